//! The coordinator's side of the wire line: its domain types to and from protocol messages.
//!
//! Conversions of the types the worker shares (jobs, counts) live in `nqueens_proto::convert`;
//! this module adds the coordinator's own (registrations, results, acknowledgements, status).
//! Nothing beyond this module and the gRPC plumbing in [`super::service`] reads or builds a
//! protocol message, so the engine and the life cycle speak domain types only.

use crate::engine::{Caller, JobAnswer, Refusal, Registration, Reply};
use crate::run_result::RunResult;
use crate::secrets::Credential;
use crate::snapshot::fleet::{Fleet, Group};
use crate::snapshot::{percent, Progress, RunSnapshot, WorkerView};
use crate::status::StatusView;
use nqueens_core::{Classes, JobCounts};
use nqueens_proto::convert::{join_wide, narrow, split_wide};
use nqueens_proto::{self as pb, CheckBounds, Outcome, Reason, WireError};
use nqueens_scheduler::{Finding, JobId, LeaseId, Verdict, WorkerId};
use nqueens_store::Evidence;

/// The most lease slots one worker is believed to have; more is clamped (the lease size follows
/// the registered slots).
pub const MAX_SLOTS: u32 = 1024;

/// The longest worker name or host name taken, in bytes (the contract's bound).
pub const MAX_NAME: usize = pb::bounds::MAX_NAME;

/// A worker's error text is cut to this many bytes.
pub const MAX_ERROR_TEXT: usize = 4096;

/// The longest worker secret taken (ours are 64 hex digits).
const MAX_SECRET: usize = pb::bounds::MAX_SECRET;

/// `text` if it is at most [`MAX_NAME`] bytes of plain text (no control, format or separator
/// character: a name is written into logs, `status` and the page; see `nqueens_proto::bounds`).
fn bounded_name(field: &'static str, text: String) -> Result<String, WireError> {
    if text.len() > MAX_NAME {
        return Err(WireError::Invalid {
            field,
            reason: format!("{} bytes, at most {MAX_NAME}", text.len()),
        });
    }
    if text.chars().any(pb::bounds::is_unshown) {
        return Err(WireError::Invalid {
            field,
            reason: "control, format or separator characters".into(),
        });
    }
    Ok(text)
}

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

/// `secret` if it is of a plausible length (a wrong one simply matches no worker).
fn bounded_secret(field: &'static str, secret: String) -> Result<String, WireError> {
    if secret.len() > MAX_SECRET {
        return Err(WireError::Invalid {
            field,
            reason: format!("longer than {MAX_SECRET} bytes"),
        });
    }
    Ok(secret)
}

impl Registration {
    /// A registration off the wire, made under `credential`: names and hosts bounded, the
    /// version strict semver.
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
        Ok(Registration {
            previous_worker_id: (req.previous_worker_id != 0)
                .then_some(WorkerId::new(req.previous_worker_id)),
            previous_secret: bounded_secret("previous_worker_secret", req.previous_worker_secret)?,
            credential,
            name: bounded_name("name", req.name)?,
            host: bounded_name("host", req.host)?,
            device: bounded_name("device", req.device)?,
            slots: req.slots.clamp(1, MAX_SLOTS),
            version: req.version,
            peer: None,
        })
    }
}

impl JobAnswer {
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
        Ok(JobAnswer {
            caller: Caller {
                worker_id: WorkerId::new(msg.worker_id),
                secret: bounded_secret("worker_secret", msg.worker_secret)?,
                credential,
            },
            lease_id: LeaseId::new(msg.lease_id),
            job_id: JobId::new(msg.job_id),
            finding,
        })
    }
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
    let (job_id, lease_id) = (result.job_id, result.lease_id);
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
        job_id: result.job_id.get(),
        lease_id: result.lease_id.get(),
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

impl From<&RunResult> for pb::RunResult {
    fn from(r: &RunResult) -> Self {
        let classes = match (r.count2, r.count4, r.count8) {
            (Some(count2), Some(count4), Some(count8)) => {
                Some(pb::Classes::from(Classes { count2, count4, count8 }))
            }
            _ => None,
        };
        let ((total, total_hi), (unique, unique_hi)) = (split_wide(r.total), split_wide(r.unique));
        pb::RunResult {
            n: r.n.into(),
            total,
            unique,
            classes,
            jobs: r.jobs,
            seconds: r.seconds,
            nodes: r.nodes,
            total_hi,
            unique_hi,
            evidence: r.evidence.as_ref().map(evidence_to_wire),
            export_sha256: r.export_sha256.clone(),
        }
    }
}

/// The wire form of what a run's total rests on.
fn evidence_to_wire(e: &Evidence) -> pb::Evidence {
    pb::Evidence {
        replication: e.replication.into(),
        jobs_independent: e.jobs_independent,
        jobs_coordinator: e.jobs_coordinator,
        jobs_one_party: e.jobs_one_party,
        rechecks_drawn: e.rechecks_drawn,
        rechecks_passed: e.rechecks_passed,
        lie_escape_probability: e.lie_escape_probability,
        wrong_jobs_bound: e.wrong_jobs_bound,
    }
}

/// What a run's total rests on, from its wire form.
fn evidence_from_wire(e: pb::Evidence) -> Result<Evidence, WireError> {
    Ok(Evidence {
        replication: narrow("evidence replication", e.replication)?,
        jobs_independent: e.jobs_independent,
        jobs_coordinator: e.jobs_coordinator,
        jobs_one_party: e.jobs_one_party,
        rechecks_drawn: e.rechecks_drawn,
        rechecks_passed: e.rechecks_passed,
        lie_escape_probability: e.lie_escape_probability,
        wrong_jobs_bound: e.wrong_jobs_bound,
    })
}

/// A digest from the wire: 64 lowercase hex digits, nothing else.
fn sha256_hex(digest: &str) -> Result<String, WireError> {
    if digest.len() == 64
        && digest.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    {
        Ok(digest.to_owned())
    } else {
        Err(WireError::Inconsistent(format!(
            "export digest {:?} is not a SHA-256 in hex",
            nqueens_proto::bounds::shown(digest)
        )))
    }
}

/// The classes, where present, must add up to the total and the unique count.
impl TryFrom<pb::RunResult> for RunResult {
    type Error = WireError;
    fn try_from(r: pb::RunResult) -> Result<Self, WireError> {
        let classes = r.classes.map(Classes::from);
        let (total, unique) = (join_wide(r.total, r.total_hi), join_wide(r.unique, r.unique_hi));
        if let Some(c) = classes {
            if c.total() != Some(total) || c.unique() != Some(unique) {
                return Err(WireError::Inconsistent(format!(
                    "classes {}/{}/{} do not add up to total {total} and unique {unique}",
                    c.count2, c.count4, c.count8
                )));
            }
        }
        Ok(RunResult {
            n: narrow("result n", r.n)?,
            total,
            unique,
            count2: classes.map(|c| c.count2),
            count4: classes.map(|c| c.count4),
            count8: classes.map(|c| c.count8),
            jobs: r.jobs,
            seconds: r.seconds,
            nodes: r.nodes,
            evidence: r.evidence.map(evidence_from_wire).transpose()?,
            export_sha256: r.export_sha256.map(|d| sha256_hex(&d)).transpose()?,
        })
    }
}

fn fleet_to_wire(f: &Fleet) -> pb::Fleet {
    let groups = |groups: &[Group]| -> Vec<pb::FleetGroup> {
        groups
            .iter()
            .map(|g| pb::FleetGroup {
                key: g.key.clone(),
                workers: g.workers,
                slots: g.slots,
                jobs_leased: g.jobs_leased,
                results: g.results,
                results_per_second: g.results_per_second,
            })
            .collect()
    };
    pb::Fleet {
        workers: f.workers,
        by_state: groups(&f.by_state),
        by_device: groups(&f.by_device),
        by_version: groups(&f.by_version),
        by_credential: groups(&f.by_credential),
        matching: f.matching,
        offset: f.offset,
        limit: f.limit,
        filter: f.filter.clone(),
    }
}

fn fleet_from_wire(f: pb::Fleet) -> Fleet {
    let groups = |groups: Vec<pb::FleetGroup>| -> Vec<Group> {
        groups
            .into_iter()
            .map(|g| Group {
                key: g.key,
                workers: g.workers,
                slots: g.slots,
                jobs_leased: g.jobs_leased,
                results: g.results,
                results_per_second: g.results_per_second,
            })
            .collect()
    };
    Fleet {
        workers: f.workers,
        by_state: groups(f.by_state),
        by_device: groups(f.by_device),
        by_version: groups(f.by_version),
        by_credential: groups(f.by_credential),
        matching: f.matching,
        offset: f.offset,
        limit: f.limit,
        filter: f.filter,
    }
}

impl StatusView {
    /// The wire form of a live coordinator's status, naming the run `run`.
    pub fn to_response(&self, run: &pb::RunId) -> pb::StatusResponse {
        let (p, snap) = (&self.run.progress, &self.run);
        let (partial_total, partial_total_hi) = split_wide(self.partial_total);
        let (partial_sym180, partial_sym180_hi) = split_wide(self.partial_sym180);
        let (partial_sym90, partial_sym90_hi) = split_wide(self.partial_sym90);
        pb::StatusResponse {
            run: Some(run.clone()),
            jobs_total: p.jobs_total,
            jobs_pending: p.jobs_pending,
            jobs_leased: p.jobs_leased,
            jobs_done: p.jobs_done,
            jobs_held: p.jobs_held,
            jobs_failed: p.jobs_failed,
            conflicts: p.conflicts,
            results_per_second: p.results_per_second.unwrap_or(0.0),
            eta_seconds: p.eta_seconds.unwrap_or(-1.0),
            partial_total,
            partial_sym180,
            partial_sym90,
            partial_total_hi,
            partial_sym180_hi,
            partial_sym90_hi,
            nodes: self.nodes,
            evidence: self.evidence.as_ref().map(evidence_to_wire),
            complete: p.complete,
            result: p.result.as_ref().map(pb::RunResult::from),
            workers: self
                .workers
                .iter()
                .map(|w| pb::WorkerInfo {
                    worker_id: w.worker_id,
                    name: w.name.clone(),
                    host: w.host.clone(),
                    slots: w.slots,
                    version: w.version.clone(),
                    results: w.results,
                    conflicts: w.conflicts,
                    last_seen_seconds_ago: w.last_seen_seconds_ago,
                    jobs_leased: w.jobs_leased,
                    untrusted: w.untrusted,
                    credential: w.credential.clone(),
                    device: w.device.clone(),
                    results_per_second: w.results_per_second,
                    trust: w.trust.clone(),
                    lease_size: w.lease_size,
                })
                .collect(),
            lease_expiries: snap.lease_expiries.unwrap_or(0),
            uptime_seconds: snap.uptime_seconds.unwrap_or(0.0),
            untrusted_workers: snap.untrusted_workers,
            waiting_on_leases: p.waiting_on_leases,
            leases_expire_in_seconds: snap.leases_expire_in_seconds.unwrap_or(-1.0),
            bad_rows: self.bad_rows,
            snapshot_seq: snap.snapshot_seq,
            quiet_seconds: snap.quiet_seconds,
            nodes_per_second: snap.nodes_per_second.unwrap_or(0.0),
            live_workers: snap.live_workers.unwrap_or(0),
            taken_unix: snap.taken_unix,
            fleet: self.fleet.as_ref().map(fleet_to_wire),
        }
    }

    /// A live coordinator's status call, as answered by the coordinator at `source`.
    pub fn from_response(r: pb::StatusResponse, source: &str) -> Result<StatusView, WireError> {
        r.check_bounds()?;
        let run = r.run.ok_or(WireError::Missing("status run"))?;
        // Decoded as answered, not recomputed: the ETA rests on the coordinator's own clock.
        let progress = Progress {
            n: run.n,
            fingerprint: run.fingerprint,
            jobs_total: r.jobs_total,
            jobs_pending: r.jobs_pending,
            jobs_leased: r.jobs_leased,
            jobs_done: r.jobs_done,
            jobs_held: r.jobs_held,
            jobs_failed: r.jobs_failed,
            percent_done: percent(r.jobs_done, r.jobs_total),
            results_per_second: Some(r.results_per_second),
            eta_seconds: (r.eta_seconds >= 0.0).then_some(r.eta_seconds),
            waiting_on_leases: r.waiting_on_leases,
            conflicts: r.conflicts,
            complete: r.complete,
            result: r.result.map(RunResult::try_from).transpose()?,
        };
        let run = RunSnapshot {
            snapshot_seq: r.snapshot_seq,
            taken_unix: r.taken_unix,
            progress,
            nodes_per_second: Some(r.nodes_per_second),
            quiet_seconds: r.quiet_seconds,
            untrusted_workers: r.untrusted_workers,
            live_workers: Some(r.live_workers),
            lease_expiries: Some(r.lease_expiries),
            leases_expire_in_seconds: (r.leases_expire_in_seconds >= 0.0)
                .then_some(r.leases_expire_in_seconds),
            uptime_seconds: Some(r.uptime_seconds),
            // The wire carries a page of them: the view's `workers`.
            all_workers: std::sync::Arc::from([]),
            // The counters are on `/metrics`.
            counters: None,
        };
        Ok(StatusView {
            run,
            source: source.to_owned(),
            state_file: None,
            partial_total: join_wide(r.partial_total, r.partial_total_hi),
            partial_sym180: join_wide(r.partial_sym180, r.partial_sym180_hi),
            partial_sym90: join_wide(r.partial_sym90, r.partial_sym90_hi),
            nodes: r.nodes,
            evidence: r.evidence.map(evidence_from_wire).transpose()?,
            workers: r.workers.into_iter().map(WorkerView::from_wire).collect(),
            fleet: r.fleet.map(fleet_from_wire),
            bad_rows: r.bad_rows,
            // A live coordinator has opened its file for writing, so its rows carry checksums.
            checksums: true,
        })
    }
}

impl WorkerView {
    /// A worker as a live coordinator's status call describes it.
    fn from_wire(w: pb::WorkerInfo) -> WorkerView {
        WorkerView {
            worker_id: w.worker_id,
            name: w.name,
            host: w.host,
            slots: w.slots,
            version: w.version,
            results: w.results,
            conflicts: w.conflicts,
            jobs_leased: w.jobs_leased,
            last_seen_seconds_ago: w.last_seen_seconds_ago,
            untrusted: w.untrusted,
            credential: w.credential,
            device: w.device,
            results_per_second: w.results_per_second,
            trust: w.trust,
            lease_size: w.lease_size,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(total: u128, classes: (u128, u128, u128)) -> RunResult {
        RunResult {
            n: 29,
            total,
            unique: classes.0 + classes.1 + classes.2,
            count2: Some(classes.0),
            count4: Some(classes.1),
            count8: Some(classes.2),
            jobs: 3,
            seconds: 1.5,
            nodes: 12,
            evidence: None,
            export_sha256: Some("0123456789abcdef".repeat(4)),
        }
    }

    /// A result past 2^64 crosses the wire exactly; one whose classes do not add up is refused.
    #[test]
    fn wide_results_round_trip_and_inconsistent_ones_are_refused() {
        let classes = (2, 1 << 60, (u128::from(u64::MAX) + 9) / 8 * 4);
        let total = 2 * classes.0 + 4 * classes.1 + 8 * classes.2;
        assert!(total > u128::from(u64::MAX));
        let r = record(total, classes);
        let wire = pb::RunResult::from(&r);
        assert_ne!(wire.total_hi, 0);
        assert_eq!(RunResult::try_from(wire.clone()), Ok(r));
        let mut bad = wire.clone();
        bad.total_hi += 1;
        assert!(matches!(RunResult::try_from(bad), Err(WireError::Inconsistent(_))));
        let mut bad = wire;
        bad.export_sha256 = Some("0123\u{1b}[2J".into());
        assert!(matches!(RunResult::try_from(bad), Err(WireError::Inconsistent(_))));
    }

    /// A live status with every field the wire carries set (each to its own value) comes back
    /// from the wire exactly as it left: what `status --connect` shows is what the engine
    /// published. Only the counters stay behind (they are on `/metrics`).
    #[test]
    fn status_round_trips_exactly() {
        let run = pb::RunId { n: 17, fingerprint: "n17-abc-p1".into() };
        let mut jobs = nqueens_scheduler::JobsByState::default();
        for (state, count) in [
            (nqueens_scheduler::JobState::Pending, 11),
            (nqueens_scheduler::JobState::Leased, 7),
            (nqueens_scheduler::JobState::Done, 90),
            (nqueens_scheduler::JobState::Held, 2),
            (nqueens_scheduler::JobState::Failed, 1),
        ] {
            jobs.add(state, count);
        }
        let name = crate::snapshot::RunName { n: 17, fingerprint: "n17-abc-p1" };
        let evidence = Evidence {
            replication: 2,
            jobs_independent: 80,
            jobs_coordinator: 9,
            jobs_one_party: 1,
            rechecks_drawn: 3,
            rechecks_passed: 2,
            lie_escape_probability: 0.25,
            wrong_jobs_bound: 1.5,
        };
        let result = record(95_815_104, (64, 2_006, 11_975_869)).with_evidence(evidence.clone());
        let progress = Progress::new(name, &jobs, Some(3.5), 0.75, 4, Some(result));
        let worker = WorkerView {
            worker_id: 7,
            name: "alpha".into(),
            host: "node1".into(),
            slots: 16,
            version: "0.1.0".into(),
            results: 40,
            conflicts: 1,
            jobs_leased: 5,
            last_seen_seconds_ago: 2.5,
            untrusted: true,
            credential: "site-a".into(),
            device: "cpu (16 threads)".into(),
            results_per_second: 1.25,
            trust: "untrusted".into(),
            lease_size: 64,
        };
        let view = StatusView {
            run: RunSnapshot {
                snapshot_seq: 12,
                taken_unix: 1.8e9,
                progress,
                nodes_per_second: Some(2.0e9),
                quiet_seconds: 0.75,
                untrusted_workers: 1,
                live_workers: Some(3),
                lease_expiries: Some(6),
                leases_expire_in_seconds: Some(41.5),
                uptime_seconds: Some(99.0),
                all_workers: vec![worker.clone(), WorkerView { worker_id: 8, ..worker }].into(),
                counters: None,
            },
            source: "http://x:7447".into(),
            state_file: None,
            partial_total: 123,
            partial_sym180: 45,
            partial_sym90: 6,
            nodes: 789,
            evidence: Some(evidence),
            workers: std::sync::Arc::from([]),
            fleet: None,
            bad_rows: 2,
            checksums: true,
        };
        let mut view = view;
        let index = crate::snapshot::fleet::FleetIndex::new(view.run.all_workers.clone());
        let (fleet, page) = index.select(&crate::snapshot::fleet::WorkerQuery::new(0, 5, "site"));
        (view.workers, view.fleet) = (page.into(), Some(fleet));
        assert_eq!(view.fleet.as_ref().map(|f| (f.workers, f.matching)), Some((2, 2)));
        let back = StatusView::from_response(view.to_response(&run), "http://x:7447").unwrap();
        let json = |v: &StatusView| serde_json::to_value(&v.run).unwrap();
        assert_eq!(json(&back), json(&view));
        assert_eq!(&*back.workers, &*view.workers);
        assert_eq!(back.bad_rows, view.bad_rows);
        assert_eq!(back.run.progress, view.run.progress);
        assert_eq!(
            (back.partial_total, back.partial_sym180, back.partial_sym90, back.nodes),
            (123, 45, 6, 789)
        );
        assert_eq!(back.evidence, view.evidence);
        assert_eq!(back.fleet, view.fleet);
        assert_eq!(back.source, view.source);
    }

    #[test]
    fn wide_partial_totals_cross_the_status_call() {
        let run = pb::RunId { n: 29, fingerprint: "f".into() };
        let total = u128::from(u64::MAX) * 5 + 3;
        let mut jobs = nqueens_scheduler::JobsByState::default();
        jobs.add(nqueens_scheduler::JobState::Done, 10);
        let name = crate::snapshot::RunName { n: 29, fingerprint: "f" };
        let view = StatusView {
            run: RunSnapshot::with_progress(Progress::new(name, &jobs, Some(1.0), 0.0, 0, None)),
            source: "x".into(),
            state_file: None,
            partial_total: total,
            partial_sym180: u128::from(u64::MAX) + 1,
            partial_sym90: 4,
            nodes: 5,
            evidence: None,
            workers: std::sync::Arc::from([]),
            fleet: None,
            bad_rows: 0,
            checksums: true,
        };
        let back = StatusView::from_response(view.to_response(&run), "x").unwrap();
        assert_eq!(
            (back.partial_total, back.partial_sym180, back.partial_sym90),
            (total, u128::from(u64::MAX) + 1, 4)
        );
        assert_eq!(back.run.progress, view.run.progress);
        assert_eq!(back.run.snapshot_seq, view.run.snapshot_seq);
    }

    /// Every count that the wire used to refuse unread (past the state file's 64-bit columns, or
    /// symmetric counts above the solutions) now reaches the scheduler, which finds each one
    /// implausible on a job of any weight and so untrusts its sender.
    #[test]
    fn counts_no_solver_gives_reach_the_scheduler_and_are_implausible() {
        let past = i64::MAX as u64 + 1;
        let honest = JobCounts { solutions: 10, sym180: 4, sym90: 2, nodes: 99 };
        let cases = [
            JobCounts { sym90: 5, ..honest },
            JobCounts { sym180: 11, ..honest },
            JobCounts { solutions: past, ..honest },
            JobCounts { sym180: past, ..honest },
            JobCounts { sym90: past, ..honest },
            JobCounts { nodes: past, ..honest },
            JobCounts { nodes: u64::MAX, ..honest },
            JobCounts { solutions: u64::MAX, sym180: u64::MAX, sym90: u64::MAX, nodes: u64::MAX },
        ];
        for counts in cases {
            let msg = pb::JobResult {
                counts: Some(counts.into()),
                worker_secret: "s".into(),
                ..Default::default()
            };
            let answer = JobAnswer::from_wire(msg, Credential::shared()).unwrap();
            assert!(matches!(answer.finding, Finding::Solved { counts: c, .. } if c == counts));
            for weight in [2, 4, 8] {
                assert!(
                    nqueens_scheduler::implausible(&counts, weight).is_some(),
                    "{counts:?} of weight {weight}"
                );
            }
        }
    }

    #[test]
    fn versions_are_strict_semver_to_the_pre_release_numbers() {
        for good in
            ["0.1.0", "1.22.333", "0.1.0-rc.1", "0.1.0-0", "0.1.0-01a", "1.0.0-x.7.z.92+b.01"]
        {
            assert!(is_strict_semver(good), "{good}");
        }
        for bad in ["0.1", "01.1.0", "0.1.0-01", "0.1.0-rc.007", "0.1.0-", "0.1.0-a..b", "0.1.0+"] {
            assert!(!is_strict_semver(bad), "{bad}");
        }
    }
}
