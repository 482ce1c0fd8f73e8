//! Reading a run's rows: reloading the scheduler, requeueing blocked jobs, and the totals and
//! summaries summed from committed rows (committing the scheduler's changes is `apply.rs`).

use super::checksum::RowClaim;
use super::credentials::CredentialNumbers;
use super::error::StoreError;
use super::{stored_counts, Loaded, Store, Summary};
use nqueens_core::{CoreError, JobCounts, Tally, Totals};
use nqueens_scheduler::state::ResultKind;
use nqueens_scheduler::state::{JobState, Review};
use nqueens_scheduler::{
    Answer, JobId, LeaseId, StoredJob, StoredLease, WorkerId, COORDINATOR, UNKNOWN_CREDENTIAL,
};
use rusqlite::OptionalExtension;
use std::collections::HashMap;

/// One row of `results` and whether its checksum holds.
#[derive(Debug, Clone)]
pub struct StoredResult {
    /// The row's id.
    pub row_id: u64,
    /// The job it answers.
    pub job_id: u64,
    /// The worker that sent it (0 for `solve --state`).
    pub worker_id: u64,
    /// It is the job's counted answer.
    pub counted: bool,
    /// Why it was stored (the scheduler's `ResultKind`, as text).
    pub kind: String,
    /// The stored counts (all zero if they are not valid stored counts, see `intact`).
    pub counts: JobCounts,
    /// The credential the answer was given under (schema 6 on; `None` for the coordinator's
    /// own rows and older rows).
    pub credential: Option<String>,
    /// The counts are non-negative integers and the checksum matches (in a schema 1 file read as it
    /// is, with no checksums, only the first holds).
    pub intact: bool,
}

/// One job's figures read with the result rows: its state (for the jobs by state of a summary),
/// and its review and conflicts (for the evidence).
pub(super) struct JobFacts {
    pub(super) state: JobState,
    pub(super) review: Review,
    pub(super) conflicts: u32,
}

/// What the committed rows come to at the run's end ([`Store::final_tally`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FinalTally {
    /// Some job has no counted result yet.
    Incomplete,
    /// Every job is counted and the sums keep the symmetry identities: the run's answer.
    Exact(Totals),
    /// Every job is counted but the sums break the symmetry identities: some counted answer is
    /// wrong (the coordinator solves the jobs that can explain it again).
    Inconsistent {
        /// Which identity fails, with the numbers.
        reason: String,
    },
}

impl FinalTally {
    /// The totals of an exact tally.
    pub fn exact(self) -> Option<Totals> {
        match self {
            FinalTally::Exact(totals) => Some(totals),
            _ => None,
        }
    }
}

/// Which blocked jobs [`Store::requeue`] returns to the queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Requeue {
    /// Held jobs: their results kept disagreeing.
    Held,
    /// Failed jobs: the solver kept reporting errors.
    Failed,
    /// Both.
    Both,
}

impl Requeue {
    fn held(self) -> bool {
        matches!(self, Requeue::Held | Requeue::Both)
    }
    fn failed(self) -> bool {
        matches!(self, Requeue::Failed | Requeue::Both)
    }
}

/// How many jobs [`Store::requeue`] returned to the queue.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Requeued {
    /// Held jobs requeued.
    pub held: u64,
    /// Failed jobs requeued.
    pub failed: u64,
}

impl StoredResult {
    /// The answer the row records, its credential numbered in `numbers`: the row's own, else
    /// (a row from before schema 6) its worker row's while that exists, else unknown (nobody's
    /// independent evidence). The coordinator's rows are its own.
    pub fn answer(
        &self,
        numbers: &mut CredentialNumbers,
        workers: &HashMap<u64, String>,
    ) -> Answer {
        let worker_id = WorkerId::new(self.worker_id);
        if worker_id == COORDINATOR {
            return Answer::coordinator(self.counts);
        }
        let credential =
            match self.credential.as_deref().or(workers.get(&self.worker_id).map(String::as_str)) {
                Some(name) => numbers.number(name),
                None => UNKNOWN_CREDENTIAL,
            };
        let late = self.kind == ResultKind::Late.as_str();
        Answer { worker_id, credential, counts: self.counts, late }
    }

    fn claim(&self) -> RowClaim<'_> {
        RowClaim {
            job_id: self.job_id,
            worker_id: self.worker_id,
            counted: self.counted,
            kind: &self.kind,
            counts: self.counts,
            credential: self.credential.as_deref(),
        }
    }
}

impl Store {
    /// Every result row, its counts and checksum checked. A row that fails (a negative or
    /// non-integer count, or a checksum that does not match) is damaged or was edited: it must
    /// never be counted.
    pub fn results(&self) -> Result<Vec<StoredResult>, StoreError> {
        let sql = self.sql();
        let has_checksum = self.mac.is_some();
        let checksum = if has_checksum { "checksum" } else { "NULL" };
        let credential =
            if self.has_column("results", "credential")? { "credential" } else { "NULL" };
        let query = format!("SELECT id, job_id, worker_id, counted, kind, solutions, sym180, sym90, nodes, {checksum}, {credential} FROM results ORDER BY id");
        let mut q = self.conn.prepare(&query).map_err(&sql)?;
        let mut rows = q.query([]).map_err(&sql)?;
        let mut out = Vec::new();
        while let Some(r) = rows.next().map_err(&sql)? {
            let counts = stored_counts(r, 5).map_err(&sql)?;
            let mut row = StoredResult {
                row_id: r.get::<_, i64>(0).map_err(&sql)? as u64,
                job_id: r.get::<_, i64>(1).map_err(&sql)? as u64,
                worker_id: r.get::<_, i64>(2).map_err(&sql)? as u64,
                counted: r.get(3).map_err(&sql)?,
                kind: r.get(4).map_err(&sql)?,
                counts: counts.unwrap_or_default(),
                credential: r.get(10).map_err(&sql)?,
                intact: counts.is_some(),
            };
            if let (Some(mac), true) = (&self.mac, row.intact) {
                // A checksum that is not a blob (NULL, or edited into text) fails.
                let tag = match r.get_ref(9).map_err(&sql)? {
                    rusqlite::types::ValueRef::Blob(b) => Some(b),
                    _ => None,
                };
                row.intact = mac.verify(&row.claim(), tag);
            }
            out.push(row);
        }
        Ok(out)
    }

    /// State, review and conflicts of every job, by id.
    pub(super) fn job_facts(&self) -> Result<Vec<JobFacts>, StoreError> {
        let sql = self.sql();
        let review = if self.has_column("jobs", "review")? { "review" } else { "NULL" };
        let query = format!("SELECT state, {review}, conflicts FROM jobs ORDER BY id");
        let mut q = self.conn.prepare(&query).map_err(&sql)?;
        let mut rows = q.query([]).map_err(&sql)?;
        let mut jobs = Vec::with_capacity(self.meta.job_count as usize);
        let corrupt = |reason: String| StoreError::Corrupt { path: self.path.clone(), reason };
        while let Some(r) = rows.next().map_err(&sql)? {
            let state: String = r.get(0).map_err(&sql)?;
            let review: Option<String> = r.get(1).map_err(&sql)?;
            jobs.push(JobFacts {
                state: JobState::parse(&state)
                    .ok_or_else(|| corrupt(format!("unknown job state {state}")))?,
                review: Review::parse(review.as_deref())
                    .ok_or_else(|| corrupt(format!("unknown review {review:?}")))?,
                conflicts: r.get(2).map_err(&sql)?,
            });
        }
        Ok(jobs)
    }

    /// Whether `table` has a column `column` (files of older schemas, read as they are, lack some).
    pub(super) fn has_column(&self, table: &str, column: &str) -> Result<bool, StoreError> {
        let mut q =
            self.conn.prepare(&format!("PRAGMA table_info({table})")).map_err(self.sql())?;
        let names = q.query_map([], |r| r.get::<_, String>(1)).map_err(self.sql())?;
        for name in names {
            if name.map_err(self.sql())? == column {
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// Whether this file's rows carry checksums (false for a schema 1 file read as it is).
    pub fn has_checksums(&self) -> bool {
        self.mac.is_some()
    }

    /// The weight of every job, by id.
    fn weights(&self) -> Result<Vec<u8>, StoreError> {
        let sql = self.sql();
        let mut q = self.conn.prepare("SELECT id, weight FROM jobs ORDER BY id").map_err(&sql)?;
        let mut rows = q.query([]).map_err(&sql)?;
        let mut weights = Vec::with_capacity(self.meta.job_count as usize);
        while let Some(r) = rows.next().map_err(&sql)? {
            let id: i64 = r.get(0).map_err(&sql)?;
            if id as usize != weights.len() {
                return Err(StoreError::Corrupt {
                    path: self.path.clone(),
                    reason: format!("job ids not contiguous at {id}"),
                });
            }
            weights.push(r.get(1).map_err(&sql)?);
        }
        Ok(weights)
    }

    /// Returns the jobs that are held (results kept disagreeing) and/or failed (the solver kept
    /// reporting errors), as `which` says, to the queue, and says how many of each. Their results
    /// and conflicts stay on record, and so do their counters: each requeue buys one more
    /// attempt, and a new result that agrees with another worker's earlier one settles a held job.
    pub fn requeue(&mut self, which: Requeue) -> Result<Requeued, StoreError> {
        let path = self.path.clone();
        let sql = move |error| StoreError::Sqlite { path: path.clone(), error };
        let tx = self.conn.transaction().map_err(&sql)?;
        let requeue = |state: JobState| {
            tx.execute(
                "UPDATE jobs SET state=?1, lease_id=NULL, worker_id=NULL WHERE state=?2",
                [JobState::Pending.as_str(), state.as_str()],
            )
        };
        let held = if which.held() { requeue(JobState::Held).map_err(&sql)? as u64 } else { 0 };
        let failed =
            if which.failed() { requeue(JobState::Failed).map_err(&sql)? as u64 } else { 0 };
        tx.commit().map_err(&sql)?;
        Ok(Requeued { held, failed })
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

    /// Reloads jobs, their results and the leases issued so far. Each answer's credential is
    /// numbered through this store's [`Store::credential_numbers`].
    pub fn load(&mut self) -> Result<Loaded, StoreError> {
        let mut jobs = self.load_jobs()?;
        let mut numbers = std::mem::take(&mut self.numbers);
        let loaded = self.load_results(&mut jobs, &mut numbers);
        self.numbers = numbers;
        loaded?;
        let leases = self.load_leases()?;
        let next_worker_id: i64 = self
            .conn
            .query_row("SELECT COALESCE(MAX(id), 0) + 1 FROM workers", [], |r| r.get(0))
            .map_err(self.sql())?;
        let untrusted = self.untrusted_workers()?;
        let untrusted = untrusted.into_iter().map(WorkerId::new).collect();
        Ok(Loaded { jobs, leases, next_worker_id: next_worker_id as u64, untrusted })
    }

    /// Every job row, by id, without its results. The worker and deadline of a leased job come
    /// from its lease (see `restore`).
    fn load_jobs(&self) -> Result<Vec<StoredJob>, StoreError> {
        let sql = self.sql();
        let mut jobs = Vec::with_capacity(self.meta.job_count as usize);
        // A schema 3 file read as it is has no review column: nothing is under review there.
        let review = if self.has_column("jobs", "review")? { "review" } else { "NULL" };
        let query = format!("SELECT id, estimate, verify, state, lease_id, errors, conflicts, weight, {review} FROM jobs ORDER BY id");
        let mut q = self.conn.prepare(&query).map_err(&sql)?;
        let mut rows = q.query([]).map_err(&sql)?;
        while let Some(r) = rows.next().map_err(&sql)? {
            let id: i64 = r.get(0).map_err(&sql)?;
            if id as usize != jobs.len() {
                return Err(StoreError::Corrupt {
                    path: self.path.clone(),
                    reason: format!("job ids not contiguous at {id}"),
                });
            }
            let state: String = r.get(3).map_err(&sql)?;
            let Some(state) = JobState::parse(&state) else {
                return Err(StoreError::Corrupt {
                    path: self.path.clone(),
                    reason: format!("unknown job state {state}"),
                });
            };
            let lease: Option<i64> = r.get(4).map_err(&sql)?;
            let mut job = StoredJob::new(
                JobId::new(id as u64),
                r.get::<_, i64>(1).map_err(&sql)? as u64,
                r.get(7).map_err(&sql)?,
                r.get(2).map_err(&sql)?,
            );
            job.state = state;
            job.lease = lease.map(|l| LeaseId::new(l as u64));
            job.errors = r.get(5).map_err(&sql)?;
            job.conflicts = r.get(6).map_err(&sql)?;
            let review: Option<String> = r.get(8).map_err(&sql)?;
            job.review = Review::parse(review.as_deref()).ok_or_else(|| StoreError::Corrupt {
                path: self.path.clone(),
                reason: format!("unknown review {review:?} of job {id}"),
            })?;
            jobs.push(job);
        }
        Ok(jobs)
    }

    /// Gives each job its result rows: its counted answer and the opinions awaiting a second
    /// worker. Rows that fail their checksum are left out, and a done job left without a counted
    /// row is pending again (solved again), with a warning that lists them.
    fn load_results(
        &self,
        jobs: &mut [StoredJob],
        numbers: &mut CredentialNumbers,
    ) -> Result<(), StoreError> {
        let mut bad = Vec::new();
        let workers = self.worker_credentials()?;
        for row in self.results()? {
            let Some(job) = jobs.get_mut(row.job_id as usize) else {
                return Err(StoreError::Corrupt {
                    path: self.path.clone(),
                    reason: format!("result for unknown job {}", row.job_id),
                });
            };
            if !row.intact {
                bad.push(row.job_id);
            } else if row.counted {
                job.counted = Some(row.answer(numbers, &workers));
            } else {
                job.opinions.push(row.answer(numbers, &workers));
            }
        }
        // A done job whose counted row failed its checksum is solved again.
        let mut requeued = Vec::new();
        for &id in &bad {
            let job = &mut jobs[id as usize];
            if job.counted.is_none() && job.state == JobState::Done {
                job.state = JobState::Pending;
                requeued.push(id);
            }
        }
        if !bad.is_empty() {
            tracing::warn!(
                state = %self.path.display(),
                bad_rows = bad.len(),
                jobs = %id_list(&bad),
                requeued = %id_list(&requeued),
                "result rows fail their checksum (damaged or edited): they are not counted, and their done jobs are solved again"
            );
        }
        Ok(())
    }

    /// Every lease issued so far, its jobs parsed from their stored list.
    fn load_leases(&self) -> Result<Vec<StoredLease>, StoreError> {
        let sql = self.sql();
        let mut leases = Vec::new();
        let mut q = self.conn.prepare("SELECT id, worker_id, job_ids FROM leases").map_err(&sql)?;
        let mut rows = q.query([]).map_err(&sql)?;
        while let Some(r) = rows.next().map_err(&sql)? {
            let id = r.get::<_, i64>(0).map_err(&sql)? as u64;
            let worker_id = r.get::<_, i64>(1).map_err(&sql)? as u64;
            let text: String = r.get(2).map_err(&sql)?;
            let job_ids = text
                .split(',')
                .filter(|s| !s.is_empty())
                .map(|s| s.parse::<u64>().map(JobId::new))
                .collect::<Result<Vec<_>, _>>()
                .map_err(|_| StoreError::Corrupt {
                    path: self.path.clone(),
                    reason: format!("bad job list of lease {id}"),
                })?;
            leases.push(StoredLease {
                id: LeaseId::new(id),
                worker: WorkerId::new(worker_id),
                jobs: job_ids,
            });
        }
        Ok(leases)
    }

    /// The weighted sums of the counted (committed) results whose checksum holds. Each row is
    /// checked and summed here, in Rust, into 128-bit sums ([`Tally`]), never with SQL `SUM`, whose
    /// 64-bit integers overflow from N=29: a row that fails is never counted, whatever its
    /// `counted` flag says.
    pub fn tally(&self) -> Result<Tally, StoreError> {
        Ok(self.tally_checked()?.0)
    }

    /// [`Store::tally`], and how many result rows fail their checksum (the `bad_rows` of status).
    pub fn tally_checked(&self) -> Result<(Tally, u64), StoreError> {
        self.tally_and_bad(&self.results()?)
    }

    /// The tally of `rows`, and how many of them fail their checksum.
    pub(super) fn tally_and_bad(&self, rows: &[StoredResult]) -> Result<(Tally, u64), StoreError> {
        // The weights are a scan of every job: not read for a run with nothing counted yet.
        let counted = rows.iter().any(|r| r.counted && r.intact);
        let weights = if counted { self.weights()? } else { Vec::new() };
        let mut tally = Tally::new(self.meta.n as u32)?;
        let mut bad = 0;
        for row in rows {
            if !row.intact {
                bad += 1;
                continue;
            }
            if !row.counted {
                continue;
            }
            let weight = *weights.get(row.job_id as usize).ok_or_else(|| StoreError::Corrupt {
                path: self.path.clone(),
                reason: format!("result for unknown job {}", row.job_id),
            })?;
            tally.add(weight, &row.counts)?;
        }
        Ok((tally, bad))
    }

    /// What `tally` (this store's [`Store::tally`], which callers already hold: summing and
    /// checking every row is the expensive part) comes to at the run's end: the totals once every
    /// job has a counted result and the sums keep the symmetry identities. A tally that breaks
    /// them is an outcome (a wrong answer was counted), not an error of the store.
    pub fn final_tally(&self, tally: &Tally) -> FinalTally {
        if tally.jobs != self.meta.job_count {
            return FinalTally::Incomplete;
        }
        match tally.totals() {
            Ok(totals) => FinalTally::Exact(totals),
            Err(CoreError::Inconsistent { reason }) => FinalTally::Inconsistent { reason },
            // `totals` fails on nothing else; should it ever, that tally is no answer either.
            Err(other) => FinalTally::Inconsistent { reason: other.to_string() },
        }
    }

    /// Progress from committed rows (for `status --state` and the status call).
    pub fn summary(&self) -> Result<Summary, StoreError> {
        self.summary_with(&self.results()?, &self.job_facts()?)
    }

    /// [`Store::summary`] from rows and job facts already read.
    pub(super) fn summary_with(
        &self,
        results: &[StoredResult],
        facts: &[JobFacts],
    ) -> Result<Summary, StoreError> {
        let sql = self.sql();
        let (tally, bad_rows) = self.tally_and_bad(results)?;
        let mut s = Summary { tally, bad_rows, ..Summary::default() };
        // Counted from the one scan of the jobs (a `GROUP BY state` sorts them: twice as slow).
        for job in facts {
            s.jobs.add(job.state, 1);
        }
        // A done job whose only counted row fails its checksum is pending again (a writer's
        // `load` puts it back in the queue).
        if bad_rows > 0 {
            let intact: std::collections::HashSet<u64> =
                results.iter().filter(|r| r.intact && r.counted).map(|r| r.job_id).collect();
            let broken: std::collections::BTreeSet<u64> = results
                .iter()
                .filter(|r| !r.intact && r.counted && !intact.contains(&r.job_id))
                .map(|r| r.job_id)
                .collect();
            let done: std::collections::HashSet<u64> = self
                .ids(&format!("SELECT id FROM jobs WHERE state='{}'", JobState::Done.as_str()))?
                .into_iter()
                .collect();
            for _ in broken.iter().filter(|id| done.contains(id)) {
                s.jobs.moved(JobState::Done, JobState::Pending);
            }
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
        (s.first_result_unix, s.last_result_unix) = self.counted_span()?;
        Ok(s)
    }

    /// When the first and the last counted result arrived (Unix seconds), if any did.
    pub fn counted_span(&self) -> Result<(Option<f64>, Option<f64>), StoreError> {
        self.conn
            .query_row("SELECT MIN(at), MAX(at) FROM results WHERE counted=1", [], |r| {
                Ok((r.get(0)?, r.get(1)?))
            })
            .map_err(self.sql())
    }

    /// How long the run took to its last counted result (its age, before any): the `seconds`
    /// of its result, live and offline alike.
    pub fn time_to_last_result(&self) -> Result<std::time::Duration, StoreError> {
        Ok(match self.counted_span()?.1 {
            Some(last) => {
                std::time::Duration::from_secs_f64((last - self.meta.created_unix).max(0.0))
            }
            None => self.age(),
        })
    }
}

/// Up to 20 job ids, for a log line.
fn id_list(ids: &[u64]) -> String {
    let mut text = ids.iter().take(20).map(|i| i.to_string()).collect::<Vec<_>>().join(",");
    if ids.len() > 20 {
        text.push_str(&format!(",... ({} in all)", ids.len()));
    }
    text
}
