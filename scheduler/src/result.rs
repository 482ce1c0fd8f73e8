//! The decision on one result, in named steps: refusals (untrusted worker, unknown job, a lease
//! that never covered it), solver errors, implausible counts, repeated answers, a probation
//! answer's review; then the answer is kept with its job and the job settled by the ruling (see
//! `settle.rs`), whatever it had before.

use crate::answer::Answer;
use crate::checks::implausible;
use crate::ids::{JobId, LeaseId, WorkerId};
use crate::outcome::{Delivery, Finding, Verdict};
use crate::settle::NewAnswer;
use crate::state::Review;
use crate::Scheduler;
use std::time::Instant;

impl Scheduler {
    /// Takes one result (`delivery`, from the authenticated identity `worker_id`), at `now` on the coordinator's clock (which times the job: the seconds a
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
    ///
    /// Only an answer under the lease that holds the job for its worker now (or a spot check or
    /// copy its live lease carries) can count: a late one (the job released, expired or leased
    /// again) is kept as an opinion of its credential, never counted by itself, and agrees with
    /// a later answer only as another credential. Every answer keeps the credential it arrived
    /// under for good.
    pub fn result(&mut self, worker_id: WorkerId, delivery: &Delivery, now: Instant) -> Verdict {
        let outcome = self.take_result(worker_id, delivery, now);
        self.checked("result");
        outcome
    }

    fn take_result(&mut self, worker_id: WorkerId, delivery: &Delivery, now: Instant) -> Verdict {
        let Delivery { job_id, lease_id, ref finding } = *delivery;
        if let Some(refusal) = self.refusal(worker_id, lease_id, job_id) {
            return refusal;
        }
        let (counts, seconds) = match *finding {
            Finding::Solved { counts, seconds } => (counts, seconds),
            Finding::SolverError(_) => return self.record_error(worker_id, lease_id, job_id),
        };
        if let Some(why) = implausible(&counts, self.jobs.entry(job_id).weight) {
            self.untrust(worker_id, job_id, format!("implausible counts: {why}"));
            return Verdict::Implausible;
        }
        self.trust.error_record.entry(worker_id).or_default().1 += 1;
        let measured = self.measured_seconds(job_id, lease_id, worker_id, now);
        let late = !self.holds_now(worker_id, lease_id, job_id);
        let credential = self.credential(worker_id);
        let answer = Answer { worker_id, credential, counts, late };
        let job = self.jobs.entry(job_id);
        let kept = || job.counted.iter().chain(&job.opinions);
        // The same answer again from the same identity (a late one after a live one too).
        if kept().any(|o| o.worker_id == worker_id && o.agrees(&counts) && (!o.late || late)) {
            return Verdict::Duplicate;
        }
        // A late answer its credential already gave: its row is kept (an acknowledged answer is
        // always in the state file), but it is no second vote of the credential.
        let credential_again =
            late && kept().any(|o| o.credential == credential && o.agrees(&counts));
        // An answer of a party on probation that nobody else gave: the job waits for evidence,
        // also once the party is trusted.
        let seconded = kept().any(|o| o.agrees(&counts) && o.party() != answer.party())
            || self.checks.reference.get(&job_id).is_some_and(|c| c.same_answer(&counts));
        if !late && !seconded && self.on_probation(worker_id) {
            self.review(job_id, Review::Probation);
        }
        let new = NewAnswer { job_id, answer, lease_id, seconds, measured, now: Some(now) };
        let settled = self.settle(job_id, Some(new), false);
        self.untrust_found();
        if credential_again {
            Verdict::Duplicate
        } else if settled.wrong {
            Verdict::Conflict
        } else if settled.stands {
            match (settled.counted, settled.agreed) {
                (_, true) => Verdict::Confirmed,
                (true, false) => Verdict::Accepted,
                (false, false) => Verdict::Duplicate,
            }
        } else if settled.conflict {
            Verdict::Conflict
        } else if settled.agreed {
            Verdict::Confirmed
        } else {
            Verdict::Accepted
        }
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

    /// Whether `lease_id` holds job `job_id` for `worker_id` now: the job is leased under it,
    /// or it is a spot check or copy that the live lease carries beside its own jobs.
    fn holds_now(&self, worker_id: WorkerId, lease_id: LeaseId, job_id: JobId) -> bool {
        self.jobs.entry(job_id).held_by(lease_id, worker_id)
            || self.leases.carries_extra(lease_id, worker_id, job_id)
    }

    /// Whether one trusted party's word cannot count job `job_id` now: every job of a record
    /// run, and a job drawn for verification, under review or in dispute.
    pub fn needs_witness(&self, job_id: JobId) -> bool {
        let job = self.jobs.entry(job_id);
        self.config.replication >= 2
            || job.needs_witness()
            || !matches!(self.need(job_id), crate::ruling::Need::Anyone)
    }
}
