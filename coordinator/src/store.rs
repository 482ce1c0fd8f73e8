//! The durable state of a run: one SQLite file (WAL, synchronous=FULL).
//!
//! The store is the single source of truth. Totals are always summed from committed result rows,
//! never from counters in memory, and a batch of results is committed together with the job-state
//! changes it causes, in one transaction. Only the engine's writer thread writes; `status --state`
//! and `solve --state` open their own connections.
//!
//! One process at a time may write a state file: a second coordinator (or `solve --state`) on the
//! same file would lease and count jobs the first one also counts. Writers hold an exclusive lock
//! on `<state>.lock` for as long as their [`Store`] lives; the kernel drops it when the process
//! dies, however it dies, so a crash never leaves a stale lock behind.

use crate::lifecycle::{Change, JobEntry, LeaseRecord, Standing};
use crate::state::{JobState, JobsByState, ResultKind};
use nqueens_core::{JobCounts, JobList, SplitParams, Tally, Totals};
use rusqlite::{params, Connection, OpenFlags, OptionalExtension};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use thiserror::Error;

/// Schema version of the state file.
pub const SCHEMA_VERSION: u32 = 1;

#[derive(Debug, Error)]
pub enum StoreError {
    #[error("state file {path}: {source}")]
    Sqlite { path: PathBuf, source: rusqlite::Error },
    #[error("state file {path} is corrupt or not an nqueens state file: {reason}")]
    Corrupt { path: PathBuf, reason: String },
    #[error("state file {path} belongs to another run: {reason}")]
    OtherRun { path: PathBuf, reason: String },
    #[error("state file {path} does not exist")]
    Missing { path: PathBuf },
    #[error("state file {path} is in use by another process (a coordinator or `solve --state` holds {lock}); stop it first, or read the file with `status --state`")]
    InUse { path: PathBuf, lock: PathBuf },
    #[error("cannot open the lock file {lock} of state file {path}: {source}")]
    Lock { path: PathBuf, lock: PathBuf, source: std::io::Error },
    #[error("building the job list: {0}")]
    Core(#[from] nqueens_core::CoreError),
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

/// Which jobs are solved twice: a fixed pseudo-random `fraction` of ids, the same on every resume.
pub fn chosen_for_verification(job_id: u64, fraction: f64) -> bool {
    if fraction <= 0.0 {
        return false;
    }
    let mut x = job_id.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^= x >> 31;
    (x as f64 / u64::MAX as f64) < fraction
}

/// A summary of a run computed from committed rows only.
#[derive(Debug, Clone, Default)]
pub struct Summary {
    pub jobs: JobsByState,
    pub conflicts: u64,
    pub workers: u64,
    pub untrusted_workers: u64,
    pub tally: Tally,
    pub first_result_unix: Option<f64>,
    pub last_result_unix: Option<f64>,
}

/// Everything needed to rebuild the scheduler after a restart.
pub struct Loaded {
    pub jobs: Vec<JobEntry>,
    pub leases: HashMap<u64, LeaseRecord>,
    pub next_worker_id: u64,
    /// Workers that lost a settled verification.
    pub untrusted: Vec<u64>,
}

pub struct Store {
    conn: Connection,
    path: PathBuf,
    meta: RunMeta,
    /// The writer's exclusive lock (see the module doc); `None` for read-only stores. Declared
    /// after `conn` so that the connection is closed before the lock is let go.
    _lock: Option<std::fs::File>,
}

/// The lock file beside a state file.
fn lock_path(path: &Path) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(".lock");
    PathBuf::from(name)
}

/// Takes the exclusive writer's lock of the state file at `path`, without waiting. A filesystem
/// that cannot lock at all (some cluster filesystems mounted without lock support) gets a warning,
/// not a refusal: the run must still be able to start there.
fn lock_state(path: &Path) -> Result<Option<std::fs::File>, StoreError> {
    let lock = lock_path(path);
    // A lock file made by another user (say `requeue` run as root) may be read-only to this one;
    // the lock works through a read-only handle all the same.
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&lock)
        .or_else(|_| std::fs::File::open(&lock))
        .map_err(|source| StoreError::Lock { path: path.into(), lock: lock.clone(), source })?;
    match file.try_lock() {
        Ok(()) => Ok(Some(file)),
        Err(std::fs::TryLockError::WouldBlock) => {
            Err(StoreError::InUse { path: path.into(), lock })
        }
        Err(std::fs::TryLockError::Error(e)) => {
            tracing::warn!(lock = %lock.display(), error = %e, "cannot lock the state file here; make sure no other process writes it");
            Ok(None)
        }
    }
}

fn now_unix() -> f64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs_f64()).unwrap_or(0.0)
}

impl Store {
    fn sql(&self) -> impl Fn(rusqlite::Error) -> StoreError + '_ {
        move |source| StoreError::Sqlite { path: self.path.clone(), source }
    }

    /// Opens the run in `path`, creating it from `list` if the file does not exist. Refuses a file
    /// of another N, split, job list or protocol version, and one that is not a valid state file.
    pub fn open_or_create(
        path: &Path,
        list: &JobList,
        verify_fraction: f64,
        kind: &str,
    ) -> Result<Store, StoreError> {
        let fingerprint = run_fingerprint(list);
        let lock = lock_state(path)?;
        let exists = path.exists();
        let conn = open_conn(path, false)?;
        let mut store = Store {
            conn,
            _lock: lock,
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
        let lock = if write { lock_state(path)? } else { None };
        let conn = open_conn(path, !write)?;
        let mut store = Store {
            conn,
            _lock: lock,
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

    /// Returns the jobs that are `held` (results kept disagreeing) and/or `failed` (the solver
    /// kept reporting errors) to the queue, and says how many of each. Their results and conflicts
    /// stay on record, and so do their counters: each requeue buys one more attempt, and a new
    /// result that agrees with another worker's earlier one settles a held job.
    pub fn requeue(&mut self, held: bool, failed: bool) -> Result<(u64, u64), StoreError> {
        let path = self.path.clone();
        let sql = move |source| StoreError::Sqlite { path: path.clone(), source };
        let tx = self.conn.transaction().map_err(&sql)?;
        let requeue = |state: JobState| {
            tx.execute(
                "UPDATE jobs SET state=?1, lease_id=NULL, worker_id=NULL WHERE state=?2",
                [JobState::Pending.as_str(), state.as_str()],
            )
        };
        let held_requeued = if held { requeue(JobState::Held).map_err(&sql)? as u64 } else { 0 };
        let failed_requeued =
            if failed { requeue(JobState::Failed).map_err(&sql)? as u64 } else { 0 };
        tx.commit().map_err(&sql)?;
        Ok((held_requeued, failed_requeued))
    }

    pub fn meta(&self) -> &RunMeta {
        &self.meta
    }
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The split the run was created with.
    pub fn split_params(&self) -> SplitParams {
        SplitParams { target_jobs: self.meta.target_jobs }
    }

    /// Ids of the workers marked untrusted (none in a read-only file that predates the table).
    pub fn untrusted_workers(&self) -> Result<Vec<u64>, StoreError> {
        let sql = self.sql();
        let table: Option<String> = self
            .conn
            .query_row(
                "SELECT name FROM sqlite_master WHERE type='table' AND name='untrusted_workers'",
                [],
                |r| r.get(0),
            )
            .optional()
            .map_err(&sql)?;
        if table.is_none() {
            return Ok(Vec::new());
        }
        let mut q = self
            .conn
            .prepare("SELECT worker_id FROM untrusted_workers ORDER BY worker_id")
            .map_err(&sql)?;
        let ids = q
            .query_map([], |r| r.get::<_, i64>(0))
            .map_err(&sql)?
            .map(|r| r.map(|v| v as u64))
            .collect::<Result<Vec<_>, _>>()
            .map_err(&sql)?;
        Ok(ids)
    }

    fn has_meta(&self) -> Result<bool, StoreError> {
        let found: Option<String> = self
            .conn
            .query_row(
                "SELECT name FROM sqlite_master WHERE type='table' AND name='meta'",
                [],
                |r| r.get(0),
            )
            .optional()
            .map_err(|e| corrupt_or_sql(&self.path, e))?;
        Ok(found.is_some())
    }

    fn read_meta(&self) -> Result<RunMeta, StoreError> {
        let get = |key: &str| -> Result<String, StoreError> {
            self.conn
                .query_row("SELECT value FROM meta WHERE key=?1", [key], |r| r.get::<_, String>(0))
                .optional()
                .map_err(|e| corrupt_or_sql(&self.path, e))?
                .ok_or_else(|| StoreError::Corrupt {
                    path: self.path.clone(),
                    reason: format!("meta key {key} missing"),
                })
        };
        let bad = |what: &str| StoreError::Corrupt {
            path: self.path.clone(),
            reason: format!("bad meta value {what}"),
        };
        let schema: u32 = get("schema")?.parse().map_err(|_| bad("schema"))?;
        if schema != SCHEMA_VERSION {
            return Err(StoreError::OtherRun {
                path: self.path.clone(),
                reason: format!("schema version {schema}, this binary reads {SCHEMA_VERSION}"),
            });
        }
        let target = get("target_jobs")?;
        Ok(RunMeta {
            n: get("n")?.parse().map_err(|_| bad("n"))?,
            target_jobs: if target.is_empty() {
                None
            } else {
                Some(target.parse().map_err(|_| bad("target_jobs"))?)
            },
            fingerprint: get("fingerprint")?,
            job_count: get("job_count")?.parse().map_err(|_| bad("job_count"))?,
            created_unix: get("created_unix")?.parse().map_err(|_| bad("created_unix"))?,
            kind: get("kind")?,
        })
    }

    fn create(&mut self, list: &JobList, verify_fraction: f64) -> Result<(), StoreError> {
        let path = self.path.clone();
        let sql = move |source| StoreError::Sqlite { path: path.clone(), source };
        let tx = self.conn.transaction().map_err(&sql)?;
        tx.execute_batch(
            "CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
             CREATE TABLE jobs (id INTEGER PRIMARY KEY, weight INTEGER NOT NULL, estimate INTEGER NOT NULL,
                 verify INTEGER NOT NULL, state TEXT NOT NULL, lease_id INTEGER, worker_id INTEGER,
                 errors INTEGER NOT NULL DEFAULT 0, conflicts INTEGER NOT NULL DEFAULT 0);
             CREATE TABLE results (id INTEGER PRIMARY KEY, job_id INTEGER NOT NULL, worker_id INTEGER NOT NULL,
                 lease_id INTEGER NOT NULL, solutions INTEGER NOT NULL, sym180 INTEGER NOT NULL, sym90 INTEGER NOT NULL,
                 nodes INTEGER NOT NULL, seconds REAL NOT NULL, counted INTEGER NOT NULL, kind TEXT NOT NULL, at REAL NOT NULL);
             CREATE INDEX results_job ON results(job_id);
             CREATE TABLE leases (id INTEGER PRIMARY KEY, worker_id INTEGER NOT NULL, job_ids TEXT NOT NULL, at REAL NOT NULL);
             CREATE TABLE workers (id INTEGER PRIMARY KEY, name TEXT, host TEXT, cores INTEGER, version TEXT, registered REAL);
             CREATE TABLE conflicts (id INTEGER PRIMARY KEY, job_id INTEGER NOT NULL, worker_a INTEGER, worker_b INTEGER, detail TEXT, at REAL);",
        )
        .map_err(&sql)?;
        tx.execute_batch(UNTRUSTED_TABLE).map_err(&sql)?;
        let m = &self.meta;
        let meta = [
            ("schema", SCHEMA_VERSION.to_string()),
            ("n", m.n.to_string()),
            ("target_jobs", m.target_jobs.map(|t| t.to_string()).unwrap_or_default()),
            ("fingerprint", m.fingerprint.clone()),
            ("job_count", m.job_count.to_string()),
            ("created_unix", m.created_unix.to_string()),
            ("kind", m.kind.clone()),
            ("verify_fraction", verify_fraction.to_string()),
        ];
        for (k, v) in meta {
            tx.execute("INSERT INTO meta(key, value) VALUES (?1, ?2)", params![k, v])
                .map_err(&sql)?;
        }
        {
            let mut insert = tx.prepare("INSERT INTO jobs(id, weight, estimate, verify, state) VALUES (?1, ?2, ?3, ?4, ?5)").map_err(&sql)?;
            for job in &list.jobs {
                let verify = chosen_for_verification(job.id, verify_fraction);
                insert
                    .execute(params![
                        job.id as i64,
                        job.weight,
                        job.estimate as i64,
                        verify,
                        JobState::Pending.as_str()
                    ])
                    .map_err(&sql)?;
            }
        }
        tx.commit().map_err(&sql)?;
        Ok(())
    }

    /// Reloads jobs, their results and the leases issued so far.
    pub fn load(&self) -> Result<Loaded, StoreError> {
        let sql = self.sql();
        let mut jobs = Vec::with_capacity(self.meta.job_count as usize);
        {
            let mut q = self.conn.prepare("SELECT id, estimate, verify, state, lease_id, errors, conflicts FROM jobs ORDER BY id").map_err(&sql)?;
            let mut rows = q.query([]).map_err(&sql)?;
            while let Some(r) = rows.next().map_err(&sql)? {
                let id: i64 = r.get(0).map_err(&sql)?;
                if id as usize != jobs.len() {
                    return Err(StoreError::Corrupt {
                        path: self.path.clone(),
                        reason: format!("job ids not contiguous at {id}"),
                    });
                }
                let mut entry = JobEntry::new(
                    r.get::<_, i64>(1).map_err(&sql)? as u64,
                    r.get(2).map_err(&sql)?,
                );
                let state: String = r.get(3).map_err(&sql)?;
                let lease: Option<i64> = r.get(4).map_err(&sql)?;
                entry.errors = r.get(5).map_err(&sql)?;
                entry.conflicts = r.get(6).map_err(&sql)?;
                entry.standing = match JobState::parse(&state) {
                    Some(JobState::Pending) => Standing::Pending,
                    // Deadline and worker are filled in by Lifecycle::new (fresh grace period).
                    Some(JobState::Leased) => Standing::Leased {
                        lease_id: lease.unwrap_or(0) as u64,
                        worker_id: 0,
                        deadline: Instant::now(),
                    },
                    Some(JobState::Done) => Standing::Done,
                    Some(JobState::Held) => Standing::Held,
                    Some(JobState::Failed) => Standing::Failed,
                    None => {
                        return Err(StoreError::Corrupt {
                            path: self.path.clone(),
                            reason: format!("unknown job state {state}"),
                        })
                    }
                };
                jobs.push(entry);
            }
        }
        {
            let mut q = self.conn.prepare("SELECT job_id, worker_id, solutions, sym180, sym90, nodes, counted, kind FROM results ORDER BY id").map_err(&sql)?;
            let mut rows = q.query([]).map_err(&sql)?;
            while let Some(r) = rows.next().map_err(&sql)? {
                let job_id = r.get::<_, i64>(0).map_err(&sql)? as usize;
                let worker = r.get::<_, i64>(1).map_err(&sql)? as u64;
                let counts = JobCounts {
                    solutions: r.get::<_, i64>(2).map_err(&sql)? as u64,
                    sym180: r.get::<_, i64>(3).map_err(&sql)? as u64,
                    sym90: r.get::<_, i64>(4).map_err(&sql)? as u64,
                    nodes: r.get::<_, i64>(5).map_err(&sql)? as u64,
                };
                let counted: bool = r.get(6).map_err(&sql)?;
                let Some(job) = jobs.get_mut(job_id) else {
                    return Err(StoreError::Corrupt {
                        path: self.path.clone(),
                        reason: format!("result for unknown job {job_id}"),
                    });
                };
                if counted {
                    job.counted = Some((worker, counts));
                } else {
                    job.opinions.push((worker, counts));
                }
            }
        }
        let mut leases = HashMap::new();
        {
            let mut q =
                self.conn.prepare("SELECT id, worker_id, job_ids FROM leases").map_err(&sql)?;
            let mut rows = q.query([]).map_err(&sql)?;
            while let Some(r) = rows.next().map_err(&sql)? {
                let id = r.get::<_, i64>(0).map_err(&sql)? as u64;
                let worker_id = r.get::<_, i64>(1).map_err(&sql)? as u64;
                let text: String = r.get(2).map_err(&sql)?;
                let job_ids = text
                    .split(',')
                    .filter(|s| !s.is_empty())
                    .map(|s| s.parse::<u64>())
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(|_| StoreError::Corrupt {
                        path: self.path.clone(),
                        reason: format!("bad job list of lease {id}"),
                    })?;
                leases.insert(id, LeaseRecord { worker_id, job_ids, active: false });
            }
        }
        let next_worker_id: i64 = self
            .conn
            .query_row("SELECT COALESCE(MAX(id), 0) + 1 FROM workers", [], |r| r.get(0))
            .map_err(&sql)?;
        let untrusted = self.untrusted_workers()?;
        Ok(Loaded { jobs, leases, next_worker_id: next_worker_id as u64, untrusted })
    }

    /// Commits `changes` (and the worker rows in `workers`) in one transaction.
    pub fn apply(&mut self, changes: &[Change], workers: &[WorkerRow]) -> Result<(), StoreError> {
        if changes.is_empty() && workers.is_empty() {
            return Ok(());
        }
        let path = self.path.clone();
        let sql = move |source| StoreError::Sqlite { path: path.clone(), source };
        let at = now_unix();
        let tx = self.conn.transaction().map_err(&sql)?;
        {
            let mut set_state = tx.prepare_cached("UPDATE jobs SET state=?2, lease_id=?3, worker_id=?4, errors=?5, conflicts=?6 WHERE id=?1").map_err(&sql)?;
            let mut insert_result = tx
                .prepare_cached(
                    "INSERT INTO results(job_id, worker_id, lease_id, solutions, sym180, sym90, nodes, seconds, counted, kind, at)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
                )
                .map_err(&sql)?;
            let mut uncount = tx
                .prepare_cached("UPDATE results SET counted=0 WHERE job_id=?1 AND counted=1")
                .map_err(&sql)?;
            let mut insert_lease = tx
                .prepare_cached(
                    "INSERT INTO leases(id, worker_id, job_ids, at) VALUES (?1, ?2, ?3, ?4)",
                )
                .map_err(&sql)?;
            let mut insert_conflict = tx.prepare_cached("INSERT INTO conflicts(job_id, worker_a, worker_b, detail, at) VALUES (?1, ?2, ?3, ?4, ?5)").map_err(&sql)?;
            let mut insert_untrusted = tx
                .prepare_cached("INSERT OR IGNORE INTO untrusted_workers(worker_id, job_id, detail, requeued, at) VALUES (?1, ?2, ?3, ?4, ?5)")
                .map_err(&sql)?;
            let mut upsert_worker = tx
                .prepare_cached("INSERT OR REPLACE INTO workers(id, name, host, cores, version, registered) VALUES (?1, ?2, ?3, ?4, ?5, ?6)")
                .map_err(&sql)?;
            for w in workers {
                upsert_worker
                    .execute(params![w.id as i64, w.name, w.host, w.cores, w.version, at])
                    .map_err(&sql)?;
            }
            for change in changes {
                match change {
                    Change::JobState { job_id, state, lease_id, worker_id, errors, conflicts } => {
                        set_state
                            .execute(params![
                                *job_id as i64,
                                state.as_str(),
                                lease_id.map(|l| l as i64),
                                worker_id.map(|w| w as i64),
                                errors,
                                conflicts
                            ])
                            .map_err(&sql)?;
                    }
                    Change::Result {
                        job_id,
                        worker_id,
                        lease_id,
                        counts,
                        seconds,
                        counted,
                        kind,
                    } => {
                        insert_result
                            .execute(params![
                                *job_id as i64,
                                *worker_id as i64,
                                *lease_id as i64,
                                counts.solutions as i64,
                                counts.sym180 as i64,
                                counts.sym90 as i64,
                                counts.nodes as i64,
                                seconds,
                                counted,
                                kind.as_str(),
                                at
                            ])
                            .map_err(&sql)?;
                    }
                    Change::Uncount { job_id } => {
                        uncount.execute(params![*job_id as i64]).map_err(&sql)?;
                    }
                    Change::Lease { lease_id, worker_id, job_ids } => {
                        let ids =
                            job_ids.iter().map(|i| i.to_string()).collect::<Vec<_>>().join(",");
                        insert_lease
                            .execute(params![*lease_id as i64, *worker_id as i64, ids, at])
                            .map_err(&sql)?;
                    }
                    Change::Conflict { job_id, worker_a, worker_b, detail } => {
                        insert_conflict
                            .execute(params![
                                *job_id as i64,
                                *worker_a as i64,
                                *worker_b as i64,
                                detail,
                                at
                            ])
                            .map_err(&sql)?;
                    }
                    Change::Untrust { worker_id, job_id, detail, requeued } => {
                        insert_untrusted
                            .execute(params![
                                *worker_id as i64,
                                *job_id as i64,
                                detail,
                                *requeued as i64,
                                at
                            ])
                            .map_err(&sql)?;
                    }
                }
            }
        }
        tx.commit().map_err(&sql)?;
        Ok(())
    }

    /// The weighted sums of all counted (committed) results. Sums per weight class in SQL, then the
    /// overflow-checked [`Tally`] applies the weights.
    pub fn tally(&self) -> Result<Tally, StoreError> {
        let sql = self.sql();
        let mut tally = Tally::new(self.meta.n as u32)?;
        let mut q = self
            .conn
            .prepare(
                "SELECT j.weight, COUNT(*), SUM(r.solutions), SUM(r.sym180), SUM(r.sym90), SUM(r.nodes)
                 FROM results r JOIN jobs j ON j.id = r.job_id WHERE r.counted = 1 GROUP BY j.weight",
            )
            .map_err(&sql)?;
        let mut rows = q.query([]).map_err(&sql)?;
        let mut jobs = 0u64;
        while let Some(r) = rows.next().map_err(&sql)? {
            let weight: u8 = r.get(0).map_err(&sql)?;
            jobs += r.get::<_, i64>(1).map_err(&sql)? as u64;
            let counts = JobCounts {
                solutions: r.get::<_, i64>(2).map_err(&sql)? as u64,
                sym180: r.get::<_, i64>(3).map_err(&sql)? as u64,
                sym90: r.get::<_, i64>(4).map_err(&sql)? as u64,
                nodes: r.get::<_, i64>(5).map_err(&sql)? as u64,
            };
            tally.add(weight, &counts)?;
        }
        tally.jobs = jobs;
        Ok(tally)
    }

    /// The final totals, if every job has a counted result.
    pub fn final_totals(&self) -> Result<Option<Totals>, StoreError> {
        let tally = self.tally()?;
        if tally.jobs != self.meta.job_count {
            return Ok(None);
        }
        Ok(Some(tally.totals()?))
    }

    /// Progress from committed rows (for `status --state` and the status call).
    pub fn summary(&self) -> Result<Summary, StoreError> {
        let sql = self.sql();
        let mut s = Summary { tally: self.tally()?, ..Summary::default() };
        let mut q =
            self.conn.prepare("SELECT state, COUNT(*) FROM jobs GROUP BY state").map_err(&sql)?;
        let mut rows = q.query([]).map_err(&sql)?;
        while let Some(r) = rows.next().map_err(&sql)? {
            let state: String = r.get(0).map_err(&sql)?;
            let count = r.get::<_, i64>(1).map_err(&sql)? as u64;
            let state = JobState::parse(&state).ok_or_else(|| StoreError::Corrupt {
                path: self.path.clone(),
                reason: format!("unknown job state {state}"),
            })?;
            s.jobs.add(state, count);
        }
        s.conflicts = self
            .conn
            .query_row("SELECT COUNT(*) FROM conflicts", [], |r| r.get::<_, i64>(0))
            .map_err(&sql)? as u64;
        s.workers = self
            .conn
            .query_row("SELECT COUNT(*) FROM workers", [], |r| r.get::<_, i64>(0))
            .map_err(&sql)? as u64;
        s.untrusted_workers = self.untrusted_workers()?.len() as u64;
        let (first, last): (Option<f64>, Option<f64>) = self
            .conn
            .query_row("SELECT MIN(at), MAX(at) FROM results WHERE counted=1", [], |r| {
                Ok((r.get(0)?, r.get(1)?))
            })
            .map_err(&sql)?;
        s.first_result_unix = first;
        s.last_result_unix = last;
        Ok(s)
    }

    /// Wall time since the run was created.
    pub fn age(&self) -> Duration {
        Duration::from_secs_f64((now_unix() - self.meta.created_unix).max(0.0))
    }
}

/// Workers that lost a settled verification (`job_id`): refused from then on.
const UNTRUSTED_TABLE: &str =
    "CREATE TABLE IF NOT EXISTS untrusted_workers (worker_id INTEGER PRIMARY KEY, job_id INTEGER NOT NULL, detail TEXT, requeued INTEGER NOT NULL, at REAL NOT NULL);";

/// A worker as stored in the `workers` table.
#[derive(Debug, Clone)]
pub struct WorkerRow {
    pub id: u64,
    pub name: String,
    pub host: String,
    pub cores: u32,
    pub version: String,
}

fn corrupt_or_sql(path: &Path, e: rusqlite::Error) -> StoreError {
    match e.sqlite_error_code() {
        Some(rusqlite::ErrorCode::NotADatabase) | Some(rusqlite::ErrorCode::DatabaseCorrupt) => {
            StoreError::Corrupt { path: path.into(), reason: e.to_string() }
        }
        _ => StoreError::Sqlite { path: path.into(), source: e },
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

/// Checkpointing for the one-machine `solve --state`: the same store, with no leases.
///
/// `solve` calls [`LocalCheckpoint::open`], skips [`done_ids`](LocalCheckpoint::done_ids), calls
/// [`record`](LocalCheckpoint::record) from any thread as jobs finish (committed in batches, at
/// least every second), and [`finish`](LocalCheckpoint::finish) for totals summed from committed rows.
pub struct LocalCheckpoint {
    inner: std::sync::Mutex<LocalInner>,
}

struct LocalInner {
    store: Store,
    buffer: Vec<Change>,
    last_commit: Instant,
}

impl LocalCheckpoint {
    /// Opens or creates the checkpoint of `list` in `path`.
    pub fn open(path: &Path, list: &JobList) -> Result<LocalCheckpoint, StoreError> {
        let store = Store::open_or_create(path, list, 0.0, "local")?;
        Ok(LocalCheckpoint {
            inner: std::sync::Mutex::new(LocalInner {
                store,
                buffer: Vec::new(),
                last_commit: Instant::now(),
            }),
        })
    }

    /// Ids of the jobs already solved in an earlier (interrupted) run.
    pub fn done_ids(&self) -> Result<Vec<u64>, StoreError> {
        let inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        let sql = inner.store.sql();
        let mut q = inner
            .store
            .conn
            .prepare("SELECT job_id FROM results WHERE counted=1 ORDER BY job_id")
            .map_err(&sql)?;
        let ids = q
            .query_map([], |r| r.get::<_, i64>(0))
            .map_err(&sql)?
            .map(|r| r.map(|v| v as u64))
            .collect::<Result<Vec<_>, _>>()
            .map_err(&sql)?;
        Ok(ids)
    }

    /// Records one solved job; commits when 512 are buffered or a second has passed.
    pub fn record(&self, job_id: u64, counts: &JobCounts, seconds: f64) -> Result<(), StoreError> {
        let mut inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        inner.buffer.push(Change::Result {
            job_id,
            worker_id: 0,
            lease_id: 0,
            counts: *counts,
            seconds,
            counted: true,
            kind: ResultKind::Local,
        });
        inner.buffer.push(Change::JobState {
            job_id,
            state: JobState::Done,
            lease_id: None,
            worker_id: None,
            errors: 0,
            conflicts: 0,
        });
        if inner.buffer.len() >= 1024 || inner.last_commit.elapsed() >= Duration::from_secs(1) {
            inner.commit()?;
        }
        Ok(())
    }

    /// Commits everything recorded so far.
    pub fn flush(&self) -> Result<(), StoreError> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner()).commit()
    }

    /// Flushes, then sums the committed rows: `Some(totals)` once every job is recorded.
    pub fn finish(&self) -> Result<(Tally, Option<Totals>), StoreError> {
        let mut inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        inner.commit()?;
        Ok((inner.store.tally()?, inner.store.final_totals()?))
    }
}

impl LocalInner {
    fn commit(&mut self) -> Result<(), StoreError> {
        let changes = std::mem::take(&mut self.buffer);
        self.store.apply(&changes, &[])?;
        self.last_commit = Instant::now();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nqueens_core::job_list;

    #[test]
    fn checkpoint_resumes_and_refuses_other_runs() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cp.db");
        let list = job_list(8, &SplitParams::default()).unwrap();
        let half = list.jobs.len() / 2;
        {
            let cp = LocalCheckpoint::open(&path, &list).unwrap();
            for job in &list.jobs[..half] {
                cp.record(job.id, &job.solve().unwrap(), 0.0).unwrap();
            }
            cp.flush().unwrap();
        }
        let cp = LocalCheckpoint::open(&path, &list).unwrap();
        let done = cp.done_ids().unwrap();
        assert_eq!(done.len(), half);
        for job in &list.jobs[half..] {
            cp.record(job.id, &job.solve().unwrap(), 0.0).unwrap();
        }
        let (_, totals) = cp.finish().unwrap();
        assert_eq!(totals.unwrap().total, nqueens_core::reference::count_all(8).unwrap());
        drop(cp);
        let other = job_list(9, &SplitParams::default()).unwrap();
        assert!(matches!(LocalCheckpoint::open(&path, &other), Err(StoreError::OtherRun { .. })));
        // An untrusted mark and the un-counting of its worker's row survive reopening.
        {
            let mut store = Store::open_or_create(&path, &list, 0.0, "local").unwrap();
            let job = &list.jobs[0];
            store
                .apply(
                    &[
                        Change::Uncount { job_id: job.id },
                        Change::JobState {
                            job_id: job.id,
                            state: JobState::Pending,
                            lease_id: None,
                            worker_id: None,
                            errors: 0,
                            conflicts: 0,
                        },
                        Change::Untrust {
                            worker_id: 7,
                            job_id: job.id,
                            detail: "test".into(),
                            requeued: 1,
                        },
                    ],
                    &[],
                )
                .unwrap();
        }
        let store = Store::open_or_create(&path, &list, 0.0, "local").unwrap();
        assert_eq!(store.untrusted_workers().unwrap(), vec![7]);
        let loaded = store.load().unwrap();
        assert_eq!(loaded.untrusted, vec![7]);
        assert_eq!(loaded.jobs[0].standing, Standing::Pending);
        assert!(loaded.jobs[0].counted.is_none());
        assert_eq!(store.tally().unwrap().jobs, list.jobs.len() as u64 - 1);
        assert_eq!(Store::open_existing(&path).unwrap().summary().unwrap().untrusted_workers, 1);
        drop(store);
        // One writer at a time; readers are welcome; the lock goes with its store.
        let writer = LocalCheckpoint::open(&path, &list).unwrap();
        assert!(matches!(LocalCheckpoint::open(&path, &list), Err(StoreError::InUse { .. })));
        assert!(matches!(
            Store::open_or_create(&path, &list, 0.0, "local"),
            Err(StoreError::InUse { .. })
        ));
        assert!(Store::open_existing(&path).is_ok());
        assert!(matches!(Store::open_existing_for_update(&path), Err(StoreError::InUse { .. })));
        drop(writer);
        LocalCheckpoint::open(&path, &list).unwrap();

        // Held and failed jobs go back to the queue, offline, keeping their counters.
        {
            let mut store = Store::open_or_create(&path, &list, 0.0, "local").unwrap();
            let state = |job_id, state, errors, conflicts| Change::JobState {
                job_id,
                state,
                lease_id: None,
                worker_id: None,
                errors,
                conflicts,
            };
            store
                .apply(
                    &[
                        state(1, JobState::Held, 0, 3),
                        state(2, JobState::Failed, 3, 0),
                        state(3, JobState::Held, 0, 3),
                    ],
                    &[],
                )
                .unwrap();
        }
        let mut store = Store::open_existing_for_update(&path).unwrap();
        assert!(matches!(LocalCheckpoint::open(&path, &list), Err(StoreError::InUse { .. })));
        assert_eq!(store.requeue(true, false).unwrap(), (2, 0));
        assert_eq!(store.requeue(true, true).unwrap(), (0, 1));
        let loaded = store.load().unwrap();
        for id in 1..=3 {
            assert_eq!(loaded.jobs[id].standing, Standing::Pending, "job {id}");
        }
        assert_eq!((loaded.jobs[1].conflicts, loaded.jobs[2].errors), (3, 3));
        drop(store);
        let junk = dir.path().join("junk.db");
        std::fs::write(&junk, b"this is not a database at all, not even close, really not")
            .unwrap();
        assert!(
            matches!(LocalCheckpoint::open(&junk, &list), Err(StoreError::Corrupt { .. })),
            "{:?}",
            LocalCheckpoint::open(&junk, &list).err()
        );
    }
}
