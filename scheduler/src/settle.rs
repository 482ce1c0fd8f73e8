//! Doing what the ruling says: every path that can count, un-count or hold a job (an answer, the
//! coordinator's answer, an untrust) calls [`Scheduler::settle`], which asks [`rule`] where the
//! job stands and moves it there, writing the rows that make it durable. The parties the ruling
//! finds wrong are untrusted afterwards ([`Scheduler::untrust_found`]), which rules their other
//! jobs again the same way.
//!
//! Trust credit is one function of the stored answers too ([`credited`]): a party earns a
//! verified answer on a job once one of its trusted identities gave, under a live lease, an
//! answer that another party (or the coordinator) gave too. A restart sums the same function
//! over the stored rows.

use crate::answer::Answer;
use crate::ids::{JobId, LeaseId, WorkerId, COORDINATOR};
use crate::jobs::Standing as JobStanding;
use crate::outcome::Change;
use crate::ruling::{rule, Need, Record, Ruling, Settings, Standing, Wrong};
use crate::state::{ResultKind, Review};
use crate::Scheduler;
use nqueens_core::{JobCounts, SplitMix64};
use std::time::Instant;

/// A new answer to settle with its job: a worker's (or the coordinator's own), with what its row
/// records beside the answer.
#[derive(Debug, Clone, Copy)]
pub(crate) struct NewAnswer {
    pub(crate) job_id: JobId,
    pub(crate) answer: Answer,
    pub(crate) lease_id: LeaseId,
    /// What the worker says it took (stored for people, never believed).
    pub(crate) seconds: f64,
    /// Lease to result on the coordinator's clock, where the job was still under this lease.
    pub(crate) measured: Option<f64>,
    /// When it arrived, on the coordinator's clock (none for a copy of an answer kept).
    pub(crate) now: Option<Instant>,
}

/// What settling a new answer came to, for its verdict.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Settled {
    /// The new answer's row carries the job's count.
    pub(crate) counted: bool,
    /// The job is counted with the new answer's value.
    pub(crate) stands: bool,
    /// Another party (or the coordinator) gave the same answer.
    pub(crate) agreed: bool,
    /// It disagrees with a live answer of another party or the coordinator's.
    pub(crate) conflict: bool,
    /// The ruling found its party wrong.
    pub(crate) wrong: bool,
}

/// The parties credited with a verified answer on a job whose answers are `answers` (every one
/// kept) and whose coordinator answer is `coordinator`: each party that gave, through an
/// identity not `untrusted` and under a live lease, an answer that the coordinator or another
/// party gave too (a late one only as another credential). One worker of each, for the record.
/// A party's verified answers are this summed over the jobs: an untrusted identity's answers
/// earn its party nothing (untrusting a party untrusts every identity it has, so it earns its
/// trust again from nothing), and a restart sums the same over the stored rows.
pub(crate) fn credited<'a>(
    answers: impl Iterator<Item = &'a Answer> + Clone,
    coordinator: Option<&JobCounts>,
    untrusted: impl Fn(WorkerId) -> bool,
) -> Vec<(u64, WorkerId)> {
    let mut parties: Vec<(u64, WorkerId)> = Vec::new();
    for a in answers.clone().filter(|a| !a.late && !a.by_coordinator() && !untrusted(a.worker_id)) {
        if parties.iter().any(|(p, _)| *p == a.party()) {
            continue;
        }
        let witnessed = coordinator.is_some_and(|c| a.agrees(c))
            || answers.clone().any(|b| {
                !b.by_coordinator()
                    && b.agrees(&a.counts)
                    && b.party() != a.party()
                    && (!b.late || b.independent_of(a))
            });
        if witnessed {
            parties.push((a.party(), a.worker_id));
        }
    }
    parties
}

impl Scheduler {
    /// The run's settings a ruling reads.
    fn settings(&self) -> Settings {
        Settings { replication: self.config.replication, referee: self.config.coordinator_checks }
    }

    /// The ruling on job `id` as it stands (see [`rule`]): `prefer` carries a count where it
    /// can, `asked` says the coordinator's answer is a ruling it was asked for.
    pub(crate) fn rule_with(&self, id: JobId, prefer: Option<&Answer>, asked: bool) -> Ruling {
        let job = self.jobs.entry(id);
        let ruled = asked || job.counted.is_some_and(|c| c.by_coordinator());
        let record = Record {
            counted: job.counted.as_ref(),
            opinions: &job.opinions,
            coordinator: self.checks.reference.get(&id).map(|c| (*c, ruled)),
            verify: job.verify,
            review: job.review,
        };
        rule(
            &record,
            &self.settings(),
            |w| self.is_untrusted(w),
            |counts, parties| self.drawn(id, counts, parties),
            prefer,
        )
    }

    /// The ruling on job `id` as it stands.
    pub(crate) fn ruling_now(&self, id: JobId) -> Ruling {
        self.rule_with(id, None, false)
    }

    /// Whether a one-party count of `counts` on job `id`, resting on `parties` parties, is
    /// drawn for a re-check: a secret draw at `recheck_fraction`, one per job, answer and number
    /// of parties (a pure function of them and the seed, so every path draws the same).
    fn drawn(&self, id: JobId, counts: &JobCounts, parties: usize) -> bool {
        let f = self.config.recheck_fraction;
        if f <= 0.0 {
            return false;
        }
        let mut key = SplitMix64::new(self.config.seed ^ 0x5eed_d4a3_c0de_0001);
        let mut mixed = 0;
        for part in [id.get(), counts.solutions, counts.sym180, counts.sym90, parties as u64] {
            mixed = SplitMix64::new(key.next_u64() ^ mixed ^ part).next_u64();
        }
        SplitMix64::new(mixed).unit() < f
    }

    /// Who may give job `id` the answer it waits for (see [`Need`]).
    pub(crate) fn need(&self, id: JobId) -> Need {
        let job = self.jobs.entry(id);
        if job.counted.is_none() && job.opinions.is_empty() {
            return Need::Anyone;
        }
        match self.rule_with(id, None, false).standing {
            Standing::Waiting(need) => need,
            Standing::Held => Need::OtherCredential,
            Standing::Counted { .. } => Need::OtherParty,
        }
    }

    /// Rules job `id` again (after an untrust) and moves it where the ruling says.
    pub(crate) fn rule_again(&mut self, id: JobId) {
        self.settle(id, None, false);
    }

    /// Settles job `id`: takes `new` (a new answer, kept with the job), asks the ruling where
    /// the job stands (`asked`: the coordinator's answer is the ruling it was asked for), and
    /// moves it there: counted (its count carried by `new`'s row where the ruling counts it,
    /// else by a row of the coordinator's or a copy of the answer it counts), un-counted, or
    /// held. A one-party count drawn for a re-check puts the job under review first. The
    /// parties found wrong are queued to be untrusted.
    pub(crate) fn settle(&mut self, id: JobId, new: Option<NewAnswer>, asked: bool) -> Settled {
        let before = self.credit_now(id);
        let mut settled = Settled::default();
        if let Some(n) = &new {
            settled.conflict = self.record_conflict(id, &n.answer);
            if n.answer.by_coordinator() {
                self.checks.reference.insert(id, n.answer.counts);
            } else {
                self.jobs.entry_mut(id).opinions.push(n.answer);
            }
        }
        let prefer = new.map(|n| n.answer);
        let mut ruling = self.rule_with(id, prefer.as_ref(), asked);
        if ruling.drawn {
            self.review(id, Review::Recheck);
            ruling = self.rule_with(id, prefer.as_ref(), asked);
        }
        if let Some(n) = &new {
            let a = &n.answer;
            let job = self.jobs.entry(id);
            settled.stands = matches!(ruling.standing, Standing::Counted { answer, .. } if answer.agrees(&a.counts));
            settled.wrong = ruling.wrong.iter().any(|(w, _)| w.party() == a.party());
            settled.agreed = self.checks.reference.get(&id).is_some_and(|c| a.agrees(c))
                || job.counted.iter().chain(&job.opinions).any(|o| {
                    o.agrees(&a.counts)
                        && (o.by_coordinator()
                            || (o.party() != a.party() && !self.is_untrusted(o.worker_id)))
                });
        }
        let kind = new.as_ref().map(|n| self.row_kind(&n.answer, &settled, &ruling));
        settled.counted = self.carry(id, &ruling.standing, new.as_ref(), kind, settled.conflict);
        self.mark_disputed(id, &ruling);
        self.credit(id, before, new.as_ref(), &settled);
        if matches!(ruling.standing, Standing::Counted { .. }) {
            self.checks.doubted.remove(&id);
        } else if self.wants_ruling(id) {
            self.refer(id);
        }
        if matches!(ruling.standing, Standing::Counted { .. }) {
            self.pool(id);
        }
        for (answer, why) in ruling.wrong {
            self.untrust_queue.push((answer, why, id));
        }
        settled
    }

    /// Keeps job `id` among the disputed jobs where `ruling` leaves it waiting with its live
    /// answers in disagreement; says so in the log when it becomes one.
    pub(crate) fn mark_disputed(&mut self, id: JobId, ruling: &Ruling) {
        if !(ruling.dispute && matches!(ruling.standing, Standing::Waiting(_))) {
            self.disputed.remove(&id);
            return;
        }
        if self.disputed.insert(id) {
            let referee = self.config.coordinator_checks;
            tracing::warn!(
                job = id.get(),
                referee,
                "answers of different parties disagree and none has independent evidence: the \
                 job waits for another credential's answer{}",
                if referee { " or the coordinator's ruling" } else { " (the referee is off)" }
            );
        }
    }

    /// The parties credited on job `id` now.
    fn credit_now(&self, id: JobId) -> Vec<(u64, WorkerId)> {
        let job = self.jobs.entry(id);
        let answers = job.counted.iter().chain(&job.opinions);
        credited(answers, self.checks.reference.get(&id), |w| self.is_untrusted(w))
    }

    /// Credits the parties credited on job `id` now that were not `before`; each delivered (as
    /// does the new answer where it carries the count).
    fn credit(
        &mut self,
        id: JobId,
        before: Vec<(u64, WorkerId)>,
        new: Option<&NewAnswer>,
        settled: &Settled,
    ) {
        let mut delivered: Vec<WorkerId> = Vec::new();
        for (party, worker) in self.credit_now(id) {
            if !before.iter().any(|(p, _)| *p == party) {
                self.trust.agreed_party(party, worker);
                delivered.push(worker);
            }
        }
        let Some(n) = new else { return };
        let Some(now) = n.now else { return };
        if settled.counted && !n.answer.late && !delivered.contains(&n.answer.worker_id) {
            delivered.push(n.answer.worker_id);
        }
        for worker in delivered {
            let measured = if worker == n.answer.worker_id { n.measured } else { None };
            self.learn_duration(id, worker, measured, now);
        }
    }

    /// Whether `a` disagrees with a live answer of another party (or the coordinator's) on job
    /// `id`; if so the conflict is recorded (a party's own earlier answers are no conflict: the
    /// ruling finds it wrong instead).
    fn record_conflict(&mut self, id: JobId, a: &Answer) -> bool {
        let job = self.jobs.entry(id);
        let other = if self.checks.reference.get(&id).is_some_and(|c| !a.agrees(c)) {
            Some(COORDINATOR)
        } else {
            job.counted
                .iter()
                .chain(&job.opinions)
                .find(|o| {
                    !o.agrees(&a.counts)
                        && !self.is_untrusted(o.worker_id)
                        && (o.by_coordinator() || o.party() != a.party())
                })
                .map(|o| o.worker_id)
        };
        if a.by_coordinator() {
            // The coordinator's answer against every live worker that said otherwise.
            let mut dissent: Vec<WorkerId> = job
                .counted
                .iter()
                .chain(&job.opinions)
                .filter(|o| !o.by_coordinator() && !o.agrees(&a.counts))
                .filter(|o| !self.is_untrusted(o.worker_id))
                .map(|o| o.worker_id)
                .collect();
            dissent.sort_unstable();
            dissent.dedup();
            for worker_b in dissent {
                self.outbox.push(Change::Conflict {
                    job_id: id,
                    worker_a: COORDINATOR,
                    worker_b,
                    detail: format!("the coordinator's answer {:?}", a.counts),
                });
                self.conflicts_total += 1;
            }
            return false;
        }
        let Some(other) = other else { return false };
        self.outbox.push(Change::Conflict {
            job_id: id,
            worker_a: other,
            worker_b: a.worker_id,
            detail: format!("got {:?}", a.counts),
        });
        self.conflicts_total += 1;
        self.jobs.entry_mut(id).conflicts += 1;
        true
    }

    /// The kind of an answer's row that does not carry the count.
    fn row_kind(&self, a: &Answer, settled: &Settled, ruling: &Ruling) -> ResultKind {
        if a.by_coordinator() {
            ResultKind::Reference
        } else if a.late {
            ResultKind::Late
        } else if settled.stands {
            ResultKind::Confirm
        } else if settled.conflict || (ruling.dispute && !settled.agreed) {
            ResultKind::Conflict
        } else {
            ResultKind::Opinion
        }
    }

    /// Moves job `id` where `standing` says, writing the rows that make it durable (`new`'s row
    /// as the one that carries the count, or else as `kind`; the job's row again where
    /// `rewrite`, its conflicts changed); whether `new`'s row carries the count.
    fn carry(
        &mut self,
        id: JobId,
        standing: &Standing,
        new: Option<&NewAnswer>,
        kind: Option<ResultKind>,
        rewrite: bool,
    ) -> bool {
        let job = self.jobs.entry(id);
        let current = job.counted;
        let (state, count) = match *standing {
            Standing::Counted { answer, .. } => (JobStanding::Done, Some(answer)),
            Standing::Waiting(_) => (JobStanding::Pending, None),
            Standing::Held => (JobStanding::Held, None),
        };
        let mut carried = false;
        if current != count {
            if current.is_some() {
                self.outbox.push(Change::Uncount { job_id: id });
                let job = self.jobs.entry_mut(id);
                if let Some(old) = job.counted.take() {
                    if !old.by_coordinator() {
                        job.opinions.push(old);
                    }
                }
            }
            if let Some(answer) = count {
                carried = self.count_with(id, answer, new);
            }
        }
        if let (Some(n), Some(kind), false) = (new, kind, carried) {
            self.outbox.push(n.row(false, kind));
        }
        let job = self.jobs.entry(id);
        let move_to = match (job.standing(), state) {
            (JobStanding::Done, JobStanding::Done) => None,
            (_, JobStanding::Done) => Some(JobStanding::Done),
            (JobStanding::Held, JobStanding::Held) => None,
            (_, JobStanding::Held) => Some(JobStanding::Held),
            // Waiting: a done or held job is pending again, and so is one its holder just
            // answered; one leased to another, pending or failed stays where it is.
            (JobStanding::Done | JobStanding::Held, _) => Some(JobStanding::Pending),
            (JobStanding::Leased { .. }, _)
                if new.is_some_and(|n| job.held_by(n.lease_id, n.answer.worker_id)) =>
            {
                Some(JobStanding::Pending)
            }
            _ => None,
        };
        match move_to {
            Some(to) => self.move_job(id, to),
            // The row is written again all the same: its conflicts changed.
            None if rewrite => self.move_job(id, self.jobs.standing(id)),
            None => {}
        }
        carried
    }

    /// Makes `answer` job `id`'s counted answer, its count carried by `new`'s row where `new` is
    /// that answer, else by a copy of the answer kept (lease 0, no time); whether `new` carries
    /// it.
    fn count_with(&mut self, id: JobId, answer: Answer, new: Option<&NewAnswer>) -> bool {
        let by_new = new.filter(|n| n.answer == answer);
        let row = match by_new {
            Some(n) => {
                let kind = if answer.late {
                    ResultKind::Late
                } else if answer.by_coordinator()
                    || self.agreeing_parties(id, &answer)
                    || self.checks.reference.get(&id).is_some_and(|c| answer.agrees(c))
                {
                    ResultKind::Verified
                } else {
                    ResultKind::First
                };
                n.row(true, kind)
            }
            None => {
                let kind = if answer.late { ResultKind::Late } else { ResultKind::Verified };
                NewAnswer::copy(id, answer).row(true, kind)
            }
        };
        self.outbox.push(row);
        let job = self.jobs.entry_mut(id);
        if by_new.is_some() {
            if let Some(i) = job.opinions.iter().rposition(|o| *o == answer) {
                job.opinions.remove(i);
            }
        }
        job.counted = Some(answer);
        by_new.is_some()
    }

    /// Whether another party's answer on job `id` agrees with `answer`.
    fn agreeing_parties(&self, id: JobId, answer: &Answer) -> bool {
        let job = self.jobs.entry(id);
        job.opinions.iter().any(|o| {
            o.agrees(&answer.counts)
                && o.party() != answer.party()
                && !self.is_untrusted(o.worker_id)
        })
    }

    /// Untrusts the parties the rulings found wrong, and with them every party that ruling
    /// their other jobs again finds wrong, until none is left.
    pub(crate) fn untrust_found(&mut self) {
        while let Some((answer, why, job_id)) = self.untrust_queue.pop() {
            if self.is_untrusted(answer.worker_id) {
                continue;
            }
            let detail = match why {
                Wrong::SelfContradiction => {
                    format!(
                        "gave two different answers to the job (one of them {:?})",
                        answer.counts
                    )
                }
                Wrong::Coordinator => {
                    format!("reported {:?}, the coordinator's own answer differs", answer.counts)
                }
                Wrong::Independent => format!(
                    "reported {:?}, two or more other credentials agreed on another answer",
                    answer.counts
                ),
                Wrong::Outvoted => format!(
                    "reported {:?}, outvoted by other identities of its credential",
                    answer.counts
                ),
            };
            self.untrust_party(answer.party(), answer.worker_id, job_id, detail);
        }
    }
}

impl NewAnswer {
    /// A row that carries the count of an answer of job `job_id` already kept (lease 0, no time).
    fn copy(job_id: JobId, answer: Answer) -> Self {
        NewAnswer {
            job_id,
            answer,
            lease_id: LeaseId::new(0),
            seconds: 0.0,
            measured: None,
            now: None,
        }
    }

    /// The result row recording this answer.
    pub(crate) fn row(&self, counted: bool, kind: ResultKind) -> Change {
        Change::Result {
            job_id: self.job_id,
            worker_id: self.answer.worker_id,
            credential: self.answer.credential,
            lease_id: self.lease_id,
            counts: self.answer.counts,
            seconds: self.seconds,
            counted,
            kind,
        }
    }
}
