//! The coordinator's ports against clients that hold connections and say nothing, over real
//! processes on loopback:
//!
//! - idle gRPC sockets (connected, nothing sent) are closed by the coordinator within its
//!   handshake timeout, and an honest client is served while they are open, even with a
//!   descriptor limit lower than their number;
//! - one address holds at most `--grpc-max-conns-per-ip` gRPC connections;
//! - slowloris clients on the HTTP port (request heads that never end) do not keep an honest
//!   request from being answered within a second;
//! - a connection is kept past `--grpc-auth-seconds` once a call on it proved authenticated (a
//!   registration, a status call with the token), and closed at that deadline otherwise;
//! - a client without a token flooding both ports of a coordinator with few descriptors, from
//!   several addresses, with idle HTTP/2 connections and silent HTTP ones, keeps out neither a
//!   worker (which registers and ends the run exact within seconds), nor the health check, nor
//!   `/status.json`.

use nqueens_coordinator::{fd_limit, result_file};
use nqueens_proto as pb;
use nqueens_tests::cluster::*;
use nqueens_tests::flood::{Flood, Speech};
use nqueens_tests::harness::{Coordinator, RunDir};
use nqueens_tests::rogue::connect_counting;
use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const LONG: Duration = Duration::from_secs(120);
const HANDSHAKE_SECONDS: u64 = 2;

/// Whether the coordinator has closed `s` (a read sees the end, or a reset).
fn closed_by_server(s: &mut TcpStream) -> bool {
    let mut buf = [0u8; 64];
    match s.read(&mut buf) {
        Ok(0) => true,
        Ok(_) => false,
        Err(e) => {
            !matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut)
        }
    }
}

/// Waits until the coordinator has closed every one of `held`; how long that took.
fn all_closed(held: &mut [TcpStream], within: Duration) -> Duration {
    let t = Instant::now();
    let mut open: Vec<usize> = (0..held.len()).collect();
    while !open.is_empty() {
        assert!(t.elapsed() < within, "{} of {} idle sockets still open", open.len(), held.len());
        open.retain(|&i| !closed_by_server(&mut held[i]));
    }
    t.elapsed()
}

/// A coordinator of N=14 in `dir` with an HTTP port, the short handshake timeout, `extra` flags
/// and at most `nofile` descriptors, once it serves.
fn serving(dir: &RunDir, extra: &[&str], nofile: Option<u64>) -> Coordinator {
    let handshake = HANDSHAKE_SECONDS.to_string();
    let mut serve = dir.coordinator(14).http_port(free_port()).log("coord.log");
    serve = serve.verify_fraction("0").args(&["--grpc-handshake-seconds", &handshake]).args(extra);
    if let Some(n) = nofile {
        serve = serve.limit(libc::RLIMIT_NOFILE, n);
    }
    let coordinator = serve.start();
    coordinator.wait_serving();
    coordinator
}

#[test]
fn idle_grpc_sockets_are_closed_and_an_honest_client_is_served_meanwhile() {
    let dir = RunDir::new();
    let (_coordinator, port) = (serving(&dir, &[], None), dir.port());
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();

    let mut idle = connect_many(addr, 100);
    assert_eq!(idle.len(), 100);
    let t = Instant::now();
    assert_eq!(health(port), "SERVING", "an honest client among 100 idle sockets");
    eprintln!("healthcheck among 100 idle gRPC sockets: {:?}", t.elapsed());
    let took = all_closed(&mut idle, Duration::from_secs(HANDSHAKE_SECONDS + 5));
    eprintln!("100 idle gRPC sockets closed by the coordinator within {took:?}");
    assert_eq!(health(port), "SERVING");
}

#[test]
fn idle_grpc_sockets_cannot_starve_a_coordinator_with_few_descriptors() {
    let dir = RunDir::new();
    // 64 descriptors: far fewer than the idle sockets below.
    let (mut coordinator, port) = (serving(&dir, &[], Some(64)), dir.port());
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();

    let mut idle = connect_many(addr, 250);
    // As many as the backlog takes beyond what 64 descriptors hold.
    assert!(idle.len() > 64, "only {} connections opened", idle.len());
    let count = idle.len();
    // Every one is accepted in turn and closed after the handshake timeout, so the backlog
    // drains and an honest client gets through while all 250 are still open on this side.
    let t = Instant::now();
    wait_until(Duration::from_secs(60), "an honest healthcheck among the idle sockets", || {
        health(port) == "SERVING"
    });
    eprintln!("healthcheck with 64 descriptors and {count} idle gRPC sockets: {:?}", t.elapsed());
    let took = all_closed(&mut idle, Duration::from_secs(60));
    eprintln!("{count} idle gRPC sockets closed by the coordinator within {took:?}");
    assert_eq!(health(port), "SERVING");
    coordinator.stop_within(LONG);
}

#[test]
fn one_address_holds_at_most_its_cap_of_grpc_connections() {
    let dir = RunDir::new();
    let coordinator = serving(&dir, &["--grpc-max-conns-per-ip", "8"], None);
    let port = coordinator.port;
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();

    let mut held = connect_many(addr, 20);
    assert_eq!(held.len(), 20);
    std::thread::sleep(Duration::from_millis(500));
    // The last 12 were closed at once; the first 8 are kept until the handshake timeout.
    let closed: Vec<bool> = held.iter_mut().map(closed_by_server).collect();
    assert_eq!(closed.iter().filter(|c| **c).count(), 12, "{closed:?}");
    assert!(closed[..8].iter().all(|c| !c), "{closed:?}");
    assert!(coordinator.log_text().contains("--grpc-max-conns-per-ip"), "the refusal is logged");
    all_closed(&mut held, Duration::from_secs(HANDSHAKE_SECONDS + 5));
    assert_eq!(health(port), "SERVING");
}

#[test]
fn slowloris_on_the_http_port_holds_up_no_honest_request() {
    let dir = RunDir::new();
    let coordinator = serving(&dir, &[], None);
    let http = coordinator.http();
    let addr: SocketAddr = format!("127.0.0.1:{http}").parse().unwrap();

    // 200 connections (the port serves 64 at once), each with a request head that never ends.
    let mut slow = Vec::new();
    for _ in 0..200 {
        let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(2)).unwrap();
        s.write_all(b"GET / HTTP/1.1\r\nHost: x\r\nX-Slow: ").unwrap();
        slow.push(s);
    }
    let mut slowest = Duration::ZERO;
    for round in 0..10 {
        let t = Instant::now();
        let mut conn = TcpStream::connect_timeout(&addr, Duration::from_secs(2)).unwrap();
        conn.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        conn.write_all(b"GET /status.json HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
        let mut answer = String::new();
        conn.read_to_string(&mut answer).unwrap();
        let took = t.elapsed();
        assert!(answer.lines().next().is_some_and(|l| l.ends_with(" 200 OK")), "{answer}");
        slowest = slowest.max(took);
        // The slowloris clients drip a byte each and more of them arrive.
        for s in &mut slow {
            let _ = s.write_all(b"a");
        }
        for _ in 0..10 {
            if let Ok(mut s) = TcpStream::connect_timeout(&addr, Duration::from_secs(2)) {
                let _ = s.write_all(b"GET / HTTP/1.1\r\nX-Slow: ");
                slow.push(s);
            }
        }
        eprintln!("honest request {round}: {took:?}");
    }
    assert!(slowest < Duration::from_secs(1), "slowest honest request {slowest:?}");
}

/// The coordinator's descriptor limit under the flood: room for 128 gRPC connections.
const FLOOD_NOFILE: u64 = 256;
/// The flood's addresses: five other hosts, as the coordinator sees them.
const FLOOD_SOURCES: [Ipv4Addr; 5] = [
    Ipv4Addr::new(127, 0, 0, 2),
    Ipv4Addr::new(127, 0, 0, 3),
    Ipv4Addr::new(127, 0, 0, 4),
    Ipv4Addr::new(127, 0, 0, 5),
    Ipv4Addr::new(127, 0, 0, 6),
];
/// The bound on a worker started during the flood: from its start to its registration...
const REGISTERS_WITHIN: Duration = Duration::from_secs(5);
/// ...and to the run's exact end (the flood goes on until then, and after).
const ENDS_WITHIN: Duration = Duration::from_secs(60);
/// The bound on each answer of `/status.json` (with the token) and each health check.
const ANSWERS_WITHIN: Duration = Duration::from_secs(3);
const FLOOD_TOKEN: &str = "flood-test-token";

fn open_descriptors(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| d.count())
}

/// `GET /status.json` from 127.0.0.1 (with `token` if given): the status line and how long the
/// answer took.
fn status_json(http: u16, token: Option<&str>) -> (String, Duration) {
    let t = Instant::now();
    let addr: SocketAddr = format!("127.0.0.1:{http}").parse().unwrap();
    let Ok(mut conn) = TcpStream::connect_timeout(&addr, ANSWERS_WITHIN) else {
        return ("no connection".into(), t.elapsed());
    };
    conn.set_read_timeout(Some(ANSWERS_WITHIN)).unwrap();
    let auth = token.map_or(String::new(), |t| format!("Authorization: Bearer {t}\r\n"));
    let request = format!("GET /status.json HTTP/1.1\r\nHost: x\r\n{auth}\r\n");
    let mut answer = String::new();
    let read = conn.write_all(request.as_bytes()).and_then(|()| conn.read_to_string(&mut answer));
    let line = match read {
        Ok(_) => answer.lines().next().unwrap_or("empty answer").to_owned(),
        Err(e) => format!("{e}"),
    };
    (line, t.elapsed())
}

/// Polls, every half second until `stop` or the coordinator's exit, the health check and
/// `/status.json` (with the token, and without it: from loopback it needs none); returns every
/// failure and the slowest answer. A round that fails once the coordinator has logged its exit
/// (`--exit-when-done`, after the run's end and its linger) is the port closing as asked, not a
/// failure: the watcher ends there.
fn watch_answers(
    port: u16,
    http: u16,
    coordinator_log: PathBuf,
    stop: Arc<AtomicBool>,
) -> (Vec<String>, Duration, usize) {
    let exiting = || {
        std::fs::read_to_string(&coordinator_log)
            .unwrap_or_default()
            .contains("run complete: exiting as asked")
    };
    let (mut failures, mut slowest, mut rounds) = (Vec::new(), Duration::ZERO, 0);
    while !stop.load(Ordering::Relaxed) {
        let before = failures.len();
        let t = Instant::now();
        let healthy = health(port);
        let took = t.elapsed();
        if healthy != "SERVING" || took > ANSWERS_WITHIN {
            failures.push(format!("round {rounds}: healthcheck {healthy} after {took:?}"));
        }
        slowest = slowest.max(took);
        for token in [Some(FLOOD_TOKEN), None] {
            let (line, took) = status_json(http, token);
            if !line.ends_with(" 200 OK") || took > ANSWERS_WITHIN {
                failures
                    .push(format!("round {rounds}: /status.json {token:?}: {line} after {took:?}"));
            }
            slowest = slowest.max(took);
        }
        if failures.len() > before && exiting() {
            failures.truncate(before);
            break;
        }
        rounds += 1;
        std::thread::sleep(Duration::from_millis(500));
    }
    (failures, slowest, rounds)
}

/// A client without a token holds as many connections as it can on both ports of a coordinator
/// limited to 256 descriptors: 300 idle HTTP/2 connections on the gRPC port (which holds 128;
/// 300 would take every descriptor) and 100 silent ones on the HTTP port (which serves 64), from
/// five addresses, each reopened as soon as it is closed. A worker started during the flood
/// registers and ends the run exact within the bounds above, and the health check and
/// `/status.json` answer throughout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tokenless_flood_of_both_ports_keeps_out_no_worker_and_no_reader() {
    let dir = RunDir::new();
    let (state, port, http) = (dir.path().join("run14.db"), dir.port(), free_port());
    let serve = dir.coordinator(14).state(&state).http_port(http).log("coord.log");
    let serve = serve.exit_when_done().token(FLOOD_TOKEN);
    let mut coordinator = serve.limit(libc::RLIMIT_NOFILE, FLOOD_NOFILE).start();
    coordinator.serving().await;
    let pid = coordinator.child.id();

    let grpc_flood = Flood::start(port, &FLOOD_SOURCES, 60, Speech::IdleHttp2);
    let http_flood = Flood::start(http, &FLOOD_SOURCES, 20, Speech::Silent);
    // Every gRPC place and every HTTP slot taken: the flood holds all it can.
    let full = fd_limit::grpc_connections(FLOOD_NOFILE) + nqueens_coordinator::MAX_HTTP_CONNECTIONS;
    tokio::task::spawn_blocking(move || {
        wait_until(Duration::from_secs(60), "the flood to fill both ports", || {
            open_descriptors(pid) >= full
        })
    })
    .await
    .unwrap();
    eprintln!(
        "flood holds {} gRPC and {} HTTP connections; the coordinator {} descriptors of {FLOOD_NOFILE}",
        grpc_flood.open(),
        http_flood.open(),
        open_descriptors(pid)
    );

    let stop = Arc::new(AtomicBool::new(false));
    let watcher = std::thread::spawn({
        let stop = stop.clone();
        let log = dir.path().join("coord.log");
        move || watch_answers(port, http, log, stop)
    });
    let started = Instant::now();
    let mut worker = coordinator.worker("honest").token(FLOOD_TOKEN).log("worker.log").start();
    let worker_log = worker.log.clone();
    let registered = tokio::task::spawn_blocking(move || {
        wait_until(REGISTERS_WITHIN, "the worker to register during the flood", || {
            std::fs::read_to_string(&worker_log)
                .unwrap_or_default()
                .contains("registered with the coordinator")
        });
        started.elapsed()
    })
    .await
    .unwrap();
    let (status, log) = tokio::task::spawn_blocking(move || {
        (coordinator.wait_exit(ENDS_WITHIN), coordinator.log_text())
    })
    .await
    .unwrap();
    let ended = started.elapsed();
    stop.store(true, Ordering::Relaxed);
    let (failures, slowest, rounds) = watcher.join().unwrap();
    eprintln!(
        "during the flood: worker registered after {registered:?}, run ended after {ended:?}; \
         {rounds} rounds of health checks and /status.json, slowest {slowest:?}; \
         the flood opened {} gRPC and {} HTTP connections",
        grpc_flood.opened(),
        http_flood.opened()
    );
    assert!(status.success(), "coordinator: {status}\n{log}");
    // Under the flood a write may find no descriptor free: it is tried again, never skipped.
    let retried = log.matches("cannot write the result file").count();
    eprintln!("result file writes that found no room and were tried again: {retried}");
    assert_matches_reference(&read_result_file(&result_file(&state)));
    assert_each_job_counted_once(&state);
    assert!(worker.wait_exit(LONG).success(), "{}", worker.log_text());
    assert!(rounds > 0 && failures.is_empty(), "{failures:#?}");
    // The flood was pushed out, not merely present: it had to reopen connections.
    assert!(grpc_flood.opened() > 300 && http_flood.opened() > 100);
    assert!(log.contains("gRPC port full"), "the pushing out is logged:\n{log}");
}

/// Calls `status` on `client` until it has opened `count` connections (at most 20 tries, a tenth
/// of a second apart); the connections it opened.
async fn calls_until_opened(client: &mut pb::Client, opened: &AtomicUsize, count: usize) -> usize {
    for _ in 0..20 {
        if opened.load(Ordering::SeqCst) >= count {
            break;
        }
        let _ = client.status(pb::StatusRequest::default()).await;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    opened.load(Ordering::SeqCst)
}

/// With `--grpc-auth-seconds 1`: a worker's connection, once it registered, and a status
/// reader's, once its call with the token was answered, are still the same connection seconds
/// later; a client whose calls were all refused is closed at the deadline, so its next call
/// opens another.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_stays_once_a_call_on_it_proved_authenticated_and_only_then() {
    let dir = RunDir::new();
    let serve = dir.coordinator(14).token(FLOOD_TOKEN).args(&["--grpc-auth-seconds", "1"]);
    let coordinator = serve.log("coord.log").start();
    coordinator.serving().await;
    let port = coordinator.port;
    let past_deadline = Duration::from_millis(2500);

    let (mut worker, worker_opened) = connect_counting(port, Some(FLOOD_TOKEN)).await;
    worker.register(crate::trust::register_request("kept", 0, "")).await.unwrap();
    let (mut reader, reader_opened) = connect_counting(port, Some(FLOOD_TOKEN)).await;
    reader.status(pb::StatusRequest::default()).await.unwrap();
    let (mut stranger, stranger_opened) = connect_counting(port, None).await;
    stranger.status(pb::StatusRequest::default()).await.unwrap_err();
    tokio::time::sleep(past_deadline).await;

    reader.status(pb::StatusRequest::default()).await.unwrap();
    worker.status(pb::StatusRequest::default()).await.unwrap();
    assert_eq!(worker_opened.load(Ordering::SeqCst), 1, "the registered worker's connection");
    assert_eq!(reader_opened.load(Ordering::SeqCst), 1, "the status reader's connection");
    let opened = calls_until_opened(&mut stranger, &stranger_opened, 2).await;
    assert_eq!(opened, 2, "the refused client's connection was not closed at its deadline");
}
