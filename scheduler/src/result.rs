//! The decision on one result, in named steps: refusals (untrusted worker, unknown job, a lease
//! that never covered it), solver errors, implausible counts, a contradicted known answer, and
//! then the answer against what the job already has: a counted answer, the coordinator's own,
//! or other workers' opinions.

use crate::checks::implausible;
use crate::ids::{JobId, LeaseId, WorkerId, COORDINATOR};
use crate::jobs::Standing;
use crate::outcome::{Change, Finding, Verdict};
use crate::state::{ResultKind, Review};
use crate::Scheduler;
use nqueens_core::JobCounts;
use std::time::Instant;

/// One solved job as a worker reported it.
#[derive(Debug, Clone, Copy)]
struct Answer {
    worker_id: WorkerId,
    lease_id: LeaseId,
    job_id: JobId,
    counts: JobCounts,
    /// What the worker says it took (stored for people, never believed).
    seconds: f64,
    /// Lease to result on the coordinator's clock, where the job was still under this lease.
    measured: Option<f64>,
    now: Instant,
}

impl Answer {
    /// The result row that records this answer.
    fn row(&self, counted: bool, kind: ResultKind) -> Change {
        Change::Result {
            job_id: self.job_id,
            worker_id: self.worker_id,
            lease_id: self.lease_id,
            counts: self.counts,
            seconds: self.seconds,
            counted,
            kind,
        }
    }
}

impl Scheduler {
    /// Takes one result, at `now` on the coordinator's clock (which times the job: the seconds a
    /// worker reports are stored, never believed). Unknown jobs and leases that never covered the
    /// job are refused without any change.
    ///
    /// An answer counts when another party gave the same one, when it agrees with the
    /// coordinator's own, or when its party is trusted (it earned that from verified answers),
    /// nobody says otherwise and the job needs no second party (see
    /// [`Scheduler::needs_witness`]). Nothing else makes an answer count: not that no other
    /// worker is around. Two identities of one per-host credential never confirm each other, and
    /// an answer that rests on one credential's word (a trusted party alone, or identities of the
    /// shared token agreeing) is drawn for a secret re-check at `recheck_fraction`: a drawn one is
    /// not counted until another party (or the coordinator) gives the same answer.
    pub fn result(
        &mut self,
        worker_id: WorkerId,
        lease_id: LeaseId,
        job_id: JobId,
        finding: Finding,
        now: Instant,
    ) -> Verdict {
        let outcome = self.take_result(worker_id, lease_id, job_id, finding, now);
        self.checked("result");
        outcome
    }

    fn take_result(
        &mut self,
        worker_id: WorkerId,
        lease_id: LeaseId,
        job_id: JobId,
        finding: Finding,
        now: Instant,
    ) -> Verdict {
        if let Some(refusal) = self.refusal(worker_id, lease_id, job_id) {
            return refusal;
        }
        let (counts, seconds) = match finding {
            Finding::Solved { counts, seconds } => (counts, seconds),
            Finding::SolverError(_) => return self.record_error(worker_id, lease_id, job_id),
        };
        if let Some(why) = implausible(&counts, self.jobs.entry(job_id).weight) {
            self.untrust(worker_id, job_id, format!("implausible counts: {why}"));
            return Verdict::Implausible;
        }
        self.trust.error_record.entry(worker_id).or_default().1 += 1;
        if let Some(truth) = self.coordinator_answer(job_id) {
            if !truth.same_answer(&counts) {
                let ids = (worker_id, lease_id, job_id);
                return self.failed_check(ids, (counts, seconds), truth);
            }
        }
        let measured = self.measured_seconds(job_id, lease_id, worker_id, now);
        let answer = Answer { worker_id, lease_id, job_id, counts, seconds, measured, now };
        if let Some(counted) = self.jobs.entry(job_id).counted {
            return self.against_counted(answer, counted);
        }
        if self.checks.reference.contains_key(&job_id) {
            // The coordinator's own answer agrees (a differing one was refused above).
            return self.against_reference(answer);
        }
        self.against_opinions(answer)
    }

    /// Why a result is refused before anything is looked at, if it is.
    fn refusal(&self, worker_id: WorkerId, lease_id: LeaseId, job_id: JobId) -> Option<Verdict> {
        if self.is_untrusted(worker_id) {
            return Some(Verdict::UntrustedWorker);
        }
        if job_id.get() >= self.jobs.len() {
            return Some(Verdict::UnknownJob);
        }
        if !self.leases.covers(lease_id, worker_id, job_id) {
            return Some(Verdict::UnknownLease);
        }
        None
    }

    /// Whether one trusted party's word cannot count job `job_id`: every job of a record run
    /// (replication 2), and a job drawn for verification, under review or once in conflict.
    pub fn needs_witness(&self, job_id: JobId) -> bool {
        self.config.replication >= 2 || self.jobs.entry(job_id).needs_witness()
    }

    /// Whether the second answer job `job_id` waits for must come from another credential (or
    /// the coordinator), not just another identity: in a record run, and for a job in dispute
    /// where the coordinator settles disputes itself (identities of the shared token agreeing
    /// must not outvote an honest dissenter before its ruling).
    fn needs_independent(&self, job_id: JobId) -> bool {
        self.config.replication >= 2
            || (self.config.coordinator_checks && self.jobs.entry(job_id).conflicts > 0)
    }

    /// Whether `a` and `b` answer as different parties for job `job_id`: different parties, and
    /// different credentials where the job needs independent answers.
    pub(crate) fn distinct_parties(&self, job_id: JobId, a: WorkerId, b: WorkerId) -> bool {
        if self.needs_independent(job_id) {
            self.independent(a, b)
        } else {
            self.party(a) != self.party(b)
        }
    }

    /// An answer for a job already counted from `counted_by`: a confirmation from another party,
    /// a duplicate, or a contradiction that puts the job back in play (the coordinator's own
    /// answer was checked before: a contradiction here is between workers, settled by the
    /// referee or a third party before anyone is untrusted).
    fn against_counted(
        &mut self,
        a: Answer,
        (counted_by, counted): (WorkerId, JobCounts),
    ) -> Verdict {
        let job = self.jobs.entry(a.job_id);
        if counted.same_answer(&a.counts) {
            let said_before = counted_by == a.worker_id
                || job.opinions.iter().any(|(w, c)| *w == a.worker_id && c.same_answer(&a.counts));
            let same_party =
                counted_by != COORDINATOR && self.party(counted_by) == self.party(a.worker_id);
            if said_before || same_party {
                return Verdict::Duplicate;
            }
            self.outbox.push(a.row(false, ResultKind::Confirm));
            self.jobs.entry_mut(a.job_id).opinions.push((a.worker_id, a.counts));
            for w in [counted_by, a.worker_id] {
                if w != COORDINATOR && !self.is_untrusted(w) {
                    self.trust.agreed(w);
                }
            }
            self.learn_duration(a.job_id, a.worker_id, a.measured, a.now);
            self.pool(a.job_id);
            return Verdict::Confirmed;
        }
        self.outbox.push(Change::Conflict {
            job_id: a.job_id,
            worker_a: counted_by,
            worker_b: a.worker_id,
            detail: format!("counted {counted:?}, got {:?}", a.counts),
        });
        self.outbox.push(Change::Uncount { job_id: a.job_id });
        self.outbox.push(a.row(false, ResultKind::Conflict));
        let job = self.jobs.entry_mut(a.job_id);
        job.counted = None;
        job.opinions.push((counted_by, counted));
        job.opinions.push((a.worker_id, a.counts));
        self.mark_conflict(a.job_id)
    }

    /// An answer agreeing with the coordinator's own: as good as a second worker's.
    fn against_reference(&mut self, a: Answer) -> Verdict {
        if self.jobs.standing(a.job_id) == Standing::Done {
            return Verdict::Duplicate;
        }
        self.outbox.push(a.row(true, ResultKind::Verified));
        self.jobs.entry_mut(a.job_id).counted = Some((a.worker_id, a.counts));
        self.move_job(a.job_id, Standing::Done);
        self.trust.agreed(a.worker_id);
        self.learn_duration(a.job_id, a.worker_id, a.measured, a.now);
        Verdict::Confirmed
    }

    /// An answer for a job not counted yet: counted when another party agrees, or when its own
    /// party is trusted, nobody disagrees and the job needs no second party; otherwise kept as an
    /// opinion (a conflict when it contradicts one) and, where the coordinator can, sent to it.
    /// An opinion of a party on probation puts the job under review: it waits for evidence also
    /// once the party is trusted.
    fn against_opinions(&mut self, a: Answer) -> Verdict {
        let job = self.jobs.entry(a.job_id);
        // A job given back to the same worker after its first opinion: the answer is new. A
        // replay of the first opinion under the old lease stays a duplicate.
        let solved_again = job.held_by(a.lease_id, a.worker_id);
        let said_before =
            job.opinions.iter().any(|(w, c)| *w == a.worker_id && c.same_answer(&a.counts));
        if said_before && !solved_again {
            return Verdict::Duplicate;
        }
        let live = |w: &WorkerId| !self.is_untrusted(*w);
        let disagrees: Option<WorkerId> = job
            .opinions
            .iter()
            .find(|(w, c)| live(w) && !c.same_answer(&a.counts))
            .map(|(w, _)| *w);
        let mut agreeing: Vec<WorkerId> = job
            .opinions
            .iter()
            .filter(|(w, c)| {
                live(w)
                    && c.same_answer(&a.counts)
                    && self.distinct_parties(a.job_id, *w, a.worker_id)
            })
            .map(|(w, _)| *w)
            .collect();
        agreeing.sort_unstable();
        agreeing.dedup();
        let alone =
            !self.on_probation(a.worker_id) && !self.needs_witness(a.job_id) && disagrees.is_none();
        if !agreeing.is_empty() || alone {
            return self.count_answer(a, &agreeing, said_before);
        }
        self.hold_opinion(a, said_before, disagrees)
    }

    /// Keeps an answer as an opinion (a conflict where `disagrees` said otherwise): the job is
    /// pending for another party, reviewed when its party is on probation, and sent to the
    /// coordinator where it settles such jobs.
    fn hold_opinion(
        &mut self,
        a: Answer,
        said_before: bool,
        disagrees: Option<WorkerId>,
    ) -> Verdict {
        let kind = if disagrees.is_some() { ResultKind::Conflict } else { ResultKind::Opinion };
        self.outbox.push(a.row(false, kind));
        if !said_before {
            self.jobs.entry_mut(a.job_id).opinions.push((a.worker_id, a.counts));
        }
        if self.on_probation(a.worker_id) {
            self.review(a.job_id, Review::Probation);
        }
        if let Some(other) = disagrees {
            self.outbox.push(Change::Conflict {
                job_id: a.job_id,
                worker_a: other,
                worker_b: a.worker_id,
                detail: format!("got {:?}", a.counts),
            });
            return self.mark_conflict(a.job_id);
        }
        if self.jobs.standing(a.job_id) != Standing::Pending {
            self.move_job(a.job_id, Standing::Pending);
        }
        self.ask_coordinator(a.job_id);
        Verdict::Accepted
    }

    /// Counts an answer that `agreeing` (other parties' earlier opinions, maybe none) share. One
    /// that rests on one credential's word (no agreeing answer of another credential) is first
    /// drawn, in secret, for a re-check at `recheck_fraction`: a drawn answer is held as an
    /// opinion under review until another party or the coordinator gives the same, and its
    /// worker is answered as if it counted. Agreement settles the job: whoever said otherwise is
    /// untrusted; agreement of another credential also makes the job a spot check.
    fn count_answer(&mut self, a: Answer, agreeing: &[WorkerId], said_before: bool) -> Verdict {
        let verdict = if agreeing.is_empty() { Verdict::Accepted } else { Verdict::Confirmed };
        let independent = agreeing.iter().any(|&w| self.independent(w, a.worker_id));
        let drawn = !independent
            && self.config.recheck_fraction > 0.0
            && self.rng.unit() < self.config.recheck_fraction;
        if drawn {
            self.review(a.job_id, Review::Recheck);
            self.hold_opinion(a, said_before, None);
            return verdict;
        }
        let kind = if agreeing.is_empty() { ResultKind::First } else { ResultKind::Verified };
        self.outbox.push(a.row(true, kind));
        self.jobs.entry_mut(a.job_id).counted = Some((a.worker_id, a.counts));
        self.move_job(a.job_id, Standing::Done);
        self.learn_duration(a.job_id, a.worker_id, a.measured, a.now);
        if !agreeing.is_empty() {
            self.credit_agreement(a.job_id, a.worker_id, a.counts);
            for &w in agreeing {
                self.learn_duration(a.job_id, w, None, a.now);
            }
        }
        if !agreeing.is_empty() {
            // Settled under the job's rules (another credential where it needs one): whoever
            // said otherwise is untrusted.
            self.untrust_dissenters(a.job_id, a.worker_id, a.counts);
        }
        if independent {
            self.pool(a.job_id);
        }
        verdict
    }

    /// One more conflict on the job: it goes back to pending (held after `max_conflicts`), and
    /// the coordinator is asked for its own answer.
    fn mark_conflict(&mut self, job_id: JobId) -> Verdict {
        self.conflicts_total += 1;
        let job = self.jobs.entry_mut(job_id);
        job.conflicts += 1;
        let next = if job.conflicts >= self.config.max_conflicts {
            Standing::Held
        } else {
            Standing::Pending
        };
        self.move_job(job_id, next);
        self.refer(job_id);
        Verdict::Conflict
    }
}
