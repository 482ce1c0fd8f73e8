//! The scheduler's own tests: leasing, expiry, verification, conflicts, untrusting, errors
//! (checks on answers: `checks.rs`).

mod checks;

use super::*;
use crate::ids::{JobId, LeaseId, WorkerId, COORDINATOR};
use crate::jobs::Standing;
use crate::outcome::{Change, Finding, Verdict};
use crate::state::{JobState, ResultKind};
use nqueens_core::JobCounts;
use std::collections::HashMap;
use std::time::{Duration, Instant};

/// Another live worker that has given no opinion on anything.
const NOBODY: u64 = 999;

fn counts(s: u64) -> JobCounts {
    JobCounts { solutions: s, sym180: 0, sym90: 0, nodes: 10 }
}

fn solved(counts: JobCounts) -> Finding {
    Finding::Solved { counts, seconds: 0.1 }
}

fn w(id: impl Into<WorkerId>) -> WorkerId {
    id.into()
}

fn j(id: impl Into<JobId>) -> JobId {
    id.into()
}

fn lid(id: impl Into<LeaseId>) -> LeaseId {
    id.into()
}

fn ws(ids: &[u64]) -> Vec<WorkerId> {
    ids.iter().map(|&id| WorkerId::new(id)).collect()
}

fn js(ids: &[u64]) -> Vec<JobId> {
    ids.iter().map(|&id| JobId::new(id)).collect()
}

fn stored(id: u64, estimate: u64, verify: bool) -> StoredJob {
    StoredJob::new(JobId::new(id), estimate, 8, verify)
}

/// The figures of these tests: leases of 10 s, no probation, a fixed seed.
fn config() -> SchedulerConfig {
    SchedulerConfig {
        lease_duration: Duration::from_secs(10),
        probation_results: 0,
        seed: 7,
        ..SchedulerConfig::default()
    }
}

fn life(n: usize, verify: bool) -> Scheduler {
    let jobs = (0..n as u64).map(|i| stored(i, i, verify)).collect();
    Scheduler::restore(config(), jobs, Vec::new(), HashMap::new(), [], Instant::now())
}

#[test]
fn leases_longest_first_and_completes() {
    let mut l = life(5, false);
    let mut ch = Vec::new();
    let (lease, ids) = l.lease(w(1), 2, &ws(&[NOBODY]), Instant::now(), &mut ch).unwrap();
    assert_eq!(ids, js(&[4, 3]));
    assert_eq!(l.leased_by(w(1)), 2);
    assert_eq!(
        l.result(w(1), lease, j(4), solved(counts(1)), Instant::now(), &mut ch),
        Verdict::Accepted
    );
    assert_eq!(l.leased_by(w(1)), 1);
    assert_eq!(
        l.result(w(1), lease, j(4), solved(counts(1)), Instant::now(), &mut ch),
        Verdict::Duplicate
    );
    assert_eq!(
        l.result(w(1), lease, j(2), solved(counts(1)), Instant::now(), &mut ch),
        Verdict::UnknownLease
    );
    assert_eq!(
        l.result(w(1), lease, j(99), solved(counts(1)), Instant::now(), &mut ch),
        Verdict::UnknownJob
    );
    assert_eq!(l.count(JobState::Done), 1);
    assert_eq!(l.count(JobState::Leased), 1);
    assert_eq!(l.count(JobState::Pending), 3);
}

#[test]
fn a_group_on_probation_gets_the_cheapest_jobs_and_a_trusted_one_the_longest() {
    let mut l = life(8, false);
    l.set_probation(1);
    let mut ch = Vec::new();
    let (lease, ids) = l.lease(w(1), 2, &[], Instant::now(), &mut ch).unwrap();
    assert_eq!(ids, js(&[1, 0]), "cheapest first, sent longest first");
    // The coordinator's own answer agrees: the group leaves probation.
    l.add_reference(j(0), counts(1), &mut ch);
    l.result(w(1), lease, j(0), solved(counts(1)), Instant::now(), &mut ch);
    assert!(!l.on_probation(w(1)));
    let (_, ids) = l.lease(w(1), 2, &[], Instant::now(), &mut ch).unwrap();
    assert_eq!(ids, js(&[7, 6]));
    assert_eq!(l.count(JobState::Pending), 4);
}

#[test]
fn expired_leases_return_jobs() {
    let mut l = life(3, false);
    let mut ch = Vec::new();
    let t0 = Instant::now();
    l.lease(w(1), 3, &ws(&[NOBODY]), t0, &mut ch).unwrap();
    assert_eq!(l.expire(t0 + Duration::from_secs(11), &mut ch), 1);
    assert_eq!(l.count(JobState::Pending), 3);
    assert_eq!(l.lease_expiries(), 1);
    assert_eq!(l.leased_by(w(1)), 0);
}

#[test]
fn conflicting_duplicate_reruns_job() {
    let mut l = life(1, false);
    let mut ch = Vec::new();
    let (a, _) = l.lease(w(1), 1, &ws(&[NOBODY]), Instant::now(), &mut ch).unwrap();
    assert_eq!(
        l.result(w(1), a, j(0), solved(counts(5)), Instant::now(), &mut ch),
        Verdict::Accepted
    );
    assert_eq!(
        l.result(w(1), a, j(0), solved(counts(6)), Instant::now(), &mut ch),
        Verdict::Conflict
    );
    assert_eq!(l.count(JobState::Pending), 1);
    // Needs two agreeing workers now; worker 2 agrees with the first result.
    let (b, ids) = l.lease(w(2), 1, &ws(&[NOBODY]), Instant::now(), &mut ch).unwrap();
    assert_eq!(ids, js(&[0]));
    assert_eq!(
        l.result(w(2), b, j(0), solved(counts(5)), Instant::now(), &mut ch),
        Verdict::Confirmed
    );
    assert!(l.is_complete());
}

#[test]
fn verified_job_needs_a_second_worker() {
    let mut l = life(1, true);
    let mut ch = Vec::new();
    let (a, _) = l.lease(w(1), 1, &ws(&[NOBODY]), Instant::now(), &mut ch).unwrap();
    assert_eq!(
        l.result(w(1), a, j(0), solved(counts(5)), Instant::now(), &mut ch),
        Verdict::Accepted
    );
    assert!(!l.is_complete());
    assert!(
        l.lease(w(1), 1, &ws(&[NOBODY]), Instant::now(), &mut ch).is_none(),
        "same worker may not verify"
    );
    let (b, _) = l.lease(w(2), 1, &ws(&[NOBODY]), Instant::now(), &mut ch).unwrap();
    assert_eq!(
        l.result(w(2), b, j(0), solved(counts(5)), Instant::now(), &mut ch),
        Verdict::Confirmed
    );
    assert!(l.is_complete());
}

#[test]
fn results_that_differ_only_in_work_done_agree() {
    // Two solver versions place a different number of queens for the same answer.
    let mut l = life(1, true);
    let mut ch = Vec::new();
    let (a, _) = l.lease(w(1), 1, &ws(&[NOBODY]), Instant::now(), &mut ch).unwrap();
    assert_eq!(
        l.result(w(1), a, j(0), solved(counts(5)), Instant::now(), &mut ch),
        Verdict::Accepted
    );
    let (b, _) = l.lease(w(2), 1, &ws(&[NOBODY]), Instant::now(), &mut ch).unwrap();
    let other_version = JobCounts { nodes: 7, ..counts(5) };
    assert_eq!(
        l.result(w(2), b, j(0), solved(other_version), Instant::now(), &mut ch),
        Verdict::Confirmed
    );
    assert!(l.is_complete());
    assert_eq!(l.conflicts_total(), 0);
}

#[test]
fn release_all_returns_every_job_of_the_worker() {
    let mut l = life(6, false);
    let mut ch = Vec::new();
    l.lease(w(1), 2, &ws(&[NOBODY]), Instant::now(), &mut ch).unwrap();
    l.lease(w(1), 2, &ws(&[NOBODY]), Instant::now(), &mut ch).unwrap();
    l.lease(w(2), 1, &ws(&[NOBODY]), Instant::now(), &mut ch).unwrap();
    assert_eq!(l.release(w(1), lid(0), &[], &mut ch), 4);
    assert_eq!(l.count(JobState::Leased), 1);
    assert_eq!(l.count(JobState::Pending), 5);
}

#[test]
fn a_lone_worker_never_verifies_its_own_job_and_the_coordinator_settles_it() {
    let mut l = life(1, true);
    let mut ch = Vec::new();
    let (a, _) = l.lease(w(1), 1, &[], Instant::now(), &mut ch).unwrap();
    assert_eq!(
        l.result(w(1), a, j(0), solved(counts(5)), Instant::now(), &mut ch),
        Verdict::Accepted
    );
    assert_eq!(
        l.result(w(1), a, j(0), solved(counts(5)), Instant::now(), &mut ch),
        Verdict::Duplicate
    );
    // Solving it again itself proves nothing.
    let (b, _) = l.lease(w(1), 1, &[], Instant::now(), &mut ch).unwrap();
    assert_eq!(
        l.result(w(1), b, j(0), solved(counts(5)), Instant::now(), &mut ch),
        Verdict::Accepted
    );
    assert!(!l.is_complete());
    // Where the coordinator can solve jobs, it is asked, and its answer settles the job.
    let mut l = Scheduler::restore(
        SchedulerConfig { coordinator_checks: true, ..config() },
        vec![stored(0, 0, true)],
        Vec::new(),
        HashMap::new(),
        [],
        Instant::now(),
    );
    let (a, _) = l.lease(w(1), 1, &[], Instant::now(), &mut ch).unwrap();
    assert_eq!(
        l.result(w(1), a, j(0), solved(counts(5)), Instant::now(), &mut ch),
        Verdict::Accepted
    );
    assert_eq!(l.take_referee_jobs(), js(&[0]));
    l.add_reference(j(0), counts(5), &mut ch);
    assert!(l.is_complete());
    assert_eq!(l.counted(j(0)), Some((COORDINATOR, counts(5))));
}

#[test]
fn two_disputing_workers_alone_solve_again_and_only_the_other_side_settles() {
    const A: u64 = 1;
    const B: u64 = 2;
    let mut l = life(1, false);
    let mut ch = Vec::new();
    let (a, _) = l.lease(w(A), 1, &ws(&[B]), Instant::now(), &mut ch).unwrap();
    assert_eq!(
        l.result(w(A), a, j(0), solved(counts(5)), Instant::now(), &mut ch),
        Verdict::Accepted
    );
    // B re-solves the done job (a lease lost in a restart, say) and disagrees.
    l.jobs.set_state(j(0), Standing::Pending, &mut ch);
    let (b, _) = l.lease(w(B), 1, &ws(&[A]), Instant::now(), &mut ch).unwrap();
    assert_eq!(
        l.result(w(B), b, j(0), solved(counts(6)), Instant::now(), &mut ch),
        Verdict::Conflict
    );
    // A third worker would get the job; with none, both may solve it again.
    assert!(l.lease(w(A), 1, &ws(&[B, NOBODY]), Instant::now(), &mut ch).is_none());
    let (a2, _) = l.lease(w(A), 1, &ws(&[B]), Instant::now(), &mut ch).unwrap();
    // Repeating its own side of the dispute settles nothing: one more conflict.
    assert_eq!(
        l.result(w(A), a2, j(0), solved(counts(5)), Instant::now(), &mut ch),
        Verdict::Conflict
    );
    assert_eq!(l.count(JobState::Pending), 1);
    // Agreeing with the other worker settles it.
    let (b2, _) = l.lease(w(B), 1, &ws(&[A]), Instant::now(), &mut ch).unwrap();
    assert_eq!(
        l.result(w(B), b2, j(0), solved(counts(5)), Instant::now(), &mut ch),
        Verdict::Confirmed
    );
    assert!(l.is_complete());
    assert_eq!(l.jobs.entry(j(0)).counted.map(|(_, c)| c.solutions), Some(5));
}

#[test]
fn a_requeued_held_job_is_not_settled_by_one_worker_alone() {
    const A: u64 = 1;
    let mut l = life(1, false);
    let mut ch = Vec::new();
    // Three conflicts hold the job (A and two other workers kept disagreeing).
    for (worker, answer) in [(A, 5), (2, 6), (3, 7), (4, 8)] {
        l.jobs.set_state(j(0), Standing::Pending, &mut ch);
        let (lease, _) = l.lease(w(worker), 1, &[], Instant::now(), &mut ch).unwrap();
        l.result(w(worker), lease, j(0), solved(counts(answer)), Instant::now(), &mut ch);
    }
    assert_eq!(l.count(JobState::Held), 1);
    // Requeued by an operator, with only A around: A's repeat of its own answer holds it again.
    l.jobs.set_state(j(0), Standing::Pending, &mut ch);
    let (a, _) = l.lease(w(A), 1, &[], Instant::now(), &mut ch).unwrap();
    assert_eq!(
        l.result(w(A), a, j(0), solved(counts(5)), Instant::now(), &mut ch),
        Verdict::Conflict
    );
    assert_eq!(l.count(JobState::Held), 1);
    assert!(!l.is_complete());
    // Requeued again: agreeing with another worker's answer settles it.
    l.jobs.set_state(j(0), Standing::Pending, &mut ch);
    let (a, _) = l.lease(w(A), 1, &[], Instant::now(), &mut ch).unwrap();
    assert_eq!(
        l.result(w(A), a, j(0), solved(counts(7)), Instant::now(), &mut ch),
        Verdict::Confirmed
    );
    assert!(l.is_complete());
}

#[test]
fn losing_a_verification_untrusts_the_worker_and_reruns_its_jobs() {
    const A: u64 = 1;
    const B: u64 = 2;
    const C: u64 = 3;
    // Jobs 0..=2 are plain, job 3 is the verification job (leased first: largest estimate).
    let mut jobs: Vec<StoredJob> = (0..3).map(|i| stored(i, i, false)).collect();
    jobs.push(stored(3, 10, true));
    let mut l = Scheduler::restore(config(), jobs, Vec::new(), HashMap::new(), [], Instant::now());
    let mut ch = Vec::new();
    let now = Instant::now();

    // A solves the verification job wrongly, then three plain jobs that are counted.
    let (a1, ids) = l.lease(w(A), 1, &ws(&[NOBODY]), now, &mut ch).unwrap();
    assert_eq!(ids, js(&[3]));
    assert_eq!(
        l.result(w(A), a1, j(3), solved(counts(99)), Instant::now(), &mut ch),
        Verdict::Accepted
    );
    let (a2, ids) = l.lease(w(A), 3, &ws(&[NOBODY]), now, &mut ch).unwrap();
    assert_eq!(ids, js(&[2, 1, 0]));
    for id in [2, 1, 0] {
        assert_eq!(
            l.result(w(A), a2, j(id), solved(counts(id)), Instant::now(), &mut ch),
            Verdict::Accepted
        );
    }
    assert_eq!(l.count(JobState::Done), 3);

    // B disagrees: a conflict, still no one untrusted.
    let (b1, ids) = l.lease(w(B), 1, &ws(&[NOBODY]), now, &mut ch).unwrap();
    assert_eq!(ids, js(&[3]));
    assert_eq!(
        l.result(w(B), b1, j(3), solved(counts(5)), Instant::now(), &mut ch),
        Verdict::Conflict
    );
    assert!(!l.is_untrusted(w(A)) && !l.is_untrusted(w(B)));

    // C agrees with B: settled, A is untrusted and its counted jobs are re-run.
    let (c1, ids) = l.lease(w(C), 1, &ws(&[NOBODY]), now, &mut ch).unwrap();
    assert_eq!(ids, js(&[3]));
    ch.clear();
    assert_eq!(
        l.result(w(C), c1, j(3), solved(counts(5)), Instant::now(), &mut ch),
        Verdict::Confirmed
    );
    assert!(l.is_untrusted(w(A)));
    assert!(!l.is_untrusted(w(B)) && !l.is_untrusted(w(C)));
    assert_eq!(l.untrusted_count(), 1);
    assert_eq!(l.jobs.standing(j(3)), Standing::Done);
    assert_eq!(l.jobs.entry(j(3)).counted, Some((w(C), counts(5))));
    for id in 0..3u64 {
        assert_eq!(l.jobs.standing(j(id)), Standing::Pending, "job {id}");
        assert_eq!(l.jobs.entry(j(id)).counted, None, "job {id}");
        assert!(
            ch.contains(&Change::Uncount { job_id: j(id) }),
            "job {id} un-counted in the same batch"
        );
    }
    assert!(ch.iter().any(|c| matches!(
        c,
        Change::Untrust { worker_id: WorkerId(A), job_id: JobId(3), requeued: 3, .. }
    )));
    assert_eq!(l.count(JobState::Done), 1);
    assert_eq!(l.count(JobState::Pending), 3);

    // A is refused; the others re-solve its jobs.
    ch.clear();
    assert!(l.lease(w(A), 3, &ws(&[NOBODY]), now, &mut ch).is_none());
    assert_eq!(
        l.result(w(A), a2, j(0), solved(counts(0)), Instant::now(), &mut ch),
        Verdict::UntrustedWorker
    );
    assert_eq!(l.heartbeat(w(A), &[a2], now, &mut ch), vec![a2]);
    assert!(ch.is_empty(), "refusals change nothing");
    let (b2, ids) = l.lease(w(B), 3, &ws(&[NOBODY]), now, &mut ch).unwrap();
    assert_eq!(ids, js(&[2, 1, 0]));
    for id in [2, 1, 0] {
        assert_eq!(
            l.result(w(B), b2, j(id), solved(counts(id)), Instant::now(), &mut ch),
            Verdict::Accepted
        );
    }
    assert!(l.is_complete());
}

#[test]
fn errors_fail_a_job_only_from_two_credentials_or_the_coordinator() {
    // Two identities under the shared token (groups of their own) never fail a job.
    let mut l = life(1, false);
    let mut ch = Vec::new();
    for worker in [1, 2, 1, 2, 1, 2] {
        let (a, _) = l.lease(w(worker), 1, &[], Instant::now(), &mut ch).unwrap();
        assert_eq!(
            l.result(
                w(worker),
                a,
                j(0),
                Finding::SolverError("boom".into()),
                Instant::now(),
                &mut ch
            ),
            Verdict::ErrorRecorded
        );
    }
    assert_eq!(l.count(JobState::Failed), 0);
    assert_eq!(l.count(JobState::Pending), 1);
    // Two per-host credentials do.
    let mut l = life(1, false);
    l.set_group(w(1), crate::CREDENTIAL_GROUPS);
    l.set_group(w(2), crate::CREDENTIAL_GROUPS + 1);
    for worker in [1, 1, 2] {
        let (a, _) = l.lease(w(worker), 1, &[], Instant::now(), &mut ch).unwrap();
        l.result(w(worker), a, j(0), Finding::SolverError("boom".into()), Instant::now(), &mut ch);
    }
    assert_eq!(l.count(JobState::Failed), 1);
    // So does the coordinator's own failed attempt, after a trusted worker's error.
    let mut l = Scheduler::restore(
        SchedulerConfig { coordinator_checks: true, ..config() },
        vec![stored(0, 0, false)],
        Vec::new(),
        HashMap::new(),
        [],
        Instant::now(),
    );
    let (a, _) = l.lease(w(1), 1, &[], Instant::now(), &mut ch).unwrap();
    l.result(w(1), a, j(0), Finding::SolverError("boom".into()), Instant::now(), &mut ch);
    assert_eq!(l.take_referee_jobs(), js(&[0]));
    assert_eq!(l.count(JobState::Failed), 0);
    l.coordinator_failed(j(0), &mut ch);
    assert_eq!(l.count(JobState::Failed), 1);
}

#[test]
fn errors_from_a_newcomer_only_release_and_a_flood_untrusts_it() {
    let mut l = life(40, false);
    l.set_probation(10);
    let mut ch = Vec::new();
    let mut refused = false;
    for _ in 0..40 {
        let Some((a, ids)) = l.lease(w(1), 4, &ws(&[NOBODY]), Instant::now(), &mut ch) else {
            refused = true;
            break;
        };
        for id in ids {
            l.result(w(1), a, j(id), Finding::SolverError("boom".into()), Instant::now(), &mut ch);
        }
    }
    assert!(refused && l.is_untrusted(w(1)), "the flooding newcomer was not untrusted");
    assert_eq!(l.count(JobState::Failed), 0);
    assert_eq!(l.count(JobState::Pending), 40);
}

#[test]
fn two_workers_of_one_group_never_confirm_each_other_while_another_group_is_around() {
    const A: u64 = 1;
    const B: u64 = 2;
    const C: u64 = 3;
    let mut l = life(3, true);
    l.set_group(w(A), 100);
    l.set_group(w(B), 100);
    let mut ch = Vec::new();
    let (a, _) = l.lease(w(A), 1, &ws(&[B, C]), Instant::now(), &mut ch).unwrap();
    assert_eq!(
        l.result(w(A), a, j(2), solved(counts(9)), Instant::now(), &mut ch),
        Verdict::Accepted
    );
    // The job waits for another group: B (A's group) is not given it while C could be.
    let (b, ids) = l.lease(w(B), 1, &ws(&[A, C]), Instant::now(), &mut ch).unwrap();
    assert_ne!(ids, js(&[2]));
    l.release(w(B), b, &[], &mut ch);
    // Even leased to B, B's agreement does not count: the job stays open.
    l.jobs.set_state(j(2), Standing::Pending, &mut ch);
    let (b, ids) = l.lease(w(B), 3, &ws(&[A]), Instant::now(), &mut ch).unwrap();
    assert!(ids.contains(&j(2)));
    assert_eq!(
        l.result(w(B), b, j(2), solved(counts(9)), Instant::now(), &mut ch),
        Verdict::Accepted
    );
    assert_eq!(l.jobs.entry(j(2)).counted, None, "one group confirmed itself");
    assert!(l.known_answer(j(2)).is_none());
    // C, of another group, settles it.
    let (c, ids) = l.lease(w(C), 3, &ws(&[A, B]), Instant::now(), &mut ch).unwrap();
    assert!(ids.contains(&j(2)));
    assert_eq!(
        l.result(w(C), c, j(2), solved(counts(9)), Instant::now(), &mut ch),
        Verdict::Confirmed
    );
    assert_eq!(l.known_answer(j(2)), Some(counts(9)));
}

#[test]
fn a_dispute_is_settled_by_the_referee_and_the_liar_untrusted() {
    const A: u64 = 1;
    const B: u64 = 2;
    let mut l = life(1, true);
    let mut ch = Vec::new();
    let (a, _) = l.lease(w(A), 1, &ws(&[B]), Instant::now(), &mut ch).unwrap();
    l.result(w(A), a, j(0), solved(counts(5)), Instant::now(), &mut ch);
    let (b, _) = l.lease(w(B), 1, &ws(&[A]), Instant::now(), &mut ch).unwrap();
    assert_eq!(
        l.result(w(B), b, j(0), solved(counts(6)), Instant::now(), &mut ch),
        Verdict::Conflict
    );
    assert_eq!(l.take_referee_jobs(), js(&[0]));
    l.add_reference(j(0), counts(5), &mut ch);
    assert!(l.is_untrusted(w(B)) && !l.is_untrusted(w(A)));
    assert!(l.is_complete(), "the coordinator's answer settles the job");
    assert_eq!(l.jobs.entry(j(0)).counted, Some((COORDINATOR, counts(5))));
}

#[test]
fn job_times_are_the_coordinators_own_and_reported_seconds_teach_nothing() {
    let mut l = life(6, false);
    let mut ch = Vec::new();
    let t0 = Instant::now();
    let (a, _) = l.lease(w(1), 3, &[], t0, &mut ch).unwrap();
    // Job 5 (estimate 5) answered 0.5 s after its lease, claiming 1e300 s: 0.1 s per unit.
    let poison = Finding::Solved { counts: counts(1), seconds: 1e300 };
    let t = t0 + Duration::from_millis(500);
    l.result(w(1), a, j(5), poison.clone(), t, &mut ch);
    let rate = l.seconds_per_estimate().unwrap();
    assert!((rate - 0.1).abs() < 1e-9, "{rate}");
    // Replays change nothing.
    for _ in 0..600 {
        assert_eq!(l.result(w(1), a, j(5), poison.clone(), t, &mut ch), Verdict::Duplicate);
    }
    assert_eq!(l.seconds_per_estimate(), Some(rate));
    // A second group answering slowly on purpose does not move the lower median.
    let (b, ids) = l.lease(w(2), 1, &[], t0, &mut ch).unwrap();
    let slow = Finding::Solved { counts: counts(1), seconds: 0.001 };
    l.result(w(2), b, ids[0], slow, t0 + Duration::from_secs(1000), &mut ch);
    assert_eq!(l.seconds_per_estimate(), Some(rate));
}

#[test]
fn a_new_worker_is_believed_alone_only_after_agreeing_with_others() {
    const A: u64 = 1;
    const B: u64 = 2;
    const C: u64 = 3;
    let mut l = life(4, false);
    l.set_probation(1);
    let mut ch = Vec::new();
    // A is new and B is around: A's answer waits for B's.
    let (a, ids) = l.lease(w(A), 1, &ws(&[B]), Instant::now(), &mut ch).unwrap();
    let job = ids[0];
    assert_eq!(
        l.result(w(A), a, j(job), solved(counts(5)), Instant::now(), &mut ch),
        Verdict::Accepted
    );
    assert_eq!(l.count(JobState::Done), 0);
    let (b, _) = l.lease(w(B), 1, &ws(&[A]), Instant::now(), &mut ch).unwrap();
    assert_eq!(
        l.result(w(B), b, j(job), solved(counts(5)), Instant::now(), &mut ch),
        Verdict::Confirmed
    );
    assert!(!l.on_probation(w(A)) && !l.on_probation(w(B)));
    // Proven, A's next answer counts at once.
    let (a, ids) = l.lease(w(A), 1, &ws(&[B]), Instant::now(), &mut ch).unwrap();
    assert_eq!(
        l.result(w(A), a, j(ids[0]), solved(counts(1)), Instant::now(), &mut ch),
        Verdict::Accepted
    );
    assert_eq!(l.count(JobState::Done), 2);
    // C is new and lies: its answer waits, B contradicts it, A settles it, C is untrusted.
    let (c, ids) = l.lease(w(C), 1, &ws(&[A, B]), Instant::now(), &mut ch).unwrap();
    let job = ids[0];
    assert_eq!(
        l.result(w(C), c, j(job), solved(counts(9)), Instant::now(), &mut ch),
        Verdict::Accepted
    );
    let (b, ids) = l.lease(w(B), 4, &ws(&[A, C]), Instant::now(), &mut ch).unwrap();
    assert!(ids.contains(&job));
    assert_eq!(
        l.result(w(B), b, j(job), solved(counts(8)), Instant::now(), &mut ch),
        Verdict::Conflict
    );
    l.release(w(B), b, &[], &mut ch);
    let (a, ids) = l.lease(w(A), 4, &ws(&[B, C]), Instant::now(), &mut ch).unwrap();
    assert!(ids.contains(&job));
    assert_eq!(
        l.result(w(A), a, j(job), solved(counts(8)), Instant::now(), &mut ch),
        Verdict::Confirmed
    );
    assert!(l.is_untrusted(w(C)) && !l.is_untrusted(w(A)) && !l.is_untrusted(w(B)));
    assert_eq!(l.jobs.entry(job).counted.map(|(_, c)| c.solutions), Some(8));
}

#[test]
fn a_lone_newcomer_is_never_believed_alone_and_earns_trust_from_the_coordinators_checks() {
    let jobs = (0..40).map(|i| stored(i, i, false)).collect();
    let config = SchedulerConfig { probation_results: 3, coordinator_checks: true, ..config() };
    let mut l = Scheduler::restore(config, jobs, Vec::new(), HashMap::new(), [], Instant::now());
    let mut ch = Vec::new();
    let now = Instant::now();
    // On probation the credential holds PROBATION_HOLD jobs at most, however it asks.
    let (a, ids) = l.lease(w(1), 1000, &[], now, &mut ch).unwrap();
    assert_eq!(ids.len(), crate::PROBATION_HOLD as usize);
    assert!(l.lease(w(1), 1000, &[], now, &mut ch).is_none(), "no room left under its cap");
    for &id in &ids {
        assert_eq!(
            l.result(w(1), a, id, solved(counts(id.get())), now, &mut ch),
            Verdict::Accepted
        );
    }
    assert_eq!(l.count(JobState::Done), 0, "nobody else around is no reason to believe it");
    // The coordinator was asked to check three of its answers, chosen after the fact.
    let asked = l.take_referee_jobs();
    assert_eq!(asked.len(), 3);
    for id in asked {
        l.add_reference(id, counts(id.get()), &mut ch);
    }
    assert!(!l.on_probation(w(1)));
    assert_eq!(l.count(JobState::Done), 3, "the checked jobs count under the coordinator");
    // Trusted, it now counts alone; its own earlier opinions come back to it.
    let (a, ids) = l.lease(w(1), 100, &[], now, &mut ch).unwrap();
    for &id in &ids {
        assert_eq!(
            l.result(w(1), a, id, solved(counts(id.get())), now, &mut ch),
            Verdict::Accepted
        );
    }
    assert_eq!(l.count(JobState::Done), 3 + ids.len() as u64);
}

#[test]
fn a_lone_liar_is_caught_by_the_coordinators_checks_before_anything_counts() {
    let jobs = (0..40).map(|i| stored(i, i, false)).collect();
    let config = SchedulerConfig { probation_results: 10, coordinator_checks: true, ..config() };
    let mut l = Scheduler::restore(config, jobs, Vec::new(), HashMap::new(), [], Instant::now());
    let mut ch = Vec::new();
    let now = Instant::now();
    let (a, ids) = l.lease(w(1), 16, &[], now, &mut ch).unwrap();
    // Right on all but one job: that one is among those the coordinator checks or not; once all
    // its answers are checked, the lie is found.
    for &id in &ids {
        let lie = if id == ids[5] { 1 } else { 0 };
        l.result(w(1), a, id, solved(counts(id.get() + lie)), now, &mut ch);
    }
    assert_eq!(l.count(JobState::Done), 0);
    for id in l.take_referee_jobs() {
        l.add_reference(id, counts(id.get()), &mut ch);
    }
    for &id in &ids {
        l.add_reference(id, counts(id.get()), &mut ch);
    }
    assert!(l.is_untrusted(w(1)));
    assert!(l.jobs.ids().all(|id| l.counted(id).is_none_or(|(by, _)| by == COORDINATOR)));
}

#[test]
fn leases_follow_the_measured_throughput_of_the_group_within_its_cap() {
    // Leases of 10 s: a slot's share should last a quarter of one, 2.5 s.
    let mut l = life(200, false);
    let mut ch = Vec::new();
    let t0 = Instant::now();
    // No job time yet: two jobs a slot.
    assert_eq!(l.batch_size(4), 8);
    let (a, ids) = l.lease(w(1), 1, &[], t0, &mut ch).unwrap();
    l.result(w(1), a, ids[0], solved(counts(1)), t0 + Duration::from_millis(500), &mut ch);
    // 0.5 s a job: five jobs a slot.
    assert_eq!(l.batch_size(4), 20);
    // The group delivered one answer in the last lease period: its cap is the floor.
    let t = t0 + Duration::from_secs(1);
    assert_eq!(l.group_cap(w(1), t), crate::PROBATION_HOLD as usize);
    assert_eq!(l.lease_size(w(1), 4, t), 16);
    // Forty delivered: a cap of 80, and the batch decides.
    let (a, ids) = l.lease(w(1), 16, &[], t, &mut ch).unwrap();
    for &id in &ids {
        l.result(w(1), a, id, solved(counts(1)), t + Duration::from_millis(500), &mut ch);
    }
    let (a, ids) = l.lease(w(1), 24, &[], t, &mut ch).unwrap();
    for &id in &ids {
        l.result(w(1), a, id, solved(counts(1)), t + Duration::from_millis(500), &mut ch);
    }
    assert_eq!(l.delivered_recently(w(1), t + Duration::from_secs(1)), 41);
    assert_eq!(l.group_cap(w(1), t + Duration::from_secs(1)), 82);
    // Past the lease period the deliveries age out and the cap falls back.
    assert_eq!(l.group_cap(w(1), t + Duration::from_secs(30)), 16);
}

#[test]
fn a_lease_takes_at_most_half_the_pending_jobs_times_the_groups_share_of_deliveries() {
    let mut l = life(200, false);
    let mut ch = Vec::new();
    let t = Instant::now();
    // `worker` answers `jobs` jobs, lease after lease.
    let deliver = |l: &mut Scheduler, ch: &mut Vec<Change>, worker: WorkerId, mut jobs: usize| {
        while jobs > 0 {
            let (lease, ids) = l.lease(worker, jobs, &[], t, ch).unwrap();
            for &id in &ids {
                l.result(worker, lease, id, solved(counts(1)), t, ch);
            }
            jobs -= ids.len();
        }
    };
    // Nothing delivered yet: half of what is pending (and never less than a job a slot).
    assert_eq!(l.fair_share(w(1), 4, t), 100);
    // Worker 1 alone delivers: the whole share stays its own.
    deliver(&mut l, &mut ch, w(1), 30);
    assert_eq!(l.count(JobState::Pending), 170);
    assert_eq!(l.fair_share(w(1), 4, t), 85);
    // Worker 2 delivers three times as much: three quarters of the half for 2, and for 1 no
    // less than an equal share (its smaller leases must not keep it small).
    deliver(&mut l, &mut ch, w(2), 90);
    assert_eq!(l.count(JobState::Pending), 80);
    assert_eq!(l.fair_share(w(2), 4, t), 30);
    assert_eq!(l.fair_share(w(1), 4, t), 20);
    assert!(l.lease_size(w(1), 4, t) <= 20);
    // A third, new party gets an equal share of three.
    assert_eq!(l.fair_share(w(3), 4, t), 14);
    // At the end of the run a lease is a job a slot.
    deliver(&mut l, &mut ch, w(2), 79);
    assert_eq!(l.fair_share(w(1), 4, t), 4);
}
