//! What the scheduler's integration tests share: a model of the state file's rows, kept only
//! from the [`Change`]s the scheduler hands out, from which a restart rebuilds it (so the changes
//! must be complete).

#![allow(dead_code)] // each test binary uses its part

use nqueens_core::JobCounts;
use nqueens_scheduler::{Answer, Change, JobId, ResultKind, StoredJob, StoredLease, WorkerId};
use std::collections::{BTreeMap, BTreeSet};

/// One stored result row.
#[derive(Debug, Clone)]
pub struct Row {
    pub worker: WorkerId,
    /// The credential the answer was given under.
    pub credential: u64,
    /// Whether it was a late answer (kind `late`).
    pub late: bool,
    pub counts: JobCounts,
    pub counted: bool,
}

impl Row {
    /// The answer the row records.
    pub fn answer(&self) -> Answer {
        Answer {
            worker_id: self.worker,
            credential: self.credential,
            counts: self.counts,
            late: self.late,
        }
    }
}

/// The stored rows, as the store would hold them after committing every change.
#[derive(Debug, Default)]
pub struct Stored {
    pub jobs: Vec<StoredJob>,
    pub results: BTreeMap<JobId, Vec<Row>>,
    pub leases: Vec<StoredLease>,
    pub untrusted: BTreeSet<WorkerId>,
}

impl Stored {
    /// A new run's rows: `jobs`, no results.
    pub fn new(jobs: Vec<StoredJob>) -> Self {
        Stored { jobs, ..Stored::default() }
    }

    /// Commits `changes`, as the store does.
    pub fn apply(&mut self, changes: &[Change]) {
        for change in changes {
            match change {
                Change::JobState { job_id, state, lease_id, errors, conflicts, .. } => {
                    let job = &mut self.jobs[job_id.get() as usize];
                    job.state = *state;
                    job.lease = *lease_id;
                    job.errors = *errors;
                    job.conflicts = *conflicts;
                }
                Change::Result { job_id, worker_id, credential, counts, counted, kind, .. } => {
                    let row = Row {
                        worker: *worker_id,
                        credential: *credential,
                        late: *kind == ResultKind::Late,
                        counts: *counts,
                        counted: *counted,
                    };
                    self.results.entry(*job_id).or_default().push(row);
                }
                Change::Uncount { job_id } => {
                    for row in self.results.entry(*job_id).or_default() {
                        row.counted = false;
                    }
                }
                Change::Lease { lease_id, worker_id, job_ids } => self.leases.push(StoredLease {
                    id: *lease_id,
                    worker: *worker_id,
                    jobs: job_ids.clone(),
                }),
                Change::Review { job_id, review } => {
                    self.jobs[job_id.get() as usize].review = *review;
                }
                Change::Conflict { .. } => {}
                Change::Untrust { worker_id, .. } => {
                    self.untrusted.insert(*worker_id);
                }
            }
        }
    }

    /// The counted rows of a job.
    pub fn counted(&self, job: JobId) -> Vec<&Row> {
        self.results
            .get(&job)
            .map_or(Vec::new(), |rows| rows.iter().filter(|r| r.counted).collect())
    }

    /// The rows as the store loads them.
    pub fn load(&self) -> Vec<StoredJob> {
        let mut jobs = self.jobs.clone();
        for job in &mut jobs {
            job.counted = None;
            job.opinions = Vec::new();
            for row in self.results.get(&job.id).into_iter().flatten() {
                if row.counted {
                    job.counted = Some(row.answer());
                } else {
                    job.opinions.push(row.answer());
                }
            }
        }
        jobs
    }
}
