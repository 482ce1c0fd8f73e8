//! The engine's commands and their answers: what the gRPC service sends the engine thread and
//! what comes back, once the changes a command made are committed.

use crate::secrets::Credential;
use nqueens_scheduler::{Finding, JobId, LeaseId, Verdict, WorkerId};
use std::sync::mpsc;
use tokio::sync::oneshot;

/// A request to the engine, with the channel its answer goes back on.
pub enum Command {
    Register {
        worker: Registration,
        reply: oneshot::Sender<RegisterReply>,
    },
    Lease {
        caller: Caller,
        free_slots: u32,
        reply: oneshot::Sender<LeaseReply>,
    },
    Heartbeat {
        caller: Caller,
        lease_ids: Vec<LeaseId>,
        reply: oneshot::Sender<Result<HeartbeatReply, Refusal>>,
    },
    Result {
        result: JobReport,
        reply: oneshot::Sender<ReportReply>,
    },
    Release {
        caller: Caller,
        lease_id: LeaseId,
        job_ids: Vec<JobId>,
        reply: oneshot::Sender<Result<u32, Refusal>>,
    },
    /// The coordinator's own answer for a job, to check workers against (see `spot_checks.rs`).
    Reference {
        job_id: JobId,
        counts: nqueens_core::JobCounts,
    },
    /// The coordinator's own attempt at a job failed (see `referee.rs`).
    RefereeFailed {
        job_id: JobId,
    },
    /// Work on the writer's store between decisions, in a transaction of its own: `token
    /// add|revoke` on a live run (`admin.rs`), so that nothing but the engine writes the file.
    WithStore(Box<dyn FnOnce(&nqueens_store::Store) + Send>),
    Shutdown,
}

/// Who makes a call: the worker id it names, the secret that must come with it, and the
/// credential (token) the call was made under.
#[derive(Debug, Clone)]
pub struct Caller {
    pub worker_id: WorkerId,
    pub secret: String,
    pub credential: Credential,
}

/// Why a call naming a worker was refused before anything was decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// No worker of that id registered with this coordinator process (register again).
    UnknownWorker,
    /// The id is another worker's: wrong secret, or another credential.
    BadSecret,
}

/// A worker introducing itself, already checked by the service (version, self-test, bounds).
#[derive(Debug, Clone)]
pub struct Registration {
    /// The id this coordinator gave the worker before a reconnect, and the secret given with it.
    pub previous_worker_id: Option<WorkerId>,
    pub previous_secret: String,
    /// The credential the registration came under.
    pub credential: Credential,
    pub name: String,
    pub host: String,
    pub cores: u32,
    pub version: String,
    /// What it solves on, as it says (shown by status; not trusted for anything).
    pub device: String,
    /// The address the registration came from (registrations are capped per credential and
    /// address).
    pub peer: Option<std::net::IpAddr>,
}

/// One job's result as a worker reported it.
#[derive(Debug, Clone)]
pub struct JobReport {
    pub worker_id: WorkerId,
    /// The secret and credential it came with (see [`Caller`]).
    pub secret: String,
    pub credential: Credential,
    pub lease_id: LeaseId,
    pub job_id: JobId,
    pub finding: Finding,
}

pub enum RegisterReply {
    Registered {
        worker_id: WorkerId,
        /// The worker's secret: every later call naming `worker_id` must carry it.
        secret: String,
        run_complete: bool,
    },
    /// Too many registrations under this credential lately.
    TooMany,
}

pub enum LeaseReply {
    /// Jobs (ids into the run's job list) under a new lease; none when nothing can be given now.
    Granted { lease_id: LeaseId, job_ids: Vec<JobId>, run_complete: bool },
    /// The worker is not registered with this coordinator.
    UnknownWorker,
    /// The worker lost a verification and gets no more work.
    UntrustedWorker,
    /// The call named a worker id without its secret.
    BadSecret,
}

pub struct HeartbeatReply {
    /// Leases that no longer cover any job of the worker.
    pub lost_lease_ids: Vec<LeaseId>,
    pub run_complete: bool,
}

pub struct ReportReply {
    /// The scheduler's verdict, or why the caller was refused before anything was decided.
    pub outcome: Result<Verdict, Refusal>,
    pub run_complete: bool,
}

/// Handle for sending commands to the engine thread.
#[derive(Clone)]
pub struct EngineHandle {
    pub(super) tx: mpsc::Sender<Command>,
}

impl EngineHandle {
    pub fn send(&self, cmd: Command) -> bool {
        self.tx.send(cmd).is_ok()
    }
}
