//! Committing the scheduler's changes: a batch of [`Change`]s (and the worker rows registered with
//! it) in ONE transaction, so that a result and the job state it causes are durable together and
//! the engine's group commit costs one sync (synchronous=FULL) per batch, not one per change.

use super::checksum::{RowClaim, RowMac};
use super::error::StoreError;
use super::{stored_counts, unix_now, Store, WorkerRow};
use nqueens_scheduler::state::{JobState, Review};
use nqueens_scheduler::{Change, JobId, LeaseId, WorkerId, COORDINATOR};
use rusqlite::{params, CachedStatement, Transaction};
use std::path::Path;

/// The error of a failed SQL call on the state file at `path`.
fn sql_error(path: &Path) -> impl Fn(rusqlite::Error) -> StoreError + '_ {
    move |error| StoreError::Sqlite { path: path.to_path_buf(), error }
}

impl Store {
    /// Commits `changes` (and the worker rows in `workers`) in one transaction.
    pub fn apply(&mut self, changes: &[Change], workers: &[WorkerRow]) -> Result<(), StoreError> {
        self.apply_with_forgotten(changes, workers, &[])
    }

    /// [`Store::apply`], deleting also the rows of the workers `forgotten` (identities that never
    /// delivered an answer, forgotten to make room: nothing else points to them).
    pub fn apply_with_forgotten(
        &mut self,
        changes: &[Change],
        workers: &[WorkerRow],
        forgotten: &[u64],
    ) -> Result<(), StoreError> {
        if changes.is_empty() && workers.is_empty() && forgotten.is_empty() {
            return Ok(());
        }
        let at = unix_now();
        let Some(mac) = &self.mac else {
            return Err(StoreError::Corrupt {
                path: self.path.clone(),
                reason: "no checksum key (a schema 1 file must be opened for writing to migrate)"
                    .into(),
            });
        };
        let sql = sql_error(&self.path);
        let tx = self.conn.transaction().map_err(&sql)?;
        {
            let mut batch = Batch::prepare(&tx, mac, &self.path, at)?;
            for w in workers {
                batch.worker(w)?;
            }
            for &id in forgotten {
                batch.forget_worker(id)?;
            }
            for change in changes {
                match change {
                    Change::JobState { job_id, state, lease_id, worker_id, errors, conflicts } => {
                        batch.job_state(*job_id, *state, *lease_id, *worker_id, *errors, *conflicts)
                    }
                    Change::Result {
                        job_id,
                        worker_id,
                        credential,
                        lease_id,
                        counts,
                        seconds,
                        counted,
                        kind,
                    } => {
                        let claim = RowClaim {
                            job_id: job_id.get(),
                            worker_id: worker_id.get(),
                            counted: *counted,
                            kind: kind.as_str(),
                            counts: *counts,
                            credential: if *worker_id == COORDINATOR {
                                None
                            } else {
                                self.numbers.name(*credential)
                            },
                        };
                        batch.result(&claim, *lease_id, *seconds)
                    }
                    Change::Uncount { job_id } => batch.uncount(*job_id),
                    Change::Review { job_id, review } => batch.review(*job_id, *review),
                    Change::Lease { lease_id, worker_id, job_ids } => {
                        batch.lease(*lease_id, *worker_id, job_ids)
                    }
                    Change::Conflict { job_id, worker_a, worker_b, detail } => {
                        batch.conflict(*job_id, *worker_a, *worker_b, detail)
                    }
                    Change::Untrust { worker_id, job_id, detail, requeued } => {
                        batch.untrust(*worker_id, *job_id, detail, *requeued)
                    }
                }?;
            }
        }
        tx.commit().map_err(&sql)?;
        Ok(())
    }
}

/// One batch being written: the statements of its transaction, prepared once per batch, and what
/// all its rows share (the run's checksum key, the commit time).
struct Batch<'tx> {
    set_state: CachedStatement<'tx>,
    set_review: CachedStatement<'tx>,
    insert_result: CachedStatement<'tx>,
    uncount_rows: CachedStatement<'tx>,
    uncount: CachedStatement<'tx>,
    uncount_bad: CachedStatement<'tx>,
    insert_lease: CachedStatement<'tx>,
    insert_conflict: CachedStatement<'tx>,
    insert_untrusted: CachedStatement<'tx>,
    upsert_worker: CachedStatement<'tx>,
    delete_worker: CachedStatement<'tx>,
    mac: &'tx RowMac,
    /// The state file, for errors.
    path: &'tx Path,
    /// The commit time of every row written (Unix seconds).
    at: f64,
}

impl<'tx> Batch<'tx> {
    fn prepare(
        tx: &'tx Transaction<'_>,
        mac: &'tx RowMac,
        path: &'tx Path,
        at: f64,
    ) -> Result<Batch<'tx>, StoreError> {
        let sql = sql_error(path);
        let prepare = |query: &str| tx.prepare_cached(query).map_err(&sql);
        Ok(Batch {
            set_state: prepare("UPDATE jobs SET state=?2, lease_id=?3, worker_id=?4, errors=?5, conflicts=?6 WHERE id=?1")?,
            set_review: prepare("UPDATE jobs SET review=?2 WHERE id=?1")?,
            insert_result: prepare(
                "INSERT INTO results(job_id, worker_id, lease_id, solutions, sym180, sym90, nodes, seconds, counted, kind, at, checksum, credential)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13)",
            )?,
            uncount_rows: prepare("SELECT id, worker_id, kind, solutions, sym180, sym90, nodes, checksum, credential FROM results WHERE job_id=?1 AND counted=1")?,
            uncount: prepare("UPDATE results SET counted=0, checksum=?2 WHERE id=?1")?,
            uncount_bad: prepare("UPDATE results SET counted=0 WHERE id=?1")?,
            insert_lease: prepare(
                "INSERT INTO leases(id, worker_id, job_ids, at) VALUES (?1, ?2, ?3, ?4)",
            )?,
            insert_conflict: prepare("INSERT INTO conflicts(job_id, worker_a, worker_b, detail, at) VALUES (?1, ?2, ?3, ?4, ?5)")?,
            insert_untrusted: prepare("INSERT OR IGNORE INTO untrusted_workers(worker_id, job_id, detail, requeued, at) VALUES (?1, ?2, ?3, ?4, ?5)")?,
            upsert_worker: prepare("INSERT OR REPLACE INTO workers(id, name, host, slots, version, registered, credential, secret_digest, device) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)")?,
            delete_worker: prepare("DELETE FROM workers WHERE id=?1")?,
            mac,
            path,
            at,
        })
    }

    /// A worker registered (or registered again): its row, as it registered now.
    fn worker(&mut self, w: &WorkerRow) -> Result<(), StoreError> {
        self.upsert_worker
            .execute(params![
                w.id as i64,
                w.name,
                w.host,
                w.slots,
                w.version,
                self.at,
                w.credential,
                w.secret_digest,
                w.device
            ])
            .map_err(sql_error(self.path))?;
        Ok(())
    }

    /// A worker identity forgotten: its row goes.
    fn forget_worker(&mut self, id: u64) -> Result<(), StoreError> {
        self.delete_worker.execute(params![id as i64]).map_err(sql_error(self.path))?;
        Ok(())
    }

    /// [`Change::JobState`]: the job's row takes its new state, lease and counters.
    fn job_state(
        &mut self,
        job_id: JobId,
        state: JobState,
        lease_id: Option<LeaseId>,
        worker_id: Option<WorkerId>,
        errors: u32,
        conflicts: u32,
    ) -> Result<(), StoreError> {
        self.set_state
            .execute(params![
                job_id.get() as i64,
                state.as_str(),
                lease_id.map(|l| l.get() as i64),
                worker_id.map(|w| w.get() as i64),
                errors,
                conflicts
            ])
            .map_err(sql_error(self.path))?;
        Ok(())
    }

    /// [`Change::Review`]: the job is under review (see [`Review`]).
    fn review(&mut self, job_id: JobId, review: Review) -> Result<(), StoreError> {
        self.set_review
            .execute(params![job_id.get() as i64, review.as_str()])
            .map_err(sql_error(self.path))?;
        Ok(())
    }

    /// [`Change::Result`]: a new result row, with the checksum of what it claims. Counts past
    /// SQLite's signed 64-bit integers are refused, never stored wrapped.
    fn result(
        &mut self,
        claim: &RowClaim,
        lease_id: LeaseId,
        seconds: f64,
    ) -> Result<(), StoreError> {
        let fit = |field, value: u64| {
            i64::try_from(value).map_err(|_| StoreError::CountOutOfRange {
                path: self.path.to_path_buf(),
                job_id: claim.job_id,
                field,
                value,
            })
        };
        let counts = claim.counts;
        let stored = [
            fit("solutions", counts.solutions)?,
            fit("sym180", counts.sym180)?,
            fit("sym90", counts.sym90)?,
            fit("nodes", counts.nodes)?,
        ];
        let tag = self.mac.tag(claim);
        self.insert_result
            .execute(params![
                claim.job_id as i64,
                claim.worker_id as i64,
                lease_id.get() as i64,
                stored[0],
                stored[1],
                stored[2],
                stored[3],
                seconds,
                claim.counted,
                claim.kind,
                self.at,
                tag,
                claim.credential
            ])
            .map_err(sql_error(self.path))?;
        Ok(())
    }

    /// [`Change::Uncount`]: the job's counted rows stop counting. Each row's checksum follows its
    /// counted flag; a row that already fails keeps failing (its checksum is left as it is).
    fn uncount(&mut self, job_id: JobId) -> Result<(), StoreError> {
        let sql = sql_error(self.path);
        let mac = self.mac;
        let mut q = self.uncount_rows.query(params![job_id.get() as i64]).map_err(&sql)?;
        let mut rows = Vec::new();
        while let Some(r) = q.next().map_err(&sql)? {
            let kind: String = r.get(2).map_err(&sql)?;
            // Counts that are not valid stored counts make a bad row, like a failing checksum.
            let valid = stored_counts(r, 3).map_err(&sql)?;
            let counts = valid.unwrap_or_default();
            let worker_id = r.get::<_, i64>(1).map_err(&sql)? as u64;
            let credential: Option<String> = r.get(8).map_err(&sql)?;
            let claim = RowClaim {
                job_id: job_id.get(),
                worker_id,
                counted: true,
                kind: &kind,
                counts,
                credential: credential.as_deref(),
            };
            let tag = match r.get_ref(7).map_err(&sql)? {
                rusqlite::types::ValueRef::Blob(b) => Some(b),
                _ => None,
            };
            let new_tag = (valid.is_some() && mac.verify(&claim, tag))
                .then(|| mac.tag(&RowClaim { counted: false, ..claim }));
            rows.push((r.get::<_, i64>(0).map_err(&sql)?, new_tag));
        }
        drop(q);
        for (row_id, tag) in rows {
            match tag {
                Some(tag) => self.uncount.execute(params![row_id, tag]),
                None => self.uncount_bad.execute(params![row_id]),
            }
            .map_err(&sql)?;
        }
        Ok(())
    }

    /// [`Change::Lease`]: a new lease row, its jobs as a comma-separated list of ids.
    fn lease(
        &mut self,
        lease_id: LeaseId,
        worker_id: WorkerId,
        job_ids: &[JobId],
    ) -> Result<(), StoreError> {
        let ids = job_ids.iter().map(|i| i.to_string()).collect::<Vec<_>>().join(",");
        self.insert_lease
            .execute(params![lease_id.get() as i64, worker_id.get() as i64, ids, self.at])
            .map_err(sql_error(self.path))?;
        Ok(())
    }

    /// [`Change::Conflict`]: two answers for a job disagreed, on record.
    fn conflict(
        &mut self,
        job_id: JobId,
        worker_a: WorkerId,
        worker_b: WorkerId,
        detail: &str,
    ) -> Result<(), StoreError> {
        self.insert_conflict
            .execute(params![
                job_id.get() as i64,
                worker_a.get() as i64,
                worker_b.get() as i64,
                detail,
                self.at
            ])
            .map_err(sql_error(self.path))?;
        Ok(())
    }

    /// [`Change::Untrust`]: the worker is marked untrusted (once: a later mark is ignored).
    fn untrust(
        &mut self,
        worker_id: WorkerId,
        job_id: JobId,
        detail: &str,
        requeued: u64,
    ) -> Result<(), StoreError> {
        self.insert_untrusted
            .execute(params![
                worker_id.get() as i64,
                job_id.get() as i64,
                detail,
                requeued as i64,
                self.at
            ])
            .map_err(sql_error(self.path))?;
        Ok(())
    }
}
