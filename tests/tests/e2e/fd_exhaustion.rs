//! A coordinator out of file descriptors waits instead of spinning: with its descriptor table full
//! (a low RLIMIT_NOFILE and many idle connections), its accept loops (gRPC and metrics) pause
//! between failed accepts and use next to no CPU. Once the connections close it serves again, and
//! a worker then brings the run to its exact end.
//!
//! The gRPC port alone no longer fills the table (it holds what the limit leaves room for, at
//! least 16 connections, see `fd_limit.rs`); below 16 + 128 descriptors the HTTP port's 64 slots
//! do, which is how this test runs the table out.

use nqueens_tests::cluster::*;
use nqueens_tests::harness::RunDir;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

const LONG: Duration = Duration::from_secs(240);
/// The coordinator's descriptor limit: room to start (state file, WAL, lock, listeners, runtime),
/// not for many connections.
const NOFILE: u64 = 64;
/// How long the descriptor table is held full while the coordinator's CPU time is measured.
const WINDOW: Duration = Duration::from_secs(2);

/// User plus system CPU time of process `pid` so far (fields 14 and 15 of /proc/PID/stat).
fn cpu_time(pid: u32) -> Duration {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    // The command name (field 2) may hold spaces; the fields after it are plain numbers.
    let fields: Vec<&str> = stat[stat.rfind(')').unwrap() + 2..].split(' ').collect();
    let ticks: u64 = fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap();
    let per_second = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as u64;
    Duration::from_secs_f64(ticks as f64 / per_second as f64)
}

fn open_descriptors(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| d.count())
}

#[test]
fn accept_loops_pause_while_descriptors_run_out_and_serve_again_after() {
    let dir = RunDir::new();
    let state = dir.path().join("run13.db");
    let (port, metrics_port) = (dir.port(), free_port());
    let serve = dir.coordinator(13).state(&state).http_port(metrics_port).log("coord.log");
    let serve = serve.verify_fraction("0").exit_when_done();
    // The idle connections below must stay accepted while the CPU is measured, not be closed
    // after the default 10 s handshake timeout (that is `connection_limits.rs`'s subject).
    let serve = serve.args(&["--grpc-handshake-seconds", "120"]);
    let coordinator = serve.limit(libc::RLIMIT_NOFILE, NOFILE).start();
    coordinator.wait_serving();
    let pid = coordinator.child.id();

    // Fill the descriptor table: every connection the coordinator accepts takes one descriptor;
    // the rest wait in the listeners' backlogs, and each accept of them fails with EMFILE.
    let grpc: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let metrics: SocketAddr = format!("127.0.0.1:{metrics_port}").parse().unwrap();
    let mut held = connect_many(grpc, 2 * NOFILE as usize);
    held.extend(connect_many(metrics, 2 * NOFILE as usize));
    assert!(held.len() > NOFILE as usize, "only {} connections opened", held.len());
    wait_until(Duration::from_secs(30), "the coordinator to run out of descriptors", || {
        open_descriptors(pid) + 2 >= NOFILE as usize
    });

    // While the table stays full, the coordinator sleeps between failed accepts.
    let (cpu0, t0) = (cpu_time(pid), Instant::now());
    std::thread::sleep(WINDOW);
    let (cpu, wall) = (cpu_time(pid) - cpu0, t0.elapsed());
    let share = cpu.as_secs_f64() / wall.as_secs_f64();
    eprintln!(
        "coordinator CPU while out of descriptors: {cpu:?} in {wall:?} ({:.1}%)",
        share * 100.0
    );
    assert!(share < 0.2, "{cpu:?} of CPU in {wall:?}: the accept loop spins");

    let log = coordinator.log_text();
    let failures = log.lines().filter(|l| l.contains("accepting a connection failed")).count();
    assert!(log.contains("errno=24"), "the log names the errno (EMFILE):\n{log}");
    assert!(failures <= 4, "failed accepts are logged at most once per 10 s per listener:\n{log}");

    // With the connections closed, the coordinator serves again and the run ends exact.
    drop(held);
    wait_until(Duration::from_secs(30), "the coordinator to serve again", || {
        health(port) == "SERVING"
    });
    let mut worker = coordinator.worker("w").threads(2).start();
    coordinator.wait_exact();
    assert!(worker.wait_exit(LONG).success(), "{}", worker.log_text());
}
