//! The workers that took part in a run, as its rows record them (for `status --state`, which has
//! no live coordinator to ask).

use super::error::StoreError;
use super::{now_unix, Store};
use nqueens_scheduler::state::JobState;
use std::collections::HashMap;

/// A worker as a run's rows record it: what it registered as, and what it did.
#[derive(Debug, Clone, PartialEq)]
pub struct WorkerRecord {
    /// Its id in the run.
    pub worker_id: u64,
    /// The name it registered with.
    pub name: String,
    /// The host it registered from.
    pub host: String,
    /// Its solver threads.
    pub cores: u32,
    /// Its version, as it registered.
    pub version: String,
    /// Its counted results.
    pub results: u64,
    /// Conflicts it was party to.
    pub conflicts: u64,
    /// Jobs leased to it now.
    pub jobs_leased: u64,
    /// Seconds since its last result (or its registration, if later).
    pub last_seen_seconds_ago: f64,
    /// It lost a settled verification.
    pub untrusted: bool,
    /// The credential (token name) it registered with, as stored: empty in rows from before
    /// credentials (the shared token).
    pub credential: String,
}

impl Store {
    /// Every worker that registered with the run: its counted results, conflicts, leased jobs,
    /// last result and whether it lost a verification.
    pub fn worker_records(&self) -> Result<Vec<WorkerRecord>, StoreError> {
        let sql = self.sql();
        let per_worker = |query: &str| -> Result<HashMap<u64, (u64, f64)>, StoreError> {
            let mut q = self.conn.prepare(query).map_err(&sql)?;
            let rows = q
                .query_map([], |r| {
                    Ok((r.get::<_, i64>(0)? as u64, (r.get::<_, i64>(1)? as u64, r.get(2)?)))
                })
                .map_err(&sql)?;
            rows.collect::<Result<_, _>>().map_err(&sql)
        };
        let results =
            per_worker("SELECT worker_id, SUM(counted), MAX(at) FROM results GROUP BY worker_id")?;
        let conflicts = per_worker(
            "SELECT w, COUNT(*), 0.0 FROM (SELECT worker_a AS w FROM conflicts
             UNION ALL SELECT worker_b FROM conflicts) GROUP BY w",
        )?;
        let leased = per_worker(&format!(
            "SELECT worker_id, COUNT(*), 0.0 FROM jobs WHERE state='{}' GROUP BY worker_id",
            JobState::Leased.as_str()
        ))?;
        let untrusted = self.untrusted_workers()?;
        let now = now_unix();
        let mut q = self
            .conn
            .prepare(if self.has_column("workers", "credential")? {
                "SELECT id, name, host, cores, version, registered, credential FROM workers ORDER BY id"
            } else {
                "SELECT id, name, host, cores, version, registered, NULL FROM workers ORDER BY id"
            })
            .map_err(&sql)?;
        let rows = q
            .query_map([], |r| {
                Ok((
                    r.get::<_, i64>(0)? as u64,
                    r.get::<_, Option<String>>(1)?.unwrap_or_default(),
                    r.get::<_, Option<String>>(2)?.unwrap_or_default(),
                    r.get::<_, Option<i64>>(3)?.unwrap_or(0) as u32,
                    r.get::<_, Option<String>>(4)?.unwrap_or_default(),
                    r.get::<_, Option<f64>>(5)?.unwrap_or(0.0),
                    r.get::<_, Option<String>>(6)?.unwrap_or_default(),
                ))
            })
            .map_err(&sql)?;
        let mut records = Vec::new();
        for row in rows {
            let (id, name, host, cores, version, registered, credential) = row.map_err(&sql)?;
            let (counted, last_result) = results.get(&id).copied().unwrap_or((0, registered));
            records.push(WorkerRecord {
                worker_id: id,
                name,
                host,
                cores,
                version,
                results: counted,
                conflicts: conflicts.get(&id).map_or(0, |c| c.0),
                jobs_leased: leased.get(&id).map_or(0, |c| c.0),
                last_seen_seconds_ago: (now - last_result.max(registered)).max(0.0),
                untrusted: untrusted.contains(&id),
                credential,
            });
        }
        Ok(records)
    }
}

/// The jobs that block a run's completion until someone requeues them (`requeue --state`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BlockedJobs {
    /// Ids of held jobs (their results kept disagreeing), lowest first, at most the limit asked.
    pub held: Vec<u64>,
    /// Ids of failed jobs (workers kept reporting solver errors), lowest first, at most the limit.
    pub failed: Vec<u64>,
    /// Conflicting results on record.
    pub conflicts: u64,
}

impl Store {
    /// The first `limit` held and failed jobs, and how many conflicts are on record.
    pub fn blocked_jobs(&self, limit: usize) -> Result<BlockedJobs, StoreError> {
        let ids = |state: JobState| {
            self.ids(&format!(
                "SELECT id FROM jobs WHERE state='{}' ORDER BY id LIMIT {limit}",
                state.as_str()
            ))
        };
        let conflicts: i64 = self
            .conn
            .query_row("SELECT COUNT(*) FROM conflicts", [], |r| r.get(0))
            .map_err(self.sql())?;
        Ok(BlockedJobs {
            held: ids(JobState::Held)?,
            failed: ids(JobState::Failed)?,
            conflicts: conflicts as u64,
        })
    }
}
