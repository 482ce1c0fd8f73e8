//! The engine's commands and their answers: what the gRPC service sends the engine thread and
//! what comes back, once the changes a command made are committed.

use crate::secrets::Credential;
use nqueens_scheduler::{Delivery, Finding, JobId, LeaseId, Verdict, WorkerId};
use nqueens_store::StoreError;
use std::sync::mpsc;
use tokio::sync::oneshot;

/// A request to the engine, with the channel its [`Reply`] goes back on.
pub enum Command {
    Register {
        worker: Registration,
        reply: ReplyTx<Registered>,
    },
    Lease {
        caller: Caller,
        free_slots: u32,
        reply: ReplyTx<Granted>,
    },
    /// Extends the caller's leases; the reply lists those that hold nothing any more.
    Heartbeat {
        caller: Caller,
        lease_ids: Vec<LeaseId>,
        reply: ReplyTx<Vec<LeaseId>>,
    },
    /// Answers read together from one result stream (one wake-up of the engine for them all),
    /// each answered on its own channel.
    Results {
        answers: Vec<(JobAnswer, ReplyTx<Verdict>)>,
    },
    /// Gives jobs back; the reply says how many were released.
    Release {
        caller: Caller,
        lease_id: LeaseId,
        job_ids: Vec<JobId>,
        reply: ReplyTx<u32>,
    },
    /// The coordinator's own answer to a job, from the reference thread (`spot_checks.rs`: a
    /// cheap job's known answer, for spot checks) or the referee (`referee.rs`: its ruling on
    /// a job in dispute or doubt); the scheduler records it and rules the job again
    /// (`Scheduler::add_reference`).
    Reference {
        job_id: JobId,
        counts: nqueens_core::JobCounts,
    },
    /// The referee's attempt at a job failed (see `referee.rs`): a job workers reported errors
    /// for is failed (`Scheduler::coordinator_failed`).
    RefereeFailed {
        job_id: JobId,
    },
    /// `token add` on a live run (`admin.rs`): the per-host credential `name` with the token
    /// digest `digest`, written by the engine (nothing else writes the file).
    AddToken {
        name: String,
        digest: [u8; 32],
        reply: TokensTx,
    },
    /// `token revoke` on a live run: the credential `name` is refused from now on.
    RevokeToken {
        name: String,
        reply: TokensTx,
    },
    Shutdown,
}

/// What a token command left: whether it changed anything, the credentials in force (name and
/// token digest), and whether the run ever had per-host credentials.
#[derive(Debug)]
pub struct TokensNow {
    pub changed: bool,
    pub active: Vec<(String, [u8; 32])>,
    pub had_credentials: bool,
}

/// The channel a token command's answer goes back on (after its batch commits, like a
/// [`Reply`]).
pub type TokensTx = mpsc::Sender<Result<TokensNow, StoreError>>;

/// What every worker's command is answered with, once the changes it made are committed: what
/// was decided, or why the caller was refused before anything was; and whether the run is
/// complete (a worker that hears so stops).
#[derive(Debug)]
pub struct Reply<T> {
    pub outcome: Result<T, Refusal>,
    pub run_complete: bool,
}

/// The channel a [`Reply`] goes back on.
pub type ReplyTx<T> = oneshot::Sender<Reply<T>>;

/// Who makes a call: the worker id it names, the secret that must come with it, and the
/// credential (token) the call was made under.
#[derive(Debug, Clone)]
pub struct Caller {
    pub worker_id: WorkerId,
    pub secret: String,
    pub credential: Credential,
}

/// Why a worker's call was refused before anything was decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// No worker of that id registered with this coordinator process (register again).
    UnknownWorker,
    /// The id is another worker's: wrong secret, or another credential.
    BadSecret,
    /// The worker lost a verification and gets no more work.
    Untrusted,
    /// The credential holds as many identities that have not delivered yet as it may, and
    /// every one of them holds jobs (see `engine/registry.rs`).
    TooManyRegistrations,
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
    pub slots: u32,
    pub version: String,
    /// What it solves on, as it says (shown by status; not trusted for anything).
    pub device: String,
    /// The address the registration came from (for the logs).
    pub peer: Option<std::net::IpAddr>,
}

/// One job's answer as a worker sent it: the scheduler's [`Delivery`], which reaches
/// [`nqueens_scheduler::Scheduler::result`] as it came off the wire, with who sent it (checked
/// before anything is decided).
#[derive(Debug, Clone)]
pub struct JobAnswer {
    pub caller: Caller,
    pub delivery: Delivery,
}

impl JobAnswer {
    /// `caller`'s answer `finding` to job `job_id` under lease `lease_id`.
    pub fn new(caller: Caller, lease_id: LeaseId, job_id: JobId, finding: Finding) -> Self {
        JobAnswer { caller, delivery: Delivery { job_id, lease_id, finding } }
    }
}

/// A registration taken: the worker's id and the secret every later call naming it must carry.
#[derive(Debug)]
pub struct Registered {
    pub worker_id: WorkerId,
    pub secret: String,
}

/// Jobs (ids into the run's job list) under a new lease; none when nothing can be given now
/// (lease id 0).
#[derive(Debug, Default)]
pub struct Granted {
    pub lease_id: LeaseId,
    pub job_ids: Vec<JobId>,
}

/// Handle for sending commands to the engine thread.
#[derive(Clone)]
pub struct EngineHandle {
    pub(super) tx: mpsc::Sender<Command>,
}

impl EngineHandle {
    /// Sends `cmd`; false once the engine is gone.
    pub fn send(&self, cmd: Command) -> bool {
        self.tx.send(cmd).is_ok()
    }

    /// Sends the command `make` builds around a reply channel, and returns where its reply
    /// comes (to `.await`, or `blocking_recv` off the runtime); None once the engine is gone.
    pub fn ask<T>(
        &self,
        make: impl FnOnce(oneshot::Sender<T>) -> Command,
    ) -> Option<oneshot::Receiver<T>> {
        let (tx, rx) = oneshot::channel();
        self.send(make(tx)).then_some(rx)
    }
}
