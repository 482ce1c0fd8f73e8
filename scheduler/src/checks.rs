//! Checks on workers' answers: the coordinator's own answers (references), the pool of jobs
//! whose answer is known (spot checks hidden in leases), counted jobs drawn for a secret
//! re-check by another group, the referee queue (jobs in dispute or doubt that the coordinator
//! solves itself), and counts no solver can give.

use crate::ids::{JobId, LeaseId, WorkerId, COORDINATOR};
use crate::jobs::Standing;
use crate::outcome::{Change, Verdict};
use crate::state::ResultKind;
use crate::Scheduler;
use nqueens_core::JobCounts;
use std::collections::{HashMap, HashSet, VecDeque};

/// The most solutions one searched node can stand for: the six rows counted in closed form
/// below it hold at most 6! completions.
pub const MAX_SOLUTIONS_PER_NODE: u64 = 720;
/// More nodes than this in one job is no real search (a job is a small part of a board of at
/// most 32 rows; this is weeks of one core).
pub const MAX_JOB_NODES: u64 = 1 << 52;

/// Why `counts` cannot be a true answer for a job of orbit size `weight`, if they cannot.
pub fn implausible(counts: &JobCounts, weight: u8) -> Option<String> {
    let c = counts;
    if c.sym90 > c.sym180 || c.sym180 > c.solutions {
        return Some(format!(
            "symmetric counts {}/{} exceed the solutions {}",
            c.sym90, c.sym180, c.solutions
        ));
    }
    if (weight == 8 && c.sym180 > 0) || (weight == 4 && c.sym90 > 0) {
        return Some(format!(
            "symmetric counts {}/{} on a job of weight {weight}",
            c.sym180, c.sym90
        ));
    }
    if c.nodes > MAX_JOB_NODES {
        return Some(format!("{} nodes in one job", c.nodes));
    }
    if c.solutions > c.nodes.saturating_add(1).saturating_mul(MAX_SOLUTIONS_PER_NODE) {
        return Some(format!("{} solutions from {} nodes", c.solutions, c.nodes));
    }
    None
}

/// What the scheduler checks workers against.
#[derive(Debug, Default)]
pub(crate) struct Checks {
    /// Answers the coordinator computed itself: what a worker's answer on these jobs must be.
    pub(crate) reference: HashMap<JobId, JobCounts>,
    /// Jobs whose answer is known (see [`Scheduler::known_answer`]): where spot checks come from.
    pub(crate) known: Vec<JobId>,
    /// Workers already given a spot check (the first one comes with their first lease).
    pub(crate) checked: HashSet<WorkerId>,
    /// Jobs in conflict, or in doubt, for the coordinator to solve itself.
    pub(crate) referee_queue: Vec<JobId>,
    /// Jobs already handed to the referee (each once per process).
    pub(crate) refereed: HashSet<JobId>,
    /// Counted jobs drawn for a secret re-check by a worker of another group.
    pub(crate) rechecks: VecDeque<JobId>,
}

impl Checks {
    /// Queues `job_id` for the coordinator's own answer: once per job and process, and while
    /// fewer than `max_queue` wait. Whether it was queued.
    fn refer(&mut self, job_id: JobId, max_queue: usize) -> bool {
        let sent = self.referee_queue.len() < max_queue && self.refereed.insert(job_id);
        if sent {
            self.referee_queue.push(job_id);
        }
        sent
    }

    /// A known answer's job, for spot checks (each once).
    fn pool(&mut self, job_id: JobId, pooled: &mut bool) {
        if !*pooled {
            *pooled = true;
            self.known.push(job_id);
        }
    }
}

impl Scheduler {
    /// The job's answer when it is known without believing any one worker: the coordinator's own
    /// (a reference), or a counted answer another trusted worker gave too.
    pub fn known_answer(&self, job_id: JobId) -> Option<JobCounts> {
        if let Some(answer) = self.checks.reference.get(&job_id) {
            return Some(*answer);
        }
        let job = self.jobs.get(job_id)?;
        let (by, counted) = job.counted?;
        if by == COORDINATOR {
            return Some(counted);
        }
        let witnessed = job.opinions.iter().any(|(w, c)| {
            self.group(*w) != self.group(by) && !self.is_untrusted(*w) && c.same_answer(&counted)
        });
        witnessed.then_some(counted)
    }

    /// The jobs that wait for the coordinator's own answer (taken: each is handed out once).
    pub fn take_referee_jobs(&mut self) -> Vec<JobId> {
        std::mem::take(&mut self.checks.referee_queue)
    }

    /// Asks for the coordinator's own answer to a job (once per job and process; at most
    /// `max_referee_queue` wait at a time, the rest are settled by workers).
    pub(crate) fn refer(&mut self, job_id: JobId) -> bool {
        self.checks.refer(job_id, self.config.max_referee_queue)
    }

    /// Sends a job `worker_id` gave an opinion on to the coordinator, where it can solve jobs
    /// itself: always for a job that needs two answers (a verification, or one in conflict
    /// before), and for a group on probation as long as its checks asked and passed fall short
    /// of probation. Each answer it checks is one the group gave among others, chosen after the
    /// fact: the group cannot tell which will be checked.
    pub(crate) fn ask_coordinator(&mut self, job_id: JobId, worker_id: WorkerId) {
        if !self.config.coordinator_checks {
            return;
        }
        if self.jobs.entry(job_id).agreeing_needed() > 1 {
            let _ = self.refer(job_id);
            return;
        }
        if !self.on_probation(worker_id) {
            return;
        }
        let group = self.group(worker_id);
        if self.trust.wants_check(group) && self.refer(job_id) {
            self.trust.check_asked(group);
        }
    }

    /// A counted job drawn for a secret re-check: the coordinator solves it itself where it can,
    /// else a worker of another group is given it beside a lease ([`Scheduler::draw_recheck`]).
    pub(crate) fn recheck(&mut self, job_id: JobId) {
        if !self.config.coordinator_checks || !self.refer(job_id) {
            self.checks.rechecks.push_back(job_id);
        }
    }

    /// Adds a job with a known answer to the spot-check pool.
    pub(crate) fn pool(&mut self, job_id: JobId) {
        self.checks.pool(job_id, &mut self.jobs.entry_mut(job_id).pooled);
    }

    /// Whether `worker_id` has given an answer for the job (counted or not).
    pub(crate) fn answered(&self, worker_id: WorkerId, job_id: JobId) -> bool {
        let job = self.jobs.entry(job_id);
        job.counted.is_some_and(|(w, _)| w == worker_id)
            || job.opinions.iter().any(|(w, _)| *w == worker_id)
    }

    /// A worker contradicted a known answer: it is untrusted at once (everything it counted is
    /// solved again), and the job keeps its answer.
    pub(crate) fn failed_check(
        &mut self,
        (worker_id, lease_id, job_id): (WorkerId, LeaseId, JobId),
        (counts, seconds): (JobCounts, f64),
        known: JobCounts,
        changes: &mut Vec<Change>,
    ) -> Verdict {
        let against = match self.jobs.entry(job_id).counted {
            Some((w, _)) if !self.checks.reference.contains_key(&job_id) => w,
            _ => COORDINATOR,
        };
        changes.push(Change::Result {
            job_id,
            worker_id,
            lease_id,
            counts,
            seconds,
            counted: false,
            kind: ResultKind::Conflict,
        });
        self.jobs.entry_mut(job_id).opinions.push((worker_id, counts));
        self.refuted(job_id, against, worker_id, counts, known, changes);
        Verdict::Conflict
    }

    /// `worker_id` answered `wrong` where `known` is the answer (`against` says whose): the
    /// conflict is recorded and the worker untrusted.
    fn refuted(
        &mut self,
        job_id: JobId,
        against: WorkerId,
        worker_id: WorkerId,
        wrong: JobCounts,
        known: JobCounts,
        changes: &mut Vec<Change>,
    ) {
        changes.push(Change::Conflict {
            job_id,
            worker_a: against,
            worker_b: worker_id,
            detail: format!("known answer {known:?}, got {wrong:?}"),
        });
        self.conflicts_total += 1;
        let detail = format!("reported {wrong:?}, agreed {known:?}");
        self.untrust(worker_id, job_id, detail, changes);
    }

    /// Records the coordinator's own answer for a job, to check workers against. A worker that
    /// already gave another answer for it is untrusted at once (its counted jobs are solved again).
    pub fn add_reference(&mut self, job_id: JobId, answer: JobCounts, changes: &mut Vec<Change>) {
        if job_id.get() >= self.jobs.len() {
            return;
        }
        self.checks.reference.insert(job_id, answer);
        self.pool(job_id);
        let job = self.jobs.entry(job_id);
        let mut answers: Vec<(WorkerId, JobCounts)> =
            job.counted.iter().chain(&job.opinions).copied().collect();
        answers.sort_by_key(|(w, _)| *w);
        answers.dedup_by_key(|(w, _)| *w);
        for (worker_id, counts) in answers {
            if self.is_untrusted(worker_id) {
                continue;
            }
            if let Some(asked) = self.trust.checks_asked.get_mut(&self.trust.group(worker_id)) {
                *asked = asked.saturating_sub(1);
            }
            if counts.same_answer(&answer) {
                self.trust.agreed(worker_id);
                continue;
            }
            self.refuted(job_id, COORDINATOR, worker_id, counts, answer, changes);
        }
        // A job the referee was asked about (in dispute, or in doubt) is settled by the
        // coordinator's own answer: counted under its name, whoever was right. (Other reference
        // jobs stay pending: they are spot checks.)
        let job = self.jobs.entry(job_id);
        let settle = self.checks.refereed.contains(&job_id)
            && job.counted.is_none()
            && matches!(job.standing(), Standing::Pending | Standing::Held);
        if settle {
            changes.push(Change::Result {
                job_id,
                worker_id: COORDINATOR,
                lease_id: LeaseId::new(0),
                counts: answer,
                seconds: 0.0,
                counted: true,
                kind: ResultKind::Verified,
            });
            self.jobs.entry_mut(job_id).counted = Some((COORDINATOR, answer));
            self.jobs.set_state(job_id, Standing::Done, changes);
        }
        self.checked("add_reference");
    }

    /// A job with a known answer that `worker_id` has not answered, of about the cost of the jobs
    /// it is leased with (so that its cost does not stand out), or none.
    pub(crate) fn draw_spot_check(
        &mut self,
        worker_id: WorkerId,
        picked: &[JobId],
        extra: &[JobId],
    ) -> Option<JobId> {
        if self.checks.known.is_empty() {
            return None;
        }
        let typical = picked.first().map(|&id| self.jobs.entry(id).estimate);
        let distance =
            |s: &Self, id: JobId| typical.map_or(0, |t| s.jobs.entry(id).estimate.abs_diff(t));
        let mut best: Option<JobId> = None;
        for _ in 0..16 {
            let known = &self.checks.known;
            let id = known[self.rng.below(known.len() as u64) as usize];
            if picked.contains(&id) || extra.contains(&id) || self.answered(worker_id, id) {
                continue;
            }
            let usable = match self.jobs.standing(id) {
                Standing::Done => self.known_answer(id).is_some(),
                Standing::Pending => self.checks.reference.contains_key(&id),
                _ => false,
            };
            if !usable {
                continue;
            }
            if best.is_none_or(|b| distance(self, id) < distance(self, b)) {
                best = Some(id);
            }
        }
        best
    }

    /// A counted job drawn for a re-check that no one of `worker_id`'s group has answered, if
    /// one is waiting. Jobs no longer done, or that wait for a group that never comes, are
    /// dropped after a look (the queue is bounded by the jobs counted).
    pub(crate) fn draw_recheck(&mut self, worker_id: WorkerId) -> Option<JobId> {
        for _ in 0..self.checks.rechecks.len().min(8) {
            let id = self.checks.rechecks.pop_front()?;
            let job = self.jobs.entry(id);
            if job.standing() != Standing::Done {
                continue;
            }
            let group = self.group(worker_id);
            let answered_by_group = job
                .counted
                .iter()
                .chain(&job.opinions)
                .any(|(w, _)| self.group(*w) == group || *w == COORDINATOR);
            if answered_by_group {
                self.checks.rechecks.push_back(id);
                continue;
            }
            return Some(id);
        }
        None
    }

    /// The done jobs of weight 2 and 4 whose answer rests on one group's word: those that can
    /// break the symmetry identities of the final tally.
    pub fn doubt_unconfirmed_symmetric(&self) -> Vec<JobId> {
        self.jobs
            .ids()
            .filter(|&id| {
                let job = self.jobs.entry(id);
                job.weight < 8
                    && job.standing() == Standing::Done
                    && self.known_answer(id).is_none()
            })
            .collect()
    }

    /// Every done job of weight 2 and 4 not counted from the coordinator's own answer.
    pub fn doubt_all_symmetric(&self) -> Vec<JobId> {
        self.jobs
            .ids()
            .filter(|&id| {
                let job = self.jobs.entry(id);
                job.weight < 8
                    && job.standing() == Standing::Done
                    && job.counted.is_some_and(|(w, _)| w != COORDINATOR)
            })
            .collect()
    }

    /// The jobs of weight 2 and 4.
    pub fn symmetric_jobs(&self) -> Vec<JobId> {
        self.jobs.ids().filter(|&id| self.jobs.entry(id).weight < 8).collect()
    }

    /// Puts a done job in doubt: its counted answer becomes one opinion among others, it must be
    /// confirmed by two groups (or the coordinator), and the coordinator is asked to solve it.
    pub fn doubt(&mut self, job_id: JobId, changes: &mut Vec<Change>) {
        let job = self.jobs.entry_mut(job_id);
        if job.standing() != Standing::Done {
            return;
        }
        if let Some(counted) = job.counted.take() {
            changes.push(Change::Uncount { job_id });
            job.opinions.push(counted);
        }
        job.verify = true;
        self.checks.reference.remove(&job_id);
        self.checks.refereed.remove(&job_id);
        self.jobs.set_state(job_id, Standing::Pending, changes);
        self.refer(job_id);
        self.checked("doubt");
    }
}
