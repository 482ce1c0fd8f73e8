//! The decision on one result, in named steps: refusals (untrusted worker, unknown job, a lease
//! that never covered it), solver errors, implausible counts, a contradicted known answer, and
//! then the answer against what the job already has: a counted answer, the coordinator's own,
//! or other workers' opinions.

use crate::checks::implausible;
use crate::ids::{JobId, LeaseId, WorkerId, COORDINATOR};
use crate::jobs::Standing;
use crate::outcome::{Change, Finding, Verdict};
use crate::state::ResultKind;
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
    /// An answer counts when another group (credential) gave the same one, when it agrees with
    /// the coordinator's own, or when its group is trusted (it earned that from verified answers)
    /// and nobody says otherwise. Nothing else makes an answer count: not that no other worker
    /// is around. Two identities under one credential never confirm each other.
    pub fn result(
        &mut self,
        worker_id: WorkerId,
        lease_id: LeaseId,
        job_id: JobId,
        finding: Finding,
        now: Instant,
        changes: &mut Vec<Change>,
    ) -> Verdict {
        let outcome = self.take_result(worker_id, lease_id, job_id, finding, now, changes);
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
        changes: &mut Vec<Change>,
    ) -> Verdict {
        if let Some(refusal) = self.refusal(worker_id, lease_id, job_id) {
            return refusal;
        }
        let (counts, seconds) = match finding {
            Finding::Solved { counts, seconds } => (counts, seconds),
            Finding::SolverError(_) => {
                return self.record_error(worker_id, lease_id, job_id, changes)
            }
        };
        if let Some(why) = implausible(&counts, self.jobs.entry(job_id).weight) {
            self.untrust(worker_id, job_id, format!("implausible counts: {why}"), changes);
            return Verdict::Implausible;
        }
        self.trust.error_record.entry(worker_id).or_default().1 += 1;
        if let Some(known) = self.known_answer(job_id) {
            if !known.same_answer(&counts) {
                let ids = (worker_id, lease_id, job_id);
                return self.failed_check(ids, (counts, seconds), known, changes);
            }
        }
        let measured = self.measured_seconds(job_id, lease_id, worker_id, now);
        let answer = Answer { worker_id, lease_id, job_id, counts, seconds, measured, now };
        if let Some(counted) = self.jobs.entry(job_id).counted {
            return self.against_counted(answer, counted, changes);
        }
        if self.checks.reference.contains_key(&job_id) {
            // The coordinator's own answer agrees (a differing one was refused above).
            return self.against_reference(answer, changes);
        }
        self.against_opinions(answer, changes)
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

    /// An answer for a job already counted from `counted_by`: a confirmation from another group,
    /// a duplicate, or a contradiction that puts the job back in play.
    fn against_counted(
        &mut self,
        a: Answer,
        (counted_by, counted): (WorkerId, JobCounts),
        changes: &mut Vec<Change>,
    ) -> Verdict {
        let job = self.jobs.entry(a.job_id);
        if counted.same_answer(&a.counts) {
            let new_witness = self.group(counted_by) != self.group(a.worker_id)
                && counted_by != COORDINATOR
                && !job.opinions.iter().any(|(w, c)| *w == a.worker_id && c.same_answer(&a.counts));
            if !new_witness {
                return Verdict::Duplicate;
            }
            changes.push(a.row(false, ResultKind::Confirm));
            self.jobs.entry_mut(a.job_id).opinions.push((a.worker_id, a.counts));
            for w in [counted_by, a.worker_id] {
                if !self.is_untrusted(w) {
                    self.trust.agreed(w);
                }
            }
            self.learn_duration(a.job_id, a.worker_id, a.measured, a.now);
            self.pool(a.job_id);
            return Verdict::Confirmed;
        }
        // A done job contradicted: stop counting it and have it solved again by others, and
        // by the coordinator itself where it can.
        changes.push(Change::Conflict {
            job_id: a.job_id,
            worker_a: counted_by,
            worker_b: a.worker_id,
            detail: format!("counted {counted:?}, got {:?}", a.counts),
        });
        changes.push(Change::Uncount { job_id: a.job_id });
        changes.push(a.row(false, ResultKind::Conflict));
        let job = self.jobs.entry_mut(a.job_id);
        job.counted = None;
        job.opinions.push((counted_by, counted));
        job.opinions.push((a.worker_id, a.counts));
        self.mark_conflict(a.job_id, changes)
    }

    /// An answer agreeing with the coordinator's own: as good as a second worker's.
    fn against_reference(&mut self, a: Answer, changes: &mut Vec<Change>) -> Verdict {
        if self.jobs.standing(a.job_id) == Standing::Done {
            return Verdict::Duplicate;
        }
        changes.push(a.row(true, ResultKind::Verified));
        self.jobs.entry_mut(a.job_id).counted = Some((a.worker_id, a.counts));
        self.jobs.set_state(a.job_id, Standing::Done, changes);
        self.trust.agreed(a.worker_id);
        self.learn_duration(a.job_id, a.worker_id, a.measured, a.now);
        Verdict::Confirmed
    }

    /// An answer for a job not counted yet: counted when another group agrees, or when its own
    /// group is trusted and nobody disagrees; otherwise kept as an opinion (a conflict when it
    /// contradicts one) and, where the coordinator can, sent to it for checking.
    fn against_opinions(&mut self, a: Answer, changes: &mut Vec<Change>) -> Verdict {
        let group = self.group(a.worker_id);
        let job = self.jobs.entry(a.job_id);
        // A job given back to the same worker after its first opinion (its group is trusted
        // now, or nobody else could answer): the answer is new. A replay of the first opinion
        // under the old lease stays a duplicate.
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
        let agrees = job
            .opinions
            .iter()
            .any(|(w, c)| live(w) && self.group(*w) != group && c.same_answer(&a.counts));
        let alone =
            !self.on_probation(a.worker_id) && job.agreeing_needed() == 1 && disagrees.is_none();
        if agrees || alone {
            return self.count_answer(a, agrees, changes);
        }
        changes.push(a.row(
            false,
            if disagrees.is_some() { ResultKind::Conflict } else { ResultKind::Opinion },
        ));
        if !said_before {
            self.jobs.entry_mut(a.job_id).opinions.push((a.worker_id, a.counts));
        }
        if let Some(other) = disagrees {
            changes.push(Change::Conflict {
                job_id: a.job_id,
                worker_a: other,
                worker_b: a.worker_id,
                detail: format!("got {:?}", a.counts),
            });
            return self.mark_conflict(a.job_id, changes);
        }
        // An opinion: the job waits for another group's answer or the coordinator's.
        if self.jobs.standing(a.job_id) != Standing::Pending {
            self.jobs.set_state(a.job_id, Standing::Pending, changes);
        }
        self.ask_coordinator(a.job_id, a.worker_id);
        Verdict::Accepted
    }

    /// Counts an answer (`agrees`: it agreed with another group's, which settles the
    /// verification and untrusts whoever said otherwise). An answer counted on one trusted
    /// group's word is drawn for a secret re-check at `recheck_fraction`.
    fn count_answer(&mut self, a: Answer, agrees: bool, changes: &mut Vec<Change>) -> Verdict {
        changes.push(a.row(true, if agrees { ResultKind::Verified } else { ResultKind::First }));
        self.jobs.entry_mut(a.job_id).counted = Some((a.worker_id, a.counts));
        self.jobs.set_state(a.job_id, Standing::Done, changes);
        self.learn_duration(a.job_id, a.worker_id, a.measured, a.now);
        if agrees {
            self.credit_agreement(a.job_id, a.worker_id, a.counts);
            self.untrust_dissenters(a.job_id, a.worker_id, a.counts, changes);
            self.pool(a.job_id);
            return Verdict::Confirmed;
        }
        if self.config.recheck_fraction > 0.0 && self.rng.unit() < self.config.recheck_fraction {
            self.recheck(a.job_id);
        }
        Verdict::Accepted
    }

    /// One more conflict on the job: it goes back to pending (held after `max_conflicts`), and
    /// the coordinator is asked for its own answer.
    fn mark_conflict(&mut self, job_id: JobId, changes: &mut Vec<Change>) -> Verdict {
        self.conflicts_total += 1;
        self.refer(job_id);
        let job = self.jobs.entry_mut(job_id);
        job.conflicts += 1;
        let next = if job.conflicts >= self.config.max_conflicts {
            Standing::Held
        } else {
            Standing::Pending
        };
        self.jobs.set_state(job_id, next, changes);
        Verdict::Conflict
    }
}
