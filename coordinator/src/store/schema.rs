//! The state file's schema: its tables, the run metadata, and the version that guards both.

use super::open::corrupt_or_sql;
use super::{chosen_for_verification, RunMeta, Store, StoreError};
use crate::state::JobState;
use nqueens_core::JobList;
use rusqlite::{params, OptionalExtension};

/// Schema version of the state file.
pub const SCHEMA_VERSION: u32 = 1;

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

    pub(super) fn create(
        &mut self,
        list: &JobList,
        verify_fraction: f64,
    ) -> Result<(), StoreError> {
        let path = self.path.clone();
        let sql = move |error| StoreError::Sqlite { path: path.clone(), error };
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
}
