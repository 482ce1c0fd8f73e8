//! Three ways one party once stalled a run or changed a plain run's total, each over real
//! processes: a late dissent that became a full opinion after a restart, one credential holding
//! jobs with its own contradictions, and a wrong answer to a spot check that stranded its job.
//! Every job's standing is now one ruling of its stored answers, so each ends exact with no
//! operator action (the scheduler's kept cases `route1`-`route3` show the same steps in the model).

use super::open_checks::{answers, earn_trust};
use super::record_run::record_run;
use super::trust::{register, register_request, TOKEN};
use super::trust_evidence::{lie, truth, untrusted};
use super::trust_forgetting::evidence_of;
use nqueens_core::JobCounts;
use nqueens_proto as pb;
use nqueens_tests::cluster::*;
use nqueens_tests::harness::{spawn_coordinator, spawn_worker, token_add, Coordinator, RunDir};
use nqueens_tests::rogue::{outcome, Rogue};
use std::path::Path;
use std::time::Duration;

/// A run without the referee (every run above N = 22) and with leases long enough for the turns
/// taken here.
const NO_REFEREE: [&str; 5] =
    ["--no-coordinator-checks", "--lease-seconds", "60", "--expected-workers", "8"];

/// A lie `k` solutions above the truth: another value for each `k`.
fn lie_by(n: u32, id: u64, k: u64) -> JobCounts {
    let t = truth(n, id);
    JobCounts { solutions: t.solutions + k, ..t }
}

/// The serve arguments of a plain run that ends when done, with every answer re-checked and no
/// referee, and `extra`.
fn plain_run_args<'a>(extra: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec!["--exit-when-done", "--token", TOKEN, "--recheck-fraction", "1"];
    args.extend_from_slice(&NO_REFEREE);
    args.extend_from_slice(extra);
    args
}

/// A plain run of board `n` served with `args` in `dir` on `port`, with per-host tokens `host-a`
/// and `host-b` added (as `record_run` makes a record run): the coordinator and the two tokens.
async fn plain_run(dir: &RunDir, n: u32, args: &[&str]) -> (Coordinator, String, String) {
    let coordinator = dir.coordinator(n).args(args).start();
    let [a, b] = coordinator.tokens_in_force(["host-a", "host-b"]).await;
    (coordinator, a, b)
}

/// Jobs of the state file in `state`.
fn jobs_in(state: &Path, which: &str) -> i64 {
    query_count(state, &format!("SELECT COUNT(*) FROM jobs WHERE state='{which}'"))
}

/// `rogue` answers `job` under `lease_id` with `counts`; the outcome.
async fn answer(rogue: &mut Rogue, lease_id: u64, job: u64, counts: JobCounts) -> pb::Outcome {
    let acks = rogue.send(vec![rogue.result(lease_id, job, Some(counts), 0.01)]).await;
    outcome(&acks[0])
}

/// The counted answer's solutions of `job`.
fn counted_solutions(state: &Path, job: u64) -> i64 {
    query_count(state, &format!("SELECT solutions FROM results WHERE job_id={job} AND counted=1"))
}

/// `rogue` leases jobs, holding them, until it is given `job`; then gives back every other one.
/// The lease that holds `job`.
async fn lease_until(rogue: &mut Rogue, job: u64) -> u64 {
    let mut held: Vec<(u64, Vec<u64>)> = Vec::new();
    let mut found = None;
    for _ in 0..64 {
        let lease = rogue.lease(32).await;
        let ids: Vec<u64> = lease.jobs.iter().map(|s| s.job_id).filter(|id| *id != job).collect();
        if lease.jobs.iter().any(|s| s.job_id == job) {
            found = Some(lease.lease_id);
        }
        held.push((lease.lease_id, ids));
        if found.is_some() || lease.jobs.is_empty() {
            break;
        }
    }
    for (lease_id, ids) in held.into_iter().filter(|(_, ids)| !ids.is_empty()) {
        rogue.release(lease_id, ids).await;
    }
    found.unwrap_or_else(|| panic!("job {job} was never leased"))
}

/// The plain run of the late-dissent route (every answer re-checked, no referee, no spot checks):
/// an honest per-host identity answers a job, a shared-token identity confirms it (two
/// credentials: counted), two other shared-token identities that held the job before contradict
/// it late, the coordinator is killed and restarted, and the confirming identity is then found
/// lying on another job (two honest credentials contradict it), so the job loses its witness.
/// Once the late lies were read back after a restart as live opinions of two parties, and the job
/// was counted from them at once: a wrong total with exit 0. Now a late answer stays late, and
/// the run ends exact with the true answer on that job.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn liveness_a_late_dissent_and_a_restart_leave_a_plain_run_exact() {
    let dir = RunDir::new();
    let state = dir.state();
    let (port, n) = (dir.port(), 12);
    let args = plain_run_args(&["--no-spot-checks"]);
    let (coordinator, a, b) = plain_run(&dir, n, &args).await;
    let mut honest = register(port, &a, "honest-a").await;
    let mut w1 = register(port, TOKEN, "shared-1").await;
    let mut w2 = register(port, TOKEN, "shared-2").await;
    let mut w3 = register(port, TOKEN, "shared-3").await;
    // w2 and w3 each hold the cheapest job once and give it back: their leases stay theirs.
    let mut turns = Vec::new();
    for w in [&mut w2, &mut w3] {
        let lease = w.lease(1).await;
        let ids: Vec<u64> = lease.jobs.iter().map(|s| s.job_id).collect();
        w.release(lease.lease_id, ids.clone()).await;
        turns.push((lease.lease_id, ids[0]));
    }
    let job = turns[0].1;
    assert_eq!(turns[1].1, job, "the two turns were not at one job");
    let lease = honest.lease(1).await;
    assert_eq!(lease.jobs[0].job_id, job);
    answer(&mut honest, lease.lease_id, job, truth(n, job)).await;
    // Drawn for a re-check (every answer is): another party confirms it.
    let lease_id = lease_until(&mut w1, job).await;
    answer(&mut w1, lease_id, job, truth(n, job)).await;
    let done = format!("SELECT COUNT(*) FROM jobs WHERE id={job} AND state='done'");
    assert_eq!(query_count(&state, &done), 1, "two credentials' answer not counted");
    for (w, (lease_id, _)) in [&mut w2, &mut w3].into_iter().zip(turns) {
        assert_ne!(answer(w, lease_id, job, lie(n, job)).await, pb::Outcome::Confirmed);
    }
    let mut coordinator = coordinator;
    coordinator.sigkill();
    let coordinator = spawn_coordinator(dir.path(), n, port, &args, "coordinator-2.log");
    coordinator.listening().await;
    // The witness comes back as itself and lies on what it gets now; two honest per-host
    // workers contradict it.
    let again = register_request("shared-1", w1.id, &w1.secret);
    let mut w1 = Rogue::register_with(port, TOKEN, again).await;
    let liar = tokio::spawn(async move {
        for _ in 0..40 {
            if let Ok(lease) = w1.try_lease(2).await {
                let lies = answers(&w1, &lease, n, lie);
                if !lies.is_empty() {
                    w1.send(lies).await;
                }
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        w1.id
    });
    let workers =
        [spawn_worker(dir.path(), port, "a", &a), spawn_worker(dir.path(), port, "b", &b)];
    coordinator.finishes_exact().await;
    drop(workers);
    let witness = liar.await.unwrap();
    assert!(untrusted(&state, witness), "the lying witness was not found");
    assert_eq!(counted_solutions(&state, job), truth(n, job).solutions as i64);
}

/// One per-host credential answers every job it leases four ways (once under its lease, then
/// three times late with other values) in a record run without the referee. Once each late
/// answer was a conflict and three of them held the job (1,604 of 2,310 held in seconds, the
/// attacker still trusted). Now a party that contradicts itself is untrusted at once: no job is
/// held, and two honest per-host workers end the run exact with no requeue.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn liveness_one_credential_answering_several_ways_holds_no_job_of_a_record_run() {
    let dir = RunDir::new();
    let state = dir.state();
    let (port, n) = (dir.port(), 12);
    let mut extra = vec!["--no-spot-checks"];
    extra.extend_from_slice(&NO_REFEREE);
    let (coordinator, a, b) = record_run(&dir, n, &extra).await;
    let c = token_add(&state, "host-c");
    let mut turncoat = register(port, &c, "turncoat").await;
    let other = register(port, &c, "turncoat-2").await;
    let lease = turncoat.lease(16).await;
    assert!(!lease.jobs.is_empty());
    turncoat.send(answers(&turncoat, &lease, n, lie)).await;
    for k in 2..=4 {
        let late: Vec<pb::JobResult> = lease
            .jobs
            .iter()
            .map(|s| {
                let counts = lie_by(n, s.job_id, k);
                turncoat.result(lease.lease_id, s.job_id, Some(counts), 0.01)
            })
            .collect();
        turncoat.send(late).await;
    }
    assert_eq!(jobs_in(&state, "held"), 0, "the turncoat held jobs");
    assert!(untrusted(&state, turncoat.id), "a credential contradicting itself stays trusted");
    assert!(untrusted(&state, other.id), "the credential's other identity stays trusted");
    let workers =
        [spawn_worker(dir.path(), port, "a", &a), spawn_worker(dir.path(), port, "b", &b)];
    coordinator.finishes_exact().await;
    drop(workers);
    let evidence = evidence_of(&state);
    assert_eq!(evidence.jobs_one_party, 0, "{evidence:?}");
}

/// A new identity of the party holding `token` (registered as `host-c`) whose first lease carries
/// a spot check of a job counted on other credentials alone (a spot check of a count the party
/// itself backs would test self-contradiction instead): the identity, its lease and that job.
/// Identities whose spot check fell elsewhere give their lease back.
async fn first_lease_with_a_spot_check(
    port: u16,
    token: &str,
    state: &Path,
) -> (Rogue, pb::LeaseResponse, u64) {
    for attempt in 0..8 {
        let done = counted_job_ids(state);
        let mut identity = register(port, token, &format!("turncoat-{}", attempt + 2)).await;
        let lease = identity.lease(8).await;
        let others_only = |id: u64| {
            let own =
                format!("SELECT COUNT(*) FROM results WHERE job_id={id} AND credential='host-c'");
            done.contains(&(id as i64)) && query_count(state, &own) == 0
        };
        if let Some(job) = lease.jobs.iter().map(|s| s.job_id).find(|id| others_only(*id)) {
            return (identity, lease, job);
        }
        let ids = lease.jobs.iter().map(|s| s.job_id).collect();
        identity.release(lease.lease_id, ids).await;
    }
    panic!("no first lease carried a spot check of a count on other credentials");
}

/// A per-host party earns trust with true answers beside two honest per-host workers in a plain
/// run without the referee (every answer re-checked, so every count rests on two credentials);
/// the honest workers are paused, and a second identity of the trusted party takes its first
/// lease, which carries a spot check of such a count, and answers everything wrongly under that
/// live lease. Once that un-counted the job and set both honest answers aside as opinions that
/// nothing counted again: the job was stranded for good and the run never ended. Now the lie
/// contradicts an answer two credentials gave: the party is untrusted, the count stands, and the
/// run ends exact with no requeue.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn liveness_a_wrong_answer_to_a_spot_check_strands_no_job() {
    let dir = RunDir::new();
    let state = dir.state();
    // Large enough that the honest workers are still busy once the party has earned its trust.
    let (port, n) = (dir.port(), 18);
    let (coordinator, a, b) = plain_run(&dir, n, &plain_run_args(&[])).await;
    let c = token_add(&state, "host-c");
    let workers =
        [spawn_worker(dir.path(), port, "a", &a), spawn_worker(dir.path(), port, "b", &b)];
    let mut first = register(port, &c, "turncoat-1").await;
    earn_trust(&mut first, n, port).await;
    for w in &workers {
        w.signal(libc::SIGSTOP);
    }
    let (mut second, lease, spot_checked) = first_lease_with_a_spot_check(port, &c, &state).await;
    let acks = second.send(answers(&second, &lease, n, lie)).await;
    assert!(acks.iter().all(|a| !a.run_complete), "the run ended before the spot check");
    assert!(untrusted(&state, second.id), "a wrong spot-check answer left its party trusted");
    let still = format!("SELECT COUNT(*) FROM jobs WHERE id={spot_checked} AND state='done'");
    assert_eq!(query_count(&state, &still), 1, "spot-checked job {spot_checked} was un-counted");
    for w in &workers {
        w.signal(libc::SIGCONT);
    }
    coordinator.finishes_exact().await;
    drop(workers);
}
