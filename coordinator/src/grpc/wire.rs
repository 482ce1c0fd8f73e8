//! The coordinator's side of the wire line: its domain types to and from protocol messages.
//!
//! Conversions of the types the worker shares (jobs, counts) live in `nqueens_proto::convert`;
//! this module adds the coordinator's own (registrations, results, acknowledgements, and in
//! [`status`] the status call). Besides this module, only the service's handlers
//! ([`super::service`], which wrap converted values in their responses), `server.rs` (the run's
//! `RunId`, made once in `server/open.rs`, and the gRPC server) and the command line's `status`
//! client (its `StatusRequest`, in the `nqueens-cli` crate) build or read a protocol message: the
//! engine, the scheduler and the status views speak domain types only.
//!
//! Every request is checked against the contract's bounds (`nqueens_proto::bounds`) here, in its
//! conversion off the wire, and nowhere else: the service reads, logs or keeps no string or list
//! of a request before its conversion checked it.

use crate::engine::{Caller, JobAnswer, Refusal, Registration, Reply};
use crate::secrets::Credential;
use nqueens_core::JobCounts;
use nqueens_proto::{self as pb, CheckBounds, Outcome, Reason, WireError};
use nqueens_scheduler::{Finding, JobId, LeaseId, Verdict, WorkerId};

mod status;
#[cfg(test)]
mod tests;

pub use status::query_from_wire;

/// The most lease slots one worker is believed to have; more is clamped (the lease size follows
/// the registered slots).
pub const MAX_SLOTS: u32 = 1024;

/// A worker's error text is cut to this many bytes.
pub const MAX_ERROR_TEXT: usize = 4096;

/// Whether `version` is strict semver: `MAJOR.MINOR.PATCH` without leading zeros, then an
/// optional `-pre` and `+build` of dot-separated `[0-9A-Za-z-]` identifiers, where a numeric
/// pre-release identifier has no leading zero either (semver 2.0.0, item 9).
pub fn is_strict_semver(version: &str) -> bool {
    let ident =
        |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-');
    let pre_ident = |s: &str| {
        ident(s) && !(s.len() > 1 && s.starts_with('0') && s.bytes().all(|b| b.is_ascii_digit()))
    };
    let (rest, build) = match version.split_once('+') {
        Some((r, b)) => (r, Some(b)),
        None => (version, None),
    };
    let (core, pre) = match rest.split_once('-') {
        Some((c, p)) => (c, Some(p)),
        None => (rest, None),
    };
    let numbers: Vec<&str> = core.split('.').collect();
    let number = |s: &&str| {
        !s.is_empty()
            && s.len() <= 9
            && s.bytes().all(|b| b.is_ascii_digit())
            && (*s == "0" || !s.starts_with('0'))
    };
    numbers.len() == 3
        && numbers.iter().all(number)
        && pre.is_none_or(|p| p.split('.').all(pre_ident))
        && build.is_none_or(|b| b.split('.').all(ident))
}

/// A register call off the wire, its bounds checked: the run it names (none on first contact)
/// and its self-test, which the service judges, beside the registration the engine takes.
pub struct RegisterCall {
    /// The run the worker served before a reconnect; none on first contact.
    pub run: Option<pb::RunId>,
    /// The worker's solver self-test, as it reports it.
    pub self_test: Option<pb::SelfTest>,
    /// What the engine registers.
    pub registration: Registration,
}

impl RegisterCall {
    /// A registration off the wire, made under `credential`: bounded (names, hosts and devices
    /// plain text), the version strict semver.
    pub fn from_wire(req: pb::RegisterRequest, credential: Credential) -> Result<Self, WireError> {
        req.check_bounds()?;
        if !is_strict_semver(&req.version) {
            return Err(WireError::Invalid {
                field: "version",
                reason: format!(
                    "{:?} is not a semantic version",
                    req.version.escape_debug().to_string()
                ),
            });
        }
        let registration = Registration {
            previous_worker_id: (req.previous_worker_id != 0)
                .then_some(WorkerId::new(req.previous_worker_id)),
            previous_secret: req.previous_worker_secret,
            credential,
            name: req.name,
            host: req.host,
            device: req.device,
            slots: req.slots.clamp(1, MAX_SLOTS),
            version: req.version,
            peer: None,
        };
        Ok(RegisterCall { run: req.run, self_test: req.self_test, registration })
    }
}

/// One streamed result off the wire, its bounds checked: the run it names, which the service
/// checks, beside the answer the engine takes.
pub struct ResultCall {
    /// The run the result names.
    pub run: Option<pb::RunId>,
    /// What the engine judges.
    pub answer: JobAnswer,
}

impl ResultCall {
    /// A result off the wire, sent under `credential`. An error text is cut to
    /// [`MAX_ERROR_TEXT`] bytes. Counts are passed on as sent, also counts no solver gives: the
    /// scheduler refuses those and untrusts their sender (`nqueens_scheduler::implausible`).
    pub fn from_wire(msg: pb::JobResult, credential: Credential) -> Result<Self, WireError> {
        msg.check_bounds()?;
        let finding = if msg.error.is_empty() {
            let counts = msg.counts.ok_or(WireError::Missing("result counts"))?;
            if !(msg.seconds.is_finite() && msg.seconds >= 0.0) {
                return Err(WireError::NotANumber { field: "result seconds", value: msg.seconds });
            }
            Finding::Solved { counts: JobCounts::from(counts), seconds: msg.seconds }
        } else {
            let mut error = msg.error;
            if error.len() > MAX_ERROR_TEXT {
                let mut cut = MAX_ERROR_TEXT;
                while !error.is_char_boundary(cut) {
                    cut -= 1;
                }
                error.truncate(cut);
                error.push_str(" [cut]");
            }
            Finding::SolverError(error)
        };
        let caller = Caller {
            worker_id: WorkerId::new(msg.worker_id),
            secret: msg.worker_secret,
            credential,
        };
        let answer =
            JobAnswer::new(caller, LeaseId::new(msg.lease_id), JobId::new(msg.job_id), finding);
        Ok(ResultCall { run: msg.run, answer })
    }
}

/// The caller of a lease, heartbeat or release request `msg` naming `worker_id` with `secret`,
/// made under `credential`; the request's bounds checked first.
pub fn caller_from_wire<T: CheckBounds>(
    msg: &T,
    worker_id: u64,
    secret: &str,
    credential: Credential,
) -> Result<Caller, WireError> {
    msg.check_bounds()?;
    Ok(Caller { worker_id: WorkerId::new(worker_id), secret: secret.to_owned(), credential })
}

impl Refusal {
    /// The typed reason a worker is given for this refusal.
    pub fn reason(self) -> Reason {
        match self {
            Refusal::UnknownWorker => Reason::UnknownWorker,
            Refusal::BadSecret => Reason::BadWorkerSecret,
            Refusal::Untrusted => Reason::UntrustedWorker,
            Refusal::TooManyRegistrations => Reason::TooManyRegistrations,
        }
    }

    /// The gRPC code of a call refused so.
    pub fn code(self) -> tonic::Code {
        match self {
            Refusal::UnknownWorker => tonic::Code::NotFound,
            Refusal::BadSecret | Refusal::Untrusted => tonic::Code::PermissionDenied,
            Refusal::TooManyRegistrations => tonic::Code::ResourceExhausted,
        }
    }

    /// A sentence a person can act on, for a call naming `worker_id`.
    pub fn message(self, worker_id: WorkerId) -> String {
        match self {
            Refusal::UnknownWorker => {
                format!("worker {worker_id} is not registered (register again)")
            }
            Refusal::BadSecret => format!("the call names worker {worker_id} without its secret"),
            Refusal::Untrusted => format!(
                "worker {worker_id} disagreed with a settled verification and gets no more work"
            ),
            Refusal::TooManyRegistrations => {
                "this credential holds as many identities that have not delivered yet as it may, and each holds jobs; try again later"
                    .into()
            }
        }
    }
}

/// The acknowledgement of one result: its outcome, and for a refusal the typed reason and a
/// sentence a person can act on.
pub fn result_ack(result: &JobAnswer, reply: Reply<Verdict>) -> pb::ResultAck {
    let (job_id, lease_id) = (result.delivery.job_id, result.delivery.lease_id);
    let worker_id = result.caller.worker_id;
    let verdict = match reply.outcome {
        Ok(verdict) => verdict,
        Err(refusal) => {
            let message = refusal.message(worker_id);
            return ack(result, Outcome::Rejected, refusal.reason(), message, reply.run_complete);
        }
    };
    let (outcome, reason, message) = match verdict {
        Verdict::Accepted => (Outcome::Accepted, Reason::Unspecified, String::new()),
        Verdict::Duplicate => (Outcome::Duplicate, Reason::Unspecified, String::new()),
        Verdict::Confirmed => (Outcome::Confirmed, Reason::Unspecified, String::new()),
        Verdict::Conflict => (
            Outcome::Conflict,
            Reason::Unspecified,
            "result disagrees with another result for this job; it will be re-run".into(),
        ),
        Verdict::ErrorRecorded => (Outcome::ErrorRecorded, Reason::Unspecified, String::new()),
        Verdict::UnknownJob => (
            Outcome::Rejected,
            Reason::UnknownJob,
            format!("job {job_id} is not in this run's job list"),
        ),
        Verdict::UntrustedWorker => (
            Outcome::Rejected,
            Reason::UntrustedWorker,
            format!(
                "worker {worker_id} disagreed with a settled verification and may not contribute results"
            ),
        ),
        Verdict::UnknownLease => (
            Outcome::Rejected,
            Reason::UnknownLease,
            format!("lease {lease_id} was not issued to this worker for job {job_id}"),
        ),
        Verdict::Implausible => (
            Outcome::Rejected,
            Reason::UntrustedWorker,
            format!("counts that no solver gives for job {job_id}: the worker is untrusted"),
        ),
    };
    ack(result, outcome, reason, message, reply.run_complete)
}

/// The acknowledgement of `result` with its outcome, reason and message.
fn ack(
    result: &JobAnswer,
    outcome: Outcome,
    reason: Reason,
    message: String,
    run_complete: bool,
) -> pb::ResultAck {
    pb::ResultAck {
        job_id: result.delivery.job_id.get(),
        lease_id: result.delivery.lease_id.get(),
        outcome: outcome as i32,
        reason: reason as i32,
        message,
        run_complete,
    }
}

/// A refused result (its job and lease ids): nothing changed, and the ack says why.
pub fn rejected_ack(ids: (u64, u64), reason: Reason, message: String) -> pb::ResultAck {
    let (job_id, lease_id) = ids;
    pb::ResultAck {
        job_id,
        lease_id,
        outcome: Outcome::Rejected as i32,
        reason: reason as i32,
        message,
        run_complete: false,
    }
}
