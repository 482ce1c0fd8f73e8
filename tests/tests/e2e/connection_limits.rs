//! The coordinator's ports against clients that hold connections and say nothing, over real
//! processes on loopback:
//!
//! - idle gRPC sockets (connected, nothing sent) are closed by the coordinator within its
//!   handshake timeout, and an honest client is served while they are open, even with a
//!   descriptor limit lower than their number;
//! - one address holds at most `--grpc-max-conns-per-ip` gRPC connections;
//! - slowloris clients on the HTTP port (request heads that never end) do not keep an honest
//!   request from being answered within a second.

use nqueens_tests::cluster::*;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
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

fn spawn_coordinator(
    dir: &std::path::Path,
    extra: &[&str],
    nofile: Option<u64>,
) -> (Proc, u16, u16) {
    let (port, http) = (free_port(), free_port());
    let state = dir.join("run.db");
    let handshake = HANDSHAKE_SECONDS.to_string();
    let mut args = serve_args(
        14,
        &state,
        port,
        &["--verify-fraction", "0", "--grpc-handshake-seconds", &handshake],
    );
    let off = args.iter().position(|a| a == "off").unwrap();
    args[off] = format!("127.0.0.1:{http}");
    args.extend(extra.iter().map(|s| s.to_string()));
    let coordinator = Proc::spawn_with("nqueens-coordinator", &args, dir.join("coord.log"), |c| {
        if let Some(n) = nofile {
            limit(c, libc::RLIMIT_NOFILE, n);
        }
    });
    wait_until(LONG, "the coordinator to serve", || health(port) == "SERVING");
    (coordinator, port, http)
}

#[test]
fn idle_grpc_sockets_are_closed_and_an_honest_client_is_served_meanwhile() {
    let dir = tempfile::tempdir().unwrap();
    let (_coordinator, port, _) = spawn_coordinator(dir.path(), &[], None);
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
    let dir = tempfile::tempdir().unwrap();
    // 64 descriptors: far fewer than the idle sockets below.
    let (mut coordinator, port, _) = spawn_coordinator(dir.path(), &[], Some(64));
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
    coordinator.signal(libc::SIGTERM);
    assert!(coordinator.wait_exit(LONG).success(), "{}", coordinator.log_text());
}

#[test]
fn one_address_holds_at_most_its_cap_of_grpc_connections() {
    let dir = tempfile::tempdir().unwrap();
    let (coordinator, port, _) =
        spawn_coordinator(dir.path(), &["--grpc-max-conns-per-ip", "8"], None);
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
    let dir = tempfile::tempdir().unwrap();
    let (_coordinator, _, http) = spawn_coordinator(dir.path(), &[], None);
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
