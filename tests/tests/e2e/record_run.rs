//! A record run (`serve --replication 2`): every job counts only when two different credentials,
//! or the coordinator and one credential, gave the same answer, whoever is trusted. One party's
//! lies never reach the result, however it tells them (from the start, or last on the heavy jobs
//! it held, through two identities of its token, or through two identities of the shared
//! token); honest workers of two credentials end it exact; and the result file, `status` and
//! `verify` say what the total rests on.

use super::open_checks::{answers, earn_trust, same_identity, wait_until_only_held_jobs_are_open};
use super::trust::{keep_beating, register, TOKEN};
use super::trust_evidence::{counted_from, lie, untrusted};
use nqueens_coordinator::result_file;
use nqueens_store::Evidence;
use nqueens_tests::cluster::*;
use nqueens_tests::harness::{spawn_coordinator, spawn_worker, token_add, Coordinator, RunDir};
use nqueens_tests::rogue::Rogue;
use std::path::Path;
use std::time::{Duration, Instant};

/// A record run of N=`n` with `extra` flags, the shared token, and per-host tokens `a` and `b`
/// (returned, with the coordinator), once they are in force.
pub(crate) async fn record_run(
    dir: &RunDir,
    n: u32,
    extra: &[&str],
) -> (Coordinator, String, String) {
    let serve = dir.coordinator(n).exit_when_done().token(TOKEN).args(&["--replication", "2"]);
    let coordinator = serve.args(extra).start();
    let [a, b] = coordinator.tokens_in_force(["host-a", "host-b"]).await;
    (coordinator, a, b)
}

/// Answers every job `rogue` gets with a lie, lease after lease, for `seconds`.
async fn lie_for(rogue: &mut Rogue, n: u32, seconds: u64) {
    let until = Instant::now() + Duration::from_secs(seconds);
    while Instant::now() < until {
        let Ok(lease) = rogue.try_lease(4).await else { return };
        let lies = answers(rogue, &lease, n, lie);
        rogue.send(lies).await;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// `status` (offline, and its JSON) and `verify` show the result file's evidence.
fn status_and_verify_show(state: &Path, evidence: &Evidence) {
    let json = |args: &[&str]| -> serde_json::Value {
        let out = coordinator_output(args);
        assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
        serde_json::from_slice(&out.stdout).unwrap()
    };
    let file = state.to_str().unwrap();
    let expected = serde_json::to_value(evidence).unwrap();
    let status = json(&["status", "--state", file, "--json"]);
    assert_eq!(status["evidence"], expected, "status --state --json");
    assert_eq!(status["result"]["evidence"], expected, "the result in status");
    let verify = json(&["verify", "--state", file, "--json", "--sample", "8"]);
    assert_eq!(verify["evidence"], expected, "verify --json");
    let text = coordinator_output(["status", "--state", file]);
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(text.contains(&format!("evidence {}", evidence.summary())), "status text:\n{text}");
}

/// One honest worker of each of two credentials: every job is counted on two independent
/// answers (the coordinator settles disputes only), and the run ends exact. The result file says
/// so, and `status` and `verify` show the same; a restart that asks for another replication is
/// refused, naming the run's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_record_run_ends_exact_on_two_credentials_and_says_what_its_total_rests_on() {
    let dir = RunDir::new();
    let state = dir.state();
    let port = dir.port();
    let (coordinator, a, b) = record_run(&dir, 12, &[]).await;
    let workers =
        [spawn_worker(dir.path(), port, "a", &a), spawn_worker(dir.path(), port, "b", &b)];
    coordinator.finishes_exact().await;
    drop(workers);
    let record = read_result_file(&result_file(&state));
    let evidence = record.evidence.expect("the result file states its evidence");
    let jobs = query_count(&state, "SELECT COUNT(*) FROM jobs") as u64;
    assert_eq!(evidence.replication, 2);
    assert_eq!(evidence.jobs_one_party, 0, "{evidence:?}");
    assert_eq!(evidence.jobs_independent + evidence.jobs_coordinator, jobs, "{evidence:?}");
    assert!(evidence.jobs_independent * 2 > jobs, "most jobs answered by both: {evidence:?}");
    assert_eq!((evidence.wrong_jobs_bound, evidence.lie_escape_probability), (0.0, 0.0));
    status_and_verify_show(&state, &evidence);
    let again = dir.coordinator(12).port(free_port()).args(&["--replication", "1"]);
    let out = coordinator_output(again.token(TOKEN).serve_args());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("replication 2"), "a changed replication: {err}");
}

/// A plain run (replication 1) says what its total rests on too: jobs counted on one
/// credential's word, the re-checks drawn, and the bound on the wrong answers among them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plain_runs_result_file_states_the_one_credential_jobs_and_their_bound() {
    let dir = RunDir::new();
    let state = dir.state();
    let port = dir.port();
    let args = ["--exit-when-done", "--token", TOKEN, "--recheck-fraction", "0.2"];
    let coordinator = spawn_coordinator(dir.path(), 12, port, &args, "coordinator.log");
    let worker = spawn_worker(dir.path(), port, "alone", TOKEN);
    coordinator.finishes_exact().await;
    drop(worker);
    let evidence = read_result_file(&result_file(&state)).evidence.unwrap();
    assert_eq!(evidence.replication, 1);
    assert!(evidence.jobs_one_party > 0 && evidence.rechecks_drawn > 0, "{evidence:?}");
    assert_eq!(evidence.rechecks_passed, evidence.rechecks_drawn, "an honest worker's re-checks");
    let drawn = query_count(&state, "SELECT COUNT(*) FROM jobs WHERE review='recheck'") as u64;
    assert_eq!(evidence.rechecks_drawn, drawn);
    assert!(
        evidence.wrong_jobs_bound > 0.0
            && evidence.wrong_jobs_bound < evidence.jobs_one_party as f64
    );
    assert!((0.5..1.0).contains(&evidence.lie_escape_probability), "{evidence:?}");
    status_and_verify_show(&state, &evidence);
}

/// One per-host party, two identities. It earns trust honestly; then each identity holds a few
/// of the heaviest jobs while the honest workers of two other credentials do everything else,
/// and both lie the same way on what they hold, last. Their answers wait for another
/// credential, the honest workers (or the coordinator) contradict them, the party is untrusted
/// and the run ends exact with nothing of it counted. A second run: the same party lies on
/// everything from its first answer on: the same end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_partys_lies_first_or_last_never_count_in_a_record_run() {
    for last in [true, false] {
        let dir = RunDir::new();
        let state = dir.state();
        let port = dir.port();
        let n = 12;
        // Long leases when the party holds jobs to lie on last: its jobs are overdue (copied to
        // the honest workers) only after that long, so a slow start of the honest workers on a
        // loaded host cannot take them from it before it lies.
        let lease_seconds = if last { "120" } else { "20" };
        let (coordinator, a, b) = record_run(&dir, n, &["--lease-seconds", lease_seconds]).await;
        let evil = token_add(&state, "evil");
        tokio::time::sleep(Duration::from_secs(3)).await;
        let mut pair =
            [register(port, &evil, "evil-1").await, register(port, &evil, "evil-2").await];
        let mut held = Vec::new();
        let mut beating = Vec::new();
        if last {
            earn_trust(&mut pair[0], n, port).await;
            for rogue in &mut pair {
                let lease = rogue.lease(2).await;
                beating.push(keep_beating(same_identity(rogue), vec![lease.lease_id]));
                held.push((
                    lease.lease_id,
                    lease.jobs.iter().map(|s| s.job_id).collect::<Vec<_>>(),
                ));
            }
        }
        let honest =
            [spawn_worker(dir.path(), port, "a", &a), spawn_worker(dir.path(), port, "b", &b)];
        if last {
            let held_leases = held.iter().map(|(lease, _)| *lease).collect::<Vec<_>>();
            wait_until_only_held_jobs_are_open(&state, &held_leases).await;
            for (rogue, (lease, jobs)) in pair.iter_mut().zip(&held) {
                let lies =
                    jobs.iter().map(|&j| rogue.result(*lease, j, Some(lie(n, j)), 0.01)).collect();
                rogue.send(lies).await;
            }
        } else {
            let [first, second] = &mut pair;
            tokio::join!(lie_for(first, n, 4), lie_for(second, n, 4));
        }
        beating.into_iter().for_each(|b| b.abort());
        coordinator.finishes_exact().await;
        drop(honest);
        for rogue in &pair {
            assert_eq!(counted_from(&state, rogue.id), 0, "last {last}: a lie was counted");
            assert!(untrusted(&state, rogue.id), "last {last}: a liar is not untrusted");
        }
    }
}

/// Two identities of the shared token tell the same lies from the start: in a record run they
/// are one credential, so their agreement counts nothing, and the honest workers of two per-host
/// credentials end the run exact.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_shared_token_identities_lying_together_never_count_in_a_record_run() {
    let dir = RunDir::new();
    let state = dir.state();
    let port = dir.port();
    let n = 12;
    let (coordinator, a, b) = record_run(&dir, n, &[]).await;
    let mut sybils =
        [register(port, TOKEN, "sybil-1").await, register(port, TOKEN, "sybil-2").await];
    let [first, second] = &mut sybils;
    tokio::join!(lie_for(first, n, 3), lie_for(second, n, 3));
    let honest = [spawn_worker(dir.path(), port, "a", &a), spawn_worker(dir.path(), port, "b", &b)];
    coordinator.finishes_exact().await;
    drop(honest);
    for sybil in &sybils {
        assert_eq!(counted_from(&state, sybil.id), 0, "a sybil's lie was counted");
    }
}
