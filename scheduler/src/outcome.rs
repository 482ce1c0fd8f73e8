//! What the scheduler's decisions give back: the durable [`Change`]s the engine commits, and
//! what became of a result ([`ResultOutcome`]); and what a worker reports ([`Finding`]).

use crate::ids::{JobId, LeaseId, WorkerId};
use crate::state::{JobState, ResultKind};
use nqueens_core::JobCounts;

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
