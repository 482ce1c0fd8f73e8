//! The lease book: every lease issued in this run, kept after it ends so that a late result can
//! still be matched to the lease that covered its job. Which jobs a lease holds is the job
//! table's business (a leased job names its lease); the book says who a lease belongs to, which
//! jobs it named and whether it is still live.

use crate::ids::{JobId, LeaseId, WorkerId};
use std::collections::HashMap;

/// A lease ever issued in this run (kept after expiry so late results can still be matched to it).
#[derive(Debug, Clone)]
pub(crate) struct LeaseRecord {
    pub(crate) worker_id: WorkerId,
    pub(crate) job_ids: Vec<JobId>,
    pub(crate) active: bool,
    /// Jobs of `job_ids` given beside the lease's own: spot checks and copies of overdue jobs.
    /// They stay in their own state (done, or leased to someone else); the lease only lets this
    /// worker answer them. Not stored: after a restart they are plain members of `job_ids`.
    pub(crate) extra: Vec<JobId>,
}

/// Every lease of the run, by id.
#[derive(Debug)]
pub(crate) struct LeaseBook {
    leases: HashMap<LeaseId, LeaseRecord>,
    next_id: LeaseId,
    /// Leases whose jobs ran past their deadline, since this process started.
    pub(crate) expiries: u64,
}

impl LeaseBook {
    /// The book over `leases` as reloaded (all inactive until a leased job names them).
    pub(crate) fn new(leases: HashMap<LeaseId, LeaseRecord>) -> Self {
        let next_id = leases.keys().max().map_or(LeaseId::new(1), |m| LeaseId::new(m.get() + 1));
        LeaseBook { leases, next_id, expiries: 0 }
    }
    /// The lease `id`, if it was issued.
    pub(crate) fn get(&self, id: LeaseId) -> Option<&LeaseRecord> {
        self.leases.get(&id)
    }
    /// The lease `id`, to mark it live or not.
    pub(crate) fn get_mut(&mut self, id: LeaseId) -> Option<&mut LeaseRecord> {
        self.leases.get_mut(&id)
    }
    /// Whether `lease_id` was issued to `worker_id` and named `job_id`.
    pub(crate) fn covers(&self, lease_id: LeaseId, worker_id: WorkerId, job_id: JobId) -> bool {
        self.leases
            .get(&lease_id)
            .is_some_and(|l| l.worker_id == worker_id && l.job_ids.contains(&job_id))
    }
    /// Whether the lease `lease_id` of `worker_id` was issued with `job_id` beside its own jobs
    /// (a spot check or a copy of an overdue job, which the coordinator chose to give it: an
    /// answer to it is wanted however the job's own lease stands). Not stored: after a restart
    /// such jobs are plain members of the lease.
    pub(crate) fn carries_extra(
        &self,
        lease_id: LeaseId,
        worker_id: WorkerId,
        job_id: JobId,
    ) -> bool {
        self.leases
            .get(&lease_id)
            .is_some_and(|l| l.worker_id == worker_id && l.extra.contains(&job_id))
    }
    /// Records a new lease and gives its id.
    pub(crate) fn issue(
        &mut self,
        worker_id: WorkerId,
        job_ids: Vec<JobId>,
        extra: Vec<JobId>,
    ) -> LeaseId {
        let id = self.next_id;
        self.next_id = LeaseId::new(id.get() + 1);
        self.leases.insert(id, LeaseRecord { worker_id, job_ids, active: true, extra });
        id
    }
    /// The id the next lease will get.
    pub(crate) fn next_id(&self) -> LeaseId {
        self.next_id
    }
    /// The live leases (of `worker_id` only, when given).
    pub(crate) fn active(&self, worker_id: Option<WorkerId>) -> Vec<LeaseId> {
        let mut ids: Vec<LeaseId> = self
            .leases
            .iter()
            .filter(|(_, l)| l.active && worker_id.is_none_or(|w| l.worker_id == w))
            .map(|(id, _)| *id)
            .collect();
        ids.sort_unstable();
        ids
    }
    /// Ends every lease of `worker_id` (its jobs were taken back).
    pub(crate) fn end_all_of(&mut self, worker_id: WorkerId) {
        for lease in self.leases.values_mut().filter(|l| l.worker_id == worker_id) {
            lease.active = false;
        }
    }
}
