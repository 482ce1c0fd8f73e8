//! The scheduler rebuilt from the store's plain rows after a restart. The store knows nothing
//! of the scheduler's internals: it hands over [`StoredJob`]s and [`StoredLease`]s, and
//! [`Scheduler::restore`] rebuilds the job table, the lease book, the agreements and the
//! spot-check pool from them.

use crate::checks::Checks;
use crate::config::SchedulerConfig;
use crate::ids::{JobId, LeaseId, WorkerId};
use crate::jobs::{JobEntry, JobTable, Standing};
use crate::leases::{LeaseBook, LeaseRecord};
use crate::pace::Pace;
use crate::state::JobState;
use crate::trust::Trust;
use crate::Scheduler;
use nqueens_core::{JobCounts, SplitMix64};
use std::collections::HashMap;
use std::time::Instant;

/// One job as stored: what [`Scheduler::restore`] rebuilds the job table from.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredJob {
    /// The job's id: its index in the run's job list.
    pub id: JobId,
    /// The job's cost estimate (leases take the most expensive pending jobs first).
    pub estimate: u64,
    /// Orbit size of the job's constellation (2, 4 or 8).
    pub weight: u8,
    /// Must be solved by two different workers that agree.
    pub verify: bool,
    /// Its state as stored.
    pub state: JobState,
    /// The lease a leased job is under.
    pub lease: Option<LeaseId>,
    /// The counted result, if any: (worker, counts).
    pub counted: Option<(WorkerId, JobCounts)>,
    /// Results received but not counted.
    pub opinions: Vec<(WorkerId, JobCounts)>,
    /// Solver errors reported for it.
    pub errors: u32,
    /// Conflicting results it had.
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
}

/// One lease as stored: its worker and every job it named.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredLease {
    /// The lease's id.
    pub id: LeaseId,
    /// The worker it was issued to.
    pub worker: WorkerId,
    /// Every job it named (spot checks and copies included).
    pub jobs: Vec<JobId>,
}

impl Scheduler {
    /// The scheduler of a run as reloaded from the store: its jobs (in id order, ids 0, 1, 2...),
    /// the leases issued so far, the workers' groups (credentials) and the untrusted workers.
    /// Leased jobs keep their lease, with a fresh grace period of one lease duration from `now`;
    /// a leased job whose lease is not among `leases` is pending again.
    ///
    /// # Panics
    /// When the jobs' ids are not 0, 1, 2... in order (the store checks that when it loads them).
    pub fn restore(
        config: SchedulerConfig,
        jobs: Vec<StoredJob>,
        leases: Vec<StoredLease>,
        groups: HashMap<WorkerId, u64>,
        untrusted: impl IntoIterator<Item = WorkerId>,
        now: Instant,
    ) -> Self {
        let mut leases: HashMap<LeaseId, LeaseRecord> = leases
            .into_iter()
            .map(|l| {
                let record = LeaseRecord {
                    worker_id: l.worker,
                    job_ids: l.jobs,
                    active: false,
                    extra: vec![],
                };
                (l.id, record)
            })
            .collect();
        let deadline = now + config.lease_duration;
        let mut trust = Trust::new(config.probation_results, groups);
        trust.untrusted.extend(untrusted);
        let mut checks = Checks::default();
        let mut conflicts_total = 0;
        let mut entries = Vec::with_capacity(jobs.len());
        for (index, row) in jobs.into_iter().enumerate() {
            assert_eq!(row.id.index(), index, "stored jobs must come in id order");
            let standing = match row.state {
                JobState::Pending => Standing::Pending,
                JobState::Leased => match row.lease.and_then(|id| Some((id, leases.get_mut(&id)?)))
                {
                    Some((lease_id, lease)) => {
                        lease.active = true;
                        let worker_id = lease.worker_id;
                        Standing::Leased { lease_id, worker_id, deadline, since: now }
                    }
                    None => Standing::Pending,
                },
                JobState::Done => Standing::Done,
                JobState::Held => Standing::Held,
                JobState::Failed => Standing::Failed,
            };
            let mut job = JobEntry::new(row.estimate, row.weight, row.verify, standing);
            job.counted = row.counted;
            job.opinions = row.opinions;
            job.errors = row.errors;
            job.conflicts = row.conflicts;
            conflicts_total += job.conflicts as u64;
            // A counted answer another group (or the coordinator) gave too was verified: it
            // credits each group once, and the job is a spot check from now on.
            if let Some((counted_by, counted)) = job.counted {
                let mut agreeing: Vec<u64> = job
                    .opinions
                    .iter()
                    .filter(|(w, c)| {
                        trust.group(*w) != trust.group(counted_by) && c.same_answer(&counted)
                    })
                    .map(|(w, _)| trust.group(*w))
                    .collect();
                agreeing.sort_unstable();
                agreeing.dedup();
                if !agreeing.is_empty() {
                    for group in agreeing.into_iter().chain([trust.group(counted_by)]) {
                        *trust.verified.entry(group).or_default() += 1;
                    }
                    job.pooled = true;
                    checks.known.push(row.id);
                }
            }
            entries.push(job);
        }
        // A credential one of whose identities was caught earns its trust again from nothing.
        let caught: Vec<u64> = trust.untrusted.iter().map(|&w| trust.group(w)).collect();
        for group in caught {
            trust.verified.remove(&group);
        }
        let rng = SplitMix64::new(config.seed);
        let scheduler = Scheduler {
            jobs: JobTable::new(entries),
            leases: LeaseBook::new(leases),
            trust,
            checks,
            pace: Pace::default(),
            conflicts_total,
            rng,
            config,
        };
        scheduler.checked("restore");
        scheduler
    }
}
