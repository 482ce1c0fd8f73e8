//! The coordinator believes only what it measured or verified: attacks that combined a
//! participant's word about itself (its job times, that it is still busy, that nobody else is
//! around, how early it came) with the rules that believed it. Each ends exact, or in a loud
//! refusal, and none depends on who wins a race: the attacker acts before the honest worker
//! starts, or beside it with nothing that order could change.

use super::trust::{keep_beating, register, register_request, TOKEN};
use nqueens_core::{job_list, JobCounts, SplitParams};
use nqueens_proto as pb;
use nqueens_tests::cluster::*;
use nqueens_tests::harness::{spawn_worker, Coordinator, RunDir};
use nqueens_tests::rogue::{connect_from, outcome, Rogue};
use std::path::Path;
use std::time::{Duration, Instant};

/// The true counts of job `id` of N=`n`.
pub(crate) fn truth(n: u32, id: u64) -> JobCounts {
    let list = job_list(n, &SplitParams::default()).unwrap();
    list.jobs[id as usize].solve().unwrap()
}

/// One more solution than the truth: a lie no plausibility check can see.
pub(crate) fn lie(n: u32, id: u64) -> JobCounts {
    let t = truth(n, id);
    JobCounts { solutions: t.solutions + 1, ..t }
}

/// Rows the state file counted from `worker_id`.
pub(crate) fn counted_from(state: &Path, worker_id: u64) -> i64 {
    query_count(
        state,
        &format!("SELECT COUNT(*) FROM results WHERE worker_id={worker_id} AND counted=1"),
    )
}

/// Whether the state file records `worker_id` as untrusted.
pub(crate) fn untrusted(state: &Path, worker_id: u64) -> bool {
    query_count(
        state,
        &format!("SELECT COUNT(*) FROM untrusted_workers WHERE worker_id={worker_id}"),
    ) == 1
}

/// Leases as much as `rogue` is given in `calls` calls: each job with its lease, and the leases.
async fn hoard(rogue: &mut Rogue, calls: usize) -> (Vec<(u64, u64)>, Vec<u64>) {
    let mut jobs: Vec<(u64, u64)> = Vec::new();
    let mut leases = Vec::new();
    for _ in 0..calls {
        let Ok(lease) = rogue.try_lease(64).await else { break };
        if lease.lease_id != 0 {
            leases.push(lease.lease_id);
        }
        for spec in &lease.jobs {
            if !jobs.iter().any(|(j, _)| *j == spec.job_id) {
                jobs.push((spec.job_id, lease.lease_id));
            }
        }
    }
    (jobs, leases)
}

/// A coordinator of N=`n` with per-host tokens `evil` and `good` (and no shared token); waits
/// until it listens with both tokens in force.
async fn per_host_run(dir: &RunDir, n: u32, extra: &[&str]) -> (Coordinator, String, String) {
    let coordinator = dir.coordinator(n).exit_when_done().args(extra).start();
    let [evil, good] = coordinator.tokens_in_force(["evil", "good"]).await;
    (coordinator, evil, good)
}

/// One per-host token's holder runs five identities: three answer a job each truthfully but
/// late and claiming a week, to poison the job time; the fourth leases again and again and keeps
/// heartbeating; then it answers everything it holds with a lie. Its credential holds a few jobs
/// at most, the job time is the coordinator's own, nothing it says counts before the
/// coordinator checked it, and the honest worker of another token finishes exact.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hoarder_with_poisoned_job_times_gets_neither_the_run_nor_a_lie() {
    let dir = RunDir::new();
    let state = dir.state();
    let port = dir.port();
    let (coordinator, evil, good) = per_host_run(&dir, 13, &["--lease-seconds", "5"]).await;
    let mut slow = Vec::new();
    for i in 0..3 {
        let mut rogue = register(port, &evil, &format!("slow-{i}")).await;
        let lease = rogue.lease(1).await;
        slow.push((rogue, lease));
    }
    let mut hoarder = register(port, &evil, "hoarder").await;
    let (held, leases) = hoard(&mut hoarder, 50).await;
    let slow_held: usize = slow.iter().map(|(_, l)| l.jobs.len()).sum();
    assert!(
        held.len() + slow_held <= 16 + 4,
        "one credential on probation held {} jobs through {} identities",
        held.len() + slow_held,
        4
    );
    // The slow ones answer truthfully, 3 s late, claiming a week.
    tokio::time::sleep(Duration::from_secs(3)).await;
    for (rogue, lease) in &mut slow {
        let results = lease
            .jobs
            .iter()
            .map(|s| rogue.result(lease.lease_id, s.job_id, Some(truth(13, s.job_id)), 604_800.0))
            .collect();
        rogue.send(results).await;
    }
    let honest = spawn_worker(dir.path(), port, "honest", &good);
    let lies: Vec<pb::JobResult> = held
        .iter()
        .map(|&(j, lease)| hoarder.result(lease, j, Some(lie(13, j)), 604_800.0))
        .collect();
    let acks = hoarder.send(lies).await;
    assert!(acks.iter().all(|a| outcome(a) != pb::Outcome::Confirmed));
    let hoarder_id = hoarder.id;
    let beating = keep_beating(hoarder, leases);
    coordinator.finishes_exact().await;
    beating.abort();
    drop(honest);
    assert_eq!(counted_from(&state, hoarder_id), 0, "a lie was counted");
}

/// A liar of one per-host token registers and answers its jobs, all wrong, before any honest
/// worker exists: nothing it says is counted, the coordinator's checks untrust it, and the
/// honest worker that comes later finishes exact.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_liar_that_registers_first_has_nothing_counted() {
    let dir = RunDir::new();
    let state = dir.state();
    let port = dir.port();
    let (coordinator, evil, good) = per_host_run(&dir, 12, &[]).await;
    let mut liar = register(port, &evil, "first").await;
    let lease = liar.lease(64).await;
    assert!(!lease.jobs.is_empty());
    let lies = lease
        .jobs
        .iter()
        .map(|s| liar.result(lease.lease_id, s.job_id, Some(lie(12, s.job_id)), 0.01))
        .collect();
    let acks = liar.send(lies).await;
    assert!(acks.iter().all(|a| outcome(a) != pb::Outcome::Confirmed));
    // Caught by the coordinator's own checks, with nobody else around.
    let started = Instant::now();
    loop {
        match liar.try_lease(64).await {
            Err(_) => break,
            Ok(l) if l.jobs.is_empty() && started.elapsed() > Duration::from_secs(30) => {
                panic!("the lone liar was not caught")
            }
            Ok(_) => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    }
    let honest = spawn_worker(dir.path(), port, "honest", &good);
    let liar_id = liar.id;
    coordinator.finishes_exact().await;
    drop(honest);
    assert_eq!(counted_from(&state, liar_id), 0, "a lie was counted");
    assert!(untrusted(&state, liar_id));
}

/// A liar alone, under the shared token, with no other worker ever: it lies on one job in
/// five. Before it could be trusted the coordinator checks its answers itself; a lie among
/// them untrusts it, and nothing it said is counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lone_liar_is_caught_by_the_coordinators_checks_before_it_is_trusted() {
    let dir = RunDir::new();
    let state = dir.state();
    let port = dir.port();
    let coordinator = dir.coordinator(12).exit_when_done().token(TOKEN).start();
    let mut liar = register(port, TOKEN, "alone").await;
    let mut answered = 0;
    let caught = loop {
        let Ok(lease) = liar.try_lease(64).await else { break true };
        if lease.jobs.is_empty() {
            if answered > 200 {
                break false;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        }
        let results = lease
            .jobs
            .iter()
            .map(|s| {
                answered += 1;
                let counts =
                    if answered % 5 == 0 { lie(12, s.job_id) } else { truth(12, s.job_id) };
                liar.result(lease.lease_id, s.job_id, Some(counts), 0.01)
            })
            .collect();
        liar.send(results).await;
    };
    assert!(caught, "the lone liar answered {answered} jobs and was never caught");
    let liar_id = liar.id;
    let honest = spawn_worker(dir.path(), port, "honest", TOKEN);
    coordinator.finishes_exact().await;
    drop(honest);
    assert_eq!(counted_from(&state, liar_id), 0, "an answer of the liar was counted");
    assert!(untrusted(&state, liar_id));
}

/// Two identities under the shared token earn trust with right answers, then report a solver
/// error for every job they get, in turn. No job fails: their errors only ask the coordinator
/// to solve the job itself, and the run ends exact without `requeue`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_shared_token_identities_erroring_in_turn_fail_no_job() {
    let dir = RunDir::new();
    let state = dir.state();
    let port = dir.port();
    let coordinator = dir.coordinator(12).exit_when_done().token(TOKEN).lease_seconds(5).start();
    let mut pair = vec![register(port, TOKEN, "err-a").await, register(port, TOKEN, "err-b").await];
    // Right answers first, until each was verified often enough to be trusted.
    for rogue in &mut pair {
        for _ in 0..3 {
            let lease = rogue.lease(64).await;
            let results = lease
                .jobs
                .iter()
                .map(|s| rogue.result(lease.lease_id, s.job_id, Some(truth(12, s.job_id)), 0.01))
                .collect();
            rogue.send(results).await;
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
    }
    // Then errors, in turn, for a while.
    let until = Instant::now() + Duration::from_secs(8);
    let mut turn = 0;
    while Instant::now() < until {
        let rogue = &mut pair[turn % 2];
        turn += 1;
        let Ok(lease) = rogue.try_lease(64).await else { continue };
        let errors =
            lease.jobs.iter().map(|s| rogue.result(lease.lease_id, s.job_id, None, 0.0)).collect();
        rogue.send(errors).await;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(query_count(&state, "SELECT COUNT(*) FROM jobs WHERE state='failed'"), 0);
    let honest = spawn_worker(dir.path(), port, "honest", TOKEN);
    coordinator.finishes_exact().await;
    drop(honest);
}

/// A fresh identity registers every lease period, leases what it can and heartbeats for ever
/// without answering. None holds a job past its measured time, and the one real worker ends
/// the run exact, in about the time it takes alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_identities_registered_every_lease_period_do_not_stall_the_run() {
    let dir = RunDir::new();
    let port = dir.port();
    let coordinator = dir.coordinator(12).exit_when_done().token(TOKEN).lease_seconds(3).start();
    let started = Instant::now();
    let spawner = tokio::spawn(async move {
        let mut beating = Vec::new();
        for i in 0.. {
            let mut idle = register(port, TOKEN, &format!("idle-{i}")).await;
            let lease_ids = idle.try_lease(64).await.map(|l| vec![l.lease_id]).unwrap_or_default();
            beating.push(keep_beating(idle, lease_ids));
            tokio::time::sleep(Duration::from_secs(3)).await;
        }
        drop(beating);
    });
    let worker = spawn_worker(dir.path(), port, "real", TOKEN);
    coordinator.finishes_exact().await;
    spawner.abort();
    drop(worker);
    let took = started.elapsed();
    assert!(took < Duration::from_secs(120), "the run took {took:?} beside idle identities");
}

/// A registration flood under the shared token from one address (127.0.0.2) is not refused for
/// its pace (honest hosts behind one NAT address arrive as fast), but what it costs is bounded:
/// past the credential's budget of identities that have not delivered (2 x
/// `--expected-workers`, here 64) each new one evicts the oldest idle one, so the stored worker
/// rows stay within the budget while it floods, and an honest worker of the same token joining
/// meanwhile gets in and finishes the run exact.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_registration_flood_does_not_keep_a_joining_honest_worker_out() {
    let dir = RunDir::new();
    let state = dir.state();
    let port = dir.port();
    let serve = dir.coordinator(11).exit_when_done().token(TOKEN);
    let coordinator = serve.args(&["--expected-workers", "32"]).start();
    coordinator.listening().await;
    let mut flood = connect_from(port, [127, 0, 0, 2].into(), Some(TOKEN)).await;
    let mut refused = 0;
    for i in 0..1000 {
        if flood.register(register_request(&format!("flood-{i}"), 0, "")).await.is_err() {
            refused += 1;
        }
    }
    assert_eq!(refused, 0, "idle identities are evicted, not refused");
    let rows = query_count(&state, "SELECT COUNT(*) FROM workers");
    assert!((1..=64).contains(&rows), "{rows} worker rows after 1,000 registrations");
    let flooding = tokio::spawn(async move {
        for i in 1000.. {
            let _ = flood.register(register_request(&format!("flood-{i}"), 0, "")).await;
        }
    });
    let worker = spawn_worker(dir.path(), port, "joining", TOKEN);
    coordinator.finishes_exact().await;
    flooding.abort();
    drop(worker);
    let rows = query_count(&state, "SELECT COUNT(*) FROM workers");
    assert!(rows <= 64 + 1, "{rows} worker rows after the flood");
}

/// Every job needs two answers (`--verify-fraction 1`). A client answers its jobs (first
/// opinions) and then heartbeats its lease ten times a second: a heartbeat never takes a job
/// back that left the lease, so the second answers go to the honest worker and the run ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fast_heartbeats_do_not_hold_a_verification_from_the_other_worker() {
    let dir = RunDir::new();
    let port = dir.port();
    let serve = dir.coordinator(11).exit_when_done().token(TOKEN);
    let coordinator = serve.verify_fraction("1").lease_seconds(3).start();
    let mut first = register(port, TOKEN, "first").await;
    let lease = first.lease(64).await;
    let results = lease
        .jobs
        .iter()
        .map(|s| first.result(lease.lease_id, s.job_id, Some(truth(11, s.job_id)), 0.01))
        .collect();
    first.send(results).await;
    let beating = tokio::spawn(async move {
        loop {
            let _ = first.heartbeat(vec![lease.lease_id]).await;
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    });
    let honest = spawn_worker(dir.path(), port, "honest", TOKEN);
    coordinator.finishes_exact().await;
    beating.abort();
    drop(honest);
}

/// One honest worker alone, as the README starts it: its first answers wait while the
/// coordinator checks some of them itself, then its credential is trusted and its answers count
/// alone. The run ends exact, nearly every job counted from the worker's own answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lone_honest_worker_leaves_probation_through_the_coordinators_checks() {
    let dir = RunDir::new();
    let state = dir.state();
    let port = dir.port();
    let coordinator = dir.coordinator(13).exit_when_done().token(TOKEN).start();
    let log = coordinator.log.clone();
    let worker = spawn_worker(dir.path(), port, "alone", TOKEN);
    coordinator.finishes_exact().await;
    drop(worker);
    let text = std::fs::read_to_string(log).unwrap();
    assert!(text.contains("credential trusted"), "the lone worker never left probation");
    let jobs = query_count(&state, "SELECT COUNT(*) FROM jobs");
    let own = query_count(&state, "SELECT COUNT(*) FROM results WHERE counted=1 AND worker_id<>0");
    assert!(own * 10 >= jobs * 9, "only {own} of {jobs} jobs counted from the worker's answers");
}
