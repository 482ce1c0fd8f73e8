//! A worker whose solver is wrong on about one job in 50 (the `fault-injection` switch of the
//! worker, on in these tests only) joins two honest ones. It passes its own self-test, so only the
//! coordinator's checks can catch it: verification, adaptive replication and spot checks. The run
//! must end exact, with the faulty worker untrusted and none of its answers counted.

use nqueens_coordinator::result_file;
use nqueens_tests::cluster::*;
use nqueens_tests::harness::RunDir;
use std::time::Duration;

const LONG: Duration = Duration::from_secs(300);

#[test]
fn a_worker_wrong_on_one_job_in_fifty_is_caught_and_the_run_ends_exact() {
    let dir = RunDir::new();
    let state = dir.path().join("run15.db");
    // N=15 has 2310 jobs; the faulty worker solves about a third of them, so about 15 of its
    // answers are wrong. Half of all jobs are cross-checked: the chance that none of its wrong
    // answers meets a cross-check is about 2^-15, before spot checks and probation.
    let serve = dir.coordinator(15).state(&state).verify_fraction("0.5");
    let mut coordinator = serve.exit_when_done().start();
    let mut workers: Vec<Proc> =
        ["honest-a", "honest-b"].iter().map(|name| coordinator.worker(name).start()).collect();
    workers.push(coordinator.worker("faulty").start_with(|c| {
        c.env("NQ_FAULT_WRONG_ONE_IN", "50");
    }));

    let status = coordinator.wait_exit(LONG);
    assert!(status.success(), "coordinator: {status}\n{}", coordinator.log_text());
    for w in &mut workers {
        w.wait_exit(Duration::from_secs(30));
    }
    let faulty_log = workers[2].log_text();
    assert!(faulty_log.contains("FAULT INJECTION"), "the fault was not switched on:\n{faulty_log}");

    // Exact, each job counted once, and nothing the faulty worker said is in the totals.
    assert_matches_reference(&read_result_file(&result_file(&state)));
    assert_each_job_counted_once(&state);
    let by_faulty = |sql_tail: &str| {
        query_count(
            &state,
            &format!("SELECT COUNT(*) FROM {sql_tail} AND worker_id IN (SELECT id FROM workers WHERE name='faulty')"),
        )
    };
    assert_eq!(by_faulty("results WHERE counted=1"), 0, "a faulty answer is still counted");
    assert!(
        query_count(
            &state,
            "SELECT COUNT(*) FROM conflicts WHERE worker_a IN (SELECT id FROM workers WHERE name='faulty') \
             OR worker_b IN (SELECT id FROM workers WHERE name='faulty')"
        ) >= 1,
        "its wrong answer is in the conflicts record"
    );
    // Caught: the faulty worker and only it is untrusted.
    assert_eq!(query_count(&state, "SELECT COUNT(*) FROM untrusted_workers"), 1);
    assert_eq!(by_faulty("untrusted_workers WHERE 1=1"), 1);
    assert!(
        coordinator.log_text().contains("it is untrusted"),
        "the coordinator says so:\n{}",
        coordinator.log_text()
    );
}
