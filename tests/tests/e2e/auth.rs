//! Authentication fails closed (`docs/threat-model.md`, "Tokens and credentials"): a run that has
//! or had per-host tokens never takes a call without a token, not in its first milliseconds and
//! not once its last per-host token is revoked; a revoke ends the revoked token's open result
//! streams; and per-host tokens never read status, on the gRPC port or the HTTP port.

use nqueens_core::Job;
use nqueens_proto as pb;
use nqueens_proto::Reason;
use nqueens_tests::cluster::*;
use nqueens_tests::harness::RunDir;
use nqueens_tests::rogue::{claimed_self_test, connect, outcome, reason, Rogue};
use std::io::{Read, Write};
use std::path::Path;
use std::time::{Duration, Instant};
use tokio_stream::StreamExt;

const LONG: Duration = Duration::from_secs(120);
const TOKEN: &str = "auth-test-shared-token";

fn register_request(name: &str) -> pb::RegisterRequest {
    pb::RegisterRequest {
        name: name.into(),
        host: "here".into(),
        slots: 2,
        version: env!("CARGO_PKG_VERSION").into(),
        self_test: Some(claimed_self_test()),
        device: "cpu".into(),
        ..Default::default()
    }
}

/// `token ACTION NAME --state STATE`: (exit code, stdout, stderr).
fn token(action: &str, name: &str, state: &Path) -> (i32, String, String) {
    let out = coordinator_output([
        "token".as_ref(),
        action.as_ref(),
        name.as_ref(),
        "--state".as_ref(),
        state.as_os_str(),
    ]);
    let text = |b: &[u8]| String::from_utf8_lossy(b).trim().to_owned();
    (out.status.code().unwrap_or(-1), text(&out.stdout), text(&out.stderr))
}

fn add_token(state: &Path, name: &str) -> String {
    let (code, out, err) = token("add", name, state);
    assert_eq!(code, 0, "token add {name}: {err}");
    out
}

fn revoke_token(state: &Path, name: &str) {
    let (code, _, err) = token("revoke", name, state);
    assert_eq!(code, 0, "token revoke {name}: {err}");
}

/// What a registration with `token` (none: no header at all) gets: Ok, or the refusal's code.
async fn try_register(port: u16, token: Option<&str>) -> Result<(), tonic::Code> {
    let mut client = connect(port, token).await;
    client.register(register_request("probe")).await.map(|_| ()).map_err(|s| s.code())
}

/// Starts a coordinator on a new run of N=12 and stops it again: the state file then exists, so
/// that tokens can be added to it offline.
fn make_run(dir: &RunDir) {
    let mut first = dir.coordinator(12).log("first.log").start();
    first.wait_listening();
    first.signal(libc::SIGTERM);
    assert!(first.wait_exit(LONG).success());
}

/// A run started without `--token` (on loopback) that gets a per-host token, then loses it: from
/// the first token on, calls without one are refused, and once the last one is revoked nobody is
/// let in (not the revoked token, not a call without a token), also after a restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn revoking_the_last_per_host_token_leaves_the_port_closed() {
    let dir = RunDir::new();
    let (state, port) = (dir.state(), dir.port());
    let serve = dir.coordinator(12);
    let coordinator = serve.clone().log("c.log").start();
    coordinator.listening().await;
    assert_eq!(try_register(port, None).await, Ok(()), "a loopback run without tokens is open");
    let host_a = add_token(&state, "host-a");
    assert_eq!(try_register(port, Some(&host_a)).await, Ok(()));
    assert_eq!(try_register(port, None).await, Err(tonic::Code::Unauthenticated));
    revoke_token(&state, "host-a");
    for token in [None, Some(host_a.as_str()), Some("anything")] {
        assert_eq!(try_register(port, token).await, Err(tonic::Code::Unauthenticated), "{token:?}");
    }
    coordinator.signal(libc::SIGTERM);
    drop(coordinator);
    let _again = serve.log("c2.log").start();
    for token in [None, Some(host_a.as_str())] {
        assert_eq!(try_register(port, token).await, Err(tonic::Code::Unauthenticated), "{token:?}");
    }
}

/// A coordinator resuming a run with per-host tokens is hammered with registrations without a
/// token from the moment its port accepts connections: every one is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokenless_calls_in_the_first_second_after_start_are_refused() {
    let dir = RunDir::new();
    let state = dir.state();
    make_run(&dir);
    let host_a = add_token(&state, "host-a");
    let port = free_port();
    let url = format!("http://127.0.0.1:{port}");
    let _coordinator = dir.coordinator(12).port(port).log("c.log").start();
    // The first connection the port accepts.
    let started = Instant::now();
    let channel = loop {
        if let Ok(ch) = pb::connect_channel(&url, None).await {
            break ch;
        }
        assert!(started.elapsed() < LONG, "the coordinator never listened");
        tokio::time::sleep(Duration::from_millis(1)).await;
    };
    let mut tokenless = pb::client(channel, None).unwrap();
    let (mut refused, first_call) = (0, Instant::now());
    while first_call.elapsed() < Duration::from_secs(1) {
        match tokenless.register(register_request("early")).await {
            Ok(_) => panic!("a registration without a token was taken after {refused} refusals"),
            Err(s) => {
                assert_eq!(s.code(), tonic::Code::Unauthenticated, "{s:?}");
                refused += 1;
            }
        }
    }
    assert!(refused > 10, "only {refused} calls made");
    assert_eq!(try_register(port, Some(&host_a)).await, Ok(()), "the token itself works");
}

/// A worker's result stream, opened under a per-host token, stops delivering once that token is
/// revoked: the next result is refused (the stream ends UNAUTHENTICATED) and not committed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revoked_tokens_open_stream_is_refused() {
    let dir = RunDir::new();
    let (state, port) = (dir.state(), dir.port());
    let serve = dir.coordinator(12).token(TOKEN).args(&["--no-spot-checks"]);
    let coordinator = serve.log("c.log").start();
    coordinator.listening().await;
    let host_a = add_token(&state, "host-a");
    let mut rogue = Rogue::register_with(port, &host_a, register_request("revoked")).await;
    let lease = rogue.lease(2).await;
    assert!(lease.jobs.len() >= 2, "{lease:?}");
    let result = |spec: &pb::JobSpec| {
        let counts = Job::try_from(spec).unwrap().solve().unwrap();
        rogue.result(lease.lease_id, spec.job_id, Some(counts), 0.001)
    };
    let (first, second) = (result(&lease.jobs[0]), result(&lease.jobs[1]));
    let (tx, rx) = tokio::sync::mpsc::channel(4);
    let mut acks = rogue
        .client
        .results(tokio_stream::wrappers::ReceiverStream::new(rx))
        .await
        .unwrap()
        .into_inner();
    tx.send(first).await.unwrap();
    let ack = acks.next().await.unwrap().unwrap();
    assert_eq!(outcome(&ack), pb::Outcome::Accepted);

    let revoker = state.clone();
    tokio::task::spawn_blocking(move || revoke_token(&revoker, "host-a")).await.unwrap();
    tx.send(second.clone()).await.unwrap();
    let refused = tokio::time::timeout(LONG, acks.next()).await.unwrap();
    match refused {
        Some(Err(status)) => {
            assert_eq!(status.code(), tonic::Code::Unauthenticated, "{status:?}");
            assert_eq!(reason(&status), Reason::BadToken);
        }
        other => panic!("a result after the revoke was not refused: {other:?}"),
    }
    let rows = query_count(
        &state,
        &format!("SELECT COUNT(*) FROM results WHERE job_id={}", second.job_id),
    );
    assert_eq!(rows, 0, "the result sent after the revoke was committed");
}

/// HTTP GET of `path` on 127.0.0.1:`port` with `Authorization: Bearer token`: the status code.
fn http_get(port: u16, path: &str, token: &str) -> u16 {
    let mut conn = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    conn.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let head = format!("GET {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\n\r\n");
    conn.write_all(head.as_bytes()).unwrap();
    let mut answer = String::new();
    conn.read_to_string(&mut answer).unwrap();
    answer.split(' ').nth(1).and_then(|c| c.parse().ok()).unwrap()
}

/// The one policy for per-host tokens and status: they are a worker's credential and never read
/// status, on either port. The shared token reads both; a per-host token is refused by the
/// gRPC Status call (PERMISSION_DENIED, BAD_TOKEN) and by the HTTP port (401), where the token is
/// required (off loopback).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn per_host_tokens_read_no_status_on_either_port() {
    let dir = RunDir::new();
    let (state, port, http) = (dir.state(), dir.port(), free_port());
    // Every address: the HTTP port requires the token there, and is reached on 127.0.0.1.
    let serve = dir.coordinator(12).token(TOKEN).http_port_on_all_addresses(http);
    let coordinator = serve.log("c.log").start();
    coordinator.listening().await;
    let host_a = add_token(&state, "host-a");

    let mut shared = connect(port, Some(TOKEN)).await;
    assert!(shared.status(pb::StatusRequest::default()).await.is_ok());
    let mut per_host = connect(port, Some(&host_a)).await;
    let refused = per_host.status(pb::StatusRequest::default()).await.unwrap_err();
    assert_eq!(refused.code(), tonic::Code::PermissionDenied, "{refused:?}");
    assert_eq!(reason(&refused), Reason::BadToken);
    assert!(per_host.register(register_request("worker")).await.is_ok(), "it still works");

    let codes = tokio::task::spawn_blocking(move || {
        ["/status.json", "/metrics", "/"]
            .map(|path| (http_get(http, path, TOKEN), http_get(http, path, &host_a)))
    })
    .await
    .unwrap();
    for (shared, per_host) in codes {
        assert_eq!((shared, per_host), (200, 401));
    }
}
