//! The workers that took part in a run, as its rows record them: for the engine, which lets a
//! worker take its id up again, and for `status --state`, which has no live coordinator to ask.

use super::error::StoreError;
use super::{unix_now, Store, WorkerRow};
use nqueens_scheduler::state::JobState;
use std::collections::HashMap;

/// A worker as a run's rows record it: its `workers` row (what it registered as), and what it
/// did. The one shape workers are read in: the engine takes `row` (to let a worker take its id up
/// again), `status` all of it.
#[derive(Debug, Clone, PartialEq)]
pub struct WorkerRecord {
    /// Its row as it registered: id, name, host, lease slots, version, credential (empty in rows
    /// from before credentials: the shared token) and secret digest.
    pub row: WorkerRow,
    /// Its answers taken: counted, confirming a counted one, or an opinion waiting for another
    /// (not those in conflict, nor late ones); the live count of `status` since the coordinator
    /// started.
    pub results: u64,
    /// Conflicts it was party to.
    pub conflicts: u64,
    /// Jobs leased to it now.
    pub jobs_leased: u64,
    /// Seconds since its last result (or its registration, if later).
    pub last_seen_seconds_ago: f64,
    /// It lost a settled verification.
    pub untrusted: bool,
}

/// Per worker id, a count and a time (Unix seconds), as a `per_worker` query sums them.
type PerWorker = HashMap<u64, (u64, f64)>;

impl Store {
    /// Every worker that registered with the run, by id: its row as it registered, its counted
    /// results, conflicts, leased jobs, last result and whether it lost a verification.
    pub fn workers(&self) -> Result<Vec<WorkerRecord>, StoreError> {
        let rows = self.worker_rows()?;
        if rows.is_empty() {
            // A run no worker joined yet: none of the scans below (of every job) is needed.
            return Ok(Vec::new());
        }
        let results = self.per_worker(
            "SELECT worker_id, SUM(kind IN ('first', 'verified', 'opinion', 'confirm')), MAX(at)
             FROM results GROUP BY worker_id",
        )?;
        let conflicts = self.per_worker(
            "SELECT w, COUNT(*), 0.0 FROM (SELECT worker_a AS w FROM conflicts
             UNION ALL SELECT worker_b FROM conflicts) GROUP BY w",
        )?;
        let leased = self.per_worker(&format!(
            "SELECT worker_id, COUNT(*), 0.0 FROM jobs WHERE state='{}' GROUP BY worker_id",
            JobState::Leased.as_str()
        ))?;
        let untrusted = self.untrusted_workers()?;
        let now = unix_now();
        let records = rows.into_iter().map(|(row, registered)| {
            let id = row.id;
            let (counted, last_result) = results.get(&id).copied().unwrap_or((0, registered));
            WorkerRecord {
                row,
                results: counted,
                conflicts: conflicts.get(&id).map_or(0, |c| c.0),
                jobs_leased: leased.get(&id).map_or(0, |c| c.0),
                last_seen_seconds_ago: (now - last_result.max(registered)).max(0.0),
                untrusted: untrusted.contains(&id),
            }
        });
        Ok(records.collect())
    }

    /// A `(worker id, count, time)` query's rows, by worker id.
    fn per_worker(&self, query: &str) -> Result<PerWorker, StoreError> {
        let sql = self.sql();
        let mut q = self.conn.prepare(query).map_err(&sql)?;
        let rows = q
            .query_map([], |r| {
                Ok((r.get::<_, i64>(0)? as u64, (r.get::<_, i64>(1)? as u64, r.get(2)?)))
            })
            .map_err(&sql)?;
        rows.collect::<Result<_, _>>().map_err(&sql)
    }

    /// Every `workers` row, by id, and when it registered (Unix seconds, 0 if unknown). Rows of
    /// files from before schema 3, read as they are, have no credential or secret digest (empty).
    fn worker_rows(&self) -> Result<Vec<(WorkerRow, f64)>, StoreError> {
        let sql = self.sql();
        let column = |name| -> Result<&str, StoreError> {
            Ok(if self.has_column("workers", name)? { name } else { "NULL" })
        };
        // Lease slots were stored as `cores` before schema 5; a file read as it is keeps that.
        let slots = if self.has_column("workers", "slots")? { "slots" } else { "cores" };
        let query = format!(
            "SELECT id, name, host, {slots}, version, registered, {}, {}, {} FROM workers ORDER BY id",
            column("credential")?,
            column("secret_digest")?,
            column("device")?
        );
        let mut q = self.conn.prepare(&query).map_err(&sql)?;
        let rows = q
            .query_map([], |r| {
                let row = WorkerRow {
                    id: r.get::<_, i64>(0)? as u64,
                    name: r.get::<_, Option<String>>(1)?.unwrap_or_default(),
                    host: r.get::<_, Option<String>>(2)?.unwrap_or_default(),
                    slots: r.get::<_, Option<i64>>(3)?.unwrap_or(0) as u32,
                    version: r.get::<_, Option<String>>(4)?.unwrap_or_default(),
                    credential: r.get::<_, Option<String>>(6)?.unwrap_or_default(),
                    secret_digest: r.get::<_, Option<Vec<u8>>>(7)?.unwrap_or_default(),
                    device: r.get::<_, Option<String>>(8)?.unwrap_or_default(),
                };
                Ok((row, r.get::<_, Option<f64>>(5)?.unwrap_or(0.0)))
            })
            .map_err(&sql)?;
        rows.collect::<Result<_, _>>().map_err(&sql)
    }
}

/// The jobs that block a run's completion until someone requeues them (`requeue --state`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BlockedJobs {
    /// Ids of held jobs (their results kept disagreeing), lowest first, at most the limit asked.
    pub held: Vec<u64>,
    /// Ids of failed jobs (workers kept reporting solver errors), lowest first, at most the limit.
    pub failed: Vec<u64>,
}

impl Store {
    /// The first `limit` held and failed jobs.
    pub fn blocked_jobs(&self, limit: usize) -> Result<BlockedJobs, StoreError> {
        let ids = |state: JobState| {
            self.ids(&format!(
                "SELECT id FROM jobs WHERE state='{}' ORDER BY id LIMIT {limit}",
                state.as_str()
            ))
        };
        Ok(BlockedJobs { held: ids(JobState::Held)?, failed: ids(JobState::Failed)? })
    }
}
