//! Every string, byte string and repeated field of the contract, bounded: what comes off the wire
//! is checked by [`CheckBounds::check_bounds`] before anything reads, logs or stores it, on both
//! sides (the coordinator checks every request and every streamed result, the worker and the status
//! client every answer). A message past a bound is refused whole, with the field named; nothing is
//! cut silently here (the coordinator itself cuts the error texts it stores to 4 KiB).
//!
//! Whole messages are bounded too: the coordinator decodes at most [`MAX_REQUEST`] bytes per
//! message (tonic's `max_decoding_message_size`), so no single field can take more memory than
//! that before these checks run.

use crate::convert::WireError;
use crate::v1 as pb;

/// The largest request message the coordinator decodes: 1 MiB (the largest honest one, a release
/// of a whole lease of [`MAX_IDS`] job ids, is under 700 KB).
pub const MAX_REQUEST: usize = 1 << 20;
/// Worker names, host names, device descriptions and credential names, in bytes.
pub const MAX_NAME: usize = 256;
/// A software version (strict semver, checked where it is used), in bytes.
pub const MAX_VERSION: usize = 64;
/// A worker secret (ours are 64 hex digits), in bytes.
pub const MAX_SECRET: usize = 128;
/// A run fingerprint (`n<N>-<16 hex digits>-p<major>`), in bytes.
pub const MAX_FINGERPRINT: usize = 128;
/// An error text or a refusal's message on the wire, in bytes (64 KiB).
pub const MAX_TEXT: usize = 64 * 1024;
/// Ids in one list (lease ids of a heartbeat, job ids of a release or a lease, workers of a status
/// answer): the scheduler's largest lease is 65,536 jobs.
pub const MAX_IDS: usize = 65_536;
/// A job's prefix: one column per searched row, fewer than 64 rows on any board a run can hold.
pub const MAX_PREFIX: usize = 64;

/// A message whose every string and list is checked against its bound.
pub trait CheckBounds {
    /// `Err` naming the first field past its bound.
    fn check_bounds(&self) -> Result<(), WireError>;
}

/// `text` (of `field`) if it is at most `max` bytes.
fn text(field: &'static str, text: &str, max: usize) -> Result<(), WireError> {
    if text.len() > max {
        return Err(WireError::Invalid {
            field,
            reason: format!("{} bytes, at most {max}", text.len()),
        });
    }
    Ok(())
}

/// A list (of `field`) of at most `max` entries.
fn list<T>(field: &'static str, items: &[T], max: usize) -> Result<(), WireError> {
    if items.len() > max {
        return Err(WireError::Invalid {
            field,
            reason: format!("{} entries, at most {max}", items.len()),
        });
    }
    Ok(())
}

fn run(run: &Option<pb::RunId>) -> Result<(), WireError> {
    run.as_ref().map_or(Ok(()), CheckBounds::check_bounds)
}

impl CheckBounds for pb::RunId {
    fn check_bounds(&self) -> Result<(), WireError> {
        text("run fingerprint", &self.fingerprint, MAX_FINGERPRINT)
    }
}

impl CheckBounds for pb::RegisterRequest {
    fn check_bounds(&self) -> Result<(), WireError> {
        run(&self.run)?;
        text("name", &self.name, MAX_NAME)?;
        text("host", &self.host, MAX_NAME)?;
        text("version", &self.version, MAX_VERSION)?;
        text("previous_worker_secret", &self.previous_worker_secret, MAX_SECRET)?;
        text("device", &self.device, MAX_NAME)
    }
}

impl CheckBounds for pb::LeaseRequest {
    fn check_bounds(&self) -> Result<(), WireError> {
        run(&self.run)?;
        text("worker_secret", &self.worker_secret, MAX_SECRET)
    }
}

impl CheckBounds for pb::HeartbeatRequest {
    fn check_bounds(&self) -> Result<(), WireError> {
        run(&self.run)?;
        list("lease_ids", &self.lease_ids, MAX_IDS)?;
        text("worker_secret", &self.worker_secret, MAX_SECRET)
    }
}

impl CheckBounds for pb::JobResult {
    fn check_bounds(&self) -> Result<(), WireError> {
        run(&self.run)?;
        text("error", &self.error, MAX_TEXT)?;
        text("worker_secret", &self.worker_secret, MAX_SECRET)
    }
}

impl CheckBounds for pb::ReleaseRequest {
    fn check_bounds(&self) -> Result<(), WireError> {
        run(&self.run)?;
        list("job_ids", &self.job_ids, MAX_IDS)?;
        text("worker_secret", &self.worker_secret, MAX_SECRET)
    }
}

impl CheckBounds for pb::StatusRequest {
    fn check_bounds(&self) -> Result<(), WireError> {
        Ok(())
    }
}

impl CheckBounds for pb::RegisterResponse {
    fn check_bounds(&self) -> Result<(), WireError> {
        run(&self.run)?;
        text("worker_secret", &self.worker_secret, MAX_SECRET)
    }
}

impl CheckBounds for pb::LeaseResponse {
    fn check_bounds(&self) -> Result<(), WireError> {
        list("jobs", &self.jobs, MAX_IDS)?;
        self.jobs.iter().try_for_each(|j| list("job prefix", &j.prefix, MAX_PREFIX))
    }
}

impl CheckBounds for pb::HeartbeatResponse {
    fn check_bounds(&self) -> Result<(), WireError> {
        list("lost_lease_ids", &self.lost_lease_ids, MAX_IDS)
    }
}

impl CheckBounds for pb::ResultAck {
    fn check_bounds(&self) -> Result<(), WireError> {
        text("ack message", &self.message, MAX_TEXT)
    }
}

impl CheckBounds for pb::ErrorDetail {
    fn check_bounds(&self) -> Result<(), WireError> {
        text("error detail message", &self.message, MAX_TEXT)
    }
}

impl CheckBounds for pb::WorkerInfo {
    fn check_bounds(&self) -> Result<(), WireError> {
        text("worker name", &self.name, MAX_NAME)?;
        text("worker host", &self.host, MAX_NAME)?;
        text("worker version", &self.version, MAX_VERSION)?;
        text("worker credential", &self.credential, MAX_NAME)?;
        text("worker device", &self.device, MAX_NAME)
    }
}

impl CheckBounds for pb::StatusResponse {
    fn check_bounds(&self) -> Result<(), WireError> {
        run(&self.run)?;
        list("workers", &self.workers, MAX_IDS)?;
        self.workers.iter().try_for_each(CheckBounds::check_bounds)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The field a check refused, if it refused.
    fn refused(message: &(impl CheckBounds + ?Sized)) -> Option<&'static str> {
        match message.check_bounds() {
            Ok(()) => None,
            Err(WireError::Invalid { field, .. }) => Some(field),
            Err(e) => panic!("unexpected {e}"),
        }
    }

    fn long(bytes: usize) -> String {
        "x".repeat(bytes)
    }

    fn run_id(fingerprint: String) -> Option<pb::RunId> {
        Some(pb::RunId { n: 18, fingerprint })
    }

    /// Each string of a request: at its bound it passes, one byte past it the message is
    /// refused, naming the field.
    #[test]
    fn every_request_string_is_bounded() {
        type Case = (&'static str, usize, fn(String) -> Box<dyn CheckBounds>);
        let cases: Vec<Case> = vec![
            ("run fingerprint", MAX_FINGERPRINT, |s| {
                Box::new(pb::LeaseRequest { run: run_id(s), ..Default::default() })
            }),
            ("name", MAX_NAME, |s| Box::new(pb::RegisterRequest { name: s, ..Default::default() })),
            ("host", MAX_NAME, |s| Box::new(pb::RegisterRequest { host: s, ..Default::default() })),
            ("version", MAX_VERSION, |s| {
                Box::new(pb::RegisterRequest { version: s, ..Default::default() })
            }),
            ("previous_worker_secret", MAX_SECRET, |s| {
                Box::new(pb::RegisterRequest { previous_worker_secret: s, ..Default::default() })
            }),
            ("device", MAX_NAME, |s| {
                Box::new(pb::RegisterRequest { device: s, ..Default::default() })
            }),
            ("run fingerprint", MAX_FINGERPRINT, |s| {
                Box::new(pb::RegisterRequest { run: run_id(s), ..Default::default() })
            }),
            ("worker_secret", MAX_SECRET, |s| {
                Box::new(pb::LeaseRequest { worker_secret: s, ..Default::default() })
            }),
            ("worker_secret", MAX_SECRET, |s| {
                Box::new(pb::HeartbeatRequest { worker_secret: s, ..Default::default() })
            }),
            ("run fingerprint", MAX_FINGERPRINT, |s| {
                Box::new(pb::HeartbeatRequest { run: run_id(s), ..Default::default() })
            }),
            ("error", MAX_TEXT, |s| Box::new(pb::JobResult { error: s, ..Default::default() })),
            ("worker_secret", MAX_SECRET, |s| {
                Box::new(pb::JobResult { worker_secret: s, ..Default::default() })
            }),
            ("run fingerprint", MAX_FINGERPRINT, |s| {
                Box::new(pb::JobResult { run: run_id(s), ..Default::default() })
            }),
            ("worker_secret", MAX_SECRET, |s| {
                Box::new(pb::ReleaseRequest { worker_secret: s, ..Default::default() })
            }),
            ("run fingerprint", MAX_FINGERPRINT, |s| {
                Box::new(pb::ReleaseRequest { run: run_id(s), ..Default::default() })
            }),
        ];
        for (field, max, make) in cases {
            assert_eq!(refused(&*make(long(max))), None, "{field} at its bound");
            assert_eq!(refused(&*make(long(max + 1))), Some(field), "{field} past its bound");
        }
        assert_eq!(refused(&pb::StatusRequest {}), None);
    }

    /// Each list of a request, and each string and list of an answer.
    #[test]
    fn every_list_and_every_answer_is_bounded() {
        let ids = |k: usize| vec![7u64; k];
        for k in [MAX_IDS, MAX_IDS + 1] {
            let over = (k > MAX_IDS).then_some(());
            let heartbeat = pb::HeartbeatRequest { lease_ids: ids(k), ..Default::default() };
            assert_eq!(refused(&heartbeat), over.map(|()| "lease_ids"));
            let release = pb::ReleaseRequest { job_ids: ids(k), ..Default::default() };
            assert_eq!(refused(&release), over.map(|()| "job_ids"));
            let lost = pb::HeartbeatResponse { lost_lease_ids: ids(k), ..Default::default() };
            assert_eq!(refused(&lost), over.map(|()| "lost_lease_ids"));
            let lease =
                pb::LeaseResponse { jobs: vec![Default::default(); k], ..Default::default() };
            assert_eq!(refused(&lease), over.map(|()| "jobs"));
            let status =
                pb::StatusResponse { workers: vec![Default::default(); k], ..Default::default() };
            assert_eq!(refused(&status), over.map(|()| "workers"));
        }
        let job = pb::JobSpec { prefix: vec![0; MAX_PREFIX + 1], ..Default::default() };
        assert_eq!(
            refused(&pb::LeaseResponse { jobs: vec![job], ..Default::default() }),
            Some("job prefix")
        );
        let secret =
            pb::RegisterResponse { worker_secret: long(MAX_SECRET + 1), ..Default::default() };
        assert_eq!(refused(&secret), Some("worker_secret"));
        let fingerprint =
            pb::RegisterResponse { run: run_id(long(MAX_FINGERPRINT + 1)), ..Default::default() };
        assert_eq!(refused(&fingerprint), Some("run fingerprint"));
        let ack = pb::ResultAck { message: long(MAX_TEXT + 1), ..Default::default() };
        assert_eq!(refused(&ack), Some("ack message"));
        let detail = pb::ErrorDetail { message: long(MAX_TEXT + 1), ..Default::default() };
        assert_eq!(refused(&detail), Some("error detail message"));
        let worker =
            |w: pb::WorkerInfo| pb::StatusResponse { workers: vec![w], ..Default::default() };
        let cases: [(&str, pb::WorkerInfo); 5] = [
            ("worker name", pb::WorkerInfo { name: long(MAX_NAME + 1), ..Default::default() }),
            ("worker host", pb::WorkerInfo { host: long(MAX_NAME + 1), ..Default::default() }),
            (
                "worker version",
                pb::WorkerInfo { version: long(MAX_VERSION + 1), ..Default::default() },
            ),
            (
                "worker credential",
                pb::WorkerInfo { credential: long(MAX_NAME + 1), ..Default::default() },
            ),
            ("worker device", pb::WorkerInfo { device: long(MAX_NAME + 1), ..Default::default() }),
        ];
        for (field, info) in cases {
            assert_eq!(refused(&worker(info)), Some(field));
        }
        let status =
            pb::StatusResponse { run: run_id(long(MAX_FINGERPRINT + 1)), ..Default::default() };
        assert_eq!(refused(&status), Some("run fingerprint"));
    }
}
