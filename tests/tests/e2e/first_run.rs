//! A first run that just works: `serve --n N --listen 127.0.0.1:PORT`, no token, no other flag,
//! serves (its HTTP port follows the loopback address), and a worker finishes a small run against
//! it. A worker refused for a reason no retry can fix exits with the reason and a non-zero status.

use nqueens_coordinator::{result_file, DEFAULT_HTTP_PORT};
use nqueens_tests::cluster::*;
use nqueens_tests::harness::{Coordinator, CoordinatorBuilder, RunDir, WorkerBuilder};
use std::io::{Read, Write};
use std::path::Path;
use std::time::Duration;

const LONG: Duration = Duration::from_secs(120);

/// `serve --n N --state STATE --listen 127.0.0.1:PORT` plus `extra`, nothing else (so the HTTP
/// port takes its default). Retried while another process holds the default HTTP port.
fn plain_serve(dir: &Path, n: u32, port: u16, extra: &[&str]) -> Coordinator {
    let serve = CoordinatorBuilder::new(dir, n).state(dir.join(format!("run{n}.db"))).port(port);
    let serve = serve.default_http_listen().args(extra);
    for attempt in 0.. {
        let mut p = serve.clone().log(&format!("c{n}-{attempt}.log")).start();
        wait_until(LONG, "the coordinator to listen or fail", || {
            p.is_listening() || p.child.try_wait().unwrap().is_some()
        });
        if p.is_listening() {
            return p;
        }
        let log = p.log_text();
        assert!(attempt < 20 && log.contains("binding --http-listen"), "serve failed: {log}");
        std::thread::sleep(Duration::from_millis(500));
    }
    unreachable!()
}

fn http_status(port: u16, path: &str) -> String {
    let mut conn = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    conn.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    write!(conn, "GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    let mut answer = String::new();
    conn.read_to_string(&mut answer).unwrap();
    answer.lines().next().unwrap_or_default().to_owned()
}

#[test]
fn a_first_run_on_loopback_needs_no_token_and_finishes() {
    let dir = RunDir::new();
    let port = dir.port();
    let mut big = plain_serve(dir.path(), 18, port, &[]);
    assert!(
        big.log_text().contains(&format!("127.0.0.1:{DEFAULT_HTTP_PORT}")),
        "the HTTP port follows --listen: {}",
        big.log_text()
    );
    let status = coordinator_output([
        "status".to_string(),
        "--connect".into(),
        format!("http://127.0.0.1:{port}"),
    ]);
    assert!(status.status.success(), "{}", String::from_utf8_lossy(&status.stderr));
    assert!(http_status(DEFAULT_HTTP_PORT, "/status.json").contains("200"));
    big.signal(libc::SIGTERM);
    assert!(big.wait_exit(LONG).success());

    let port = free_port();
    let mut small = plain_serve(dir.path(), 12, port, &["--exit-when-done"]);
    let _worker = small.worker("first").log("w.log").start();
    assert!(small.wait_exit(LONG).success(), "{}", small.log_text());
    assert_matches_reference(&read_result_file(&result_file(&dir.path().join("run12.db"))));
}

/// A worker started with `args` against the coordinator on `port` exits non-zero within a minute,
/// saying `why` on stderr.
fn exits_saying(dir: &Path, port: u16, name: &str, extra: &[&str], why: &str) {
    let mut worker = WorkerBuilder::new(dir, port, name).args(extra).log("refused.log").start();
    let status = worker.wait_exit(Duration::from_secs(60));
    let log = worker.log_text();
    assert!(!status.success(), "the refused worker exited 0: {log}");
    assert!(log.contains(why), "the worker did not say {why:?}: {log}");
}

#[test]
fn a_worker_refused_for_good_exits_with_the_reason() {
    let dir = RunDir::new();
    let port = dir.port();
    let token = "first-run-token";
    let _coordinator = dir.coordinator(12).token(token).log("c.log").start();
    let long_name = "n".repeat(300);
    exits_saying(dir.path(), port, &long_name, &["--token", token], "name: 300 bytes, at most 256");
    exits_saying(dir.path(), port, "wrong", &["--token", "not-the-token"], "BadToken");
    exits_saying(dir.path(), port, "none", &[], "BadToken");
}
