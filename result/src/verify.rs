//! `verify --state`: solves a deterministic sample (or all) of a run's counted jobs again on this
//! machine and compares them with the stored results, and lists the rows whose checksum fails.
//!
//! It reads the state file read-only, so it works on a finished run and beside a live coordinator.
//! The job list is rebuilt from the file's N and split with [`nqueens_core::job_list`], and must
//! give the file's run fingerprint. The checksums (see the `store` module) catch damage to rows;
//! this catches what the checksums cannot: a worker that computed, and reported, a wrong count.

use nqueens_core::{job_list, JobCounts, JobList, SplitParams};
use nqueens_store::{
    run_fingerprint, Evidence, RunMeta, Store, StoreError, StoredResult, WorkerRow,
};
use rayon::prelude::*;
use serde::Serialize;
use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::path::Path;
use std::time::Instant;
use thiserror::Error;

/// Which counted jobs to solve again.
#[derive(Debug, Clone, Copy)]
pub enum Sample {
    /// This many, chosen by a fixed pseudo-random order of job ids (the same on every call).
    Jobs(usize),
    /// Every counted job.
    All,
}

/// Why `verify --state` could not check a run.
#[derive(Debug, Error)]
pub enum VerifyError {
    /// Opening or reading the state file failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The job list could not be rebuilt from the file's N and split.
    #[error("rebuilding the job list of state file {path}")]
    JobList {
        /// The state file.
        path: std::path::PathBuf,
        /// Why the split failed.
        source: nqueens_core::CoreError,
    },
    /// The rebuilt job list is not the one the file's run was made from.
    #[error("state file {path} has run fingerprint {stored}, but its N and split give {rebuilt} (a file of another version)")]
    Fingerprint {
        /// The state file.
        path: std::path::PathBuf,
        /// The run fingerprint stored in the file.
        stored: String,
        /// The fingerprint of the job list rebuilt here.
        rebuilt: String,
    },
    /// Solving a sampled job again failed.
    #[error("solving job {job_id} again")]
    Solve {
        /// The job.
        job_id: u64,
        /// The solver's error.
        source: nqueens_core::CoreError,
    },
    /// The solver thread pool could not be started.
    #[error("starting {threads} solver threads")]
    Threads {
        /// Solver threads asked for.
        threads: usize,
        /// Rayon's error.
        source: rayon::ThreadPoolBuildError,
    },
}

/// A stored count that solving the job again does not reproduce.
#[derive(Debug, Clone, Serialize)]
pub struct Mismatch {
    /// The job.
    pub job_id: u64,
    /// The worker whose counted row it is (0: `solve --state`).
    pub worker_id: u64,
    /// The counts stored in the counted row.
    pub stored: JobCounts,
    /// The counts solving the job again gave.
    pub recomputed: JobCounts,
}

/// A result row whose checksum fails (damaged or edited): never counted.
#[derive(Debug, Clone, Serialize)]
pub struct BadRow {
    /// The result row's id.
    pub row_id: u64,
    /// The job the row is for.
    pub job_id: u64,
    /// The worker the row names.
    pub worker_id: u64,
    /// Whether the row is marked counted (it is not counted all the same).
    pub counted: bool,
}

/// A worker behind a mismatch or a bad row.
#[derive(Debug, Clone, Serialize)]
pub struct Culprit {
    /// Its id in the run (0: `solve --state`).
    pub worker_id: u64,
    /// The name it registered with (`local` for `solve --state`, `?` if unknown).
    pub name: String,
    /// The host it registered from.
    pub host: String,
    /// Its counted rows that solving again did not reproduce.
    pub mismatches: u64,
    /// Its result rows whose checksum fails.
    pub bad_rows: u64,
}

/// What `verify --state` found: the sampled jobs solved again, and the rows that fail.
#[derive(Debug, Clone, Serialize)]
pub struct Verification {
    /// The state file's path.
    pub state: String,
    /// Board size.
    pub n: u32,
    /// The run fingerprint (checked against the rebuilt job list).
    pub fingerprint: String,
    /// False for a schema 1 file not yet migrated: its rows carry no checksums to check.
    pub checksums: bool,
    /// Counted result rows whose checksum holds (jobs).
    pub counted_jobs: u64,
    /// Of those, the jobs solved again.
    pub checked: u64,
    /// Checked jobs whose stored counts agree with the recomputed ones.
    pub agreements: u64,
    /// Checked jobs whose stored counts do not, by job id.
    pub mismatches: Vec<Mismatch>,
    /// Result rows whose checksum fails.
    pub bad_rows: Vec<BadRow>,
    /// The workers behind the mismatches and bad rows, by id.
    pub workers: Vec<Culprit>,
    /// What the counted answers rest on (the reading of the result file and `status`).
    pub evidence: Evidence,
    /// Seconds the whole check took.
    pub seconds: f64,
}

impl Verification {
    /// No mismatch and no bad row.
    pub fn ok(&self) -> bool {
        self.mismatches.is_empty() && self.bad_rows.is_empty()
    }

    /// The report as one JSON object.
    pub fn json(&self) -> String {
        serde_json::to_string(self).expect("report serializes")
    }

    /// The human-readable report.
    pub fn text(&self) -> String {
        let mut o = String::new();
        let _ = writeln!(
            o,
            "run        N={} fingerprint {} ({})",
            self.n, self.fingerprint, self.state
        );
        let _ = writeln!(
            o,
            "checked    {} of {} counted jobs solved again in {:.1}s: {} agree, {} mismatch",
            self.checked,
            self.counted_jobs,
            self.seconds,
            self.agreements,
            self.mismatches.len()
        );
        let _ = writeln!(o, "evidence   {}", self.evidence.summary());
        let _ = if self.checksums {
            writeln!(o, "checksums  {} result rows fail their checksum", self.bad_rows.len())
        } else {
            writeln!(o, "checksums  none in this file (schema 1; the next serve or solve --state adds them)")
        };
        for m in &self.mismatches {
            let _ = writeln!(
                o,
                "  MISMATCH job {} by worker #{}: stored {}/{}/{} (solutions/sym180/sym90), recomputed {}/{}/{}",
                m.job_id,
                m.worker_id,
                m.stored.solutions,
                m.stored.sym180,
                m.stored.sym90,
                m.recomputed.solutions,
                m.recomputed.sym180,
                m.recomputed.sym90
            );
        }
        for b in &self.bad_rows {
            let _ = writeln!(
                o,
                "  BAD ROW  {} (job {}, worker #{}, {}): checksum fails, not counted",
                b.row_id,
                b.job_id,
                b.worker_id,
                if b.counted { "marked counted" } else { "uncounted" }
            );
        }
        for w in &self.workers {
            let _ = writeln!(
                o,
                "  worker   #{} {} on {}: {} mismatches, {} bad rows",
                w.worker_id, w.name, w.host, w.mismatches, w.bad_rows
            );
        }
        let _ = writeln!(
            o,
            "{}",
            if self.ok() {
                "OK         every checked job agrees and every row's checksum holds".to_string()
            } else {
                format!(
                    "FAILED     {} mismatches, {} bad rows",
                    self.mismatches.len(),
                    self.bad_rows.len()
                )
            }
        );
        o
    }
}

/// The order in which jobs are sampled: a fixed mix of the id.
fn sample_key(job_id: u64) -> u64 {
    let mut x = job_id.wrapping_add(0x5851_f42d_4c95_7f2d);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// Verifies the run in `path` (see the module doc), solving on `threads` threads.
pub fn verify_state(
    path: &Path,
    protocol_major: u32,
    sample: Sample,
    threads: usize,
) -> Result<Verification, VerifyError> {
    let started = Instant::now();
    let run = StoredRun::read(path, protocol_major)?;
    let bad_rows = bad_rows(&run.rows);
    let (counted, counted_jobs) = sampled_jobs(&run.rows, run.list.jobs.len(), sample);
    let (agreements, mismatches) = solve_again(&run.list, &counted, threads)?;
    let workers = culprits(&mismatches, &bad_rows, &run.workers);
    Ok(Verification {
        state: path.display().to_string(),
        n: run.meta.n as u32,
        fingerprint: run.meta.fingerprint,
        checksums: run.checksums,
        counted_jobs,
        checked: counted.len() as u64,
        agreements,
        mismatches,
        bad_rows,
        workers,
        evidence: run.evidence,
        seconds: started.elapsed().as_secs_f64(),
    })
}

/// A counted job to check: its id, the worker whose counted row it is, and the stored counts.
type CountedJob = (u64, u64, JobCounts);

/// What `verify` reads of a run; the state file is closed once it is read.
struct StoredRun {
    meta: RunMeta,
    /// The job list rebuilt from the file's N and split (its fingerprint checked).
    list: JobList,
    /// Every result row, its checksum checked.
    rows: Vec<StoredResult>,
    /// The workers' rows, by id.
    workers: HashMap<u64, WorkerRow>,
    /// The file's rows carry checksums.
    checksums: bool,
    /// What the counted answers rest on.
    evidence: Evidence,
}

impl StoredRun {
    /// Reads the run in `path` and rebuilds its job list, which must give the file's run
    /// fingerprint.
    fn read(path: &Path, protocol_major: u32) -> Result<StoredRun, VerifyError> {
        let (store, list) = open_with_list(path, protocol_major)?;
        let meta = store.meta().clone();
        let rows = store.results()?;
        let workers = store.workers()?.into_iter().map(|w| (w.row.id, w.row)).collect();
        let checksums = store.has_checksums();
        let evidence = store.evidence_of(&rows)?;
        Ok(StoredRun { meta, list, rows, workers, checksums, evidence })
    }
}

/// Opens the state file in `path` read-only and rebuilds its job list, which must give the
/// file's run fingerprint under the coordinator's wire protocol `protocol_major`
/// (`nqueens_proto::PROTOCOL_MAJOR`, passed in as the store takes it: no network crate here).
pub(crate) fn open_with_list(
    path: &Path,
    protocol_major: u32,
) -> Result<(Store, JobList), VerifyError> {
    let store = Store::open_existing(path)?;
    let meta = store.meta();
    let list = job_list(meta.n as u32, &SplitParams { target_jobs: meta.target_jobs })
        .map_err(|source| VerifyError::JobList { path: path.into(), source })?;
    let rebuilt = run_fingerprint(&list, protocol_major);
    if rebuilt != meta.fingerprint {
        return Err(VerifyError::Fingerprint {
            path: path.into(),
            stored: meta.fingerprint.clone(),
            rebuilt,
        });
    }
    Ok((store, list))
}

/// The result rows whose checksum fails.
fn bad_rows(rows: &[StoredResult]) -> Vec<BadRow> {
    rows.iter()
        .filter(|r| !r.intact)
        .map(|r| BadRow {
            row_id: r.row_id,
            job_id: r.job_id,
            worker_id: r.worker_id,
            counted: r.counted,
        })
        .collect()
}

/// The counted rows (whose checksum holds, of jobs in the list of `jobs` jobs) to solve again,
/// in the fixed sampling order and cut to `sample`, and how many counted rows there are in all.
fn sampled_jobs(rows: &[StoredResult], jobs: usize, sample: Sample) -> (Vec<CountedJob>, u64) {
    let mut counted: Vec<CountedJob> = rows
        .iter()
        .filter(|r| r.intact && r.counted && (r.job_id as usize) < jobs)
        .map(|r| (r.job_id, r.worker_id, r.counts))
        .collect();
    let counted_jobs = counted.len() as u64;
    counted.sort_by_key(|(job, worker, _)| (sample_key(*job), *job, *worker));
    if let Sample::Jobs(k) = sample {
        counted.truncate(k);
    }
    (counted, counted_jobs)
}

/// Solves the `counted` jobs of `list` again on `threads` threads: how many agree with their
/// stored counts, and the mismatches, by job id.
fn solve_again(
    list: &JobList,
    counted: &[CountedJob],
    threads: usize,
) -> Result<(u64, Vec<Mismatch>), VerifyError> {
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .thread_name(|i| format!("verify-{i}"))
        .build()
        .map_err(|source| VerifyError::Threads { threads, source })?;
    let solved: Vec<Result<JobCounts, nqueens_core::CoreError>> = pool.install(|| {
        counted.par_iter().map(|(job, _, _)| list.jobs[*job as usize].solve()).collect()
    });
    let mut mismatches = Vec::new();
    let mut agreements = 0;
    for ((job_id, worker_id, stored), recomputed) in counted.iter().zip(solved) {
        let recomputed =
            recomputed.map_err(|source| VerifyError::Solve { job_id: *job_id, source })?;
        if stored.same_answer(&recomputed) {
            agreements += 1;
        } else {
            mismatches.push(Mismatch {
                job_id: *job_id,
                worker_id: *worker_id,
                stored: *stored,
                recomputed,
            });
        }
    }
    mismatches.sort_by_key(|m| m.job_id);
    Ok((agreements, mismatches))
}

/// The workers behind `mismatches` and `bad_rows`, by id, named from their rows in `workers`.
fn culprits(
    mismatches: &[Mismatch],
    bad_rows: &[BadRow],
    workers: &HashMap<u64, WorkerRow>,
) -> Vec<Culprit> {
    let mut blame: BTreeMap<u64, (u64, u64)> = BTreeMap::new();
    for m in mismatches {
        blame.entry(m.worker_id).or_default().0 += 1;
    }
    for b in bad_rows {
        blame.entry(b.worker_id).or_default().1 += 1;
    }
    blame
        .into_iter()
        .map(|(worker_id, (mismatches, bad_rows))| {
            let (name, host) = match workers.get(&worker_id) {
                Some(w) => (w.name.clone(), w.host.clone()),
                // Worker 0 is `solve --state`, which registers no worker.
                None if worker_id == 0 => ("local".into(), "this run's solve --state".into()),
                None => ("?".into(), "?".into()),
            };
            Culprit { worker_id, name, host, mismatches, bad_rows }
        })
        .collect()
}
