//! Reading and writing a run's rows: reloading the scheduler, committing its changes, and the
//! totals and summaries summed from committed rows.

use super::{now_unix, Loaded, Store, StoreError, Summary, WorkerRow};
use crate::lifecycle::{Change, JobEntry, LeaseRecord, Standing};
use crate::state::JobState;
use nqueens_core::{JobCounts, Tally, Totals};
use rusqlite::{params, OptionalExtension};
use std::collections::HashMap;
use std::time::Instant;

impl Store {
    /// Returns the jobs that are `held` (results kept disagreeing) and/or `failed` (the solver
    /// kept reporting errors) to the queue, and says how many of each. Their results and conflicts
    /// stay on record, and so do their counters: each requeue buys one more attempt, and a new
    /// result that agrees with another worker's earlier one settles a held job.
    pub fn requeue(&mut self, held: bool, failed: bool) -> Result<(u64, u64), StoreError> {
        let path = self.path.clone();
        let sql = move |error| StoreError::Sqlite { path: path.clone(), error };
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
        self.ids("SELECT worker_id FROM untrusted_workers ORDER BY worker_id")
    }

    /// The ids a one-column `query` selects.
    pub(super) fn ids(&self, query: &str) -> Result<Vec<u64>, StoreError> {
        let sql = self.sql();
        let mut q = self.conn.prepare(query).map_err(&sql)?;
        let ids = q
            .query_map([], |r| r.get::<_, i64>(0))
            .map_err(&sql)?
            .map(|r| r.map(|v| v as u64))
            .collect::<Result<Vec<_>, _>>()
            .map_err(&sql)?;
        Ok(ids)
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
        let sql = move |error| StoreError::Sqlite { path: path.clone(), error };
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
}
