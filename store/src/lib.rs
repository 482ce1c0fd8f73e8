//! The durable state of a run: one SQLite file (WAL, synchronous=FULL).
//!
//! The store is the single source of truth. Totals are always summed from committed result rows,
//! never from counters in memory, and a batch of results is committed together with the job-state
//! changes it causes, in one transaction. Only the engine's writer thread writes; `status --state`
//! and `solve --state` open their own connections.
//!
//! One process at a time may write a state file: a second coordinator (or `solve --state`) on the
//! same file would lease and count jobs the first one also counts. Writers hold an exclusive lock
//! on `<state>.lock` and on the file itself (through any link) for as long as their [`Store`]
//! lives; the kernel drops it when the process dies, however it dies, so a crash never leaves a
//! stale lock behind.
//!
//! The store trades plain values: the scheduler's [`Change`](nqueens_scheduler::Change)s in, rows
//! and sums out. It knows nothing of the coordinator's transport (no gRPC, no async runtime).

#![warn(missing_docs)]

#[cfg(test)]
mod answer_tests;
mod apply;
mod backup;
mod checkpoint;
mod checksum;
pub mod credentials;
mod descriptors;
mod error;
mod evidence;
mod lock;
#[cfg(test)]
mod lock_tests;
mod open;
#[cfg(test)]
mod open_tests;
mod rows;
mod schema;
#[cfg(test)]
mod tests;
mod workers;

pub use backup::backup;
pub use checkpoint::LocalCheckpoint;
pub use credentials::{
    add_credential, check_credential_name, revoke_credential, CredentialNumbers, CredentialRow,
};
pub use error::StoreError;
pub use evidence::{CountedJob, Evidence, EVIDENCE_CONFIDENCE};
pub use open::{connections_opened_here, NewRun, ResumedRun, ServeOpen};
pub use rows::{FinalTally, Requeue, Requeued, StoredResult};
pub use workers::{BlockedJobs, WorkerRecord};

use nqueens_core::{JobList, Tally};
use nqueens_scheduler::state::JobsByState;
use nqueens_scheduler::{StoredJob, StoredLease, WorkerId};
use rusqlite::Connection;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

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
    /// The board size.
    pub n: u8,
    /// The `--target-jobs` the job list was split for, if one was given.
    pub target_jobs: Option<u64>,
    /// `n<N>-<job list fingerprint>-p<protocol major>`.
    pub fingerprint: String,
    /// The number of jobs.
    pub job_count: u64,
    /// When the run was created (Unix seconds).
    pub created_unix: f64,
    /// As stored: [`RunKind::as_str`] of the kind that created the run.
    pub kind: String,
    /// How many independent answers every job needs (fixed when the run was made; 1 in files
    /// made before the setting existed). See `SchedulerConfig::replication`.
    pub replication: u8,
}

/// What a new run is made with, fixed for its whole life: the share of jobs drawn to be solved by
/// two parties, and how many independent answers every job needs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RunPolicy {
    /// Fraction (0 to 1) of the jobs that must be solved by two agreeing workers.
    pub verify_fraction: f64,
    /// Independent answers every job needs: 1, or 2 for a record run.
    pub replication: u8,
}

impl Default for RunPolicy {
    fn default() -> Self {
        RunPolicy { verify_fraction: 0.0, replication: 1 }
    }
}

/// The run fingerprint named by every request: board size, job list and the major version of the
/// coordinator's wire protocol (`nqueens_proto::PROTOCOL_MAJOR`, passed in: the store does not
/// depend on the protocol crate).
pub fn run_fingerprint(list: &JobList, protocol_major: u32) -> String {
    format!("n{}-{}-p{protocol_major}", list.n, list.fingerprint())
}

/// Which command made a run. A state file of one kind is refused by the other: a cluster run has
/// leases and workers, a local one has neither.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunKind {
    /// `serve`: a cluster run.
    Cluster,
    /// `solve --state`: a checkpoint of one machine's run.
    Local,
}

impl RunKind {
    /// The name stored in the `meta` table.
    pub fn as_str(self) -> &'static str {
        match self {
            RunKind::Cluster => "cluster",
            RunKind::Local => "local",
        }
    }
}

/// Which jobs are solved twice: each with probability `fraction`, drawn once at run creation with
/// a fresh random key that is never stored or sent. The draw itself is kept in the `jobs.verify`
/// column, so a resume keeps it and no worker can compute which of its results will be compared.
pub(crate) fn verification_draw(fraction: f64) -> impl Fn(u64) -> bool {
    use std::hash::BuildHasher;
    let key = std::collections::hash_map::RandomState::new();
    move |job_id| fraction > 0.0 && (key.hash_one(job_id) as f64 / u64::MAX as f64) < fraction
}

/// A summary of a run computed from committed rows only.
#[derive(Debug, Clone, Default)]
pub struct Summary {
    /// Jobs by state (a done job whose counted row fails its checksum counts as pending).
    pub jobs: JobsByState,
    /// Conflicting results on record.
    pub conflicts: u64,
    /// Workers that registered.
    pub workers: u64,
    /// Workers that lost a settled verification.
    pub untrusted_workers: u64,
    /// Result rows whose checksum fails: damaged or edited, never counted.
    pub bad_rows: u64,
    /// The weighted sums of the counted rows whose checksum holds.
    pub tally: Tally,
    /// When the first counted result was committed (Unix seconds).
    pub first_result_unix: Option<f64>,
    /// When the last counted result was committed (Unix seconds).
    pub last_result_unix: Option<f64>,
}

/// Everything needed to rebuild the scheduler after a restart.
pub struct Loaded {
    /// Every job, by id, as stored.
    pub jobs: Vec<StoredJob>,
    /// Every lease issued so far (the scheduler decides which are still active).
    pub leases: Vec<StoredLease>,
    /// The id the next registered worker gets.
    pub next_worker_id: u64,
    /// Workers that lost a settled verification.
    pub untrusted: Vec<WorkerId>,
}

/// An open state file: a writer (holding the file's lock) or a read-only reader.
pub struct Store {
    conn: Connection,
    path: PathBuf,
    meta: RunMeta,
    /// The run's row checksums; `None` only for a schema 1 file opened read-only.
    mac: Option<checksum::RowMac>,
    /// The credential numbers of this process (see [`CredentialNumbers`]).
    numbers: CredentialNumbers,
    /// The writer's exclusive lock (see the module doc); `None` for read-only stores. Declared
    /// after `conn` so that the connection is closed before the lock is let go.
    _lock: Option<lock::WriterLock>,
}

/// Unix time now, in seconds (0 before 1970): the one clock of the rows' times and of the
/// coordinator's snapshots.
pub fn unix_now() -> f64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs_f64()).unwrap_or(0.0)
}

impl Store {
    fn sql(&self) -> impl Fn(rusqlite::Error) -> StoreError + '_ {
        move |error| StoreError::Sqlite { path: self.path.clone(), error }
    }

    /// The credential numbers of this process: registrations number their credential here, so
    /// that result rows are written with its name and read back into the same number.
    pub fn credential_numbers(&mut self) -> &mut CredentialNumbers {
        &mut self.numbers
    }

    /// SQLite's `data_version` of this connection: it changes whenever another connection
    /// commits, so a reader can tell the file changed without reading it.
    pub fn data_version(&self) -> Result<i64, StoreError> {
        self.conn.query_row("PRAGMA data_version", [], |r| r.get(0)).map_err(self.sql())
    }

    /// What identifies the run.
    pub fn meta(&self) -> &RunMeta {
        &self.meta
    }

    /// The state file.
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
        Duration::from_secs_f64((unix_now() - self.meta.created_unix).max(0.0))
    }
}

/// A worker as stored in the `workers` table: what it registered as. Written by
/// [`Store::apply`]; read, with what the worker did, as a [`WorkerRecord`] by [`Store::workers`].
#[derive(Debug, Clone, PartialEq)]
pub struct WorkerRow {
    /// Its id in the run.
    pub id: u64,
    /// The name it registered with.
    pub name: String,
    /// The host it registered from.
    pub host: String,
    /// Its lease slots: how many jobs it solves at once, as it registered.
    pub slots: u32,
    /// Its version, as it registered.
    pub version: String,
    /// The credential (token name) the worker registered with.
    pub credential: String,
    /// SHA-256 of the worker's own secret (empty for rows that predate it: such an id cannot
    /// be taken up again, its worker registers anew).
    pub secret_digest: Vec<u8>,
    /// What it solves on, as it registered (empty in rows from before schema 7).
    pub device: String,
}
