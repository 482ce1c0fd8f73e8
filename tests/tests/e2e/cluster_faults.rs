//! Fault tests with real processes: workers and coordinators are the real binaries, killed with
//! real signals, talking over real loopback sockets to a real SQLite state file.

use nqueens_coordinator::result_file;
use nqueens_tests::cluster::*;
use nqueens_tests::harness::RunDir;
use std::time::Duration;

const LONG: Duration = Duration::from_secs(240);

fn jobs_in(state: &std::path::Path) -> i64 {
    query_count(state, "SELECT COUNT(*) FROM jobs")
}

/// `status --json --state` of a state file.
fn status_of(state: &std::path::Path) -> std::process::Output {
    coordinator_output([
        "status".as_ref(),
        "--json".as_ref(),
        "--state".as_ref(),
        state.as_os_str(),
    ])
}

#[test]
fn sigkilled_worker_leases_expire_and_total_stays_exact() {
    let dir = RunDir::new();
    let state = dir.path().join("run16.db");
    let serve = dir.coordinator(16).state(&state).lease_seconds(3).verify_fraction("0");
    let mut coordinator = serve.exit_when_done().start();
    let mut doomed = coordinator.worker("doomed").start();
    wait_until(LONG, "the first worker to commit results while holding leases", || {
        committed_results(&state) >= 30
            && query_count(&state, "SELECT COUNT(*) FROM jobs WHERE state='leased'") > 0
    });
    doomed.sigkill();
    let before = counted_job_ids(&state);
    assert!((before.len() as i64) < jobs_in(&state), "killed mid-run, not after it");

    let mut survivor = coordinator.worker("survivor").start();
    let status = coordinator.wait_exit(LONG);
    assert!(status.success(), "coordinator: {status}\n{}", coordinator.log_text());
    assert!(
        coordinator.log_text().contains("leases expired"),
        "the killed worker's leases expired:\n{}",
        coordinator.log_text()
    );
    let record = read_result_file(&result_file(&state));
    assert_matches_reference(&record);
    assert_each_job_counted_once(&state);
    assert!(before.is_subset(&counted_job_ids(&state)));
    let s = survivor.wait_exit(Duration::from_secs(60));
    assert!(s.success(), "survivor exits 0 when the run is complete: {s}\n{}", survivor.log_text());

    // Offline status of the finished run shows the result.
    let out = status_of(&state);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["complete"], true);
    assert_eq!(v["result"]["total"].as_u64().map(u128::from), Some(record.total));
}

#[test]
fn sigkilled_coordinator_restarts_on_its_state_and_nothing_is_lost_or_doubled() {
    let dir = RunDir::new();
    let state = dir.path().join("run16.db");
    let serve = dir.coordinator(16).state(&state).lease_seconds(10).verify_fraction("0.02");
    let serve = serve.exit_when_done().token("sesame");
    let mut first = serve.clone().log("coordinator1.log").start();
    let mut workers: Vec<Proc> =
        ["w1", "w2"].iter().map(|name| dir.worker(name).token("sesame").start()).collect();
    wait_until(LONG, "a fifth of the jobs committed", || {
        let jobs = jobs_in(&state);
        jobs > 0 && committed_results(&state) * 5 >= jobs
    });
    first.sigkill();
    let before = counted_job_ids(&state);
    assert!((before.len() as i64) < jobs_in(&state), "killed mid-run, not after it");
    std::thread::sleep(Duration::from_millis(500));

    // Same port, same state file: the workers reconnect on their own.
    let mut second = serve.log("coordinator2.log").start();
    let status = second.wait_exit(LONG);
    assert!(status.success(), "restarted coordinator: {status}\n{}", second.log_text());
    let log = second.log_text();
    assert!(log.contains("run loaded"), "{log}");
    let record = read_result_file(&result_file(&state));
    assert_matches_reference(&record);
    assert_each_job_counted_once(&state);
    let after = counted_job_ids(&state);
    assert!(before.is_subset(&after), "no committed result was lost");
    for w in &mut workers {
        let s = w.wait_exit(Duration::from_secs(60));
        assert!(s.success(), "{} exits 0: {s}\n{}", w.what, w.log_text());
    }
    for w in &workers {
        let registrations = w.log_text().matches("registered with the coordinator").count();
        assert!(
            registrations >= 2,
            "{} registered again after the restart:\n{}",
            w.what,
            w.log_text()
        );
    }
}

#[test]
fn sigterm_worker_releases_its_leases_and_exits_zero() {
    let dir = RunDir::new();
    let state = dir.path().join("run16.db");
    let serve = dir.coordinator(16).state(&state).lease_seconds(120).verify_fraction("0");
    let mut coordinator = serve.start();
    let mut worker = coordinator.worker("polite").log("worker.log").start();
    let leased = || query_count(&state, "SELECT COUNT(*) FROM jobs WHERE state='leased'");
    wait_until(LONG, "results committed while jobs are leased", || {
        committed_results(&state) >= 5 && leased() > 0
    });
    worker.signal(libc::SIGTERM);
    let s = worker.wait_exit(Duration::from_secs(60));
    assert!(s.success(), "worker exits 0 on SIGTERM: {s}\n{}", worker.log_text());
    // Released at once, not after the 120 s lease.
    wait_until(Duration::from_secs(20), "no job leased any more", || leased() == 0);
    assert!(worker.log_text().contains("released unfinished jobs"), "{}", worker.log_text());

    coordinator.signal(libc::SIGTERM);
    let s = coordinator.wait_exit(Duration::from_secs(60));
    assert!(s.success(), "coordinator exits 0 on SIGTERM: {s}\n{}", coordinator.log_text());
    assert!(coordinator.log_text().contains("engine stopped after committing everything received"));
}

#[test]
fn a_second_writer_on_a_live_state_file_is_refused_and_changes_nothing() {
    let dir = RunDir::new();
    let state = dir.path().join("run16.db");
    let serve = dir.coordinator(16).state(&state).exit_when_done();
    let coordinator = serve.start();
    wait_until(LONG, "the run to be created", || jobs_in(&state) > 0);
    let jobs = jobs_in(&state);

    // Another coordinator, or a `solve --state`, on the same file: both would count the same jobs.
    let second = coordinator_output(serve.clone().port(free_port()).serve_args());
    let solve = coordinator_output([
        "solve".as_ref(),
        "16".as_ref(),
        "--state".as_ref(),
        state.as_os_str(),
    ]);
    for (what, out) in [("serve", &second), ("solve --state", &solve)] {
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "a second {what} must fail: {err}");
        assert!(err.contains("in use by another process"), "{what}: {err}");
    }
    // Reading it while it is in use is fine.
    let status = status_of(&state);
    assert!(status.status.success(), "{}", String::from_utf8_lossy(&status.stderr));

    let requeue = coordinator_output(["requeue".as_ref(), "--state".as_ref(), state.as_os_str()]);
    assert_eq!(requeue.status.code(), Some(1), "requeue on a live run must fail");
    assert!(String::from_utf8_lossy(&requeue.stderr).contains("in use by another process"));

    // The first run is untouched: a worker finishes it exactly, each job counted once.
    assert_eq!(jobs_in(&state), jobs);
    let mut worker = coordinator.worker("finisher").threads(2).log("worker.log").start();
    coordinator.wait_exact();
    worker.wait_exit(Duration::from_secs(60));

    // Its lock went with it: the file opens again (the run is complete, so `serve` just reports
    // it).
    let again = coordinator_output(serve.port(free_port()).serve_args());
    assert!(again.status.success(), "{}", String::from_utf8_lossy(&again.stderr));
}

#[test]
fn held_and_failed_jobs_block_the_run_until_requeued() {
    use nqueens_scheduler::state::JobState;
    use nqueens_scheduler::Change;
    let dir = RunDir::new();
    let state = dir.path().join("run12.db");
    let coordinator_cmd = |args: &[&str]| {
        let out =
            coordinator_output(args.iter().map(std::ffi::OsStr::new).chain([state.as_os_str()]));
        assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8(out.stdout).unwrap()
    };
    let held_and_failed = || {
        let status: serde_json::Value =
            serde_json::from_str(&coordinator_cmd(&["status", "--json", "--state"])).unwrap();
        (status["jobs_held"].as_u64().unwrap(), status["jobs_failed"].as_u64().unwrap())
    };
    // A run as `serve --n 12` creates it, in which one job's results kept disagreeing and
    // another's solver kept failing.
    {
        let list = nqueens_core::job_list(12, &nqueens_core::SplitParams::default()).unwrap();
        let mut store = nqueens_store::Store::open_or_create(
            &state,
            &list,
            nqueens_proto::PROTOCOL_MAJOR,
            nqueens_store::RunPolicy::default(),
            nqueens_store::RunKind::Cluster,
        )
        .unwrap();
        let set = |job_id: u64, state, errors, conflicts| Change::JobState {
            job_id: job_id.into(),
            state,
            lease_id: None,
            worker_id: None,
            errors,
            conflicts,
        };
        store.apply(&[set(0, JobState::Held, 0, 3), set(5, JobState::Failed, 3, 0)], &[]).unwrap();
    }
    assert_eq!(held_and_failed(), (1, 1));
    let text = coordinator_cmd(&["status", "--state"]);
    assert!(
        text.contains("1 held, 1 failed") && text.contains("requeue --state"),
        "status tells what blocks the run:\n{text}"
    );
    let jobs = jobs_in(&state);

    // Every other job gets solved, but the run cannot complete.
    let serve = dir.coordinator(12).state(&state).exit_when_done();
    let mut coordinator = serve.clone().log("coordinator1.log").start();
    let mut worker = coordinator.worker("solo").log("worker.log").start();
    wait_until(LONG, "every job but the held and the failed one solved", || {
        committed_results(&state) == jobs - 2
    });
    std::thread::sleep(Duration::from_secs(1));
    assert!(
        coordinator.child.try_wait().unwrap().is_none(),
        "a run with held and failed jobs must not complete"
    );
    coordinator.signal(libc::SIGTERM);
    let s = coordinator.wait_exit(LONG);
    assert!(s.success(), "coordinator stops on SIGTERM: {s}\n{}", coordinator.log_text());

    // The operator gives them another attempt, one kind at a time.
    let out = coordinator_cmd(&["requeue", "--held", "--state"]);
    assert!(out.contains("requeued 1 held and 0 failed job(s)"), "{out}");
    assert_eq!(held_and_failed(), (0, 1));
    let out = coordinator_cmd(&["requeue", "--state"]);
    assert!(out.contains("requeued 0 held and 1 failed job(s)"), "{out}");
    assert!(coordinator_cmd(&["requeue", "--state"]).contains("nothing to requeue"));

    // Restarted on the same port, the waiting worker reconnects and the run completes, exactly.
    serve.log("coordinator2.log").start().wait_exact();
    let s = worker.wait_exit(Duration::from_secs(60));
    assert!(s.success(), "worker: {s}\n{}", worker.log_text());
}
