//! `verify --export`: an export checked from the file alone (no state file, no job list): its
//! digest and sums, its figures against a published result file, and a seeded sample of its rows
//! solved again from their queens.

use crate::export::{read_export, ExportError, ExportRow};
use crate::run_result::RunResult;
use nqueens_core::{Job, SplitMix64};
use rayon::prelude::*;
use serde::Serialize;
use std::fmt::Write as _;
use std::path::Path;
use std::time::Instant;

/// Which rows of an export to solve again.
#[derive(Debug, Clone, Copy)]
pub enum RowSample {
    /// This many, in an order drawn from `seed` (anyone can pick the seed).
    Rows {
        /// How many rows.
        count: usize,
        /// The seed of the order.
        seed: u64,
    },
    /// Every row.
    All,
}

/// A row that solving its queens again does not reproduce (or that names no job).
#[derive(Debug, Clone, Serialize)]
pub struct WrongRow {
    /// The row's job id.
    pub job: u64,
    /// What is wrong.
    pub reason: String,
}

/// What `verify --export` found.
#[derive(Debug, Clone, Serialize)]
pub struct ExportVerification {
    /// The export's path.
    pub export: String,
    /// Board size.
    pub n: u8,
    /// Rows in the export.
    pub rows: u64,
    /// Every job of the run has its row.
    pub complete: bool,
    /// Total the rows give.
    pub total: u128,
    /// Unique the rows give (complete exports).
    pub unique: Option<u128>,
    /// The digest of the rows (recomputed).
    pub rows_sha256: String,
    /// Figures that differ between the rows, the export's last line and the result file.
    pub disagreements: Vec<String>,
    /// Rows solved again.
    pub checked: u64,
    /// Those whose counts agree.
    pub agreements: u64,
    /// Those whose counts do not.
    pub wrong: Vec<WrongRow>,
    /// The seed of the sample (absent: every row).
    pub seed: Option<u64>,
    /// Seconds the whole check took.
    pub seconds: f64,
}

impl ExportVerification {
    /// Nothing disagrees and every row solved again agrees.
    pub fn ok(&self) -> bool {
        self.disagreements.is_empty() && self.wrong.is_empty()
    }

    /// The report as one JSON object.
    pub fn json(&self) -> String {
        serde_json::to_string(self).expect("report serializes")
    }

    /// The human-readable report.
    pub fn text(&self) -> String {
        let mut o = String::new();
        let unique = self.unique.map_or("-".into(), |u| u.to_string());
        let _ = writeln!(o, "export     N={} {} rows ({})", self.n, self.rows, self.export);
        let _ = writeln!(
            o,
            "rows give  Total {} Unique {} ({}), rows_sha256 {}",
            self.total,
            unique,
            if self.complete { "every job" } else { "NOT every job: a partial export" },
            self.rows_sha256
        );
        let seed = self.seed.map_or("every row".into(), |s| format!("seed {s}"));
        let _ = writeln!(
            o,
            "checked    {} rows solved again from their queens ({seed}) in {:.1}s: {} agree, {} wrong",
            self.checked,
            self.seconds,
            self.agreements,
            self.wrong.len()
        );
        for d in &self.disagreements {
            let _ = writeln!(o, "  DISAGREE {d}");
        }
        for w in &self.wrong {
            let _ = writeln!(o, "  WRONG    job {}: {}", w.job, w.reason);
        }
        let verdict = if self.ok() {
            "OK         the digest and sums hold and every row solved again agrees".to_string()
        } else {
            format!(
                "FAILED     {} disagreements, {} wrong rows",
                self.disagreements.len(),
                self.wrong.len()
            )
        };
        let _ = writeln!(o, "{verdict}");
        o
    }
}

/// Checks the export in `path` (see the module doc) against the result file `result` if given,
/// solving the `sample` rows again on `threads` threads.
pub fn verify_export(
    path: &Path,
    result: Option<&Path>,
    sample: RowSample,
    threads: usize,
) -> Result<ExportVerification, ExportError> {
    let started = Instant::now();
    let export = read_export(path)?;
    let (end, rows) = (&export.recomputed, &export.rows);
    let mut disagreements = Vec::new();
    if export.end != *end {
        disagreements.push(format!(
            "the export's last line says {}, its rows give {}",
            serde_json::to_string(&export.end).expect("serializes"),
            serde_json::to_string(end).expect("serializes")
        ));
    }
    if let Some(result) = result {
        let published = read_result(result)?;
        let mut differ = |what: &str, published: String, rows: String| {
            if published != rows {
                disagreements.push(format!(
                    "{what}: the result file {} says {published}, the rows give {rows}",
                    result.display()
                ));
            }
        };
        let show = |v: Option<u128>| v.map_or("null".into(), |v| v.to_string());
        differ("n", published.n.to_string(), export.header.n.to_string());
        differ("jobs", published.jobs.to_string(), export.header.jobs.to_string());
        differ("total", published.total.to_string(), end.total.to_string());
        differ("unique", published.unique.to_string(), show(end.unique));
        differ("count2", show(published.count2), show(end.count2));
        differ("count4", show(published.count4), show(end.count4));
        differ("count8", show(published.count8), show(end.count8));
        let digest = published.export_sha256.clone().unwrap_or_else(|| "(none)".into());
        differ("export_sha256", digest, end.rows_sha256.clone());
    }
    let (picked, seed) = pick(rows, sample);
    let wrong = solve_again(export.header.n, &picked, threads)?;
    Ok(ExportVerification {
        export: path.display().to_string(),
        n: export.header.n,
        rows: end.rows,
        complete: end.complete,
        total: end.total,
        unique: end.unique,
        rows_sha256: end.rows_sha256.clone(),
        disagreements,
        checked: picked.len() as u64,
        agreements: (picked.len() - wrong.len()) as u64,
        wrong,
        seed,
        seconds: started.elapsed().as_secs_f64(),
    })
}

fn read_result(path: &Path) -> Result<RunResult, ExportError> {
    let text = std::fs::read_to_string(path)
        .map_err(|source| ExportError::Io { path: path.into(), source })?;
    serde_json::from_str(text.trim()).map_err(|e| ExportError::Format {
        path: path.into(),
        line: 1,
        reason: format!("not a result file: {e}"),
    })
}

/// The rows to solve again: all, or `count` in the order of a generator seeded with `seed`.
fn pick(rows: &[ExportRow], sample: RowSample) -> (Vec<&ExportRow>, Option<u64>) {
    match sample {
        RowSample::All => (rows.iter().collect(), None),
        RowSample::Rows { count, seed } => {
            let mut keyed: Vec<(u64, &ExportRow)> = rows
                .iter()
                .map(|r| {
                    (
                        SplitMix64::new(seed ^ r.job.wrapping_mul(0x9e37_79b9_7f4a_7c15))
                            .next_u64(),
                        r,
                    )
                })
                .collect();
            keyed.sort_unstable_by_key(|(key, r)| (*key, r.job));
            (keyed.into_iter().take(count).map(|(_, r)| r).collect(), Some(seed))
        }
    }
}

/// Solves `rows` again from their queens alone; the rows that do not agree.
fn solve_again(n: u8, rows: &[&ExportRow], threads: usize) -> Result<Vec<WrongRow>, ExportError> {
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .thread_name(|i| format!("verify-exp-{i}"))
        .build()
        .map_err(|e| ExportError::Io {
            path: "(solver threads)".into(),
            source: std::io::Error::other(e),
        })?;
    let check = |row: &&ExportRow| -> Option<WrongRow> {
        let wrong = |reason: String| Some(WrongRow { job: row.job, reason });
        let job = match Job::from_board(n, &row.queens) {
            Ok(job) => job,
            Err(e) => return wrong(format!("its queens are no job of an {n}-board: {e}")),
        };
        if job.weight != row.weight || row.fill as usize != n as usize - row.queens.len() {
            return wrong(format!(
                "weight {} and fill {}: its queens give weight {} and fill {}",
                row.weight,
                row.fill,
                job.weight,
                n as usize - row.queens.len()
            ));
        }
        match job.solve() {
            Ok(found) if found.same_answer(&row.counts()) => None,
            Ok(found) => wrong(format!(
                "stored {} solutions, {} sym180, {} sym90; solved again {}, {}, {}",
                row.solutions, row.sym180, row.sym90, found.solutions, found.sym180, found.sym90
            )),
            Err(e) => wrong(format!("solving it: {e}")),
        }
    };
    let mut wrong: Vec<WrongRow> = pool.install(|| rows.par_iter().filter_map(check).collect());
    wrong.sort_by_key(|w| w.job);
    Ok(wrong)
}
