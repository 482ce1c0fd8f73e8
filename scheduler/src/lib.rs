//! The scheduler of a cluster run: the job state machine (pending -> leased -> done, held,
//! failed), leases, trust and probation, spot checks and pace. Pure bookkeeping: it never touches
//! the disk, the network or a clock of its own; the coordinator's engine drives it and commits the
//! [`Change`]s it returns.
//!
//! Every decision returns the [`Change`]s that make it durable; the engine commits those in one
//! transaction before any reply leaves the coordinator, so the in-memory view never runs ahead of
//! what a restart would reload ([`Scheduler::restore`]). Deadlines use the monotonic clock
//! ([`Instant`]); they are not persisted, and a restart gives every lease found in the store a
//! fresh grace period.
//!
//! One concern a module: the job table (`jobs`), the lease book (`leases`), trust and probation
//! (`trust`), checks on answers (`checks`), pace and lease sizes (`pace`); the decisions on
//! leases (`decide`) and on results (`result`); the restart from stored rows (`stored`); and the
//! invariants every decision keeps (`invariants`).

mod checks;
mod config;
mod decide;
mod ids;
mod invariants;
mod jobs;
mod leases;
mod outcome;
mod pace;
mod result;
pub mod state;
mod stored;
#[cfg(test)]
mod tests;
mod trust;

pub use checks::{implausible, MAX_JOB_NODES, MAX_SOLUTIONS_PER_NODE};
pub use config::{
    SchedulerConfig, ERROR_UNTRUST_MIN, LEASE_DURATION, MAX_CONFLICTS, MAX_COPIES, MAX_ERRORS,
    MAX_LEASE, MAX_REFEREE_QUEUE, MIN_ERROR_GROUPS, OVERDUE_FACTOR, PROBATION_HOLD,
    PROBATION_RESULTS, SPOT_CHECK_RATE,
};
pub use ids::{JobId, LeaseId, WorkerId, COORDINATOR};
pub use outcome::{Change, Finding, Verdict};
pub use pace::ACTIVE_LEASES;
pub use state::{JobState, JobsByState, ResultKind};
pub use stored::{StoredJob, StoredLease};
pub use trust::CREDENTIAL_GROUPS;

use checks::Checks;
use jobs::{JobTable, Standing};
use leases::LeaseBook;
use nqueens_core::SplitMix64;
use pace::Pace;
use std::time::Instant;
use trust::Trust;

/// The scheduler's complete view of a run. Built by [`Scheduler::restore`]; every decision
/// (`lease_checked`, `heartbeat`, `expire`, `release`, `result`, `add_reference`, `doubt`)
/// returns the changes to commit.
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
}

impl Scheduler {
    /// The policy this scheduler decides by.
    pub fn config(&self) -> &SchedulerConfig {
        &self.config
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
    /// Whether every job is done.
    pub fn is_complete(&self) -> bool {
        self.jobs.by_state().get(JobState::Done) == self.jobs.len()
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
        self.jobs.get(job_id).and_then(|job| job.counted)
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
