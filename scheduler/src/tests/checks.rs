//! The scheduler's tests of checks on answers: references, spot checks, overdue copies.

use super::*;

#[test]
fn a_wrong_answer_to_a_reference_job_untrusts_the_worker_at_once() {
    const A: u64 = 1;
    let mut l = life(3, false);
    let mut ch = Vec::new();
    l.add_reference(j(1), counts(7), &mut ch);
    assert!(ch.is_empty(), "nobody has answered yet");
    let (a, ids) = l.lease_checked(w(A), 3, &ws(&[NOBODY]), true, Instant::now(), &mut ch).unwrap();
    assert_eq!(ids, js(&[2, 1, 0]));
    assert_eq!(
        l.result(w(A), a, j(2), solved(counts(2)), Instant::now(), &mut ch),
        Verdict::Accepted
    );
    ch.clear();
    assert_eq!(
        l.result(w(A), a, j(1), solved(counts(8)), Instant::now(), &mut ch),
        Verdict::Conflict
    );
    assert!(l.is_untrusted(w(A)));
    // Its earlier counted job is solved again; the reference job was never counted.
    assert!(ch.contains(&Change::Uncount { job_id: j(2) }));
    assert!(ch.iter().any(|c| matches!(
        c,
        Change::Conflict { job_id: JobId(1), worker_a: COORDINATOR, worker_b: WorkerId(A), .. }
    )));
    assert_eq!(l.count(JobState::Pending), 3);
    assert_eq!(l.jobs.entry(j(1)).counted, None);
    // A right answer is counted at once, as verified.
    let (b, _) = l.lease(w(2), 3, &[], Instant::now(), &mut ch).unwrap();
    ch.clear();
    assert_eq!(
        l.result(w(2), b, j(1), solved(counts(7)), Instant::now(), &mut ch),
        Verdict::Confirmed
    );
    assert!(ch.iter().any(|c| matches!(
        c,
        Change::Result { job_id: JobId(1), counted: true, kind: ResultKind::Verified, .. }
    )));
}

#[test]
fn a_reference_that_contradicts_a_counted_answer_untrusts_its_worker() {
    let mut l = life(2, false);
    let mut ch = Vec::new();
    let (a, _) = l.lease(w(1), 2, &[], Instant::now(), &mut ch).unwrap();
    for id in [1, 0] {
        assert_eq!(
            l.result(w(1), a, j(id), solved(counts(id + 1)), Instant::now(), &mut ch),
            Verdict::Accepted
        );
    }
    ch.clear();
    l.add_reference(j(0), counts(1), &mut ch);
    assert!(!l.is_untrusted(w(1)), "it agreed");
    l.add_reference(j(1), counts(5), &mut ch);
    assert!(l.is_untrusted(w(1)));
    assert_eq!(l.count(JobState::Pending), 2, "both its counted jobs are solved again");
}

#[test]
fn the_first_lease_carries_a_spot_check_in_place_of_a_job() {
    const A: u64 = 1;
    const B: u64 = 2;
    let mut l = life(6, false);
    let mut ch = Vec::new();
    // Job 5 gets a known answer: B's, confirmed by the coordinator's own.
    l.add_reference(j(5), counts(50), &mut ch);
    let (b, ids) = l.lease(w(B), 1, &[], Instant::now(), &mut ch).unwrap();
    assert_eq!(ids, js(&[5]));
    assert_eq!(
        l.result(w(B), b, j(5), solved(counts(50)), Instant::now(), &mut ch),
        Verdict::Confirmed
    );
    // A's first lease: two jobs, one of them the done job 5, sorted by cost like the others.
    let (a, ids) = l.lease_checked(w(A), 2, &ws(&[B]), true, Instant::now(), &mut ch).unwrap();
    assert_eq!(ids, js(&[5, 4]));
    assert_eq!(l.count(JobState::Pending), 4, "job 3 went back to the queue");
    assert_eq!(l.jobs.standing(j(5)), Standing::Done);
    // The check is held by heartbeats like any job until answered.
    assert!(l.heartbeat(w(A), &[a], Instant::now(), &mut ch).is_empty());
    ch.clear();
    assert_eq!(
        l.result(w(A), a, j(5), solved(counts(51)), Instant::now(), &mut ch),
        Verdict::Conflict
    );
    assert!(l.is_untrusted(w(A)));
    assert_eq!(
        l.jobs.entry(j(5)).counted,
        Some((w(B), counts(50))),
        "a known answer stays counted"
    );
    assert!(ch
        .iter()
        .any(|c| matches!(c, Change::Conflict { job_id: JobId(5), worker_b: WorkerId(A), .. })));
}

#[test]
fn a_right_spot_check_answer_is_an_agreement() {
    const A: u64 = 1;
    const B: u64 = 2;
    let mut l = life(3, false);
    l.set_probation(1);
    let mut ch = Vec::new();
    // Job 0, the cheapest, is what a lease on probation takes first.
    l.add_reference(j(0), counts(20), &mut ch);
    let (b, _) = l.lease(w(B), 1, &[], Instant::now(), &mut ch).unwrap();
    assert_eq!(
        l.result(w(B), b, j(0), solved(counts(20)), Instant::now(), &mut ch),
        Verdict::Confirmed
    );
    assert!(!l.on_probation(w(B)), "agreeing with the coordinator counts");
    assert!(l.on_probation(w(A)));
    let (a, ids) = l.lease_checked(w(A), 1, &ws(&[B]), true, Instant::now(), &mut ch).unwrap();
    assert_eq!(ids, js(&[0]));
    assert_eq!(
        l.result(w(A), a, j(0), solved(counts(20)), Instant::now(), &mut ch),
        Verdict::Confirmed
    );
    assert!(!l.on_probation(w(A)));
}

#[test]
fn a_job_held_far_past_its_measured_time_is_copied_and_its_lease_ends_whatever_the_heartbeats() {
    const A: u64 = 1;
    const B: u64 = 2;
    const C: u64 = 3;
    let mut l = life(3, false);
    let mut ch = Vec::new();
    let t0 = Instant::now();
    // A takes job 2 and keeps heartbeating without ever answering.
    let (a, ids) = l.lease(w(A), 1, &[], t0, &mut ch).unwrap();
    assert_eq!(ids, js(&[2]));
    // B's job 1 (estimate 1) comes back 0.1 s after its lease on the coordinator's clock: job 2
    // should take about 0.2 s, overdue after 4 x 0.2 + 10 = 10.8 s, its lease over at 21.6 s.
    let (b, _) = l.lease(w(B), 1, &[], t0, &mut ch).unwrap();
    let claims_slow = Finding::Solved { counts: counts(1), seconds: 1e9 };
    let answered = t0 + Duration::from_millis(100);
    assert_eq!(l.result(w(B), b, j(1), claims_slow, answered, &mut ch), Verdict::Accepted);
    let t = t0 + Duration::from_secs(9);
    assert!(l.heartbeat(w(A), &[a], t, &mut ch).is_empty());
    assert_eq!(l.expire(t, &mut ch), 0);
    // Not yet overdue: C gets only the pending job 0.
    let (c0, ids) = l.lease(w(C), 2, &[], t0 + Duration::from_secs(5), &mut ch).unwrap();
    assert_eq!(ids, js(&[0]));
    assert_eq!(l.result(w(C), c0, j(0), solved(counts(0)), t, &mut ch), Verdict::Accepted);
    // At 12 s it is: C gets a copy; A still holds its lease.
    let t = t0 + Duration::from_secs(12);
    assert!(l.heartbeat(w(A), &[a], t, &mut ch).is_empty());
    let (c, ids) = l.lease(w(C), 2, &[], t, &mut ch).unwrap();
    assert_eq!(ids, js(&[2]));
    assert!(matches!(l.jobs.standing(j(2)), Standing::Leased { lease_id, .. } if lease_id == a));
    assert!(l.heartbeat(w(C), &[c], t, &mut ch).is_empty(), "the copy is held too");
    // Only one copy: nobody else gets it.
    assert!(l.lease(w(NOBODY), 2, &[], t + Duration::from_secs(2), &mut ch).is_none());
    // Heartbeats do not carry A's lease past 21.6 s.
    let t = t0 + Duration::from_secs(20);
    assert!(l.heartbeat(w(A), &[a], t, &mut ch).is_empty());
    assert_eq!(l.expire(t0 + Duration::from_secs(22), &mut ch), 1);
    assert_eq!(l.state(j(2)), Some(JobState::Pending));
    // The first answer counts; A's later one (its lease still names the job) confirms it.
    let t = t0 + Duration::from_secs(23);
    assert_eq!(l.result(w(C), c, j(2), solved(counts(2)), t, &mut ch), Verdict::Accepted);
    assert_eq!(l.result(w(A), a, j(2), solved(counts(2)), t, &mut ch), Verdict::Confirmed);
    assert_eq!(l.jobs.entry(j(2)).counted, Some((w(C), counts(2))));
}
