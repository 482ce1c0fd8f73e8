//! The store's error, and the mapping of SQLite's errors onto it, shared by every module.

use std::path::{Path, PathBuf};
use thiserror::Error;

/// Why a state file cannot be opened, read or written. Each variant names the file; the cause,
/// where there is one, is its [`source`](std::error::Error::source), not repeated in the message.
#[derive(Debug, Error)]
pub enum StoreError {
    /// SQLite refused an operation. Its message is part of ours: rusqlite's errors repeat their
    /// own text as their source, so they are not chained.
    #[error("state file {path}: {error}")]
    Sqlite {
        /// The state file.
        path: PathBuf,
        /// What SQLite said.
        error: rusqlite::Error,
    },
    /// The file is not one of ours (another program's, or not a database); it was not changed.
    #[error("{path} is not an nqueens state file, refused and left untouched: {reason}")]
    NotOurs {
        /// The file.
        path: PathBuf,
        /// What it is instead.
        reason: String,
    },
    /// The file cannot be read.
    #[error("cannot read state file {path}")]
    Io {
        /// The state file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// A `token add` / `token revoke` that cannot be done (the name is taken or not plain).
    #[error("{0}")]
    Credential(String),
    /// No random key could be made for a new (or migrated) run.
    #[error("cannot make the checksum key of state file {path}")]
    Random {
        /// The state file.
        path: PathBuf,
        /// The cause.
        source: getrandom::Error,
    },
    /// The file is ours but damaged, or what it holds does not add up.
    #[error("state file {path} is corrupt or not an nqueens state file: {reason}")]
    Corrupt {
        /// The state file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// The file holds another run (N, job list, protocol, kind or schema).
    #[error("state file {path} belongs to another run: {reason}")]
    OtherRun {
        /// The state file.
        path: PathBuf,
        /// How the runs differ.
        reason: String,
    },
    /// There is no file to read.
    #[error("state file {path} does not exist")]
    Missing {
        /// The path asked for.
        path: PathBuf,
    },
    /// Another process writes the file.
    #[error("state file {path} is in use by another process (a coordinator or `solve --state` holds {lock}); stop it first, or read the file with `status --state`")]
    InUse {
        /// The state file.
        path: PathBuf,
        /// The lock held (the `.lock` file, or the state file itself).
        lock: PathBuf,
    },
    /// The lock file cannot be opened.
    #[error("cannot open the lock file {lock} of state file {path}")]
    Lock {
        /// The state file.
        path: PathBuf,
        /// The lock file.
        lock: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// `backup` cannot write its copy there.
    #[error("cannot back up to {path}: {reason}")]
    BackupTarget {
        /// The copy asked for.
        path: PathBuf,
        /// Why not.
        reason: String,
    },
    /// The job list or the sums cannot be made.
    #[error("building the job list")]
    Core(#[from] nqueens_core::CoreError),
    /// A per-job count that the signed 64-bit columns cannot hold; refused before anything is
    /// written.
    #[error("state file {path}: job {job_id}'s {field} = {value} does not fit a stored count (at most 2^63 - 1)")]
    CountOutOfRange {
        /// The state file.
        path: PathBuf,
        /// The job.
        job_id: u64,
        /// Which count.
        field: &'static str,
        /// Its value.
        value: u64,
    },
}

/// A SQLite error on the file at `path`: [`StoreError::Corrupt`] where SQLite says the file is not
/// a database or is damaged, [`StoreError::Sqlite`] otherwise.
pub(crate) fn corrupt_or_sql(path: &Path, e: rusqlite::Error) -> StoreError {
    match e.sqlite_error_code() {
        Some(rusqlite::ErrorCode::NotADatabase) | Some(rusqlite::ErrorCode::DatabaseCorrupt) => {
            StoreError::Corrupt { path: path.into(), reason: e.to_string() }
        }
        _ => StoreError::Sqlite { path: path.into(), error: e },
    }
}
