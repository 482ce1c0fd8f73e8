//! The job life cycle, in one place: pending -> leased(lease, worker, deadline) -> done, with
//! held/failed after repeated conflicts or errors.
//!
//! This module is pure bookkeeping: it never touches the disk or the network. Every decision it takes
//! returns the [`Change`]s that make it durable; the engine commits those in one transaction before
//! any reply leaves the coordinator, so the in-memory view never runs ahead of what a restart would
//! reload. Deadlines use the monotonic clock ([`Instant`]); they are not persisted, and a restart gives
//! every lease found in the store a fresh grace period.

use crate::ids::{JobId, LeaseId, WorkerId, COORDINATOR};
use crate::state::{JobState, JobsByState, ResultKind};
use nqueens_core::{JobCounts, SplitMix64};
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, HashSet, VecDeque};
use std::time::{Duration, Instant};

/// After this many reported solver errors, from at least [`MIN_ERROR_GROUPS`] independent workers,
/// a job is marked failed and left alone.
pub const MAX_ERRORS: u32 = 3;
/// Errors from one credential (or one worker under the shared token) never fail a job alone.
pub const MIN_ERROR_GROUPS: usize = 2;
/// A worker that reported at least this many solver errors, and errors on more than a quarter of
/// what it answered, is untrusted: honest solvers all but never fail.
pub const ERROR_UNTRUST_MIN: u32 = 8;
/// Reported solve times are clamped to this (a week) before they teach the duration model.
pub const MAX_REPORTED_SECONDS: f64 = 7.0 * 86_400.0;
/// After this many conflicting results a job is held for a human to look at.
pub const MAX_CONFLICTS: u32 = 3;
/// Spot checks per leased job: about one job in this many that a worker is given has an answer
/// the coordinator already knows. The worker cannot tell it from the others; a wrong answer
/// untrusts it. (Each worker's first lease carries one as well: the check at registration.)
pub const SPOT_CHECK_RATE: f64 = 0.005;
/// A job leased for longer than this many times its expected time (plus one lease duration) is
/// also given to another worker, and the first agreeing answer counts: heartbeats alone cannot
/// hold a job forever.
pub const OVERDUE_FACTOR: f64 = 4.0;
/// How many extra workers one overdue job is given to at most. A copy that is itself overdue
/// (its holder stalls too) is followed by another, on the same rule.
const MAX_COPIES: u32 = 4;
/// Jobs in conflict waiting for the coordinator's own answer at most (more wait for workers).
const MAX_REFEREE_QUEUE: usize = 256;

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
    pub fn state(&self) -> JobState {
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
    pub estimate: u64,
    /// Orbit size of the job's constellation (2, 4 or 8): how much a wrong count moves the total.
    pub weight: u8,
    /// Must be solved by two different workers that agree.
    pub verify: bool,
    pub standing: Standing,
    /// The result counted in the totals, once done: (worker, counts).
    pub counted: Option<(WorkerId, JobCounts)>,
    /// Results received but not (yet) counted: a first opinion awaiting verification, or the
    /// sides of a conflict.
    pub opinions: Vec<(WorkerId, JobCounts)>,
    pub errors: u32,
    pub conflicts: u32,
    /// Extra workers this job was given to because its lease ran far past its expected time, and
    /// when the last of them was.
    copies: u32,
    last_copy: Option<Instant>,
    /// Groups (credentials) that reported a solver error for this job since this process started.
    error_groups: Vec<u64>,
    /// Whether the job is in the spot-check pool (its answer is known).
    pooled: bool,
}

impl JobEntry {
    pub(crate) fn new(estimate: u64, verify: bool) -> Self {
        JobEntry {
            estimate,
            weight: 8,
            verify,
            standing: Standing::Pending,
            counted: None,
            opinions: Vec::new(),
            errors: 0,
            conflicts: 0,
            copies: 0,
            last_copy: None,
            error_groups: Vec::new(),
            pooled: false,
        }
    }
    /// How many agreeing results from distinct workers make this job done.
    fn agreeing_needed(&self) -> usize {
        if self.verify || self.conflicts > 0 {
            2
        } else {
            1
        }
    }
}

/// One job as stored: what [`Lifecycle::restore`] rebuilds the job table from.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredJob {
    pub id: JobId,
    /// The job's cost estimate (leases take the most expensive pending jobs first).
    pub estimate: u64,
    /// Orbit size of the job's constellation (2, 4 or 8).
    pub weight: u8,
    /// Must be solved by two different workers that agree.
    pub verify: bool,
    pub state: JobState,
    /// The lease a leased job is under.
    pub lease: Option<LeaseId>,
    /// The counted result, if any: (worker, counts).
    pub counted: Option<(WorkerId, JobCounts)>,
    /// Results received but not counted.
    pub opinions: Vec<(WorkerId, JobCounts)>,
    pub errors: u32,
    pub conflicts: u32,
}

impl StoredJob {
    /// A new pending job without results.
    pub fn new(id: JobId, estimate: u64, weight: u8, verify: bool) -> Self {
        StoredJob {
            id,
            estimate,
            weight,
            verify,
            state: JobState::Pending,
            lease: None,
            counted: None,
            opinions: Vec::new(),
            errors: 0,
            conflicts: 0,
        }
    }

    /// The scheduler's entry for the job. A leased job's worker and deadline are filled in by
    /// [`Lifecycle::restore`] from its lease.
    fn into_entry(self, now: Instant) -> JobEntry {
        let mut entry = JobEntry::new(self.estimate, self.verify);
        entry.weight = self.weight;
        entry.standing = match self.state {
            JobState::Pending => Standing::Pending,
            JobState::Leased => Standing::Leased {
                lease_id: self.lease.unwrap_or_default(),
                worker_id: WorkerId::default(),
                deadline: now,
                since: now,
            },
            JobState::Done => Standing::Done,
            JobState::Held => Standing::Held,
            JobState::Failed => Standing::Failed,
        };
        entry.counted = self.counted;
        entry.opinions = self.opinions;
        entry.errors = self.errors;
        entry.conflicts = self.conflicts;
        entry
    }
}

/// One lease as stored: its worker and every job it named.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredLease {
    pub id: LeaseId,
    pub worker: WorkerId,
    pub jobs: Vec<JobId>,
}

/// A durable consequence of a decision, committed by the engine.
#[derive(Debug, Clone, PartialEq)]
pub enum Change {
    /// Job state (and current lease) as stored in `jobs`.
    JobState {
        job_id: JobId,
        state: JobState,
        lease_id: Option<LeaseId>,
        worker_id: Option<WorkerId>,
        errors: u32,
        conflicts: u32,
    },
    /// A received result row. `counted` rows make up the totals.
    Result {
        job_id: JobId,
        worker_id: WorkerId,
        lease_id: LeaseId,
        counts: JobCounts,
        seconds: f64,
        counted: bool,
        kind: ResultKind,
    },
    /// The counted row of a job stops counting (a conflict put it in doubt).
    Uncount {
        job_id: JobId,
    },
    Lease {
        lease_id: LeaseId,
        worker_id: WorkerId,
        job_ids: Vec<JobId>,
    },
    Conflict {
        job_id: JobId,
        worker_a: WorkerId,
        worker_b: WorkerId,
        detail: String,
    },
    /// A worker lost a settled verification (or reported far too many solver errors): refused
    /// from now on; `requeued` of its counted jobs were un-counted (by the `Uncount`s beside this
    /// change) and returned to pending.
    Untrust {
        worker_id: WorkerId,
        job_id: JobId,
        detail: String,
        requeued: u64,
    },
}

/// What a worker found for one job.
#[derive(Debug, Clone, PartialEq)]
pub enum Finding {
    /// The job's counts, and the seconds solving it took.
    Solved { counts: JobCounts, seconds: f64 },
    /// The worker's solver could not solve the job; its message.
    SolverError(String),
}

/// What happened to one incoming result.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResultOutcome {
    Accepted,
    Duplicate,
    Confirmed,
    Conflict,
    ErrorRecorded,
    UnknownJob,
    UnknownLease,
    /// The worker lost a verification; nothing it sends is taken any more.
    UntrustedWorker,
    /// The worker is not registered with this coordinator process (it registers again).
    UnknownWorker,
    /// The result names a worker id without that worker's secret.
    BadSecret,
    /// Counts no solver can give for this job (symmetric counts its weight rules out, or nodes
    /// out of proportion): refused, and the worker is untrusted.
    Implausible,
}

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

/// A lease ever issued in this run (kept after expiry so late results can still be matched to it).
#[derive(Debug, Clone)]
pub(crate) struct LeaseRecord {
    pub worker_id: WorkerId,
    pub job_ids: Vec<JobId>,
    pub active: bool,
    /// Jobs of `job_ids` given beside the lease's own: spot checks and copies of overdue jobs.
    /// They stay in their own state (done, or leased to someone else); the lease only lets this
    /// worker answer them. Not stored: after a restart they are plain members of `job_ids`.
    pub extra: Vec<JobId>,
}

/// The scheduler's complete view of a run.
pub struct Lifecycle {
    pub(crate) jobs: Vec<JobEntry>,
    pub(crate) leases: HashMap<LeaseId, LeaseRecord>,
    next_lease_id: LeaseId,
    lease_duration: Duration,
    /// Pending jobs, most expensive first (lazily cleaned: entries whose job is no longer pending
    /// are skipped when popped).
    queue: BinaryHeap<(u64, Reverse<JobId>)>,
    by_state: JobsByState,
    /// Leased jobs per worker, kept as jobs move (status reads it without walking every job).
    leased_by: HashMap<WorkerId, u64>,
    pub lease_expiries: u64,
    pub conflicts_total: u64,
    /// Workers that disagreed with a settled verification. Their opinions no longer count as
    /// agreement or disagreement, and they get no leases.
    untrusted: HashSet<WorkerId>,
    /// Per worker: the jobs on which another trusted worker gave the same answer.
    agreements: HashMap<WorkerId, u32>,
    /// A worker with fewer agreements than this is on probation: while another worker is around
    /// to compare with, each of its results waits for a second worker's (adaptive replication).
    probation: u32,
    /// Answers the coordinator computed itself: what a worker's answer on these jobs must be.
    reference: HashMap<JobId, JobCounts>,
    /// Jobs whose answer is known (see [`Lifecycle::known_answer`]): where spot checks come from.
    known: Vec<JobId>,
    /// Workers already given a spot check (the first one comes with their first lease).
    checked: HashSet<WorkerId>,
    /// Per worker: seconds per unit of cost estimate, from its counted results. A job's expected
    /// time comes from the lower median over trusted workers ([`Lifecycle::seconds_per_estimate`]).
    worker_rates: HashMap<WorkerId, f64>,
    /// Per worker: the group whose members never confirm each other (its credential). A worker
    /// without an entry is a group of its own (the shared token: see `docs/threat-model.md`).
    groups: HashMap<WorkerId, u64>,
    /// Per worker: solver errors reported, and answers given.
    error_record: HashMap<WorkerId, (u32, u32)>,
    /// Jobs in conflict, or in doubt, for the coordinator to solve itself (see `referee.rs`).
    referee_queue: Vec<JobId>,
    /// Jobs already handed to the referee (each once per process).
    refereed: HashSet<JobId>,
    /// Counted jobs drawn for a secret re-check by a worker of another group.
    rechecks: VecDeque<JobId>,
    /// The fraction of counted jobs drawn for a re-check.
    recheck_fraction: f64,
    /// No scan for overdue jobs before this (they are looked for at most once a second).
    next_overdue_scan: Option<Instant>,
    rng: SplitMix64,
}

/// The scheduler's random choices (which lease carries a spot check, which known job it is) come
/// from a generator seeded by the operating system: nothing a worker can predict.
fn rng_from_os() -> SplitMix64 {
    let mut seed = [0u8; 8];
    // Without OS randomness the clock still makes the choices unpredictable enough.
    if getrandom::getrandom(&mut seed).is_err() {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        seed = nanos.to_le_bytes();
    }
    SplitMix64::new(u64::from_le_bytes(seed))
}

impl Lifecycle {
    /// The scheduler of a run as reloaded from the store: its jobs (in id order, ids 0, 1, 2...),
    /// the leases issued so far, the workers' groups and the untrusted workers. Leased jobs keep
    /// their lease, with a fresh grace period of one lease duration from `now`; a leased job whose
    /// lease is not among `leases` is pending again.
    ///
    /// # Panics
    /// When the jobs' ids are not 0, 1, 2... in order (the store checks that when it loads them).
    pub fn restore(
        jobs: Vec<StoredJob>,
        leases: Vec<StoredLease>,
        groups: HashMap<WorkerId, u64>,
        untrusted: impl IntoIterator<Item = WorkerId>,
        lease_duration: Duration,
        now: Instant,
    ) -> Self {
        let jobs: Vec<JobEntry> = jobs
            .into_iter()
            .enumerate()
            .map(|(index, row)| {
                assert_eq!(row.id.index(), index, "stored jobs must come in id order");
                row.into_entry(now)
            })
            .collect();
        let leases: HashMap<LeaseId, LeaseRecord> = leases
            .into_iter()
            .map(|l| {
                (
                    l.id,
                    LeaseRecord {
                        worker_id: l.worker,
                        job_ids: l.jobs,
                        active: false,
                        extra: Vec::new(),
                    },
                )
            })
            .collect();
        let mut life = Self::new(jobs, leases, groups, lease_duration, now);
        life.untrusted.extend(untrusted);
        life
    }

    fn new(
        jobs: Vec<JobEntry>,
        leases: HashMap<LeaseId, LeaseRecord>,
        groups: HashMap<WorkerId, u64>,
        lease_duration: Duration,
        now: Instant,
    ) -> Self {
        let next_lease_id =
            leases.keys().max().map_or(LeaseId::new(1), |m| LeaseId::new(m.get() + 1));
        let mut life = Lifecycle {
            jobs,
            leases,
            next_lease_id,
            lease_duration,
            queue: BinaryHeap::new(),
            by_state: JobsByState::default(),
            leased_by: HashMap::new(),
            lease_expiries: 0,
            conflicts_total: 0,
            untrusted: HashSet::new(),
            agreements: HashMap::new(),
            probation: 0,
            reference: HashMap::new(),
            known: Vec::new(),
            checked: HashSet::new(),
            worker_rates: HashMap::new(),
            groups,
            error_record: HashMap::new(),
            referee_queue: Vec::new(),
            refereed: HashSet::new(),
            rechecks: VecDeque::new(),
            recheck_fraction: 0.0,
            next_overdue_scan: None,
            rng: rng_from_os(),
        };
        for lease in life.leases.values_mut() {
            lease.active = false;
        }
        for id in 0..life.jobs.len() {
            let job = &mut life.jobs[id];
            if let Standing::Leased { lease_id, .. } = job.standing {
                match life.leases.get_mut(&lease_id) {
                    Some(lease) => {
                        lease.active = true;
                        job.standing = Standing::Leased {
                            lease_id,
                            worker_id: lease.worker_id,
                            deadline: now + lease_duration,
                            since: now,
                        };
                    }
                    None => job.standing = Standing::Pending,
                }
            }
            life.conflicts_total += job.conflicts as u64;
            if let Some((counted_by, counted)) = job.counted {
                let group = |w: WorkerId| life.groups.get(&w).copied().unwrap_or(w.get());
                let mut agreeing: Vec<WorkerId> = job
                    .opinions
                    .iter()
                    .filter(|(w, c)| group(*w) != group(counted_by) && c.same_answer(&counted))
                    .map(|(w, _)| *w)
                    .collect();
                agreeing.sort_unstable();
                agreeing.dedup();
                if !agreeing.is_empty() {
                    for w in agreeing.into_iter().chain([counted_by]) {
                        *life.agreements.entry(w).or_default() += 1;
                    }
                    job.pooled = true;
                    life.known.push(JobId::new(id as u64));
                }
            }
            life.by_state.add(job.standing.state(), 1);
            if let Standing::Leased { worker_id, .. } = job.standing {
                *life.leased_by.entry(worker_id).or_default() += 1;
            }
            if job.standing == Standing::Pending {
                life.queue.push((job.estimate, Reverse(JobId::new(id as u64))));
            }
        }
        life
    }

    pub fn total_jobs(&self) -> u64 {
        self.jobs.len() as u64
    }
    /// How many jobs are in `state`.
    pub fn count(&self, state: JobState) -> u64 {
        self.by_state.get(state)
    }
    /// How many jobs are in each state.
    pub fn by_state(&self) -> JobsByState {
        self.by_state
    }
    /// When the last of the current leases runs out unless renewed (active leases only, so that a
    /// status call need not walk every job).
    pub fn last_lease_deadline(&self) -> Option<Instant> {
        let mut last = None;
        for (&lease_id, lease) in self.leases.iter().filter(|(_, l)| l.active) {
            for &id in &lease.job_ids {
                if let Standing::Leased { lease_id: l, deadline, .. } =
                    self.jobs[id.index()].standing
                {
                    if l == lease_id {
                        last = last.max(Some(deadline));
                    }
                }
            }
        }
        last
    }
    /// How many jobs `worker_id` holds under its leases.
    pub fn leased_by(&self, worker_id: WorkerId) -> u64 {
        self.leased_by.get(&worker_id).copied().unwrap_or(0)
    }
    pub fn is_complete(&self) -> bool {
        self.by_state.get(JobState::Done) == self.jobs.len() as u64
    }

    /// Puts every worker on probation until `results` of its answers agreed with another
    /// worker's (0, the default, turns probation off).
    pub fn set_probation(&mut self, results: u32) {
        self.probation = results;
    }
    /// Whether `worker_id` has yet to agree with others often enough to be believed alone.
    pub fn on_probation(&self, worker_id: WorkerId) -> bool {
        self.agreements.get(&worker_id).copied().unwrap_or(0) < self.probation
    }

    pub fn is_untrusted(&self, worker_id: WorkerId) -> bool {
        self.untrusted.contains(&worker_id)
    }

    /// Puts `worker_id` in `group`: workers of one group (one credential) never confirm each
    /// other's answers, nor take each other off probation.
    pub fn set_group(&mut self, worker_id: WorkerId, group: u64) {
        self.groups.insert(worker_id, group);
    }

    /// The group of `worker_id` (itself, where none was set).
    pub fn group(&self, worker_id: WorkerId) -> u64 {
        self.groups.get(&worker_id).copied().unwrap_or(worker_id.get())
    }

    /// Draws about `fraction` of the jobs counted from now on for a secret re-check: each is
    /// given once more, beside a lease, to a worker of a group that did not answer it.
    pub fn set_recheck_fraction(&mut self, fraction: f64) {
        self.recheck_fraction = fraction.clamp(0.0, 1.0);
    }

    /// The jobs that wait for the coordinator's own answer (taken: each is handed out once).
    pub fn take_referee_jobs(&mut self) -> Vec<JobId> {
        std::mem::take(&mut self.referee_queue)
    }

    /// Asks for the coordinator's own answer to a job (once per job and process; at most
    /// [`MAX_REFEREE_QUEUE`] wait at a time, the rest are settled by workers).
    fn refer(&mut self, job_id: JobId) {
        if self.referee_queue.len() < MAX_REFEREE_QUEUE && self.refereed.insert(job_id) {
            self.referee_queue.push(job_id);
        }
    }
    pub fn untrusted_count(&self) -> u64 {
        self.untrusted.len() as u64
    }

    /// Moves a job (same-state moves are fine: they rewrite the stored row) and records the change.
    fn set_state(&mut self, id: JobId, state: Standing, changes: &mut Vec<Change>) {
        let job = &mut self.jobs[id.index()];
        self.by_state.moved(job.standing.state(), state.state());
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
        changes.push(Change::JobState {
            job_id: id,
            state: state.state(),
            lease_id,
            worker_id,
            errors: job.errors,
            conflicts: job.conflicts,
        });
        if state == Standing::Pending {
            self.queue.push((job.estimate, Reverse(id)));
        }
    }

    /// Leases up to `max_jobs` pending jobs, longest first, to `worker_id`, without spot checks
    /// (see [`Lifecycle::lease_checked`]).
    pub fn lease(
        &mut self,
        worker_id: WorkerId,
        max_jobs: usize,
        others: &[WorkerId],
        now: Instant,
        changes: &mut Vec<Change>,
    ) -> Option<(LeaseId, Vec<JobId>)> {
        self.lease_checked(worker_id, max_jobs, others, false, now, changes)
    }

    /// Leases up to `max_jobs` jobs to `worker_id`: pending ones, longest first; when none is left,
    /// copies of jobs leased far past their expected time. A job awaiting another opinion goes to
    /// a worker that has not given one yet: this worker gets it back only when none of the
    /// `others` (the other live, trusted workers) could give a fresh opinion.
    ///
    /// With `spot_checks`, the worker's first lease and about [`SPOT_CHECK_RATE`] of the jobs it
    /// is given afterwards are jobs whose answer is already known, in place of a pending job and
    /// sorted among the others by cost like any job: nothing tells the worker which they are.
    pub fn lease_checked(
        &mut self,
        worker_id: WorkerId,
        max_jobs: usize,
        others: &[WorkerId],
        spot_checks: bool,
        now: Instant,
        changes: &mut Vec<Change>,
    ) -> Option<(LeaseId, Vec<JobId>)> {
        if self.is_untrusted(worker_id) || max_jobs == 0 {
            return None;
        }
        let mut picked = Vec::new();
        let mut set_aside = Vec::new();
        while picked.len() < max_jobs {
            let Some((estimate, Reverse(id))) = self.queue.pop() else { break };
            let job = &self.jobs[id.index()];
            if job.standing != Standing::Pending {
                continue; // stale queue entry
            }
            // Whether someone of `w`'s group has given an opinion: a group confirms nothing alone.
            let gave =
                |w: WorkerId| job.opinions.iter().any(|(o, _)| self.group(*o) == self.group(w));
            if gave(worker_id) && others.iter().any(|&o| !gave(o)) {
                set_aside.push((estimate, Reverse(id)));
                continue;
            }
            picked.push(id);
        }
        self.queue.extend(set_aside);
        let mut extra = Vec::new();
        if picked.len() < max_jobs {
            self.overdue_copies(worker_id, max_jobs - picked.len(), now, &mut extra);
        }
        if let Some(id) = self.draw_recheck(worker_id) {
            extra.push(id);
        }
        let due = !self.checked.contains(&worker_id)
            || self.rng.unit() < SPOT_CHECK_RATE * (picked.len() + extra.len()).max(1) as f64;
        if spot_checks && due {
            if let Some(id) = self.draw_spot_check(worker_id, &picked, &extra) {
                self.checked.insert(worker_id);
                // The lease keeps the size it would have had: the check takes a job's place.
                if picked.len() + extra.len() >= max_jobs {
                    if let Some(back) = picked.pop() {
                        self.queue.push((self.jobs[back.index()].estimate, Reverse(back)));
                    }
                }
                if self.jobs[id.index()].standing == Standing::Pending {
                    picked.push(id);
                } else {
                    extra.push(id);
                }
            }
        }
        if picked.is_empty() && extra.is_empty() {
            return None;
        }
        let lease_id = self.next_lease_id;
        self.next_lease_id = LeaseId::new(lease_id.get() + 1);
        let mut job_ids: Vec<JobId> = picked.iter().chain(&extra).copied().collect();
        job_ids.sort_by_key(|&id| (Reverse(self.jobs[id.index()].estimate), id));
        changes.push(Change::Lease { lease_id, worker_id, job_ids: job_ids.clone() });
        let deadline = now + self.lease_duration;
        for &id in &picked {
            self.set_state(
                id,
                Standing::Leased { lease_id, worker_id, deadline, since: now },
                changes,
            );
        }
        self.leases.insert(
            lease_id,
            LeaseRecord { worker_id, job_ids: job_ids.clone(), active: true, extra },
        );
        Some((lease_id, job_ids))
    }

    /// A job with a known answer that `worker_id` has not answered, of about the cost of the jobs
    /// it is leased with (so that its cost does not stand out), or none.
    fn draw_spot_check(
        &mut self,
        worker_id: WorkerId,
        picked: &[JobId],
        extra: &[JobId],
    ) -> Option<JobId> {
        if self.known.is_empty() {
            return None;
        }
        let typical = picked.first().map(|&id| self.jobs[id.index()].estimate);
        let mut best: Option<JobId> = None;
        for _ in 0..16 {
            let id = self.known[self.rng.below(self.known.len() as u64) as usize];
            if picked.contains(&id) || extra.contains(&id) || self.answered(worker_id, id) {
                continue;
            }
            let usable = match self.jobs[id.index()].standing {
                Standing::Done => self.known_answer(id).is_some(),
                Standing::Pending => self.reference.contains_key(&id),
                _ => false,
            };
            if !usable {
                continue;
            }
            let distance =
                |id: JobId| typical.map_or(0, |t| self.jobs[id.index()].estimate.abs_diff(t));
            if best.is_none_or(|b| distance(id) < distance(b)) {
                best = Some(id);
            }
        }
        best
    }

    /// A counted job drawn for a re-check that no one of `worker_id`'s group has answered, if
    /// one is waiting. Jobs no longer done, or that wait for a group that never comes, are
    /// dropped after a look (the queue is bounded by the jobs counted).
    fn draw_recheck(&mut self, worker_id: WorkerId) -> Option<JobId> {
        for _ in 0..self.rechecks.len().min(8) {
            let id = self.rechecks.pop_front()?;
            let job = &self.jobs[id.index()];
            if job.standing != Standing::Done {
                continue;
            }
            let group = self.group(worker_id);
            let answered_by_group = job
                .counted
                .iter()
                .chain(&job.opinions)
                .any(|(w, _)| self.group(*w) == group || *w == COORDINATOR);
            if answered_by_group {
                self.rechecks.push_back(id);
                continue;
            }
            return Some(id);
        }
        None
    }

    /// Whether `worker_id` has given an answer for the job (counted or not).
    fn answered(&self, worker_id: WorkerId, job_id: JobId) -> bool {
        let job = &self.jobs[job_id.index()];
        job.counted.is_some_and(|(w, _)| w == worker_id)
            || job.opinions.iter().any(|(w, _)| *w == worker_id)
    }

    /// Up to `room` jobs leased to other workers for much longer than their expected time, each
    /// given to one extra worker at most. Looked for at most once a second.
    fn overdue_copies(
        &mut self,
        worker_id: WorkerId,
        room: usize,
        now: Instant,
        out: &mut Vec<JobId>,
    ) {
        let Some(rate) = self.seconds_per_estimate() else { return };
        if self.next_overdue_scan.is_some_and(|next| now < next) {
            return;
        }
        self.next_overdue_scan = Some(now + Duration::from_secs(1));
        let grace = self.lease_duration.as_secs_f64();
        for id in (0..self.jobs.len() as u64).map(JobId::new) {
            if out.len() >= room {
                break;
            }
            let job = &self.jobs[id.index()];
            let Standing::Leased { worker_id: holder, since, .. } = job.standing else { continue };
            if holder == worker_id || job.copies >= MAX_COPIES || self.answered(worker_id, id) {
                continue;
            }
            let expected = rate * job.estimate as f64;
            let overdue = OVERDUE_FACTOR * expected + grace;
            let held = now.duration_since(since).as_secs_f64();
            // The last copy's holder gets the same time as the first holder before another.
            let copy_overdue =
                job.last_copy.is_none_or(|t| now.duration_since(t).as_secs_f64() > overdue);
            if held > overdue && copy_overdue {
                tracing::info!(
                    job = %id,
                    %holder,
                    to = %worker_id,
                    held_seconds = held,
                    expected_seconds = expected,
                    "job overdue: also given to another worker; the first agreeing answer counts"
                );
                self.jobs[id.index()].copies += 1;
                self.jobs[id.index()].last_copy = Some(now);
                out.push(id);
            }
        }
    }

    /// Learns from one counted result how long a unit of cost estimate takes on `worker_id`.
    /// Only results that count teach it (never duplicates); times are clamped, and each sample
    /// moves the worker's figure a little and by at most a factor of ten.
    fn learn_duration(&mut self, job_id: JobId, worker_id: WorkerId, seconds: f64) {
        let estimate = self.jobs[job_id.index()].estimate;
        if !(seconds.is_finite() && seconds > 0.0) || estimate == 0 {
            return;
        }
        let sample = seconds.min(MAX_REPORTED_SECONDS) / estimate as f64;
        let rate = self.worker_rates.entry(worker_id).or_insert(sample);
        *rate = *rate * 0.98 + sample.clamp(*rate / 10.0, *rate * 10.0) * 0.02;
    }

    /// Seconds per unit of cost estimate: the lower median of the trusted workers' own figures.
    /// One worker cannot move it past an honest one's: a slow claim (to hide a hoarder's overdue
    /// jobs) loses to the faster figure, and a fast one only makes copies sooner, a few per job.
    pub fn seconds_per_estimate(&self) -> Option<f64> {
        let mut rates: Vec<f64> = self
            .worker_rates
            .iter()
            .filter(|(w, _)| !self.untrusted.contains(w))
            .map(|(_, r)| *r)
            .collect();
        rates.sort_by(f64::total_cmp);
        rates.get(rates.len().checked_sub(1)? / 2).copied()
    }

    /// Extends `lease_ids` of `worker_id`. A lease that expired but whose jobs are still pending is
    /// re-attached (the worker is still on them); one with nothing left is reported lost.
    pub fn heartbeat(
        &mut self,
        worker_id: WorkerId,
        lease_ids: &[LeaseId],
        now: Instant,
        changes: &mut Vec<Change>,
    ) -> Vec<LeaseId> {
        let deadline = now + self.lease_duration;
        let mut lost = Vec::new();
        for &lease_id in lease_ids {
            let Some(lease) = self.leases.get(&lease_id) else {
                lost.push(lease_id);
                continue;
            };
            if lease.worker_id != worker_id || self.untrusted.contains(&worker_id) {
                lost.push(lease_id);
                continue;
            }
            let mut holds_any = false;
            let extra = lease.extra.clone();
            for id in lease.job_ids.clone() {
                match self.jobs[id.index()].standing {
                    Standing::Leased { lease_id: l, since, .. } if l == lease_id => {
                        self.jobs[id.index()].standing =
                            Standing::Leased { lease_id, worker_id, deadline, since };
                        holds_any = true;
                    }
                    Standing::Pending
                        if !self.jobs[id.index()].opinions.iter().any(|(w, _)| *w == worker_id) =>
                    {
                        self.set_state(
                            id,
                            Standing::Leased { lease_id, worker_id, deadline, since: now },
                            changes,
                        );
                        holds_any = true;
                    }
                    // A spot check or an overdue copy: held until answered (or given up).
                    Standing::Done | Standing::Leased { .. }
                        if extra.contains(&id) && !self.answered(worker_id, id) =>
                    {
                        holds_any = true;
                    }
                    _ => {}
                }
            }
            if let Some(lease) = self.leases.get_mut(&lease_id) {
                lease.active = holds_any;
            }
            if !holds_any {
                lost.push(lease_id);
            }
        }
        lost
    }

    /// Returns the jobs of leases past their deadline to the pending queue.
    pub fn expire(&mut self, now: Instant, changes: &mut Vec<Change>) -> u64 {
        let mut expired_leases = 0;
        let active: Vec<LeaseId> =
            self.leases.iter().filter(|(_, l)| l.active).map(|(id, _)| *id).collect();
        for lease_id in active {
            let job_ids = self.leases[&lease_id].job_ids.clone();
            let mut expired_any = false;
            let mut still_held = false;
            for id in job_ids {
                if let Standing::Leased { lease_id: l, deadline, .. } =
                    self.jobs[id.index()].standing
                {
                    if l == lease_id {
                        if deadline <= now {
                            self.set_state(id, Standing::Pending, changes);
                            expired_any = true;
                        } else {
                            still_held = true;
                        }
                    }
                }
            }
            if expired_any {
                expired_leases += 1;
            }
            if !still_held {
                if let Some(lease) = self.leases.get_mut(&lease_id) {
                    lease.active = false;
                }
            }
        }
        self.lease_expiries += expired_leases;
        expired_leases
    }

    /// Gives back jobs of a lease (all of them when `job_ids` is empty). Lease id 0 means every
    /// active lease of the worker, including one whose grant it never received.
    pub fn release(
        &mut self,
        worker_id: WorkerId,
        lease_id: LeaseId,
        job_ids: &[JobId],
        changes: &mut Vec<Change>,
    ) -> u32 {
        if lease_id == LeaseId::new(0) {
            let mine: Vec<LeaseId> = self
                .leases
                .iter()
                .filter(|(_, l)| l.active && l.worker_id == worker_id)
                .map(|(id, _)| *id)
                .collect();
            return mine.into_iter().map(|id| self.release(worker_id, id, &[], changes)).sum();
        }
        let Some(lease) = self.leases.get(&lease_id) else { return 0 };
        if lease.worker_id != worker_id {
            return 0;
        }
        let ids: Vec<JobId> =
            if job_ids.is_empty() { lease.job_ids.clone() } else { job_ids.to_vec() };
        let mut released = 0;
        for id in ids {
            if let Some(Standing::Leased { lease_id: l, .. }) =
                self.jobs.get(id.index()).map(|j| j.standing)
            {
                if l == lease_id {
                    self.set_state(id, Standing::Pending, changes);
                    released += 1;
                }
            }
        }
        released
    }

    /// Takes one result. Unknown jobs and leases that never covered the job are refused without
    /// any change. `others` are the other active, trusted workers: a worker on probation is
    /// believed alone only when none of another group is around to compare with.
    ///
    /// Agreement counts only between groups (credentials): two identities under one credential
    /// never confirm each other while a worker of another group is active.
    pub fn result(
        &mut self,
        worker_id: WorkerId,
        lease_id: LeaseId,
        job_id: JobId,
        finding: Finding,
        others: &[WorkerId],
        changes: &mut Vec<Change>,
    ) -> ResultOutcome {
        if self.is_untrusted(worker_id) {
            return ResultOutcome::UntrustedWorker;
        }
        if job_id.get() >= self.jobs.len() as u64 {
            return ResultOutcome::UnknownJob;
        }
        match self.leases.get(&lease_id) {
            Some(lease) if lease.worker_id == worker_id && lease.job_ids.contains(&job_id) => {}
            _ => return ResultOutcome::UnknownLease,
        }
        let (counts, seconds) = match finding {
            Finding::Solved { counts, seconds } => (counts, seconds),
            Finding::SolverError(_) => {
                return self.record_error(worker_id, lease_id, job_id, changes)
            }
        };
        if let Some(why) = implausible(&counts, self.jobs[job_id.index()].weight) {
            self.untrust_for(worker_id, job_id, format!("implausible counts: {why}"), changes);
            return ResultOutcome::Implausible;
        }
        self.error_record.entry(worker_id).or_default().1 += 1;
        if let Some(known) = self.known_answer(job_id) {
            if !known.same_answer(&counts) {
                return self.failed_check(
                    worker_id,
                    lease_id,
                    job_id,
                    (counts, seconds),
                    known,
                    changes,
                );
            }
        }
        let row = |counted: bool, kind: ResultKind| Change::Result {
            job_id,
            worker_id,
            lease_id,
            counts,
            seconds,
            counted,
            kind,
        };
        let group = self.group(worker_id);
        let comparable = others.iter().any(|&o| o != worker_id && self.group(o) != group);
        let job = &self.jobs[job_id.index()];
        if let Some((counted_by, counted)) = job.counted {
            if counted.same_answer(&counts) {
                let new_witness = self.group(counted_by) != group
                    && counted_by != COORDINATOR
                    && !job.opinions.iter().any(|(w, c)| *w == worker_id && c.same_answer(&counts));
                if new_witness {
                    changes.push(row(false, ResultKind::Confirm));
                    self.jobs[job_id.index()].opinions.push((worker_id, counts));
                    for w in [counted_by, worker_id] {
                        if !self.untrusted.contains(&w) {
                            *self.agreements.entry(w).or_default() += 1;
                        }
                    }
                    self.learn_duration(job_id, worker_id, seconds);
                    self.pool(job_id);
                    return ResultOutcome::Confirmed;
                }
                return ResultOutcome::Duplicate;
            }
            // A done job contradicted: stop counting it and have it solved again by others, and
            // by the coordinator itself where it can.
            changes.push(Change::Conflict {
                job_id,
                worker_a: counted_by,
                worker_b: worker_id,
                detail: format!("counted {counted:?}, got {counts:?}"),
            });
            changes.push(Change::Uncount { job_id });
            changes.push(row(false, ResultKind::Conflict));
            let job = &mut self.jobs[job_id.index()];
            job.counted = None;
            job.opinions.push((counted_by, counted));
            job.opinions.push((worker_id, counts));
            return self.mark_conflict(job_id, changes);
        }
        // The scheduler gave this job back to the same worker after its first opinion (only done
        // when no other worker could give a fresh one). A replay of the first opinion carries the
        // old lease and stays a duplicate.
        let solved_again = matches!(job.standing, Standing::Leased { lease_id: l, worker_id: w, .. } if l == lease_id && w == worker_id);
        // The coordinator's own answer agrees (a differing one was refused above): as good as a
        // second worker's.
        if self.reference.contains_key(&job_id) {
            if matches!(job.standing, Standing::Done) {
                return ResultOutcome::Duplicate;
            }
            changes.push(row(true, ResultKind::Verified));
            self.jobs[job_id.index()].counted = Some((worker_id, counts));
            self.set_state(job_id, Standing::Done, changes);
            *self.agreements.entry(worker_id).or_default() += 1;
            self.learn_duration(job_id, worker_id, seconds);
            return ResultOutcome::Confirmed;
        }
        if !solved_again
            && job.opinions.iter().any(|(w, c)| *w == worker_id && c.same_answer(&counts))
        {
            return ResultOutcome::Duplicate;
        }
        let needed =
            if self.on_probation(worker_id) && comparable { 2 } else { job.agreeing_needed() };
        let trusted = |w: &WorkerId| !self.untrusted.contains(w);
        let disagrees: Option<WorkerId> = job
            .opinions
            .iter()
            .find(|(w, c)| trusted(w) && !c.same_answer(&counts))
            .map(|(w, _)| *w);
        // A worker solving again may confirm its own answer only where no trusted worker says
        // otherwise (a verification with one worker around). In a dispute it takes another
        // worker's agreement: repeating one side of it is one more conflict. Within a group,
        // agreement counts only while no worker of another group is around.
        let self_confirms = solved_again && disagrees.is_none();
        let agrees = job.opinions.iter().any(|(w, c)| {
            let independent =
                self.group(*w) != group || (!comparable && (*w != worker_id || self_confirms));
            trusted(w) && independent && c.same_answer(&counts)
        });
        // An answer that contradicts another trusted one is never counted alone.
        if (needed == 1 && disagrees.is_none()) || agrees {
            changes.push(row(true, if agrees { ResultKind::Verified } else { ResultKind::First }));
            self.jobs[job_id.index()].counted = Some((worker_id, counts));
            self.set_state(job_id, Standing::Done, changes);
            self.learn_duration(job_id, worker_id, seconds);
            if agrees {
                self.credit_agreement(job_id, worker_id, counts);
                self.untrust_dissenters(job_id, worker_id, counts, changes);
                self.pool(job_id);
            }
            if self.recheck_fraction > 0.0 && self.rng.unit() < self.recheck_fraction {
                self.rechecks.push_back(job_id);
            }
            return if agrees { ResultOutcome::Confirmed } else { ResultOutcome::Accepted };
        }
        changes.push(row(
            false,
            if disagrees.is_some() { ResultKind::Conflict } else { ResultKind::Opinion },
        ));
        self.jobs[job_id.index()].opinions.push((worker_id, counts));
        if let Some(other) = disagrees {
            changes.push(Change::Conflict {
                job_id,
                worker_a: other,
                worker_b: worker_id,
                detail: format!("got {counts:?}"),
            });
            return self.mark_conflict(job_id, changes);
        }
        // First opinion of a verified job: a different worker must now solve it too.
        if self.jobs[job_id.index()].standing != Standing::Pending {
            self.set_state(job_id, Standing::Pending, changes);
        }
        ResultOutcome::Accepted
    }

    /// `worker_id` and every other trusted worker that gave `agreed` for the job agreed once more.
    fn credit_agreement(&mut self, job_id: JobId, worker_id: WorkerId, agreed: JobCounts) {
        let mut agreeing: Vec<WorkerId> = self.jobs[job_id.index()]
            .opinions
            .iter()
            .filter(|(w, c)| c.same_answer(&agreed) && !self.untrusted.contains(w))
            .map(|(w, _)| *w)
            .chain([worker_id])
            .collect();
        agreeing.sort_unstable();
        agreeing.dedup();
        let mut groups: Vec<u64> = agreeing.iter().map(|&w| self.group(w)).collect();
        groups.sort_unstable();
        groups.dedup();
        if groups.len() < 2 {
            return; // a worker (or a credential) confirming itself proves nothing
        }
        for w in agreeing {
            *self.agreements.entry(w).or_default() += 1;
        }
    }

    /// A verification settled on `agreed`: every worker that reported something else is no longer
    /// trusted, so its counted results elsewhere are in doubt too. They are un-counted and solved
    /// again by others; its active leases are taken back.
    ///
    /// A worker that also gave the agreed answer (`settled_by` just did) is not a dissenter: it
    /// was right this time, and only repeated answers tell a faulty solver from a passing fault.
    fn untrust_dissenters(
        &mut self,
        job_id: JobId,
        settled_by: WorkerId,
        agreed: JobCounts,
        changes: &mut Vec<Change>,
    ) {
        let opinions = &self.jobs[job_id.index()].opinions;
        let gave_agreed = |w: WorkerId| {
            w == settled_by || opinions.iter().any(|(o, c)| *o == w && c.same_answer(&agreed))
        };
        let mut dissenters: Vec<(WorkerId, JobCounts)> = opinions
            .iter()
            .filter(|(w, c)| {
                !c.same_answer(&agreed) && !gave_agreed(*w) && !self.untrusted.contains(w)
            })
            .copied()
            .collect();
        dissenters.sort_by_key(|(w, _)| *w);
        dissenters.dedup_by_key(|(w, _)| *w);
        for (worker_id, wrong) in dissenters {
            self.untrust(worker_id, job_id, wrong, agreed, changes);
        }
    }

    /// `worker_id` reported `wrong` where the answer is `agreed`: it is refused from now on, its
    /// counted results are un-counted and solved again by others, its leases taken back.
    fn untrust(
        &mut self,
        worker_id: WorkerId,
        job_id: JobId,
        wrong: JobCounts,
        agreed: JobCounts,
        changes: &mut Vec<Change>,
    ) {
        self.untrust_for(
            worker_id,
            job_id,
            format!("reported {wrong:?}, agreed {agreed:?}"),
            changes,
        )
    }

    /// Untrusts `worker_id` for the reason `detail` (see [`Lifecycle::untrust`]).
    fn untrust_for(
        &mut self,
        worker_id: WorkerId,
        job_id: JobId,
        detail: String,
        changes: &mut Vec<Change>,
    ) {
        if !self.untrusted.insert(worker_id) {
            return;
        }
        let mut requeued = 0;
        for id in (0..self.jobs.len() as u64).map(JobId::new) {
            let job = &mut self.jobs[id.index()];
            match (job.counted, job.standing) {
                (Some((w, counts)), _) if w == worker_id => {
                    changes.push(Change::Uncount { job_id: id });
                    job.counted = None;
                    // Kept as an (ignored) opinion, the same as a reload sees the un-counted row.
                    job.opinions.push((w, counts));
                    if job.standing == Standing::Done {
                        self.set_state(id, Standing::Pending, changes);
                    }
                    requeued += 1;
                }
                (_, Standing::Leased { worker_id: w, .. }) if w == worker_id => {
                    self.set_state(id, Standing::Pending, changes)
                }
                _ => {}
            }
        }
        for lease in self.leases.values_mut().filter(|l| l.worker_id == worker_id) {
            lease.active = false;
        }
        changes.push(Change::Untrust { worker_id, job_id, detail, requeued });
    }

    /// The job's answer when it is known without believing any one worker: the coordinator's own
    /// (a reference), or a counted answer another trusted worker gave too.
    pub fn known_answer(&self, job_id: JobId) -> Option<JobCounts> {
        if let Some(answer) = self.reference.get(&job_id) {
            return Some(*answer);
        }
        let job = self.jobs.get(job_id.index())?;
        let (by, counted) = job.counted?;
        if by == COORDINATOR {
            return Some(counted);
        }
        let witnessed = job.opinions.iter().any(|(w, c)| {
            self.group(*w) != self.group(by)
                && !self.untrusted.contains(w)
                && c.same_answer(&counted)
        });
        witnessed.then_some(counted)
    }

    /// Adds a job with a known answer to the spot-check pool.
    fn pool(&mut self, job_id: JobId) {
        let job = &mut self.jobs[job_id.index()];
        if !job.pooled {
            job.pooled = true;
            self.known.push(job_id);
        }
    }

    /// A worker contradicted a known answer: it is untrusted at once (everything it counted is
    /// solved again), and the job keeps its answer.
    fn failed_check(
        &mut self,
        worker_id: WorkerId,
        lease_id: LeaseId,
        job_id: JobId,
        (counts, seconds): (JobCounts, f64),
        known: JobCounts,
        changes: &mut Vec<Change>,
    ) -> ResultOutcome {
        let against = match self.jobs[job_id.index()].counted {
            Some((w, _)) if !self.reference.contains_key(&job_id) => w,
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
        self.jobs[job_id.index()].opinions.push((worker_id, counts));
        self.refuted(job_id, against, worker_id, counts, known, changes);
        ResultOutcome::Conflict
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
        self.untrust(worker_id, job_id, wrong, known, changes);
    }

    /// Records the coordinator's own answer for a job, to check workers against. A worker that
    /// already gave another answer for it is untrusted at once (its counted jobs are solved again).
    pub fn add_reference(&mut self, job_id: JobId, answer: JobCounts, changes: &mut Vec<Change>) {
        if job_id.get() >= self.jobs.len() as u64 {
            return;
        }
        self.reference.insert(job_id, answer);
        self.pool(job_id);
        let job = &self.jobs[job_id.index()];
        let mut answers: Vec<(WorkerId, JobCounts)> =
            job.counted.iter().chain(&job.opinions).copied().collect();
        answers.sort_by_key(|(w, _)| *w);
        answers.dedup_by_key(|(w, _)| *w);
        for (worker_id, counts) in answers {
            if self.untrusted.contains(&worker_id) {
                continue;
            }
            if counts.same_answer(&answer) {
                *self.agreements.entry(worker_id).or_default() += 1;
                continue;
            }
            self.refuted(job_id, COORDINATOR, worker_id, counts, answer, changes);
        }
        // A job the referee was asked about (in dispute, or in doubt) is settled by the
        // coordinator's own answer: counted under its name, whoever was right. (Other reference
        // jobs stay pending: they are spot checks.)
        let job = &self.jobs[job_id.index()];
        let settle = self.refereed.contains(&job_id)
            && job.counted.is_none()
            && matches!(job.standing, Standing::Pending | Standing::Held);
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
            self.jobs[job_id.index()].counted = Some((COORDINATOR, answer));
            self.set_state(job_id, Standing::Done, changes);
        }
    }

    fn mark_conflict(&mut self, job_id: JobId, changes: &mut Vec<Change>) -> ResultOutcome {
        self.conflicts_total += 1;
        self.refer(job_id);
        let job = &mut self.jobs[job_id.index()];
        job.conflicts += 1;
        let next = if job.conflicts >= MAX_CONFLICTS { Standing::Held } else { Standing::Pending };
        self.set_state(job_id, next, changes);
        ResultOutcome::Conflict
    }

    /// A solver error from `worker_id`. From a worker on probation it only gives the job back;
    /// otherwise it counts towards failing the job, which takes [`MAX_ERRORS`] errors from at
    /// least [`MIN_ERROR_GROUPS`] groups. A worker whose errors pass [`ERROR_UNTRUST_MIN`] and a
    /// quarter of its answers is untrusted: one participant cannot fail a run's jobs.
    fn record_error(
        &mut self,
        worker_id: WorkerId,
        lease_id: LeaseId,
        job_id: JobId,
        changes: &mut Vec<Change>,
    ) -> ResultOutcome {
        let job = &self.jobs[job_id.index()];
        if job.standing == Standing::Done {
            return ResultOutcome::Duplicate;
        }
        let record = self.error_record.entry(worker_id).or_default();
        record.0 += 1;
        let (errors, answers) = *record;
        if errors >= ERROR_UNTRUST_MIN && errors * 4 > errors + answers {
            self.untrust_for(
                worker_id,
                job_id,
                format!("{errors} solver errors against {answers} answers"),
                changes,
            );
            return ResultOutcome::ErrorRecorded;
        }
        let held_here = matches!(job.standing, Standing::Leased { lease_id: l, worker_id: w, .. } if l == lease_id && w == worker_id);
        if self.on_probation(worker_id) {
            if held_here {
                self.set_state(job_id, Standing::Pending, changes);
            }
            return ResultOutcome::ErrorRecorded;
        }
        let group = self.group(worker_id);
        let job = &mut self.jobs[job_id.index()];
        job.errors += 1;
        if !job.error_groups.contains(&group) {
            job.error_groups.push(group);
        }
        let failed = job.errors >= MAX_ERRORS && job.error_groups.len() >= MIN_ERROR_GROUPS;
        if failed {
            self.set_state(job_id, Standing::Failed, changes);
        } else if held_here {
            self.set_state(job_id, Standing::Pending, changes);
        }
        ResultOutcome::ErrorRecorded
    }

    /// The done jobs of weight 2 and 4 whose answer rests on one group's word: those that can
    /// break the symmetry identities of the final tally.
    pub fn doubt_unconfirmed_symmetric(&self) -> Vec<JobId> {
        (0..self.jobs.len() as u64)
            .map(JobId::new)
            .filter(|&id| {
                let job = &self.jobs[id.index()];
                job.weight < 8 && job.standing == Standing::Done && self.known_answer(id).is_none()
            })
            .collect()
    }

    /// Every done job of weight 2 and 4 not counted from the coordinator's own answer.
    pub fn doubt_all_symmetric(&self) -> Vec<JobId> {
        (0..self.jobs.len() as u64)
            .map(JobId::new)
            .filter(|&id| {
                let job = &self.jobs[id.index()];
                job.weight < 8
                    && job.standing == Standing::Done
                    && job.counted.is_some_and(|(w, _)| w != COORDINATOR)
            })
            .collect()
    }

    /// The jobs of weight 2 and 4.
    pub fn symmetric_jobs(&self) -> Vec<JobId> {
        (0..self.jobs.len() as u64)
            .map(JobId::new)
            .filter(|&id| self.jobs[id.index()].weight < 8)
            .collect()
    }

    /// Puts a done job in doubt: its counted answer becomes one opinion among others, it must be
    /// confirmed by two groups (or the coordinator), and the coordinator is asked to solve it.
    pub fn doubt(&mut self, job_id: JobId, changes: &mut Vec<Change>) {
        let job = &mut self.jobs[job_id.index()];
        if job.standing != Standing::Done {
            return;
        }
        if let Some(counted) = job.counted.take() {
            changes.push(Change::Uncount { job_id });
            job.opinions.push(counted);
        }
        job.verify = true;
        self.reference.remove(&job_id);
        self.refereed.remove(&job_id);
        self.set_state(job_id, Standing::Pending, changes);
        self.refer(job_id);
    }

    /// Batch size for a worker: its free slots times jobs per slot, so that one slot's share lasts
    /// about a quarter of a lease at the observed job duration.
    pub fn batch_size(&self, free_slots: u32, mean_job_seconds: Option<f64>) -> usize {
        let per_slot = match mean_job_seconds {
            Some(s) if s > 0.0 => {
                ((self.lease_duration.as_secs_f64() / 4.0) / s).clamp(1.0, 64.0) as usize
            }
            _ => 2,
        };
        (free_slots.max(1) as usize).saturating_mul(per_slot).min(4096)
    }
}

#[cfg(test)]
mod tests;
