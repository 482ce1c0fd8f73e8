//! Opening a state file: the connection settings (WAL, synchronous=FULL), and the checks that it is
//! a valid state file of the expected run before anything is written.

use super::lock::WriterLock;
use super::schema::UNTRUSTED_TABLE;
use super::{now_unix, run_fingerprint, RunMeta, Store, StoreError};
use nqueens_core::JobList;
use rusqlite::{Connection, OpenFlags};
use std::path::Path;
use std::time::Duration;

impl Store {
    /// Opens the run in `path`, creating it from `list` if the file does not exist. Refuses a file
    /// of another N, split, job list or protocol version, and one that is not a valid state file.
    pub fn open_or_create(
        path: &Path,
        list: &JobList,
        verify_fraction: f64,
        kind: &str,
    ) -> Result<Store, StoreError> {
        let lock = WriterLock::acquire(path)?;
        match Self::open_or_create_locked(path, list, verify_fraction, kind) {
            Ok(store) => Ok(Store { _lock: Some(lock), ..store }),
            Err(e) => {
                lock.discard();
                Err(e)
            }
        }
    }

    fn open_or_create_locked(
        path: &Path,
        list: &JobList,
        verify_fraction: f64,
        kind: &str,
    ) -> Result<Store, StoreError> {
        let fingerprint = run_fingerprint(list);
        let exists = path.exists();
        let conn = open_conn(path, false)?;
        let mut store = Store {
            conn,
            _lock: None,
            path: path.to_owned(),
            meta: RunMeta {
                n: list.n,
                target_jobs: list.params.target_jobs,
                fingerprint: fingerprint.clone(),
                job_count: list.jobs.len() as u64,
                created_unix: now_unix(),
                kind: kind.to_owned(),
            },
        };
        if exists && store.has_meta()? {
            let stored = store.read_meta()?;
            if stored.n != list.n {
                return Err(StoreError::OtherRun {
                    path: path.into(),
                    reason: format!("it is a run of N={}, not N={}", stored.n, list.n),
                });
            }
            if stored.fingerprint != fingerprint {
                return Err(StoreError::OtherRun {
                    path: path.into(),
                    reason: format!("its run fingerprint is {} but this N and split give {fingerprint} (other --target-jobs or incompatible version)", stored.fingerprint),
                });
            }
            if stored.kind != kind {
                return Err(StoreError::OtherRun {
                    path: path.into(),
                    reason: format!("it is a {} run, not a {kind} run", stored.kind),
                });
            }
            let jobs: i64 = store
                .conn
                .query_row("SELECT COUNT(*) FROM jobs", [], |r| r.get(0))
                .map_err(store.sql())?;
            if jobs as u64 != list.jobs.len() as u64 {
                return Err(StoreError::Corrupt {
                    path: path.into(),
                    reason: format!("{jobs} job rows, expected {}", list.jobs.len()),
                });
            }
            store.meta = stored;
            // Added after schema 1 shipped; created on open so older state files keep working.
            store.conn.execute_batch(UNTRUSTED_TABLE).map_err(store.sql())?;
            return Ok(store);
        }
        store.create(list, verify_fraction)?;
        Ok(store)
    }

    /// Opens an existing state file read-only, for `status --state`.
    pub fn open_existing(path: &Path) -> Result<Store, StoreError> {
        Self::open_existing_file(path, false)
    }

    /// Opens an existing state file to change it offline ([`Store::requeue`]), holding the
    /// writer's lock: refused while a coordinator runs on it.
    pub fn open_existing_for_update(path: &Path) -> Result<Store, StoreError> {
        Self::open_existing_file(path, true)
    }

    fn open_existing_file(path: &Path, write: bool) -> Result<Store, StoreError> {
        if !path.exists() {
            return Err(StoreError::Missing { path: path.into() });
        }
        let lock = if write { Some(WriterLock::acquire(path)?) } else { None };
        match Self::open_existing_locked(path, write) {
            Ok(store) => Ok(Store { _lock: lock, ..store }),
            Err(e) => {
                if let Some(lock) = lock {
                    lock.discard();
                }
                Err(e)
            }
        }
    }

    fn open_existing_locked(path: &Path, write: bool) -> Result<Store, StoreError> {
        let conn = open_conn(path, !write)?;
        let mut store = Store {
            conn,
            _lock: None,
            path: path.into(),
            meta: RunMeta {
                n: 0,
                target_jobs: None,
                fingerprint: String::new(),
                job_count: 0,
                created_unix: 0.0,
                kind: String::new(),
            },
        };
        if !store.has_meta()? {
            return Err(StoreError::Corrupt {
                path: path.into(),
                reason: "no run metadata".into(),
            });
        }
        store.meta = store.read_meta()?;
        Ok(store)
    }
}

pub(super) fn corrupt_or_sql(path: &Path, e: rusqlite::Error) -> StoreError {
    match e.sqlite_error_code() {
        Some(rusqlite::ErrorCode::NotADatabase) | Some(rusqlite::ErrorCode::DatabaseCorrupt) => {
            StoreError::Corrupt { path: path.into(), reason: e.to_string() }
        }
        _ => StoreError::Sqlite { path: path.into(), error: e },
    }
}

fn open_conn(path: &Path, read_only: bool) -> Result<Connection, StoreError> {
    let flags = if read_only {
        OpenFlags::SQLITE_OPEN_READ_ONLY
    } else {
        OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_CREATE
    };
    let conn = Connection::open_with_flags(path, flags | OpenFlags::SQLITE_OPEN_NO_MUTEX)
        .map_err(|e| corrupt_or_sql(path, e))?;
    conn.busy_timeout(Duration::from_secs(10)).map_err(|e| corrupt_or_sql(path, e))?;
    if !read_only {
        // Fails on a file that is not a database, which is reported as corrupt.
        let mode: String = conn
            .query_row("PRAGMA journal_mode=WAL", [], |r| r.get(0))
            .map_err(|e| corrupt_or_sql(path, e))?;
        if !mode.eq_ignore_ascii_case("wal") {
            return Err(StoreError::Corrupt {
                path: path.into(),
                reason: format!("cannot switch to WAL (journal mode {mode})"),
            });
        }
        conn.execute_batch("PRAGMA synchronous=FULL;").map_err(|e| corrupt_or_sql(path, e))?;
    }
    let check: String = conn
        .query_row("PRAGMA quick_check", [], |r| r.get(0))
        .map_err(|e| corrupt_or_sql(path, e))?;
    if check != "ok" {
        return Err(StoreError::Corrupt { path: path.into(), reason: check });
    }
    Ok(conn)
}
