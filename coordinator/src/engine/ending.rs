//! The run's end, owned by [`Ending`]: when the run is complete (every job done, no check owed
//! to the referee, and the committed rows' final tally exact), the result summed from those rows,
//! the result file (written, and tried again until it is; a result that differs from the
//! published counts is written too, saying so, and logged as an error), the repair of a final
//! tally that breaks the symmetry identities, and what a stopping engine owes `--exit-when-done`.
//!
//! The engine asks [`Ending::after_batch`] once at start (a run complete on disk ends at once) and
//! after every batch it commits, and does what the answer ([`Step`]) says: publish the written
//! result, or hand the jobs in doubt to the referee. Only a written result is published: it is
//! the run's end for `serve --exit-when-done` and every reader, so that no run ends without its
//! output on disk.

use super::EngineError;
use nqueens_core::{Job, Totals};
use nqueens_result::RunResult;
use nqueens_scheduler::{JobId, Scheduler};
use nqueens_store::{FinalTally, Store, StoreError};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How soon a result file that could not be written is first tried again; each failure doubles
/// the wait, up to [`RESULT_FILE_RETRY_MAX`] (a flood's lack of descriptors passes in seconds, a
/// full disk or a read-only directory is logged once a minute until someone acts).
const RESULT_FILE_RETRY: Duration = Duration::from_secs(1);
const RESULT_FILE_RETRY_MAX: Duration = Duration::from_secs(60);

/// What the engine does after [`Ending::after_batch`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Step {
    /// Nothing for the readers to see.
    Nothing,
    /// The result file was just written: publish the run's end.
    Written,
    /// The final tally broke the symmetry identities and the jobs that can explain it are
    /// pending again (committed): hand the referee its jobs and publish.
    Repairing,
}

/// How the run ends: its result once written, or the refusal to write one.
pub(super) struct Ending {
    result_file: PathBuf,
    /// The run's jobs, for the export digest of the result file (none: no digest).
    jobs: Option<Arc<Vec<Job>>>,
    /// The result, once computed from the committed rows: nothing changes the rows after.
    result: Option<RunResult>,
    /// Whether the result file holds `result` (a failed write, a full disk or no descriptor
    /// left, is tried again).
    written: bool,
    /// When the result file is next tried, after a failed write, and the wait after that one.
    next_write: Option<(Instant, Duration)>,
    /// The final tally broke the symmetry identities and no repair was left: the job ids in
    /// doubt, reported once; the coordinator keeps serving status.
    refused: Option<Vec<JobId>>,
    /// Rounds of repair so far: jobs un-counted and solved again after a broken final tally.
    repairs: u32,
}

impl Ending {
    /// The end of a run whose result goes to `result_file` (with the export digest of `jobs`).
    pub(super) fn new(result_file: PathBuf, jobs: Option<Arc<Vec<Job>>>) -> Self {
        Ending {
            result_file,
            jobs,
            result: None,
            written: false,
            next_write: None,
            refused: None,
            repairs: 0,
        }
    }

    /// Whether the result is computed: no answer may change the rows it was summed from.
    pub(super) fn is_final(&self) -> bool {
        self.result.is_some()
    }

    /// The result as every reader sees it: only once the result file holds it.
    pub(super) fn published(&self) -> Option<RunResult> {
        self.result.clone().filter(|_| self.written)
    }

    /// After a committed batch (and once at start): once every job is done, the result from the
    /// committed rows and the result file, or the repair of a broken tally; while the file is
    /// not written, the next try when it is due.
    pub(super) fn after_batch(
        &mut self,
        store: &mut Store,
        scheduler: &mut Scheduler,
    ) -> Result<Step, StoreError> {
        if self.result.is_some() {
            let due = self.next_write.is_none_or(|(at, _)| Instant::now() >= at);
            return Ok(if !self.written && due { self.try_write() } else { Step::Nothing });
        }
        if self.refused.is_some() || !scheduler.is_complete() {
            return Ok(Step::Nothing);
        }
        let tally = store.tally()?;
        match store.final_tally(&tally) {
            FinalTally::Exact(totals) => {
                self.conclude(store, &totals, scheduler.total_jobs(), tally.nodes)?;
                Ok(self.try_write())
            }
            FinalTally::Incomplete => {
                tracing::error!(
                    "all jobs are done in memory but the committed rows are incomplete"
                );
                Ok(Step::Nothing)
            }
            FinalTally::Inconsistent { reason } => self.repair(store, scheduler, &reason),
        }
    }

    /// What a stopping engine owes `--exit-when-done`: a run complete in the rows but not on
    /// disk must not look finished, so the result file is tried once more and the last try's
    /// error ends the coordinator non-zero (a restart writes it).
    pub(super) fn before_exit(&mut self) -> Result<(), EngineError> {
        if self.result.is_some() && !self.written {
            self.write().map_err(|source| EngineError::ResultFile {
                path: self.result_file.clone(),
                source,
            })?;
        }
        Ok(())
    }

    /// The result of an exact final tally, with what it rests on and the export digest.
    fn conclude(
        &mut self,
        store: &mut Store,
        totals: &Totals,
        jobs: u64,
        nodes: u64,
    ) -> Result<(), StoreError> {
        // The `.db` alone is then the whole state (a copy of it needs no `-wal` beside it).
        store.checkpoint()?;
        let evidence = store.evidence()?;
        tracing::info!(evidence = %evidence.summary(), "what the total rests on");
        let mut record = RunResult::new(totals, jobs, store.time_to_last_result()?, nodes)
            .with_evidence(evidence);
        if let Some(jobs) = &self.jobs {
            match nqueens_result::export_digest(store, jobs) {
                Ok(digest) => record = record.with_export_digest(digest),
                Err(nqueens_result::ExportError::Store(e)) => return Err(e),
                // The tally read the same rows: only a broken list gets here.
                Err(e) => tracing::error!(error = %e, "the export digest cannot be computed"),
            }
        }
        tracing::info!(n = record.n, total = record.total, unique = record.unique, result = %record.json_line(), "run complete");
        match record.not_exact() {
            // Written and published all the same, so that the result file says why and
            // `serve --exit-when-done` ends (non-zero).
            Some(why) => {
                tracing::error!(%why, "the final tally differs from the published counts: the result is NOT exact; inspect the jobs with `verify --state`")
            }
            None => {
                tracing::info!(published = %record.published.summary, "checked against the published counts")
            }
        }
        self.result = Some(record);
        Ok(())
    }

    /// Writes the result file, or logs why not and sets when to try again (waits that double).
    fn try_write(&mut self) -> Step {
        match self.write() {
            Ok(()) => Step::Written,
            Err(e) => {
                let wait = self.next_write.map_or(RESULT_FILE_RETRY, |(_, w)| w);
                self.next_write =
                    Some((Instant::now() + wait, (wait * 2).min(RESULT_FILE_RETRY_MAX)));
                tracing::error!(error = %e, file = %self.result_file.display(), retry_in = ?wait, "cannot write the result file; trying again (the run is not over until it is written)");
                Step::Nothing
            }
        }
    }

    /// Writes the result (a temporary file renamed over the result file, so that a reader never
    /// sees half a line) and marks it written.
    fn write(&mut self) -> std::io::Result<()> {
        let Some(record) = &self.result else { return Ok(()) };
        let file = &self.result_file;
        let tmp = file.with_extension("json.tmp");
        std::fs::write(&tmp, format!("{}\n", record.json_line()))
            .and_then(|_| std::fs::rename(&tmp, file))?;
        self.written = true;
        tracing::info!(file = %file.display(), "result file written");
        Ok(())
    }

    /// The final tally breaks the symmetry identities: some counted answer is wrong. The jobs
    /// that can explain it (weight 2 and 4, first those counted on one credential's word, then
    /// all of them) are un-counted and solved again, by the coordinator itself where it can;
    /// whoever answered them wrongly is untrusted and everything it counted is solved again. Only
    /// when no such job is left to doubt does the run refuse, once, naming the jobs, and it keeps
    /// serving status: a restart does the same and never loops.
    fn repair(
        &mut self,
        store: &mut Store,
        scheduler: &mut Scheduler,
        reason: &str,
    ) -> Result<Step, StoreError> {
        self.repairs += 1;
        let doubted = match self.repairs {
            1 => scheduler.doubt_unconfirmed_symmetric(),
            2 => scheduler.doubt_all_symmetric(),
            _ => Vec::new(),
        };
        if doubted.is_empty() {
            let jobs = scheduler.symmetric_jobs();
            tracing::error!(%reason, jobs = ?jobs, "the final tally breaks the symmetry identities and every job that could explain it was solved again: refusing to write a result. The coordinator keeps serving status; inspect the jobs with `verify --state`");
            self.refused = Some(jobs);
            return Ok(Step::Nothing);
        }
        for &job_id in &doubted {
            scheduler.doubt(job_id);
        }
        tracing::warn!(%reason, jobs = doubted.len(), round = self.repairs, ids = ?&doubted[..doubted.len().min(20)], "the final tally breaks the symmetry identities: the jobs that can explain it are solved again");
        // Committed at once, not with the next batch: the referee is handed these jobs next.
        store.apply(&scheduler.take_changes(), &[])?;
        Ok(Step::Repairing)
    }
}
