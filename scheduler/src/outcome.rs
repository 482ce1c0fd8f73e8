//! What the scheduler's decisions give back: the durable [`Change`]s the engine commits, and
//! what became of a result ([`Verdict`]); and what a worker reports ([`Delivery`], with its
//! [`Finding`]).

use crate::ids::{JobId, LeaseId, WorkerId};
use crate::state::{JobState, ResultKind, Review};
use nqueens_core::JobCounts;

/// A durable consequence of a decision, committed by the engine.
#[derive(Debug, Clone, PartialEq)]
pub enum Change {
    /// Job state (and current lease) as stored in `jobs`.
    JobState {
        /// The job whose row changes.
        job_id: JobId,
        /// Its new state.
        state: JobState,
        /// The lease holding it, when leased.
        lease_id: Option<LeaseId>,
        /// The worker holding it, when leased.
        worker_id: Option<WorkerId>,
        /// Solver errors reported for it so far.
        errors: u32,
        /// Conflicting results it has had so far.
        conflicts: u32,
    },
    /// A received result row. `counted` rows make up the totals.
    Result {
        /// The job the result is for.
        job_id: JobId,
        /// The worker that reported it.
        worker_id: WorkerId,
        /// The credential it was given under, fixed when it arrived (see [`crate::Answer`]).
        credential: u64,
        /// The lease it was reported under.
        lease_id: LeaseId,
        /// The counts the worker found.
        counts: JobCounts,
        /// Seconds the worker took to solve the job.
        seconds: f64,
        /// Whether this row counts towards the totals.
        counted: bool,
        /// How the result was taken (counted first, verified, opinion, confirm, conflict, local).
        kind: ResultKind,
    },
    /// A job is put under review: it needs another party's answer (see [`Review`]).
    Review {
        /// The job under review.
        job_id: JobId,
        /// Why.
        review: Review,
    },
    /// The counted row of a job stops counting (a conflict put it in doubt).
    Uncount {
        /// The job whose counted row stops counting.
        job_id: JobId,
    },
    /// A new lease granted to a worker.
    Lease {
        /// The new lease.
        lease_id: LeaseId,
        /// The worker it is granted to.
        worker_id: WorkerId,
        /// The jobs it covers, in the order given to the worker.
        job_ids: Vec<JobId>,
    },
    /// Two answers for one job disagreed.
    Conflict {
        /// The job answered differently.
        job_id: JobId,
        /// The worker of the earlier answer (or the coordinator, for its own).
        worker_a: WorkerId,
        /// The worker whose answer contradicted it.
        worker_b: WorkerId,
        /// What disagreed, for people.
        detail: String,
    },
    /// A worker lost a settled verification (or reported far too many solver errors): refused
    /// from now on; `requeued` of its counted jobs were un-counted (by the `Uncount`s beside this
    /// change) and returned to pending.
    Untrust {
        /// The worker untrusted.
        worker_id: WorkerId,
        /// The job on which it was caught.
        job_id: JobId,
        /// Why, for people.
        detail: String,
        /// How many of its counted jobs went back to pending (jobs).
        requeued: u64,
    },
}

impl Change {
    /// The two rows that a job finished on one answer leaves in a run: its counted first result,
    /// from `worker_id` under the shared credential (lease 1, no time), and its `Done` state. For
    /// tools and tests that write the rows of a finished run without running one; the scheduler
    /// writes its own through its decisions.
    pub fn finished_on_one_answer(
        job_id: JobId,
        worker_id: WorkerId,
        counts: JobCounts,
    ) -> [Change; 2] {
        [
            Change::Result {
                job_id,
                worker_id,
                credential: crate::SHARED_CREDENTIAL,
                lease_id: LeaseId::new(1),
                counts,
                seconds: 0.0,
                counted: true,
                kind: ResultKind::First,
            },
            Change::JobState {
                job_id,
                state: JobState::Done,
                lease_id: None,
                worker_id: None,
                errors: 0,
                conflicts: 0,
            },
        ]
    }
}

/// One answer to one job as a worker sends it: the job, the lease it answers under and what was
/// found. The one shape an answer has from the wire's conversion (the coordinator's `ResultCall`)
/// to the ruling ([`crate::Scheduler::result`]), beside the identity that authenticated it.
#[derive(Debug, Clone, PartialEq)]
pub struct Delivery {
    /// The job answered.
    pub job_id: JobId,
    /// The lease the worker answers under (it may no longer hold the job: a late answer).
    pub lease_id: LeaseId,
    /// What the worker found.
    pub finding: Finding,
}

/// What a worker found for one job.
#[derive(Debug, Clone, PartialEq)]
pub enum Finding {
    /// The job's counts, and the seconds solving it took.
    Solved {
        /// The job's solution counts.
        counts: JobCounts,
        /// Seconds the worker took to solve it.
        seconds: f64,
    },
    /// The worker's solver could not solve the job; its message.
    SolverError(String),
}

/// What happened to one incoming result.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Taken: counted, or kept as a first opinion when the job needs a second worker.
    Accepted,
    /// Nothing new: already taken, no independent witness, or the job is already done.
    Duplicate,
    /// Agreed with an independent answer: the job is counted as verified, or its count confirmed.
    Confirmed,
    /// Contradicted another answer: the job goes back to pending (or held), or the worker is
    /// untrusted where it contradicted a known answer.
    Conflict,
    /// A solver error, recorded: the job goes back to pending, or fails after too many.
    ErrorRecorded,
    /// No job has this id.
    UnknownJob,
    /// The worker holds no lease with this id covering the job.
    UnknownLease,
    /// The worker lost a verification; nothing it sends is taken any more.
    UntrustedWorker,
    /// Counts no solver can give for this job (symmetric counts its weight rules out, or nodes
    /// out of proportion): refused, and the worker is untrusted.
    Implausible,
}
