//! A coordinator that cannot write stops loudly: health turns NOT_SERVING, then the process exits
//! non-zero within seconds, so that systemd, Kubernetes or compose restart it. Restarted with room,
//! the run ends exact: nothing acknowledged was lost, nothing is counted twice. A result file that
//! cannot be written never ends a run with exit 0.

use nqueens_coordinator::result_file;
use nqueens_tests::cluster::*;
use nqueens_tests::harness::RunDir;
use std::time::{Duration, Instant};

const LONG: Duration = Duration::from_secs(240);

#[test]
fn a_write_failure_stops_the_coordinator_loudly_and_a_restart_ends_exact() {
    let dir = RunDir::new();
    let (state, port) = (dir.path().join("run15.db"), dir.port());
    let serve = dir.coordinator(15).state(&state);
    let roomy = serve.clone().verify_fraction("0").args(&["--target-jobs", "4096"]);

    // The run is created with room to spare, then stopped.
    let mut create = roomy.clone().log("create.log").start();
    create.wait_serving();
    create.signal(libc::SIGTERM);
    assert!(create.wait_exit(LONG).success(), "{}", create.log_text());
    let jobs = query_count(&state, "SELECT COUNT(*) FROM jobs");
    assert!(jobs > 1000, "{jobs} jobs");

    // Resumed under a file-size limit a little above the file's size: the write-ahead log soon
    // runs into it while results arrive.
    let room = std::fs::metadata(&state).unwrap().len() + 256 * 1024;
    let mut cramped = roomy.log("cramped.log").limit(libc::RLIMIT_FSIZE, room).start();
    cramped.wait_serving();
    let mut worker = cramped.worker("w").threads(2).start();

    // Health must say NOT SERVING before the process goes, and the process must go soon after.
    let mut not_serving_at = None;
    let status = loop {
        if let Some(status) = cramped.child.try_wait().unwrap() {
            break status;
        }
        let now = Instant::now();
        if not_serving_at.is_none() && health(port).starts_with("NOT SERVING") {
            not_serving_at = Some(now);
        }
        if let Some(at) = not_serving_at {
            assert!(at.elapsed() < Duration::from_secs(10), "still up 10 s after NOT SERVING");
        }
        assert!(now.elapsed() < LONG);
        std::thread::sleep(Duration::from_millis(50));
    };
    let log = cramped.log_text();
    assert!(not_serving_at.is_some(), "health never said NOT SERVING; log:\n{log}");
    assert!(!status.success(), "a coordinator that cannot commit must exit non-zero: {status}");
    assert!(log.contains("commit failed"), "the cause is in the log:\n{log}");
    let committed = committed_results(&state);
    assert!(committed < jobs, "the failure came mid-run ({committed} of {jobs} committed)");

    // With room again, the same worker (still holding its unacknowledged results) finishes the run.
    serve.exit_when_done().log("resumed.log").start().wait_exact();
    assert!(worker.wait_exit(LONG).success(), "{}", worker.log_text());
}

/// A result file that cannot be written (a directory stands where it goes) keeps the run from
/// ending: with `--exit-when-done` the coordinator keeps serving and logs why; stopped, it exits
/// non-zero saying so; restarted once the way is clear, it writes the file at once and ends exact.
#[test]
fn a_result_file_that_cannot_be_written_never_ends_the_run_with_exit_0() {
    let dir = RunDir::new();
    let (state, port) = (dir.path().join("run10.db"), dir.port());
    let blocked = result_file(&state);
    std::fs::create_dir(&blocked).unwrap();
    let serve = dir.coordinator(10).state(&state).exit_when_done();
    let mut coordinator = serve.clone().log("coord.log").start();
    let _worker = coordinator.worker("w").threads(2).start();
    wait_until(LONG, "the failed write of the result file to be logged", || {
        coordinator.log_text().contains("cannot write the result file")
    });
    // Longer than the linger after a written result: the coordinator has not taken it as the end.
    std::thread::sleep(Duration::from_secs(5));
    assert!(coordinator.child.try_wait().unwrap().is_none(), "{}", coordinator.log_text());
    assert_eq!(health(port), "SERVING");

    coordinator.signal(libc::SIGTERM);
    let status = coordinator.wait_exit(LONG);
    let log = coordinator.log_text();
    assert!(!status.success(), "stopped without its result file, yet exit 0:\n{log}");
    assert!(log.contains("its result file") && log.contains("cannot be written"), "{log}");

    std::fs::remove_dir(&blocked).unwrap();
    // The result file is written where `blocked` stood.
    serve.log("again.log").start().wait_exact();
}
