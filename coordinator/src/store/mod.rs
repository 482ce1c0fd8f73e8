//! The durable state of a run: one SQLite file (WAL, synchronous=FULL).
//!
//! The store is the single source of truth. Totals are always summed from committed result rows,
//! never from counters in memory, and a batch of results is committed together with the job-state
//! changes it causes, in one transaction. Only the engine's writer thread writes; `status --state`
//! and `solve --state` open their own connections.
//!
//! One process at a time may write a state file: a second coordinator (or `solve --state`) on the
//! same file would lease and count jobs the first one also counts. Writers hold an exclusive lock
//! on `<state>.lock` and on the file itself (through any link) for as long as their [`Store`] lives; the kernel drops it when the process
//! dies, however it dies, so a crash never leaves a stale lock behind.

mod checkpoint;
mod checksum;
mod credentials;
mod lock;
mod open;
mod rows;
mod schema;
#[cfg(test)]
mod tests;
mod workers;

pub use checkpoint::LocalCheckpoint;
pub use credentials::{add_credential, revoke_credential, CredentialRow};
pub use open::APPLICATION_ID;
pub use rows::StoredResult;
pub use schema::SCHEMA_VERSION;
pub use workers::BlockedJobs;

use nqueens_core::{JobList, Tally};
use nqueens_scheduler::state::JobsByState;
use nqueens_scheduler::{StoredJob, StoredLease, WorkerId};
use rusqlite::Connection;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use thiserror::Error;

/// Why a state file cannot be opened, read or written. Each variant names the file; the cause,
/// where there is one, is its [`source`](std::error::Error::source), not repeated in the message.
#[derive(Debug, Error)]
pub enum StoreError {
    /// SQLite refused an operation. Its message is part of ours: rusqlite's errors repeat their
    /// own text as their source, so they are not chained.
    #[error("state file {path}: {error}")]
    Sqlite { path: PathBuf, error: rusqlite::Error },
    #[error("{path} is not an nqueens state file, refused and left untouched: {reason}")]
    NotOurs { path: PathBuf, reason: String },
    #[error("cannot read state file {path}")]
    Io { path: PathBuf, source: std::io::Error },
    /// A `token add` / `token revoke` that cannot be done (the name is taken or not plain).
    #[error("{0}")]
    Credential(String),
    #[error("cannot make the checksum key of state file {path}")]
    Random { path: PathBuf, source: getrandom::Error },
    #[error("state file {path} is corrupt or not an nqueens state file: {reason}")]
    Corrupt { path: PathBuf, reason: String },
    #[error("state file {path} belongs to another run: {reason}")]
    OtherRun { path: PathBuf, reason: String },
    #[error("state file {path} does not exist")]
    Missing { path: PathBuf },
    #[error("state file {path} is in use by another process (a coordinator or `solve --state` holds {lock}); stop it first, or read the file with `status --state`")]
    InUse { path: PathBuf, lock: PathBuf },
    #[error("cannot open the lock file {lock} of state file {path}")]
    Lock { path: PathBuf, lock: PathBuf, source: std::io::Error },
    #[error("building the job list")]
    Core(#[from] nqueens_core::CoreError),
    /// A per-job count that the signed 64-bit columns cannot hold; refused before anything is written.
    #[error("state file {path}: job {job_id}'s {field} = {value} does not fit a stored count (at most 2^63 - 1)")]
    CountOutOfRange { path: PathBuf, job_id: u64, field: &'static str, value: u64 },
}

/// A per-job count as the `results` table stores it: a non-negative SQLite integer. Anything else
/// (negative, real, text, NULL) is `None`: the row is refused, never counted.
pub(crate) fn stored_count(value: rusqlite::types::ValueRef<'_>) -> Option<u64> {
    match value {
        rusqlite::types::ValueRef::Integer(i) => u64::try_from(i).ok(),
        _ => None,
    }
}

/// The four counts of a result row from columns `first..first + 4` (solutions, sym180, sym90,
/// nodes), or `None` if any of them is not a valid stored count.
pub(crate) fn stored_counts(
    row: &rusqlite::Row<'_>,
    first: usize,
) -> rusqlite::Result<Option<nqueens_core::JobCounts>> {
    let mut v = [0u64; 4];
    for (i, slot) in v.iter_mut().enumerate() {
        match stored_count(row.get_ref(first + i)?) {
            Some(c) => *slot = c,
            None => return Ok(None),
        }
    }
    Ok(Some(nqueens_core::JobCounts { solutions: v[0], sym180: v[1], sym90: v[2], nodes: v[3] }))
}

/// What identifies a run; stored in the `meta` table.
#[derive(Debug, Clone, PartialEq)]
pub struct RunMeta {
    pub n: u8,
    pub target_jobs: Option<u64>,
    /// `n<N>-<job list fingerprint>-p<protocol major>`.
    pub fingerprint: String,
    pub job_count: u64,
    pub created_unix: f64,
    /// "cluster" for `serve`, "local" for `solve --state`.
    pub kind: String,
}

/// The run fingerprint named by every request: board size, job list and protocol major version.
pub fn run_fingerprint(list: &JobList) -> String {
    format!("n{}-{}-p{}", list.n, list.fingerprint(), nqueens_proto::PROTOCOL_MAJOR)
}

/// Which jobs are solved twice: each with probability `fraction`, drawn once at run creation with
/// a fresh random key that is never stored or sent. The draw itself is kept in the `jobs.verify`
/// column, so a resume keeps it and no worker can compute which of its results will be compared.
pub fn verification_draw(fraction: f64) -> impl Fn(u64) -> bool {
    use std::hash::BuildHasher;
    let key = std::collections::hash_map::RandomState::new();
    move |job_id| fraction > 0.0 && (key.hash_one(job_id) as f64 / u64::MAX as f64) < fraction
}

/// A summary of a run computed from committed rows only.
#[derive(Debug, Clone, Default)]
pub struct Summary {
    pub jobs: JobsByState,
    pub conflicts: u64,
    pub workers: u64,
    pub untrusted_workers: u64,
    /// Result rows whose checksum fails: damaged or edited, never counted.
    pub bad_rows: u64,
    pub tally: Tally,
    pub first_result_unix: Option<f64>,
    pub last_result_unix: Option<f64>,
}

/// Everything needed to rebuild the scheduler after a restart.
pub struct Loaded {
    pub jobs: Vec<StoredJob>,
    pub leases: Vec<StoredLease>,
    pub next_worker_id: u64,
    /// Workers that lost a settled verification.
    pub untrusted: Vec<WorkerId>,
}

pub struct Store {
    conn: Connection,
    path: PathBuf,
    meta: RunMeta,
    /// The run's row checksums; `None` only for a schema 1 file opened read-only.
    mac: Option<checksum::RowMac>,
    /// The writer's exclusive lock (see the module doc); `None` for read-only stores. Declared
    /// after `conn` so that the connection is closed before the lock is let go.
    _lock: Option<lock::WriterLock>,
}

fn now_unix() -> f64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs_f64()).unwrap_or(0.0)
}

impl Store {
    fn sql(&self) -> impl Fn(rusqlite::Error) -> StoreError + '_ {
        move |error| StoreError::Sqlite { path: self.path.clone(), error }
    }

    pub fn meta(&self) -> &RunMeta {
        &self.meta
    }
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Copies the write-ahead log into the file and empties it (`wal_checkpoint(TRUNCATE)`), so
    /// that the `.db` alone holds every committed change: done at a clean stop and when the run
    /// completes. A checkpoint that readers hold up is retried by the next one; it loses nothing.
    pub fn checkpoint(&self) -> Result<(), StoreError> {
        let (busy, log, done): (i64, i64, i64) = self
            .conn
            .query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |r| {
                Ok((r.get(0)?, r.get(1)?, r.get(2)?))
            })
            .map_err(self.sql())?;
        if busy != 0 {
            tracing::warn!(state = %self.path.display(), log, done, "WAL checkpoint held up by a reader; the -wal file still holds part of the state");
        } else {
            tracing::debug!(state = %self.path.display(), pages = done, "WAL checkpointed: the state file stands alone");
        }
        Ok(())
    }

    /// Wall time since the run was created.
    pub fn age(&self) -> Duration {
        Duration::from_secs_f64((now_unix() - self.meta.created_unix).max(0.0))
    }
}

/// A worker as stored in the `workers` table.
#[derive(Debug, Clone)]
pub struct WorkerRow {
    pub id: u64,
    pub name: String,
    pub host: String,
    pub cores: u32,
    pub version: String,
    /// The credential (token name) the worker registered with.
    pub credential: String,
    /// SHA-256 of the worker's own secret (empty for rows that predate it: such an id cannot
    /// be taken up again, its worker registers anew).
    pub secret_digest: Vec<u8>,
}
