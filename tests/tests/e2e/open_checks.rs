//! No count is final while a check it drew is open: a trusted party that tells its lies last,
//! when nothing else is pending, is caught like any other, and a coordinator killed between a
//! lie and its re-check asks the check again after the restart. Each ends exact, the liar
//! untrusted, and nothing it said counted.

use super::trust::{keep_beating, register, LONG, TOKEN};
use super::trust_evidence::{counted_from, lie, truth, untrusted};
use nqueens_core::JobCounts;
use nqueens_proto as pb;
use nqueens_tests::cluster::*;
use nqueens_tests::harness::{spawn_worker, RunDir};
use nqueens_tests::rogue::{outcome, Rogue};
use std::path::Path;
use std::time::{Duration, Instant};

/// What `status --connect` says of worker `worker_id` (its trust: `probation`, `trusted` or
/// `untrusted`), asked with the shared token.
pub(crate) fn trust_of(port: u16, worker_id: u64) -> String {
    let url = format!("http://127.0.0.1:{port}");
    let out = coordinator_output(["status", "--connect", &url, "--token", TOKEN, "--json"]);
    assert!(out.status.success(), "status: {}", String::from_utf8_lossy(&out.stderr));
    let status: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let workers = status["workers"].as_array().expect("workers in status");
    let worker = workers.iter().find(|w| w["worker_id"] == worker_id).expect("the worker");
    worker["trust"].as_str().unwrap().to_owned()
}

/// `rogue`'s answer to every job of `lease`: the counts `count` gives for it on board `n`.
pub(crate) fn answers(
    rogue: &Rogue,
    lease: &pb::LeaseResponse,
    n: u32,
    count: fn(u32, u64) -> JobCounts,
) -> Vec<pb::JobResult> {
    lease
        .jobs
        .iter()
        .map(|s| rogue.result(lease.lease_id, s.job_id, Some(count(n, s.job_id)), 0.01))
        .collect()
}

/// `rogue` answers every job it gets with the truth, lease after lease, until `status` says it is
/// trusted (its answers checked by the coordinator or another credential).
pub(crate) async fn earn_trust(rogue: &mut Rogue, n: u32, port: u16) {
    let deadline = Instant::now() + LONG;
    while trust_of(port, rogue.id) != "trusted" {
        assert!(Instant::now() < deadline, "worker {} never earned trust", rogue.id);
        let lease = rogue.lease(4).await;
        let truthful = answers(rogue, &lease, n, truth);
        rogue.send(truthful).await;
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// A second handle on `rogue`'s identity (its connection, run, id and secret).
pub(crate) fn same_identity(rogue: &Rogue) -> Rogue {
    Rogue {
        client: rogue.client.clone(),
        run: rogue.run.clone(),
        id: rogue.id,
        secret: rogue.secret.clone(),
    }
}

/// Waits (off the async runtime) until no job of the state file in `state` is pending or leased
/// except under `held_leases`, and checks those still hold a leased job: a lie sent on them then
/// is among the run's last answers. (A lease may also carry a spot check of a done job, so not
/// every job it names is leased in the table.)
pub(crate) async fn wait_until_only_held_jobs_are_open(state: &Path, held_leases: &[u64]) {
    let held = held_leases.iter().map(u64::to_string).collect::<Vec<_>>().join(",");
    let in_held = format!("lease_id IN ({held})");
    let state = state.to_path_buf();
    tokio::task::spawn_blocking(move || {
        let count = |filter: &str| {
            query_count(&state, &format!("SELECT COUNT(*) FROM jobs WHERE {filter}"))
        };
        wait_until(LONG, "everything but the held jobs answered", || {
            count("state='pending'") == 0
                && count(&format!("state='leased' AND NOT {in_held}")) == 0
        });
        let still_held = count(&format!("state='leased' AND {in_held}"));
        assert!(still_held > 0, "the held jobs were taken from their holder before it lied");
    })
    .await
    .unwrap();
}

/// Sends `rogue`'s lies for every job of `held` (job, lease) and checks none was confirmed.
async fn tell_lies(rogue: &mut Rogue, n: u32, held: &[(u64, u64)]) {
    let lies = held
        .iter()
        .map(|&(job, lease)| rogue.result(lease, job, Some(lie(n, job)), 0.01))
        .collect();
    let acks = rogue.send(lies).await;
    assert!(
        acks.iter().all(|a| outcome(a) != pb::Outcome::Rejected),
        "a lie was refused: {acks:?}"
    );
}

/// A per-host party earns trust honestly, then holds a few of the heaviest jobs while an honest
/// worker of another token does everything else, and lies on them only once nothing else is
/// pending: the run's last answers. With `--recheck-fraction 1` every answer that would count on
/// its word is drawn, so the run waits for the coordinator's re-solve of each, which catches the
/// lies; the party is untrusted and the honest worker's answers end the run exact.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trusted_partys_last_lies_are_caught_before_the_result_is_written() {
    let dir = RunDir::new();
    let state = dir.state();
    let port = dir.port();
    let n = 13;
    // Long leases: the held jobs are overdue (copied to the honest worker) only after that long,
    // so a slow honest worker on a loaded host cannot take them before the lies.
    let serve = dir.coordinator(n).exit_when_done().token(TOKEN).recheck_fraction("1");
    let coordinator = serve.lease_seconds(120).start();
    let [evil, good] = coordinator.tokens_in_force(["evil", "good"]).await;
    let mut liar = register(port, &evil, "turncoat").await;
    earn_trust(&mut liar, n, port).await;
    // Trusted: its lease is the heaviest pending jobs. It holds them, heartbeating.
    let lease = liar.lease(4).await;
    let held: Vec<(u64, u64)> = lease.jobs.iter().map(|s| (s.job_id, lease.lease_id)).collect();
    assert!(!held.is_empty());
    let beating = keep_beating(same_identity(&liar), vec![lease.lease_id]);
    let honest = spawn_worker(dir.path(), port, "honest", &good);
    wait_until_only_held_jobs_are_open(&state, &[lease.lease_id]).await;
    beating.abort();
    let liar_id = liar.id;
    tell_lies(&mut liar, n, &held).await;
    coordinator.finishes_exact().await;
    drop(honest);
    assert!(untrusted(&state, liar_id), "the liar is not untrusted");
    assert_eq!(counted_from(&state, liar_id), 0, "an answer of the liar is counted");
    let record = read_result_file(&nqueens_coordinator::result_file(&state));
    let evidence = record.evidence.expect("the result file states its evidence");
    assert_eq!(evidence.jobs_one_party, 0, "every answer was re-checked: {evidence:?}");
}

/// Two per-host parties earn trust by confirming each other's answers (the coordinator solves
/// nothing itself: `--no-coordinator-checks`). Then one of them, trusted, lies, and with
/// `--recheck-fraction 1` the lie waits for its re-check, which nobody gives: the coordinator is
/// SIGKILLed with the check open. Restarted with its own checks on, it finds the review in the
/// state file and asks its referee again, whose answer untrusts the liar before any other worker
/// exists; an honest worker then ends the run exact.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recheck_open_when_the_coordinator_is_killed_is_asked_again_after_the_restart() {
    let dir = RunDir::new();
    let state = dir.state();
    let port = dir.port();
    let n = 13;
    let args = ["--exit-when-done", "--token", TOKEN, "--recheck-fraction", "1"];
    let no_checks = [&args[..], &["--no-coordinator-checks", "--lease-seconds", "20"]].concat();
    let mut coordinator = dir.coordinator(n).args(&no_checks).log("first.log").start();
    let [evil, good] = coordinator.tokens_in_force(["evil", "good"]).await;
    let mut liar = register(port, &evil, "turncoat").await;
    let mut other = register(port, &good, "witness").await;
    // Each answers what the other answered before (on probation both take the cheapest jobs,
    // and a job one party answered is left for the other): their agreements verify both.
    let deadline = Instant::now() + LONG;
    while trust_of(port, liar.id) != "trusted" || trust_of(port, other.id) != "trusted" {
        assert!(Instant::now() < deadline, "the two parties never earned trust");
        for rogue in [&mut liar, &mut other] {
            let Ok(lease) = rogue.try_lease(4).await else { continue };
            let truthful = answers(rogue, &lease, n, truth);
            rogue.send(truthful).await;
        }
    }
    let lease = liar.lease(1).await;
    let job = lease.jobs[0].job_id;
    tell_lies(&mut liar, n, &[(job, lease.lease_id)]).await;
    let review = format!("SELECT COUNT(*) FROM jobs WHERE id={job} AND review='recheck'");
    assert_eq!(query_count(&state, &review), 1, "the lie's re-check is not in the state file");
    coordinator.sigkill();
    assert!(!untrusted(&state, liar.id), "the liar was caught before the kill");
    let restarted = dir.coordinator(n).args(&args).log("second.log").start();
    let (state_file, liar_id) = (state.clone(), liar.id);
    tokio::task::spawn_blocking(move || {
        wait_until(LONG, "the restarted coordinator's re-check", || untrusted(&state_file, liar_id))
    })
    .await
    .unwrap();
    let honest = spawn_worker(dir.path(), port, "honest", &good);
    restarted.finishes_exact().await;
    drop(honest);
    assert_eq!(counted_from(&state, liar_id), 0, "an answer of the liar is counted");
}
