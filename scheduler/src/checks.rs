//! Checks on workers' answers: the coordinator's own answers (references, kept in the state
//! file), the pool of jobs whose answer is known (spot checks hidden in leases), reviews (jobs
//! whose answer must come from a second party: a re-check drawn in secret, a probation answer),
//! the referee's backlog (jobs the coordinator solves itself) with the rulings it still owes,
//! and counts no solver can give.

use crate::answer::Answer;
use crate::ids::{JobId, LeaseId, WorkerId};
use crate::jobs::Standing;
use crate::outcome::Change;
use crate::settle::NewAnswer;
use crate::state::Review;
use crate::Scheduler;
use nqueens_core::JobCounts;
use std::collections::{HashMap, HashSet, VecDeque};
use std::time::Instant;

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
    /// Jobs for the coordinator to solve itself (in dispute, under review, in doubt, failed by
    /// a trusted worker), not yet handed to its referee, oldest first.
    pub(crate) referee_backlog: VecDeque<JobId>,
    /// Jobs handed to the referee whose ruling has not come back: the run is not complete while
    /// one is out (a ruling can still untrust a worker and un-count its answers).
    pub(crate) awaiting_ruling: HashSet<JobId>,
    /// Jobs referred and not ruled yet: in the backlog or awaiting their ruling (a job is
    /// referred once until its ruling; a job opened again later may be referred again).
    pub(crate) refereed: HashSet<JobId>,
    /// Jobs put in doubt by a broken final tally (see [`Scheduler::doubt`]): they want the
    /// coordinator's answer until they are counted again.
    pub(crate) doubted: HashSet<JobId>,
}

impl Checks {
    /// A known answer's job, for spot checks (each once).
    fn pool(&mut self, job_id: JobId, pooled: &mut bool) {
        if !*pooled {
            *pooled = true;
            self.known.push(job_id);
        }
    }
}

impl Scheduler {
    /// The coordinator's own answer to the job, if it has one: what no worker may contradict.
    pub fn coordinator_answer(&self, job_id: JobId) -> Option<JobCounts> {
        if let Some(answer) = self.checks.reference.get(&job_id) {
            return Some(*answer);
        }
        let counted = self.jobs.get(job_id)?.counted?;
        counted.by_coordinator().then_some(counted.counts)
    }

    /// The job's answer when it is known without believing any one party: the coordinator's own,
    /// or a counted answer that a live worker of another credential gave too. (Agreement among
    /// identities of one credential, such as the shared token, is one party's word.)
    pub fn known_answer(&self, job_id: JobId) -> Option<JobCounts> {
        if let Some(answer) = self.coordinator_answer(job_id) {
            return Some(answer);
        }
        let job = self.jobs.get(job_id)?;
        let counted = job.counted?;
        let witnessed = job.opinions.iter().any(|o| {
            o.independent_of(&counted)
                && !self.is_untrusted(o.worker_id)
                && o.agrees(&counted.counts)
        });
        witnessed.then_some(counted.counts)
    }

    /// Jobs to hand to the coordinator's referee now: the oldest referred ones, while fewer than
    /// `max_referee_queue` rulings are out (a job settled by workers meanwhile is skipped). Each
    /// is awaited until [`Scheduler::add_reference`] or [`Scheduler::coordinator_failed`]
    /// brings its ruling.
    pub fn take_referee_jobs(&mut self) -> Vec<JobId> {
        let mut handed = Vec::new();
        while self.checks.awaiting_ruling.len() < self.config.max_referee_queue {
            let Some(id) = self.checks.referee_backlog.pop_front() else { break };
            if !self.wants_ruling(id) {
                // Settled meanwhile: a later dispute may refer it again.
                self.checks.refereed.remove(&id);
                continue;
            }
            self.checks.awaiting_ruling.insert(id);
            handed.push(id);
        }
        handed
    }

    /// Whether job `id` wants the coordinator's own answer now: it is not done, and it is in
    /// doubt, or failed by a trusted worker, or a live worker answered it and it is in dispute
    /// or held, under review, or drawn for verification (in a plain run: a record run cannot be
    /// solved again whole). One predicate for
    /// referring a job, handing it to the referee and asking again after a restart, so that a
    /// restart asks for the same rulings.
    pub(crate) fn wants_ruling(&self, id: JobId) -> bool {
        let job = self.jobs.entry(id);
        if !matches!(job.standing(), Standing::Pending | Standing::Leased { .. } | Standing::Held) {
            return false;
        }
        if job.errors > 0 || self.checks.doubted.contains(&id) {
            return true;
        }
        let (review, verify) = (job.review, job.verify);
        // A job nobody answered yet is the workers' to solve: the referee checks answers.
        let answered = job.opinions.iter().any(|o| !self.is_untrusted(o.worker_id));
        if !answered {
            return false;
        }
        let ruling = self.ruling_now(id);
        match ruling.standing {
            crate::ruling::Standing::Held => true,
            crate::ruling::Standing::Waiting(_) => {
                ruling.dispute || review != Review::None || (verify && self.config.replication < 2)
            }
            crate::ruling::Standing::Counted { .. } => false,
        }
    }

    /// Rulings the referee owes: jobs handed to it and not answered yet.
    pub fn awaiting_rulings(&self) -> usize {
        self.checks.awaiting_ruling.len()
    }

    /// Asks for the coordinator's own answer to a job, where it solves jobs itself (unless it is
    /// already asked and not ruled yet). Whether it was asked.
    pub(crate) fn refer(&mut self, job_id: JobId) -> bool {
        if !self.config.coordinator_checks || !self.checks.refereed.insert(job_id) {
            return false;
        }
        self.checks.referee_backlog.push_back(job_id);
        true
    }

    /// Puts a job under review (durably): it now needs another party's answer, and the
    /// coordinator is asked for its own where it can.
    pub(crate) fn review(&mut self, job_id: JobId, review: Review) {
        let job = self.jobs.entry_mut(job_id);
        if job.review == Review::None {
            job.review = review;
            self.outbox.push(Change::Review { job_id, review });
        }
    }

    /// Adds a job with a known answer to the spot-check pool.
    pub(crate) fn pool(&mut self, job_id: JobId) {
        if self.known_answer(job_id).is_some() {
            self.checks.pool(job_id, &mut self.jobs.entry_mut(job_id).pooled);
        }
    }

    /// Whether `worker_id` has given an answer for the job (counted or not).
    pub(crate) fn answered(&self, worker_id: WorkerId, job_id: JobId) -> bool {
        let job = self.jobs.entry(job_id);
        job.counted.is_some_and(|c| c.worker_id == worker_id)
            || job.opinions.iter().any(|o| o.worker_id == worker_id)
    }

    /// Records the coordinator's own answer for a job at `now` (kept in the state file, as a
    /// reference row or as the job's counted row), to check workers against, and rules the job
    /// again (see [`Scheduler::settle`]): every party that gave another answer is untrusted at
    /// once (its counted jobs are ruled again); a job handed to the referee (in dispute, under
    /// review, in doubt) is settled by it, counted under the coordinator's name where no live
    /// worker gave the same answer; a job a live worker already gave the same answer for is
    /// counted on the two. Other reference jobs stay as they are: they are spot checks.
    pub fn add_reference(&mut self, job_id: JobId, answer: JobCounts, now: Instant) {
        if job_id.get() >= self.jobs.len() {
            return;
        }
        let asked = self.checks.awaiting_ruling.remove(&job_id);
        self.checks.refereed.remove(&job_id);
        let new = NewAnswer {
            job_id,
            answer: Answer::coordinator(answer),
            lease_id: LeaseId::new(0),
            seconds: 0.0,
            measured: None,
            now: Some(now),
        };
        self.settle(job_id, Some(new), asked);
        self.untrust_found();
        self.pool(job_id);
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

    /// The done jobs of weight 2 and 4 whose answer rests on one party's word: those that can
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
                    && job.counted.is_some_and(|c| !c.by_coordinator())
            })
            .collect()
    }

    /// The jobs of weight 2 and 4.
    pub fn symmetric_jobs(&self) -> Vec<JobId> {
        self.jobs.ids().filter(|&id| self.jobs.entry(id).weight < 8).collect()
    }

    /// Puts a done job in doubt: its counted answer becomes one opinion among others, it must be
    /// confirmed by two parties (or the coordinator), and the coordinator is asked to solve it.
    pub fn doubt(&mut self, job_id: JobId) {
        let job = self.jobs.entry_mut(job_id);
        if job.standing() != Standing::Done {
            return;
        }
        if let Some(counted) = job.counted.take() {
            self.outbox.push(Change::Uncount { job_id });
            job.opinions.push(counted);
        }
        job.verify = true;
        self.checks.reference.remove(&job_id);
        self.checks.refereed.remove(&job_id);
        self.checks.doubted.insert(job_id);
        self.move_job(job_id, Standing::Pending);
        self.refer(job_id);
        self.checked("doubt");
    }
}
