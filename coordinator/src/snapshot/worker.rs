//! The one shape of a worker for readers: what the engine knows of a worker registered with this
//! process, or (offline) what its stored row records. The engine keeps its own bookkeeping
//! (`engine/registry.rs`) and the store its row; every reader sees this.

use crate::secrets::Credential;
use nqueens_store::WorkerRecord;
use serde::Serialize;

/// One worker as `status` shows it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct WorkerView {
    /// Its id in the run.
    pub worker_id: u64,
    /// The name it registered with.
    pub name: String,
    /// The host it registered from.
    pub host: String,
    /// Its lease slots: how many jobs it solves at once, as it registered.
    pub slots: u32,
    /// Its version, as it registered.
    pub version: String,
    /// Its answers taken: counted, confirming a counted one, or an opinion waiting for another
    /// (live: since the coordinator started; offline: the whole run).
    pub results: u64,
    /// Conflicts it was party to.
    pub conflicts: u64,
    /// Jobs leased to it now.
    pub jobs_leased: u64,
    /// Seconds since it was last heard from: live, its last authenticated call or registration;
    /// offline, its last result row or registration, whichever is later.
    pub last_seen_seconds_ago: f64,
    /// It lost a settled verification (or reported too many solver errors): refused.
    pub untrusted: bool,
    /// The credential (token name) it registered with: `shared` for the `--token` secret.
    pub credential: String,
    /// What it solves on, as it registered (empty offline for rows from before schema 7).
    pub device: String,
    /// Its counted results per second over the last lease period (live coordinators only).
    pub results_per_second: f64,
    /// Its credential's standing: `probation`, `trusted` or `untrusted` (live coordinators only,
    /// else empty or `untrusted`).
    pub trust: String,
    /// Jobs its last lease call was sized for (live coordinators only).
    pub lease_size: u64,
}

impl From<WorkerRecord> for WorkerView {
    /// A worker as the state file records it; what only a live coordinator knows (its rate, trust
    /// and lease size of the moment) is left empty.
    fn from(r: WorkerRecord) -> Self {
        WorkerView {
            worker_id: r.row.id,
            name: r.row.name,
            host: r.row.host,
            slots: r.row.slots,
            version: r.row.version,
            results: r.results,
            conflicts: r.conflicts,
            jobs_leased: r.jobs_leased,
            last_seen_seconds_ago: r.last_seen_seconds_ago,
            untrusted: r.untrusted,
            credential: Credential::from_stored(&r.row.credential).name,
            device: r.row.device,
            results_per_second: 0.0,
            trust: if r.untrusted { "untrusted".into() } else { String::new() },
            lease_size: 0,
        }
    }
}
