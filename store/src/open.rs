//! Opening a state file: first the checks that the file is ours, made without writing a byte (a
//! read-only look at the SQLite header, then at its tables, then the whole-file `quick_check`),
//! and only then the writer's connection settings (WAL, synchronous=FULL), the checks that it is
//! the expected run, and the migration of an older schema.
//!
//! A writer opens its file once: [`Store::open_for_serve`] (and [`Store::open_or_create`] on top
//! of the same steps) takes the writer's lock, looks, opens one connection and reads the run's
//! metadata, and hands back a [`ServeOpen`]: a new run to make, or a stored run whose settings the
//! caller checks before [`ResumedRun::resume`] checks its job list and migrates it.
//!
//! A state file is marked at creation with [`APPLICATION_ID`] and `PRAGMA user_version` =
//! [`SCHEMA_VERSION`]. A file that is not ours (another program's database,
//! a text file, another application id) is refused and left exactly as it was: no table, no WAL
//! switch, no `-wal`/`-shm`/`.lock` file. A missing or empty (0-byte) file becomes a new run. Files
//! made before the mark existed (application id 0, our `meta` table) still open, and get marked
//! when opened for writing.

use super::checksum::{from_hex, RowMac, KEY_LEN};
use super::credentials::CredentialNumbers;
use super::descriptors::read_header;
use super::error::{corrupt_or_sql, StoreError};
use super::lock::{OpeningLock, WriterLock};
use super::schema::{APPLICATION_ID, SCHEMA_VERSION, UNTRUSTED_TABLE};
use super::{run_fingerprint, unix_now, RunKind, RunMeta, RunPolicy, Store};
use nqueens_core::JobList;
use rusqlite::{Connection, OpenFlags, OptionalExtension};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// What a look at a file, without writing to it, found.
#[derive(Debug, PartialEq)]
enum Probe {
    Missing,
    /// 0 bytes: may become a new run.
    Empty,
    /// Marked with our application id.
    Ours,
    /// Application id 0 but our `meta` table: made before the mark existed.
    Unmarked,
}

/// A state file opened for writing, once and checked (`quick_check`), by
/// [`Store::open_for_serve`]: a new run to make or a run to take up. Each refusal after this
/// (a setting that does not fit the run, a dropped value) lets the writer's lock go and leaves
/// nothing behind.
pub enum ServeOpen {
    /// The file holds no run yet (missing or 0 bytes).
    New(NewRun),
    /// The file holds a run, read as far as its [`RunMeta`]: the caller checks its settings
    /// against [`ResumedRun::meta`], then [`ResumedRun::resume`] checks the job list.
    Resumed(Box<ResumedRun>),
}

/// A state file that holds no run yet, under the writer's lock: [`NewRun::create`] makes the run.
pub struct NewRun {
    path: PathBuf,
    kind: RunKind,
    /// The writer's connection of a marked file whose creation was interrupted before its one
    /// transaction committed (no metadata); `None` for a missing or empty file, which is not
    /// created (nor opened) before [`NewRun::create`]. Declared before `lock`, so that it is
    /// closed before the lock is let go.
    conn: Option<Connection>,
    lock: OpeningLock,
}

/// A state file that holds a run, opened for writing under the writer's lock and checked, its
/// metadata read; not migrated, nor written, before [`ResumedRun::resume`].
pub struct ResumedRun {
    kind: RunKind,
    /// Declared before `lock`, so that its connection is closed before the lock is let go.
    store: Store,
    lock: OpeningLock,
}

impl NewRun {
    /// Makes the run of `list` (named by [`run_fingerprint`] with `protocol_major`) with
    /// `policy`, in one transaction.
    pub fn create(
        mut self,
        list: &JobList,
        protocol_major: u32,
        policy: RunPolicy,
    ) -> Result<Store, StoreError> {
        let conn = match self.conn.take() {
            Some(conn) => conn,
            None => open_conn(&self.path, Mode::Write { fresh: true })?,
        };
        let mut store = Store::unread(conn, &self.path);
        store.meta = RunMeta {
            n: list.n,
            target_jobs: list.params.target_jobs,
            fingerprint: run_fingerprint(list, protocol_major),
            job_count: list.jobs.len() as u64,
            created_unix: unix_now(),
            kind: self.kind.as_str().to_owned(),
            replication: policy.replication,
        };
        store.create(list, policy)?;
        // A new run's file exists only now.
        self.lock.hold_file(&self.path)?;
        Ok(Store { _lock: self.lock.keep(), ..store })
    }
}

impl ResumedRun {
    /// What identifies the stored run, as stored: what the caller checks its settings against.
    pub fn meta(&self) -> &RunMeta {
        &self.store.meta
    }

    /// The per-host tokens in force (see [`Store::active_credentials`]).
    pub fn active_credentials(&self) -> Result<Vec<(String, [u8; 32])>, StoreError> {
        self.store.active_credentials()
    }

    /// Takes the run up: refuses it unless it is the run of `list` (its N, its fingerprint with
    /// `protocol_major`: another split or an incompatible version differ), of this kind, with
    /// one row per job; then migrates an older schema.
    pub fn resume(mut self, list: &JobList, protocol_major: u32) -> Result<Store, StoreError> {
        let fingerprint = run_fingerprint(list, protocol_major);
        self.store.check_same_run(list, &fingerprint, self.kind)?;
        // Added after schema 1 shipped; created on open so older state files keep working.
        self.store.conn.execute_batch(UNTRUSTED_TABLE).map_err(self.store.sql())?;
        self.store.upgrade()?;
        let ResumedRun { store, lock, .. } = self;
        Ok(Store { _lock: lock.keep(), ..store })
    }
}

impl Store {
    /// Opens the run in `path`, creating it from `list` if the file does not exist. Refuses a file
    /// of another N, split, job list, protocol version (`protocol_major`, part of the
    /// [`run_fingerprint`]) or [`RunKind`], and one that is not a valid state file. A new run
    /// is made with `policy` (an existing one keeps its own: see [`RunMeta::replication`]); a
    /// marked file whose creation was interrupted is made anew.
    pub fn open_or_create(
        path: &Path,
        list: &JobList,
        protocol_major: u32,
        policy: RunPolicy,
        kind: RunKind,
    ) -> Result<Store, StoreError> {
        match Self::open_to_write(path, kind)? {
            ServeOpen::New(new) => new.create(list, protocol_major, policy),
            ServeOpen::Resumed(run) => run.resume(list, protocol_major),
        }
    }

    /// Opens the state file of `serve` (a cluster run) for writing: the one open of the file a
    /// coordinator makes for its run (its status readers open their own connections later,
    /// [`Store::open_beside_writer`]). Refuses, leaving the file exactly as it was, a file that
    /// another process writes, one that is not a state file of ours, one that fails its
    /// `quick_check`, and one without run metadata; the rest is checked against the caller's
    /// settings and by [`ResumedRun::resume`].
    pub fn open_for_serve(path: &Path) -> Result<ServeOpen, StoreError> {
        match Self::open_to_write(path, RunKind::Cluster)? {
            ServeOpen::New(new) if new.conn.is_some() => {
                Err(StoreError::Corrupt { path: path.into(), reason: "no run metadata".into() })
            }
            opened => Ok(opened),
        }
    }

    /// The writer's lock, then a look that writes nothing ([`probe`]); a file that holds a run is
    /// then opened for writing, checked and its metadata read.
    fn open_to_write(path: &Path, kind: RunKind) -> Result<ServeOpen, StoreError> {
        let lock = OpeningLock::acquire(path)?;
        if let Probe::Missing | Probe::Empty = probe(path)? {
            return Ok(ServeOpen::New(NewRun { path: path.into(), kind, conn: None, lock }));
        }
        let mut store = Store::unread(open_conn(path, Mode::Write { fresh: false })?, path);
        if !store.has_meta()? {
            // A marked file without metadata is a creation that was interrupted before its one
            // transaction committed.
            let conn = Some(store.conn);
            return Ok(ServeOpen::New(NewRun { path: path.into(), kind, conn, lock }));
        }
        store.meta = store.read_meta()?;
        Ok(ServeOpen::Resumed(Box::new(ResumedRun { kind, store, lock })))
    }

    /// A store on `conn` whose metadata is not read yet.
    fn unread(conn: Connection, path: &Path) -> Store {
        Store {
            conn,
            mac: None,
            numbers: CredentialNumbers::default(),
            _lock: None,
            path: path.into(),
            meta: RunMeta {
                n: 0,
                target_jobs: None,
                fingerprint: String::new(),
                job_count: 0,
                created_unix: 0.0,
                kind: String::new(),
                replication: 1,
            },
        }
    }

    /// Refuses a stored run (its metadata read) that is not the run of `list` named
    /// `fingerprint`, of `kind`, with one row per job.
    fn check_same_run(
        &self,
        list: &JobList,
        fingerprint: &str,
        kind: RunKind,
    ) -> Result<(), StoreError> {
        let (path, stored, kind) = (&self.path, &self.meta, kind.as_str());
        let other = |reason| StoreError::OtherRun { path: path.clone(), reason };
        if stored.n != list.n {
            return Err(other(format!("it is a run of N={}, not N={}", stored.n, list.n)));
        }
        if stored.fingerprint != fingerprint {
            return Err(other(format!("its run fingerprint is {} but this N and split give {fingerprint} (other --target-jobs or incompatible version)", stored.fingerprint)));
        }
        if stored.kind != kind {
            return Err(other(format!("it is a {} run, not a {kind} run", stored.kind)));
        }
        let jobs: i64 = self
            .conn
            .query_row("SELECT COUNT(*) FROM jobs", [], |r| r.get(0))
            .map_err(self.sql())?;
        if jobs as u64 != list.jobs.len() as u64 {
            return Err(StoreError::Corrupt {
                path: path.clone(),
                reason: format!("{jobs} job rows, expected {}", list.jobs.len()),
            });
        }
        Ok(())
    }

    /// Fails with [`StoreError::InUse`] while another process writes the state file at `path`
    /// (through this path or any link to the same file); takes and lets go of the lock.
    pub fn ensure_no_writer(path: &Path) -> Result<(), StoreError> {
        WriterLock::acquire(path)?.discard();
        Ok(())
    }

    /// Opens an existing state file read-only after a whole-file `quick_check`: for the
    /// commands that answer for its rows (`verify`, `export`, `backup`, `token list`).
    pub fn open_existing(path: &Path) -> Result<Store, StoreError> {
        Self::open_existing_file(path, false)
    }

    /// Opens a state file read-only beside this process's writer (a live coordinator's status
    /// readers): the writer checked the file (`quick_check`) when it opened it, so this does not
    /// scan it again.
    pub fn open_beside_writer(path: &Path) -> Result<Store, StoreError> {
        Self::open_existing_locked(path, Mode::ReadUnchecked)
    }

    /// Opens an existing state file read-only to show its figures (`status --state`), without
    /// the whole-file `quick_check` of [`Store::open_existing`] (a third of a second at
    /// N = 27): a damaged page it reads still fails the read (SQLite reports it, as `Corrupt`),
    /// every result row it sums is checked by its checksum, and every command that writes the
    /// file or answers for its rows (`serve`, `solve --state`, `requeue`, `verify`, `export`)
    /// checks the whole file first.
    pub fn open_to_show(path: &Path) -> Result<Store, StoreError> {
        match probe(path)? {
            Probe::Missing => Err(StoreError::Missing { path: path.into() }),
            Probe::Empty => Err(StoreError::NotOurs {
                path: path.into(),
                reason: "it is empty (0 bytes), not a run".into(),
            }),
            Probe::Ours | Probe::Unmarked => Self::open_existing_locked(path, Mode::ReadUnchecked),
        }
    }

    /// Opens a copy of a state file read-only and as immutable (`backup` checks its copy so):
    /// nothing is created beside it, and a `-wal` beside it is ignored.
    pub(super) fn open_copy(path: &Path) -> Result<Store, StoreError> {
        match probe(path)? {
            Probe::Ours | Probe::Unmarked => Self::open_existing_locked(path, Mode::Immutable),
            _ => Err(StoreError::Corrupt { path: path.into(), reason: "not a state file".into() }),
        }
    }

    /// Opens an existing state file to change it offline ([`Store::requeue`]), holding the
    /// writer's lock: refused while a coordinator runs on it.
    pub fn open_existing_for_update(path: &Path) -> Result<Store, StoreError> {
        Self::open_existing_file(path, true)
    }

    fn open_existing_file(path: &Path, write: bool) -> Result<Store, StoreError> {
        match probe(path)? {
            Probe::Missing => return Err(StoreError::Missing { path: path.into() }),
            Probe::Empty => {
                return Err(StoreError::NotOurs {
                    path: path.into(),
                    reason: "it is empty (0 bytes), not a run".into(),
                })
            }
            Probe::Ours | Probe::Unmarked => {}
        }
        let lock = if write { Some(WriterLock::acquire(path)?) } else { None };
        let mode = if write { Mode::Write { fresh: false } } else { Mode::Read };
        match Self::open_existing_locked(path, mode) {
            Ok(store) => Ok(Store { _lock: lock, ..store }),
            Err(e) => {
                if let Some(lock) = lock {
                    lock.discard();
                }
                Err(e)
            }
        }
    }

    fn open_existing_locked(path: &Path, mode: Mode) -> Result<Store, StoreError> {
        let write = matches!(mode, Mode::Write { .. });
        let mut store = Store::unread(open_conn(path, mode)?, path);
        if !store.has_meta()? {
            return Err(StoreError::Corrupt {
                path: path.into(),
                reason: "no run metadata".into(),
            });
        }
        store.meta = store.read_meta()?;
        if write {
            store.upgrade()?;
        } else {
            store.load_key()?;
        }
        Ok(store)
    }

    /// Reads the run's checksum key (none in a schema 1 file opened read-only).
    pub(super) fn load_key(&mut self) -> Result<(), StoreError> {
        let hex: Option<String> = self
            .conn
            .query_row("SELECT value FROM meta WHERE key='checksum_key'", [], |r| r.get(0))
            .optional()
            .map_err(|e| corrupt_or_sql(&self.path, e))?;
        self.mac = match hex {
            None if self.stored_schema()? < 2 => None,
            None => {
                return Err(StoreError::Corrupt {
                    path: self.path.clone(),
                    reason: "meta key checksum_key missing".into(),
                })
            }
            Some(hex) => match from_hex(&hex) {
                Some(key) if key.len() == KEY_LEN => {
                    Some(RowMac::new(&key, &self.meta.fingerprint))
                }
                _ => {
                    return Err(StoreError::Corrupt {
                        path: self.path.clone(),
                        reason: "bad meta value checksum_key".into(),
                    })
                }
            },
        };
        Ok(())
    }
}

/// Looks at `path` without changing it, nor leaving anything beside it: is it missing, empty, or
/// one of our state files? Anything else is [`StoreError::NotOurs`].
fn probe(path: &Path) -> Result<Probe, StoreError> {
    let io = |source| StoreError::Io { path: path.into(), source };
    // Through the process's own descriptor of the file, never closed (see `descriptors.rs`).
    let mut header = [0u8; 100];
    let (got, len) = match read_header(path, &mut header).map_err(io)? {
        None => return Ok(Probe::Missing),
        Some(read) => read,
    };
    if len == 0 {
        return Ok(Probe::Empty);
    }
    let not_ours = |reason: String| StoreError::NotOurs { path: path.into(), reason };
    if got < header.len() || &header[..16] != b"SQLite format 3\0" {
        return Err(not_ours("it is not a SQLite database (a text file, or a corrupt one)".into()));
    }
    let app_id = i32::from_be_bytes([header[68], header[69], header[70], header[71]]);
    if app_id == APPLICATION_ID {
        return Ok(Probe::Ours);
    }
    if app_id != 0 {
        return Err(not_ours(format!(
            "its SQLite application_id is {app_id:#010x}, not nqueens' {APPLICATION_ID:#010x}"
        )));
    }
    // Application id 0: a state file made before the mark, or another program's database. Look at
    // its tables read-only. Without a `-wal` beside it the file is complete on its own and is read
    // as immutable, which creates no `-wal`/`-shm` (a plain read-only open of a WAL database
    // would).
    let sql = |e| corrupt_or_sql(path, e);
    let conn = if wal_path(path, "-wal").exists() {
        connect(path, OpenFlags::SQLITE_OPEN_READ_ONLY)
    } else {
        connect(immutable_uri(path), OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_URI)
    }
    .map_err(sql)?;
    // Through the WAL, the header may already carry the mark (a migration not yet checkpointed).
    let app_id: i32 = conn.query_row("PRAGMA application_id", [], |r| r.get(0)).map_err(sql)?;
    if app_id == APPLICATION_ID {
        return Ok(Probe::Ours);
    }
    let schema: Option<String> = conn
        .query_row(
            "SELECT value FROM meta WHERE key='schema' AND EXISTS (SELECT 1 FROM sqlite_master WHERE type='table' AND name='jobs')",
            [],
            |r| r.get(0),
        )
        .optional()
        .or_else(|e| match e {
            // No `meta` table at all.
            rusqlite::Error::SqliteFailure(_, Some(ref m)) if m.starts_with("no such table") => {
                Ok(None)
            }
            e => Err(e),
        })
        .map_err(sql)?;
    match schema {
        Some(_) => Ok(Probe::Unmarked),
        None => {
            let mut q = conn
                .prepare("SELECT name FROM sqlite_master WHERE type='table' ORDER BY name LIMIT 6")
                .map_err(sql)?;
            let tables = q
                .query_map([], |r| r.get::<_, String>(0))
                .map_err(sql)?
                .collect::<Result<Vec<_>, _>>()
                .map_err(sql)?;
            Err(not_ours(if tables.is_empty() {
                "it is a SQLite database without tables, not a run".into()
            } else {
                format!(
                    "it is another program's SQLite database (tables {}), without nqueens run metadata",
                    tables.join(", ")
                )
            }))
        }
    }
}

fn wal_path(path: &Path, suffix: &str) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(suffix);
    PathBuf::from(name)
}

/// `file:<path>?mode=ro&immutable=1`, the path percent-encoded.
fn immutable_uri(path: &Path) -> String {
    use std::os::unix::ffi::OsStrExt;
    let mut uri = String::from("file:");
    for &b in path.as_os_str().as_bytes() {
        if b.is_ascii_alphanumeric() || b"/-_.~".contains(&b) {
            uri.push(b as char);
        } else {
            uri.push_str(&format!("%{b:02X}"));
        }
    }
    uri.push_str("?mode=ro&immutable=1");
    uri
}

/// How [`open_conn`] opens a file that [`probe`] accepted.
enum Mode {
    Read,
    /// Read-only without the whole-file `quick_check`: beside this process's writer, which
    /// checked the file when it opened it, or to show figures only (`status --state`).
    ReadUnchecked,
    /// Read-only, as an immutable file: for a copy that no one writes.
    Immutable,
    /// `fresh`: a missing or empty file, marked as ours before anything else is written.
    Write {
        fresh: bool,
    },
}

thread_local! {
    /// SQLite connections to state files this thread opened (see [`connections_opened_here`]).
    static CONNECTIONS_OPENED: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// How many SQLite connections to state files (this crate's every open, the read-only look of
/// [`probe`] included) the calling thread has opened so far: what lets a test show that a
/// command opens its state file once (`serve` does, through [`Store::open_for_serve`]).
pub fn connections_opened_here() -> u64 {
    CONNECTIONS_OPENED.with(|c| c.get())
}

/// Opens a connection, counted by [`connections_opened_here`].
fn connect(target: impl AsRef<Path>, flags: OpenFlags) -> rusqlite::Result<Connection> {
    CONNECTIONS_OPENED.with(|c| c.set(c.get() + 1));
    Connection::open_with_flags(target, flags)
}

/// Opens `path` as `mode` says. The whole-file `quick_check` (all modes but `ReadUnchecked`)
/// comes before the writer's settings (WAL, synchronous=FULL), so that a damaged file is refused
/// before anything is changed in it.
fn open_conn(path: &Path, mode: Mode) -> Result<Connection, StoreError> {
    let read_only = matches!(mode, Mode::Read | Mode::ReadUnchecked | Mode::Immutable);
    let flags = if read_only {
        OpenFlags::SQLITE_OPEN_READ_ONLY
    } else {
        OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_CREATE
    };
    let sql = |e| corrupt_or_sql(path, e);
    let conn = if let Mode::Immutable = mode {
        let flags = flags | OpenFlags::SQLITE_OPEN_URI | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        connect(immutable_uri(path), flags)
    } else {
        connect(path, flags | OpenFlags::SQLITE_OPEN_NO_MUTEX)
    }
    .map_err(sql)?;
    conn.busy_timeout(Duration::from_secs(10)).map_err(sql)?;
    if let Mode::Write { fresh: true } = mode {
        conn.execute_batch(&format!(
            "PRAGMA application_id={APPLICATION_ID}; PRAGMA user_version={SCHEMA_VERSION};"
        ))
        .map_err(sql)?;
    }
    if !matches!(mode, Mode::ReadUnchecked) {
        let check: String = conn.query_row("PRAGMA quick_check", [], |r| r.get(0)).map_err(sql)?;
        if check != "ok" {
            return Err(StoreError::Corrupt { path: path.into(), reason: check });
        }
    }
    if !read_only {
        // Fails on a file that is not a database, which is reported as corrupt.
        let mode: String =
            conn.query_row("PRAGMA journal_mode=WAL", [], |r| r.get(0)).map_err(sql)?;
        if !mode.eq_ignore_ascii_case("wal") {
            return Err(StoreError::Corrupt {
                path: path.into(),
                reason: format!("cannot switch to WAL (journal mode {mode})"),
            });
        }
        conn.execute_batch("PRAGMA synchronous=FULL;").map_err(sql)?;
    }
    Ok(conn)
}
