//! The decision on one result, in named steps: refusals (untrusted worker, unknown job, a lease
//! that never covered it), solver errors, implausible counts, a contradicted known answer, and
//! then the answer against what the job already has: a counted answer, the coordinator's own,
//! or other workers' opinions.

use crate::answer::Answer;
use crate::checks::implausible;
use crate::ids::{JobId, LeaseId, WorkerId, COORDINATOR};
use crate::jobs::Standing;
use crate::outcome::{Change, Finding, Verdict};
use crate::state::{ResultKind, Review};
use crate::Scheduler;
use nqueens_core::JobCounts;
use std::time::Instant;

/// One solved job as a worker reported it, with the credential it arrived under.
#[derive(Debug, Clone, Copy)]
struct Incoming {
    worker_id: WorkerId,
    /// The worker's credential now, as it gives the answer: the answer's for good.
    credential: u64,
    lease_id: LeaseId,
    job_id: JobId,
    counts: JobCounts,
    /// What the worker says it took (stored for people, never believed).
    seconds: f64,
    /// Lease to result on the coordinator's clock, where the job was still under this lease.
    measured: Option<f64>,
    /// The lease no longer holds the job for this worker (see [`Answer::late`]).
    late: bool,
    now: Instant,
}

impl Incoming {
    /// The result row that records this answer (a late one that is not counted as such).
    fn row(&self, counted: bool, kind: ResultKind) -> Change {
        let kind = if self.late && !counted && kind == ResultKind::Opinion {
            ResultKind::Late
        } else {
            kind
        };
        Change::Result {
            job_id: self.job_id,
            worker_id: self.worker_id,
            credential: self.credential,
            lease_id: self.lease_id,
            counts: self.counts,
            seconds: self.seconds,
            counted,
            kind,
        }
    }
    /// The answer as the job keeps it.
    fn answer(&self) -> Answer {
        Answer {
            worker_id: self.worker_id,
            credential: self.credential,
            counts: self.counts,
            late: self.late,
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
    ///
    /// Only an answer under the lease that holds the job for its worker now (or a spot check or
    /// copy its live lease carries) can count: a late one (the job released, expired or leased
    /// again) is kept as an opinion of its credential, never counted by itself, and agrees with
    /// a later answer only as another credential. Every answer keeps the credential it arrived
    /// under for good.
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
        let measured = self.measured_seconds(job_id, lease_id, worker_id, now);
        let late = !self.holds_now(worker_id, lease_id, job_id);
        let credential = self.credential(worker_id);
        let answer = Incoming {
            worker_id,
            credential,
            lease_id,
            job_id,
            counts,
            seconds,
            measured,
            late,
            now,
        };
        if let Some(truth) = self.coordinator_answer(job_id) {
            if !truth.same_answer(&counts) {
                let row = answer.row(false, ResultKind::Conflict);
                return self.failed_check(job_id, answer.answer(), row, truth);
            }
        }
        if let Some(counted) = self.jobs.entry(job_id).counted {
            return self.against_counted(answer, counted);
        }
        if self.checks.reference.contains_key(&job_id) && !late {
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

    /// Whether `lease_id` holds job `job_id` for `worker_id` now: the job is leased under it,
    /// or it is a spot check or copy that the live lease carries beside its own jobs.
    fn holds_now(&self, worker_id: WorkerId, lease_id: LeaseId, job_id: JobId) -> bool {
        self.jobs.entry(job_id).held_by(lease_id, worker_id)
            || self.leases.carries_extra(lease_id, worker_id, job_id)
    }

    /// Whether one trusted party's word cannot count job `job_id`: every job of a record run
    /// (replication 2), and a job drawn for verification, under review or once in conflict.
    pub fn needs_witness(&self, job_id: JobId) -> bool {
        self.config.replication >= 2 || self.jobs.entry(job_id).needs_witness()
    }

    /// Whether the second answer job `job_id` waits for must come from another credential (or
    /// the coordinator), not just another identity: in a record run, and for a job in dispute
    /// where the coordinator settles disputes itself (identities of the shared token agreeing
    /// must not outvote an honest dissenter before its ruling). Without the referee, a dispute
    /// with another credential is settled only across credentials too (see `against_opinions`).
    fn needs_independent(&self, job_id: JobId) -> bool {
        self.config.replication >= 2
            || (self.config.coordinator_checks && self.jobs.entry(job_id).conflicts > 0)
    }

    /// Whether the answers `a` and `b` are given by different parties for job `job_id`:
    /// different parties, and different credentials where the job needs independent answers
    /// or where either answer is late (a late answer speaks for its credential only).
    pub(crate) fn distinct_parties(&self, job_id: JobId, a: &Answer, b: &Answer) -> bool {
        if self.needs_independent(job_id) || a.late || b.late {
            a.independent_of(b)
        } else {
            a.party() != b.party()
        }
    }

    /// An answer for a job already counted from `counted`: a confirmation from another party,
    /// a duplicate, or a contradiction that puts the job back in play (the coordinator's own
    /// answer was checked before: a contradiction here is between workers, settled by the
    /// referee or a third party before anyone is untrusted). A late contradiction of a count
    /// that stands on independent answers is only recorded.
    fn against_counted(&mut self, a: Incoming, counted: Answer) -> Verdict {
        let job = self.jobs.entry(a.job_id);
        let given = a.answer();
        if counted.agrees(&a.counts) {
            let said_before = counted.worker_id == a.worker_id
                || job.opinions.iter().any(|o| o.worker_id == a.worker_id && o.agrees(&a.counts));
            let same_party = !counted.by_coordinator() && counted.party() == given.party();
            let credential_again = a.late
                && job.opinions.iter().any(|o| o.credential == a.credential && o.agrees(&a.counts));
            if said_before || same_party {
                return Verdict::Duplicate;
            }
            if credential_again {
                return self.keep_only(a);
            }
            self.outbox.push(a.row(false, ResultKind::Confirm));
            self.jobs.entry_mut(a.job_id).opinions.push(given);
            if !a.late {
                for w in [counted.worker_id, a.worker_id] {
                    if w != COORDINATOR && !self.is_untrusted(w) {
                        self.trust.agreed(w);
                    }
                }
                self.learn_duration(a.job_id, a.worker_id, a.measured, a.now);
            }
            self.pool(a.job_id);
            return Verdict::Confirmed;
        }
        self.outbox.push(Change::Conflict {
            job_id: a.job_id,
            worker_a: counted.worker_id,
            worker_b: a.worker_id,
            detail: format!("counted {:?}, got {:?}", counted.counts, a.counts),
        });
        if a.late && self.known_answer(a.job_id).is_some() {
            // A late dissent from a count that two credentials (or the coordinator) stand on is
            // recorded, never enough to take the count away: one late answer must not reopen a
            // job that every credential around has answered already (nobody could take it).
            self.outbox.push(a.row(false, ResultKind::Conflict));
            self.jobs.entry_mut(a.job_id).opinions.push(given);
            self.conflicts_total += 1;
            return Verdict::Conflict;
        }
        self.outbox.push(Change::Uncount { job_id: a.job_id });
        self.outbox.push(a.row(false, ResultKind::Conflict));
        let job = self.jobs.entry_mut(a.job_id);
        job.counted = None;
        job.opinions.push(counted);
        job.opinions.push(given);
        self.mark_conflict(a.job_id, false)
    }

    /// A late answer its credential already gave: its row is kept (an acknowledged answer is
    /// always in the state file) but it is no second vote of the credential, here or after a
    /// restart (where it is one more late opinion of the same credential).
    fn keep_only(&mut self, a: Incoming) -> Verdict {
        self.outbox.push(a.row(false, ResultKind::Late));
        Verdict::Duplicate
    }

    /// An answer agreeing with the coordinator's own: as good as a second worker's.
    fn against_reference(&mut self, a: Incoming) -> Verdict {
        if self.jobs.standing(a.job_id) == Standing::Done {
            return Verdict::Duplicate;
        }
        self.outbox.push(a.row(true, ResultKind::Verified));
        self.jobs.entry_mut(a.job_id).counted = Some(a.answer());
        self.move_job(a.job_id, Standing::Done);
        self.trust.agreed(a.worker_id);
        self.learn_duration(a.job_id, a.worker_id, a.measured, a.now);
        Verdict::Confirmed
    }

    /// An answer for a job not counted yet: counted when another party agrees, or when its own
    /// party is trusted, nobody disagrees and the job needs no second party; otherwise kept as an
    /// opinion (a conflict when it contradicts one) and, where the coordinator can, sent to it.
    /// An opinion of a party on probation puts the job under review: it waits for evidence also
    /// once the party is trusted. A late answer is only ever kept (once per credential and
    /// answer).
    fn against_opinions(&mut self, a: Incoming) -> Verdict {
        let job = self.jobs.entry(a.job_id);
        let given = a.answer();
        // A job given back to the same worker after its first opinion: the answer is new. A
        // replay of the first opinion under the old lease stays a duplicate.
        let solved_again = job.held_by(a.lease_id, a.worker_id);
        let said_before =
            job.opinions.iter().any(|o| o.worker_id == a.worker_id && o.agrees(&a.counts));
        let credential_again = a.late
            && job.opinions.iter().any(|o| o.credential == a.credential && o.agrees(&a.counts));
        if said_before && !solved_again {
            return Verdict::Duplicate;
        }
        if credential_again {
            return self.keep_only(a);
        }
        let live = |w: WorkerId| !self.is_untrusted(w);
        let disagrees: Option<WorkerId> = job
            .opinions
            .iter()
            .find(|o| live(o.worker_id) && !o.agrees(&a.counts))
            .map(|o| o.worker_id);
        if a.late {
            return self.hold_opinion(a, said_before, disagrees);
        }
        // A dispute with another credential is settled only by another credential (or the
        // coordinator): one credential's identities never outvote another credential's
        // dissent (within the shared token they can: its holders cannot be told apart).
        let across = job
            .opinions
            .iter()
            .any(|o| live(o.worker_id) && !o.agrees(&a.counts) && o.credential != a.credential);
        let mut agreeing: Vec<Answer> = job
            .opinions
            .iter()
            .filter(|o| {
                live(o.worker_id)
                    && o.agrees(&a.counts)
                    && if across {
                        o.independent_of(&given)
                    } else {
                        self.distinct_parties(a.job_id, o, &given)
                    }
            })
            .copied()
            .collect();
        agreeing.sort_unstable_by_key(|o| o.worker_id);
        agreeing.dedup_by_key(|o| o.worker_id);
        let alone =
            !self.on_probation(a.worker_id) && !self.needs_witness(a.job_id) && disagrees.is_none();
        if !agreeing.is_empty() || alone {
            return self.count_answer(a, &agreeing, said_before);
        }
        self.hold_opinion(a, said_before, disagrees)
    }

    /// Keeps an answer as an opinion (a conflict where `disagrees` said otherwise): the job is
    /// pending for another party, reviewed when its party is on probation, and sent to the
    /// coordinator where it settles such jobs. A late answer leaves the job where it stands.
    fn hold_opinion(
        &mut self,
        a: Incoming,
        said_before: bool,
        disagrees: Option<WorkerId>,
    ) -> Verdict {
        let kind = if disagrees.is_some() { ResultKind::Conflict } else { ResultKind::Opinion };
        self.outbox.push(a.row(false, kind));
        if !said_before {
            self.jobs.entry_mut(a.job_id).opinions.push(a.answer());
        }
        if self.on_probation(a.worker_id) && !a.late {
            self.review(a.job_id, Review::Probation);
        }
        if let Some(other) = disagrees {
            self.outbox.push(Change::Conflict {
                job_id: a.job_id,
                worker_a: other,
                worker_b: a.worker_id,
                detail: format!("got {:?}", a.counts),
            });
            return self.mark_conflict(a.job_id, a.late);
        }
        if !a.late && self.jobs.standing(a.job_id) != Standing::Pending {
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
    /// untrusted (agreement within one credential untrusts only that credential's identities:
    /// it is one party's word), and agreement of another credential makes the job a spot check.
    fn count_answer(&mut self, a: Incoming, agreeing: &[Answer], said_before: bool) -> Verdict {
        let verdict = if agreeing.is_empty() { Verdict::Accepted } else { Verdict::Confirmed };
        let given = a.answer();
        let independent = agreeing.iter().any(|o| o.independent_of(&given));
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
        self.jobs.entry_mut(a.job_id).counted = Some(given);
        self.move_job(a.job_id, Standing::Done);
        self.learn_duration(a.job_id, a.worker_id, a.measured, a.now);
        if !agreeing.is_empty() {
            self.credit_agreement(a.job_id, &given);
            for o in agreeing {
                self.learn_duration(a.job_id, o.worker_id, None, a.now);
            }
        }
        if !agreeing.is_empty() {
            self.untrust_dissenters(a.job_id, &given, independent);
        }
        if independent {
            self.pool(a.job_id);
        }
        verdict
    }

    /// One more conflict on the job: it goes back to pending (held after `max_conflicts`), and
    /// the coordinator is asked for its own answer. A late answer's conflict leaves a job leased
    /// to someone else with it (a late answer never takes a job from its holder).
    fn mark_conflict(&mut self, job_id: JobId, late: bool) -> Verdict {
        self.conflicts_total += 1;
        let job = self.jobs.entry_mut(job_id);
        job.conflicts += 1;
        let next = if job.conflicts >= self.config.max_conflicts {
            Standing::Held
        } else {
            Standing::Pending
        };
        let leased = matches!(job.standing(), Standing::Leased { .. });
        if !(late && leased && next == Standing::Pending) {
            self.move_job(job_id, next);
        }
        self.refer(job_id);
        Verdict::Conflict
    }
}
