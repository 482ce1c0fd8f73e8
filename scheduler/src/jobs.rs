//! The job table: every job's standing and results, with the counters kept beside it (jobs per
//! state, leased jobs per worker) and the queue of pending jobs. A job's standing changes only
//! through [`JobTable::set_state`] (and a heartbeat's [`JobTable::renew`]), which keep the
//! counters and the queue true and record the change: nobody else can move a job behind their
//! backs.

use crate::answer::Answer;
use crate::ids::{JobId, LeaseId, WorkerId};
use crate::outcome::Change;
use crate::state::{JobState, JobsByState, Review};
use std::cmp::Reverse;
use std::collections::{BTreeSet, HashMap};
use std::time::Instant;

/// Where a job stands in the scheduler: its [`JobState`], with the lease a leased job is under.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Standing {
    Pending,
    Leased {
        lease_id: LeaseId,
        worker_id: WorkerId,
        deadline: Instant,
        /// When the job was leased to this worker (heartbeats move the deadline, not this).
        since: Instant,
    },
    Done,
    Held,
    Failed,
}

impl Standing {
    /// The state's name, as stored and reported.
    pub(crate) fn state(&self) -> JobState {
        match self {
            Standing::Pending => JobState::Pending,
            Standing::Leased { .. } => JobState::Leased,
            Standing::Done => JobState::Done,
            Standing::Held => JobState::Held,
            Standing::Failed => JobState::Failed,
        }
    }
}

/// One job as the scheduler sees it.
#[derive(Debug, Clone)]
pub(crate) struct JobEntry {
    pub(crate) estimate: u64,
    /// Orbit size of the job's constellation (2, 4 or 8): how much a wrong count moves the total.
    pub(crate) weight: u8,
    /// Must be solved by two different workers that agree.
    pub(crate) verify: bool,
    /// Why the job needs another party's answer beyond the run's rules (durable).
    pub(crate) review: Review,
    /// Private to this module: only the table moves a job (see the module doc).
    standing: Standing,
    /// The answer counted in the totals, once done.
    pub(crate) counted: Option<Answer>,
    /// Results received but not (yet) counted: a first opinion awaiting verification, or the
    /// sides of a conflict.
    pub(crate) opinions: Vec<Answer>,
    pub(crate) errors: u32,
    pub(crate) conflicts: u32,
    /// Extra workers this job was given to because its lease ran far past its expected time, and
    /// when the last of them was.
    pub(crate) copies: u32,
    pub(crate) last_copy: Option<Instant>,
    /// Parties (credentials) that reported a solver error for this job since this process started.
    pub(crate) error_parties: Vec<u64>,
    /// Whether the job is in the spot-check pool (its answer is known).
    pub(crate) pooled: bool,
}

impl JobEntry {
    /// A job standing as `standing`, without results.
    pub(crate) fn new(estimate: u64, weight: u8, verify: bool, standing: Standing) -> Self {
        JobEntry {
            estimate,
            weight,
            verify,
            review: Review::None,
            standing,
            counted: None,
            opinions: Vec::new(),
            errors: 0,
            conflicts: 0,
            copies: 0,
            last_copy: None,
            error_parties: Vec::new(),
            pooled: false,
        }
    }
    /// Where the job stands.
    pub(crate) fn standing(&self) -> Standing {
        self.standing
    }
    /// Whether one party's lone answer cannot count this job: it was drawn for verification, or
    /// it is under review. (A record run asks more of every job, and a dispute more of this one:
    /// see `Scheduler::needs_witness`.)
    pub(crate) fn needs_witness(&self) -> bool {
        self.verify || self.review != Review::None
    }
    /// Whether `worker_id` holds the job under `lease_id`.
    pub(crate) fn held_by(&self, lease_id: LeaseId, worker_id: WorkerId) -> bool {
        matches!(self.standing, Standing::Leased { lease_id: l, worker_id: w, .. } if l == lease_id && w == worker_id)
    }
}

/// Which end of the pending queue a lease takes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Pick {
    /// The most expensive first: the run's tail is then its cheapest jobs.
    Longest,
    /// The cheapest first: for a party on probation, whose every answer the coordinator (or
    /// another party) checks; cheap answers make those checks cheap and the probation short.
    Cheapest,
}

/// Every job of the run, indexed by id, with its counters.
#[derive(Debug)]
pub(crate) struct JobTable {
    jobs: Vec<JobEntry>,
    /// Exactly the pending jobs (less those popped and not yet leased), ordered by cost: the
    /// most expensive at the back (leases take the longest first), the cheapest at the front
    /// (probation leases take those, see [`Pick`]).
    queue: BTreeSet<(u64, Reverse<JobId>)>,
    by_state: JobsByState,
    /// Leased jobs per worker, kept as jobs move (status reads it without walking every job).
    leased_by: HashMap<WorkerId, u64>,
}

impl JobTable {
    /// The table over `jobs` (job `i` has id `i`), with its counters and queue built.
    pub(crate) fn new(jobs: Vec<JobEntry>) -> Self {
        let mut table = JobTable {
            jobs,
            queue: BTreeSet::new(),
            by_state: JobsByState::default(),
            leased_by: HashMap::new(),
        };
        for id in table.ids() {
            let job = &table.jobs[id.index()];
            table.by_state.add(job.standing.state(), 1);
            if let Standing::Leased { worker_id, .. } = job.standing {
                *table.leased_by.entry(worker_id).or_default() += 1;
            }
            if job.standing == Standing::Pending {
                table.queue.insert((job.estimate, Reverse(id)));
            }
        }
        table
    }

    /// How many jobs the run has.
    pub(crate) fn len(&self) -> u64 {
        self.jobs.len() as u64
    }
    /// Every job id, in order.
    pub(crate) fn ids(&self) -> impl Iterator<Item = JobId> {
        (0..self.jobs.len() as u64).map(JobId::new)
    }
    /// The job `id`, if the run has it.
    pub(crate) fn get(&self, id: JobId) -> Option<&JobEntry> {
        self.jobs.get(id.index())
    }
    /// The job `id` (which must be the run's).
    pub(crate) fn entry(&self, id: JobId) -> &JobEntry {
        &self.jobs[id.index()]
    }
    /// The job `id`, to record results on (its standing moves only by [`JobTable::set_state`]).
    pub(crate) fn entry_mut(&mut self, id: JobId) -> &mut JobEntry {
        &mut self.jobs[id.index()]
    }
    /// Where the job `id` stands.
    pub(crate) fn standing(&self, id: JobId) -> Standing {
        self.jobs[id.index()].standing
    }
    /// How many jobs are in each state.
    pub(crate) fn by_state(&self) -> JobsByState {
        self.by_state
    }
    /// How many jobs `worker_id` holds under its leases.
    pub(crate) fn leased_by(&self, worker_id: WorkerId) -> u64 {
        self.leased_by.get(&worker_id).copied().unwrap_or(0)
    }

    /// Drops the count of jobs held by `worker_id` (it holds none).
    pub(crate) fn forget_holder(&mut self, worker_id: WorkerId) {
        self.leased_by.remove(&worker_id);
    }

    /// Moves a job (same-state moves are fine: they rewrite the stored row); the change that makes
    /// the move durable, for the scheduler's outbox.
    #[must_use]
    pub(crate) fn set_state(&mut self, id: JobId, state: Standing) -> Change {
        let job = &mut self.jobs[id.index()];
        self.by_state.moved(job.standing.state(), state.state());
        if state == Standing::Pending {
            self.queue.insert((job.estimate, Reverse(id)));
        } else {
            self.queue.remove(&(job.estimate, Reverse(id)));
        }
        if let Standing::Leased { worker_id, .. } = job.standing {
            if let Some(held) = self.leased_by.get_mut(&worker_id) {
                *held = held.saturating_sub(1);
            }
        }
        if let Standing::Leased { worker_id, .. } = state {
            *self.leased_by.entry(worker_id).or_default() += 1;
        }
        job.standing = state;
        let (lease_id, worker_id) = match state {
            Standing::Leased { lease_id, worker_id, .. } => (Some(lease_id), Some(worker_id)),
            _ => (None, None),
        };
        Change::JobState {
            job_id: id,
            state: state.state(),
            lease_id,
            worker_id,
            errors: job.errors,
            conflicts: job.conflicts,
        }
    }

    /// Moves the deadline of a job held under `lease_id` (nothing durable changes: deadlines are
    /// not stored). Whether it was held so.
    pub(crate) fn renew(&mut self, id: JobId, lease_id: LeaseId, deadline: Instant) -> bool {
        match &mut self.jobs[id.index()].standing {
            Standing::Leased { lease_id: l, deadline: d, .. } if *l == lease_id => {
                *d = deadline;
                true
            }
            _ => false,
        }
    }

    /// A pending job taken off the queue, the most expensive or the cheapest as `pick` says (the
    /// caller leases it, or gives it back by [`JobTable::requeue`]).
    pub(crate) fn pop_queued(&mut self, pick: Pick) -> Option<JobId> {
        let entry = match pick {
            Pick::Longest => self.queue.pop_last(),
            Pick::Cheapest => self.queue.pop_first(),
        };
        entry.map(|(_, Reverse(id))| id)
    }
    /// Puts pending jobs taken by [`JobTable::pop_queued`] but not leased back in the queue.
    pub(crate) fn requeue(&mut self, ids: impl IntoIterator<Item = JobId>) {
        for id in ids {
            self.queue.insert((self.jobs[id.index()].estimate, Reverse(id)));
        }
    }

    /// Recounts the counters and checks the queue: every pending job must be in it.
    pub(crate) fn check(&self) -> Result<(), String> {
        let mut by_state = JobsByState::default();
        let mut leased_by: HashMap<WorkerId, u64> = HashMap::new();
        for job in &self.jobs {
            by_state.add(job.standing.state(), 1);
            if let Standing::Leased { worker_id, .. } = job.standing {
                *leased_by.entry(worker_id).or_default() += 1;
            }
        }
        if by_state != self.by_state {
            return Err(format!("jobs by state {:?}, recounted {:?}", self.by_state, by_state));
        }
        leased_by.retain(|_, n| *n > 0);
        let kept: HashMap<WorkerId, u64> =
            self.leased_by.iter().filter(|(_, n)| **n > 0).map(|(w, n)| (*w, *n)).collect();
        if kept != leased_by {
            return Err(format!("leased jobs per worker {kept:?}, recounted {leased_by:?}"));
        }
        for id in self.ids() {
            let job = &self.jobs[id.index()];
            let queued = self.queue.contains(&(job.estimate, Reverse(id)));
            if (job.standing == Standing::Pending) != queued {
                return Err(format!("job {id} is {:?} and queued: {queued}", job.standing.state()));
            }
        }
        Ok(())
    }
}
