//! The state file's schema: its tables, the run metadata, and the version that guards both.

use super::checksum::{new_key, to_hex, RowClaim, RowMac};
use super::error::{corrupt_or_sql, StoreError};
use super::{stored_counts, verification_draw, RunMeta, RunPolicy, Store};
use nqueens_core::JobList;
use nqueens_scheduler::state::JobState;
use rusqlite::{params, OptionalExtension};

/// Schema version of the state file, also its `PRAGMA user_version`.
///
/// - 1: the first schema.
/// - 2: result rows carry a keyed `checksum` (see [`super::checksum`]) and `meta` holds the run's
///   `checksum_key`; the file is marked with [`APPLICATION_ID`]. A schema 1 file is migrated
///   when it is opened for writing ([`Store::upgrade`]) and read as it is (its rows unchecked)
///   when opened read-only. The version is bumped, rather than the column added quietly, so that an older
///   binary refuses a migrated file instead of writing rows without checksums into it, which this
///   one would then have to take for damage.
/// - 3: workers carry the credential they registered with and the digest of their own secret;
///   `credentials` holds the digests of per-host tokens (`token add`). Migrated from 2 by adding
///   the columns and the table (old workers cannot take their ids up again: they register anew).
/// - 4: jobs carry their `review` (why a job waits for a second party's answer: a re-check drawn
///   in secret, a probation answer; NULL for none), so that no check a count drew is forgotten
///   by a restart, and `meta` holds the run's `replication`. Migrated from 3 by adding the column
///   (NULL: reviews drawn before were kept in memory only) and `replication` 1.
/// - 5: the workers' column `cores` is called `slots` (a worker's lease slots, what it always
///   held). Migrated from 4 by renaming the column; read as it is, a file of 4 is read by the
///   old name.
/// - 6: result rows carry the `credential` their answer was given under, fixed when it arrived
///   and covered by the row's checksum, so that forgetting a worker row never changes whose word
///   an answer is. Migrated from 5 by adding the column (NULL in older rows: they take their
///   worker row's credential while it exists, and are nobody's independent evidence once it is
///   gone).
/// - 7: workers carry their `device`, so that offline status shows it too. Migrated from 6 by
///   adding the column (empty in older rows).
pub(crate) const SCHEMA_VERSION: u32 = 7;

/// `PRAGMA application_id` of every nqueens state file: "NQCS".
pub(crate) const APPLICATION_ID: i32 = 0x4E51_4353;

/// Per-host tokens (`nqueens-coordinator token add`): only their SHA-256 digests are kept.
pub(super) const CREDENTIALS_TABLE: &str = "CREATE TABLE IF NOT EXISTS credentials (name TEXT PRIMARY KEY, digest BLOB NOT NULL UNIQUE, created REAL NOT NULL, revoked REAL);";

/// Workers that lost a settled verification (`job_id`): refused from then on.
pub(super) const UNTRUSTED_TABLE: &str =
    "CREATE TABLE IF NOT EXISTS untrusted_workers (worker_id INTEGER PRIMARY KEY, job_id INTEGER NOT NULL, detail TEXT, requeued INTEGER NOT NULL, at REAL NOT NULL);";

impl Store {
    pub(super) fn has_meta(&self) -> Result<bool, StoreError> {
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

    pub(super) fn read_meta(&self) -> Result<RunMeta, StoreError> {
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
        if !(1..=SCHEMA_VERSION).contains(&schema) {
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
            replication: match get("replication") {
                Ok(value) => value.parse().map_err(|_| bad("replication"))?,
                // Files made before the setting: one answer a job.
                Err(StoreError::Corrupt { .. }) if schema < 4 => 1,
                Err(e) => return Err(e),
            },
        })
    }

    /// The schema version in `meta`.
    pub(super) fn stored_schema(&self) -> Result<u32, StoreError> {
        let text: String = self
            .conn
            .query_row("SELECT value FROM meta WHERE key='schema'", [], |r| r.get(0))
            .map_err(|e| corrupt_or_sql(&self.path, e))?;
        text.parse().map_err(|_| StoreError::Corrupt {
            path: self.path.clone(),
            reason: "bad meta value schema".into(),
        })
    }

    /// The tables and columns of schemas 3 to 7 a file of schema `from` lacks, each step
    /// idempotent (a file of schema 1 gets them before it is marked with the current version).
    fn add_columns_since(&mut self, from: u32) -> Result<(), StoreError> {
        if from < 3 {
            // Schema 3's additions, idempotent; a schema 1 file gets them before the step below
            // marks it with the current version.
            self.conn.execute_batch(CREDENTIALS_TABLE).map_err(self.sql())?;
            for column in ["credential TEXT", "secret_digest BLOB"] {
                let name = column.split(' ').next().unwrap_or_default();
                if !self.has_column("workers", name)? {
                    self.conn
                        .execute_batch(&format!("ALTER TABLE workers ADD COLUMN {column}"))
                        .map_err(self.sql())?;
                }
            }
        }
        if from < 4 {
            // Schema 4's additions, idempotent.
            if !self.has_column("jobs", "review")? {
                self.conn
                    .execute_batch("ALTER TABLE jobs ADD COLUMN review TEXT")
                    .map_err(self.sql())?;
            }
            self.conn
                .execute("INSERT OR IGNORE INTO meta(key, value) VALUES ('replication', '1')", [])
                .map_err(self.sql())?;
            self.meta.replication = 1;
        }
        if from < 6 && !self.has_column("results", "credential")? {
            // Schema 6: every answer's credential, as it was given.
            self.conn
                .execute_batch("ALTER TABLE results ADD COLUMN credential TEXT")
                .map_err(self.sql())?;
        }
        if from < 7 && !self.has_column("workers", "device")? {
            // Schema 7: what a worker solves on, so that offline status shows it too.
            self.conn
                .execute_batch("ALTER TABLE workers ADD COLUMN device TEXT")
                .map_err(self.sql())?;
        }
        if from < 5 && self.has_column("workers", "cores")? {
            // Schema 5: a worker's lease slots are called what they are.
            self.conn
                .execute_batch("ALTER TABLE workers RENAME COLUMN cores TO slots")
                .map_err(self.sql())?;
        }
        Ok(())
    }

    /// Brings a file opened for writing to [`SCHEMA_VERSION`] and loads its key. From schema 1, in
    /// one transaction: the `checksum` column, a new random key, a checksum for every existing row
    /// (as they are: damage done before the migration cannot be told apart, and `verify` is the
    /// check for that), and the file's mark.
    pub(super) fn upgrade(&mut self) -> Result<(), StoreError> {
        let from = self.stored_schema()?;
        self.add_columns_since(from)?;
        if (2..SCHEMA_VERSION).contains(&from) {
            self.conn
                .execute_batch(&format!(
                    "UPDATE meta SET value='{SCHEMA_VERSION}' WHERE key='schema'; PRAGMA user_version={SCHEMA_VERSION};"
                ))
                .map_err(self.sql())?;
            tracing::info!(state = %self.path.display(), from, "state file migrated to schema {SCHEMA_VERSION}: workers carry their credential and secret digest (3), jobs their review and the run its replication (4), workers' lease slots by that name (5), result rows their credential (6), workers their device (7)");
        }
        if from == 1 {
            let key = new_key()
                .map_err(|source| StoreError::Random { path: self.path.clone(), source })?;
            let mac = RowMac::new(&key, &self.meta.fingerprint);
            let path = self.path.clone();
            let sql = move |error| StoreError::Sqlite { path: path.clone(), error };
            let tx = self.conn.transaction().map_err(&sql)?;
            tx.execute_batch("ALTER TABLE results ADD COLUMN checksum BLOB").map_err(&sql)?;
            tx.execute("INSERT INTO meta(key, value) VALUES ('checksum_key', ?1)", [to_hex(&key)])
                .map_err(&sql)?;
            let mut rows = 0u64;
            {
                let mut read = tx.prepare("SELECT id, job_id, worker_id, counted, kind, solutions, sym180, sym90, nodes FROM results").map_err(&sql)?;
                let mut write =
                    tx.prepare("UPDATE results SET checksum=?2 WHERE id=?1").map_err(&sql)?;
                let mut q = read.query([]).map_err(&sql)?;
                while let Some(r) = q.next().map_err(&sql)? {
                    let kind: String = r.get(4).map_err(&sql)?;
                    // A row whose counts are not valid stored counts (negative, not integers)
                    // gets no checksum: it stays refused, as it was before the migration.
                    let Some(counts) = stored_counts(r, 5).map_err(&sql)? else {
                        continue;
                    };
                    let claim = RowClaim {
                        job_id: r.get::<_, i64>(1).map_err(&sql)? as u64,
                        worker_id: r.get::<_, i64>(2).map_err(&sql)? as u64,
                        counted: r.get(3).map_err(&sql)?,
                        kind: &kind,
                        counts,
                        credential: None,
                    };
                    write
                        .execute(params![r.get::<_, i64>(0).map_err(&sql)?, mac.tag(&claim)])
                        .map_err(&sql)?;
                    rows += 1;
                }
            }
            tx.execute("UPDATE meta SET value=?1 WHERE key='schema'", [SCHEMA_VERSION.to_string()])
                .map_err(&sql)?;
            tx.execute_batch(&format!(
                "PRAGMA application_id={APPLICATION_ID}; PRAGMA user_version={SCHEMA_VERSION};"
            ))
            .map_err(&sql)?;
            tx.commit().map_err(&sql)?;
            tracing::info!(
                state = %self.path.display(),
                rows,
                "state file migrated from schema 1 to {SCHEMA_VERSION}: checksummed its existing result rows as they are and marked the file"
            );
        } else {
            // An unmarked file of the current schema is not made by this code, but mark it anyway.
            let app_id: i32 = self
                .conn
                .query_row("PRAGMA application_id", [], |r| r.get(0))
                .map_err(self.sql())?;
            if app_id != APPLICATION_ID {
                self.conn
                    .execute_batch(&format!(
                        "PRAGMA application_id={APPLICATION_ID}; PRAGMA user_version={SCHEMA_VERSION};"
                    ))
                    .map_err(self.sql())?;
            }
        }
        self.load_key()
    }

    pub(super) fn create(&mut self, list: &JobList, policy: RunPolicy) -> Result<(), StoreError> {
        let path = self.path.clone();
        let sql = move |error| StoreError::Sqlite { path: path.clone(), error };
        let key =
            new_key().map_err(|source| StoreError::Random { path: self.path.clone(), source })?;
        let tx = self.conn.transaction().map_err(&sql)?;
        tx.execute_batch(
            "CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
             CREATE TABLE jobs (id INTEGER PRIMARY KEY, weight INTEGER NOT NULL, estimate INTEGER NOT NULL,
                 verify INTEGER NOT NULL, state TEXT NOT NULL, lease_id INTEGER, worker_id INTEGER,
                 errors INTEGER NOT NULL DEFAULT 0, conflicts INTEGER NOT NULL DEFAULT 0, review TEXT);
             CREATE TABLE results (id INTEGER PRIMARY KEY, job_id INTEGER NOT NULL, worker_id INTEGER NOT NULL,
                 lease_id INTEGER NOT NULL, solutions INTEGER NOT NULL, sym180 INTEGER NOT NULL, sym90 INTEGER NOT NULL,
                 nodes INTEGER NOT NULL, seconds REAL NOT NULL, counted INTEGER NOT NULL, kind TEXT NOT NULL, at REAL NOT NULL,
                 checksum BLOB, credential TEXT);
             CREATE INDEX results_job ON results(job_id);
             CREATE TABLE leases (id INTEGER PRIMARY KEY, worker_id INTEGER NOT NULL, job_ids TEXT NOT NULL, at REAL NOT NULL);
             CREATE TABLE workers (id INTEGER PRIMARY KEY, name TEXT, host TEXT, slots INTEGER, version TEXT, registered REAL,
                 credential TEXT, secret_digest BLOB, device TEXT);
             CREATE TABLE conflicts (id INTEGER PRIMARY KEY, job_id INTEGER NOT NULL, worker_a INTEGER, worker_b INTEGER, detail TEXT, at REAL);",
        )
        .map_err(&sql)?;
        tx.execute_batch(UNTRUSTED_TABLE).map_err(&sql)?;
        tx.execute_batch(CREDENTIALS_TABLE).map_err(&sql)?;
        let m = &self.meta;
        let meta = [
            ("schema", SCHEMA_VERSION.to_string()),
            ("n", m.n.to_string()),
            ("target_jobs", m.target_jobs.map(|t| t.to_string()).unwrap_or_default()),
            ("fingerprint", m.fingerprint.clone()),
            ("job_count", m.job_count.to_string()),
            ("created_unix", m.created_unix.to_string()),
            ("kind", m.kind.clone()),
            ("verify_fraction", policy.verify_fraction.to_string()),
            ("replication", policy.replication.to_string()),
            ("checksum_key", to_hex(&key)),
        ];
        for (k, v) in meta {
            tx.execute("INSERT INTO meta(key, value) VALUES (?1, ?2)", params![k, v])
                .map_err(&sql)?;
        }
        {
            let mut insert = tx.prepare("INSERT INTO jobs(id, weight, estimate, verify, state) VALUES (?1, ?2, ?3, ?4, ?5)").map_err(&sql)?;
            let chosen = verification_draw(policy.verify_fraction);
            for job in &list.jobs {
                let verify = chosen(job.id.get());
                insert
                    .execute(params![
                        job.id.get() as i64,
                        job.weight,
                        job.estimate as i64,
                        verify,
                        JobState::Pending.as_str()
                    ])
                    .map_err(&sql)?;
            }
        }
        tx.commit().map_err(&sql)?;
        self.mac = Some(RowMac::new(&key, &self.meta.fingerprint));
        Ok(())
    }
}
