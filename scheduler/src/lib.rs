//! The scheduler of a cluster run: the job state machine (pending -> leased -> done, held,
//! failed), leases, trust and probation, spot checks and pace. Pure bookkeeping: it never touches
//! the disk, the network or a clock of its own; the coordinator's engine drives it and commits the
//! [`Change`]s it returns.
//!
//! Every decision leaves the [`Change`]s that make it durable in the scheduler's outbox; the
//! engine drains them ([`Scheduler::take_changes`]) and commits them in one transaction before any
//! reply leaves the coordinator, so the in-memory view never runs ahead of what a restart would
//! reload ([`Scheduler::restore`]). Deadlines use the monotonic clock
//! ([`Instant`]); they are not persisted, and a restart gives every lease found in the store a
//! fresh grace period.
//!
//! One concern a module: the job table (`jobs`), the lease book (`leases`), trust and probation
//! (`trust`), checks on answers (`checks`), pace and lease sizes (`pace`); the decisions on
//! leases (`decide`) and on results (`result`); where a job stands, one pure function of what is
//! stored for it (`ruling`), and doing what it says on every path that counts, un-counts or
//! holds a job (`settle`); the restart from stored rows (`stored`); and the invariants every
//! decision keeps (`invariants`).

mod answer;
mod checks;
mod config;
mod credential;
mod decide;
pub mod evidence;
mod ids;
mod invariants;
mod jobs;
mod leases;
mod outcome;
mod pace;
mod per_second;
mod result;
pub mod ruling;
mod settle;
pub mod state;
mod stored;
mod trust;

pub use answer::Answer;
pub use checks::{implausible, MAX_JOB_NODES, MAX_SOLUTIONS_PER_NODE};
pub use config::{
    SchedulerConfig, ERROR_UNTRUST_MIN, LEASE_DURATION, MAX_COPIES, MAX_ERRORS, MAX_LEASE,
    MAX_REFEREE_QUEUE, MIN_ERROR_PARTIES, OVERDUE_FACTOR, PROBATION_HOLD, PROBATION_RESULTS,
    SPOT_CHECK_RATE,
};
pub use credential::{
    COORDINATOR_CREDENTIAL, OPEN_CREDENTIAL, PER_HOST_CREDENTIALS, SHARED_CREDENTIAL,
    UNKNOWN_CREDENTIAL,
};
pub use ids::{JobId, LeaseId, WorkerId, COORDINATOR};
pub use outcome::{Change, Delivery, Finding, Verdict};
pub use pace::ACTIVE_LEASES;
pub use per_second::PerSecond;
pub use state::{JobState, JobsByState, ResultKind, Review};
pub use stored::{StoredJob, StoredLease};

use checks::Checks;
use jobs::{JobTable, Standing};
use leases::LeaseBook;
use nqueens_core::SplitMix64;
use pace::Pace;
use std::time::Instant;
use trust::Trust;

/// The scheduler's complete view of a run. Built by [`Scheduler::restore`]; every decision
/// (`lease_checked`, `heartbeat`, `expire`, `release`, `result`, `add_reference`, `doubt`)
/// leaves the changes to commit in the outbox, drained by [`Scheduler::take_changes`].
pub struct Scheduler {
    config: SchedulerConfig,
    jobs: JobTable,
    leases: LeaseBook,
    trust: Trust,
    checks: Checks,
    pace: Pace,
    /// Conflicting results seen (stored ones included).
    conflicts_total: u64,
    /// The random choices: which lease carries a spot check, which known job it is, which
    /// counted job is re-checked (seeded from the config).
    rng: SplitMix64,
    /// The changes decided since the engine last took them, in order (see
    /// [`Scheduler::take_changes`]).
    outbox: Vec<Change>,
    /// Jobs held now per party (party), kept with every move, so that a lease's room under its
    /// party's cap costs the same with ten workers or ten thousand.
    party_holds: std::collections::HashMap<u64, u64>,
    /// Parties a ruling found wrong, to untrust once the ruling is done (see
    /// [`Scheduler::settle`]), with the answer that showed it and the job.
    untrust_queue: Vec<(Answer, ruling::Wrong, JobId)>,
    /// Jobs not counted whose live answers disagree (see [`Scheduler::disputed_jobs`]): kept
    /// with every ruling, so that a dispute no rule can settle yet is shown, never silent.
    disputed: std::collections::HashSet<JobId>,
}

impl Scheduler {
    /// The changes every decision since the last call made, in the order they were made: what
    /// the engine commits (in one transaction) before it answers anyone.
    pub fn take_changes(&mut self) -> Vec<Change> {
        std::mem::take(&mut self.outbox)
    }

    /// Moves a job through the job table and records the move in the outbox.
    pub(crate) fn move_job(&mut self, id: JobId, standing: Standing) {
        if let Standing::Leased { worker_id, .. } = self.jobs.standing(id) {
            let party = self.party(worker_id);
            if let Some(held) = self.party_holds.get_mut(&party) {
                *held = held.saturating_sub(1);
                if *held == 0 {
                    self.party_holds.remove(&party);
                }
            }
        }
        if let Standing::Leased { worker_id, .. } = standing {
            *self.party_holds.entry(self.party(worker_id)).or_default() += 1;
        }
        let change = self.jobs.set_state(id, standing);
        self.outbox.push(change);
    }

    /// Jobs not counted whose answers disagree: they wait for the answer of a credential that
    /// has not answered them (or for the coordinator's ruling, where it rules disputes). With
    /// two credentials in the run and the referee off, nothing settles them: a stall that
    /// `status`, the page and the metrics show.
    pub fn disputed_jobs(&self) -> u64 {
        self.disputed.len() as u64
    }

    /// Jobs held now by the workers of `party`.
    pub(crate) fn party_holds_now(&self, party: u64) -> u64 {
        self.party_holds.get(&party).copied().unwrap_or(0)
    }

    /// The jobs held per party, counted from the job table (after a restore, and to check the
    /// running count).
    pub(crate) fn recount_party_holds(&self) -> std::collections::HashMap<u64, u64> {
        let mut holds = std::collections::HashMap::new();
        for id in self.jobs.ids() {
            if let Standing::Leased { worker_id, .. } = self.jobs.standing(id) {
                *holds.entry(self.party(worker_id)).or_default() += 1;
            }
        }
        holds
    }

    /// Forgets `worker_id`, an identity the engine dropped before it delivered anything: its
    /// credential entry goes, so that identities made and dropped do not pile up. Nothing is
    /// forgotten while it holds a job.
    pub fn forget_worker(&mut self, worker_id: WorkerId) {
        if self.jobs.leased_by(worker_id) == 0 {
            self.trust.credentials.remove(&worker_id);
            self.jobs.forget_holder(worker_id);
        }
    }

    /// How many jobs the run has.
    pub fn total_jobs(&self) -> u64 {
        self.jobs.len()
    }
    /// How many jobs are in `state`.
    pub fn count(&self, state: JobState) -> u64 {
        self.jobs.by_state().get(state)
    }
    /// How many jobs are in each state.
    pub fn by_state(&self) -> JobsByState {
        self.jobs.by_state()
    }
    /// Whether the run is complete: every job done, and no ruling of the coordinator's referee
    /// owed (a ruling can still untrust a worker and un-count its answers). Reviews need nothing
    /// here: a job under review is not done before its second answer, and a done job wants no
    /// ruling.
    pub fn is_complete(&self) -> bool {
        // A done job wants no ruling (see `Scheduler::wants_ruling`): what is left in the
        // referee's backlog once every job is done is skipped when it is taken.
        self.jobs.by_state().get(JobState::Done) == self.jobs.len()
            && self.checks.awaiting_ruling.is_empty()
    }
    /// How many jobs `worker_id` holds under its leases.
    pub fn leased_by(&self, worker_id: WorkerId) -> u64 {
        self.jobs.leased_by(worker_id)
    }
    /// Conflicting results seen in this run.
    pub fn conflicts_total(&self) -> u64 {
        self.conflicts_total
    }
    /// Leases that ran past their deadline since this process started.
    pub fn lease_expiries(&self) -> u64 {
        self.leases.expiries
    }
    /// Where job `job_id` stands, if the run has it.
    pub fn state(&self, job_id: JobId) -> Option<JobState> {
        self.jobs.get(job_id).map(|job| job.standing().state())
    }
    /// The answer counted for job `job_id`, and who gave it.
    pub fn counted(&self, job_id: JobId) -> Option<(WorkerId, nqueens_core::JobCounts)> {
        self.counted_answer(job_id).map(|a| (a.worker_id, a.counts))
    }
    /// The answer counted for job `job_id`, with the credential it was given under.
    pub fn counted_answer(&self, job_id: JobId) -> Option<Answer> {
        self.jobs.get(job_id).and_then(|job| job.counted)
    }
    /// Where job `job_id` stands by the ruling on what is stored for it (see [`ruling::rule`]):
    /// what the scheduler holds it to be, recomputed.
    pub fn ruling(&self, job_id: JobId) -> Option<ruling::Ruling> {
        self.jobs.get(job_id)?;
        Some(self.ruling_now(job_id))
    }
    /// Every answer job `job_id` holds now: the counted one first, then the opinions.
    pub fn answers(&self, job_id: JobId) -> Vec<Answer> {
        self.jobs
            .get(job_id)
            .map_or(Vec::new(), |job| job.counted.iter().chain(&job.opinions).copied().collect())
    }

    /// When the last of the current leases runs out unless renewed (active leases only, so that a
    /// status call need not walk every job).
    pub fn last_lease_deadline(&self) -> Option<Instant> {
        let mut last = None;
        for lease_id in self.leases.active(None) {
            let Some(lease) = self.leases.get(lease_id) else { continue };
            for &id in &lease.job_ids {
                if let Standing::Leased { lease_id: l, deadline, .. } = self.jobs.standing(id) {
                    if l == lease_id {
                        last = last.max(Some(deadline));
                    }
                }
            }
        }
        last
    }
}
