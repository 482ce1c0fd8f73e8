//! `verify --export`: an export checked from the file alone (no state file): its digest and sums,
//! its figures against a published result file, the checks that cost no solving
//! (`export_checks.rs`: coverage against the job list rebuilt from the header, the published
//! values, every row's bound), and a sample of its rows solved again from their queens, drawn
//! from a seed nobody can predict unless one is given.

use crate::export::{read_export, ExportError, ExportRow, ReadExport};
use crate::export_checks;
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
        /// The seed was drawn from the operating system's entropy ([`fresh_seed`]), not given.
        drawn: bool,
    },
    /// Every `of`-th row, starting at row `index - 1` (rows counted from 0 in file order): the
    /// shards `1/of` to `of/of` together are every row, once.
    Shard {
        /// Which shard, from 1.
        index: u64,
        /// How many shards.
        of: u64,
    },
    /// Every row.
    All,
}

/// A seed from the operating system's entropy: a draw nobody can predict. (Should the system's
/// generator fail, the standard library's randomly keyed hasher, whose keys come from the same
/// source, gives it.)
pub fn fresh_seed() -> u64 {
    let mut seed = [0u8; 8];
    if getrandom::getrandom(&mut seed).is_ok() {
        return u64::from_le_bytes(seed);
    }
    use std::hash::{BuildHasher, Hasher};
    std::collections::hash_map::RandomState::new().build_hasher().finish()
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
    /// Jobs in the run's list.
    pub jobs: u64,
    /// Every job of the run has its row (false: a partial export, whose Total is not the board's).
    pub complete: bool,
    /// Total the rows give.
    pub total: u128,
    /// Unique the rows give (complete exports).
    pub unique: Option<u128>,
    /// The digest of the rows (recomputed).
    pub rows_sha256: String,
    /// Figures that differ between the rows, the export's last line and the result file.
    pub disagreements: Vec<String>,
    /// The header and rows against the job list rebuilt from the header.
    pub coverage: Vec<String>,
    /// The figures published for this board (`-`: none).
    pub published_figures: String,
    /// Figures that differ from their published values.
    pub published: Vec<String>,
    /// Rows whose counts no board allows (beyond their bound).
    pub implausible: Vec<String>,
    /// Rows solved again.
    pub checked: u64,
    /// Those whose counts agree.
    pub agreements: u64,
    /// Those whose counts do not.
    pub wrong: Vec<WrongRow>,
    /// The seed of the sample (absent: every row, or a shard).
    pub seed: Option<u64>,
    /// The seed was drawn from the operating system's entropy.
    pub seed_drawn: bool,
    /// The shard solved again, as `k/K`.
    pub shard: Option<String>,
    /// Seconds the whole check took.
    pub seconds: f64,
}

/// Findings shown per kind in the text report (the JSON report has them all).
const SHOWN: usize = 10;

impl ExportVerification {
    /// Nothing disagrees, every check that costs no solving holds and every row solved again
    /// agrees.
    pub fn ok(&self) -> bool {
        self.disagreements.is_empty()
            && self.coverage.is_empty()
            && self.published.is_empty()
            && self.implausible.is_empty()
            && self.wrong.is_empty()
    }

    /// The report as one JSON object.
    pub fn json(&self) -> String {
        serde_json::to_string(self).expect("report serializes")
    }

    /// The human-readable report, ending with what the check showed and what it did not.
    pub fn text(&self) -> String {
        let mut o = String::new();
        let unique = self.unique.map_or("-".into(), |u| u.to_string());
        let partial = if self.complete {
            String::new()
        } else {
            format!(" PARTIAL: {} of {} jobs", self.rows, self.jobs)
        };
        let _ =
            writeln!(o, "export     N={} {} rows ({}){partial}", self.n, self.rows, self.export);
        let _ = writeln!(
            o,
            "rows give  Total {} Unique {} ({}), rows_sha256 {}",
            self.total,
            unique,
            if self.complete { "every job" } else { "partial: not the board's" },
            self.rows_sha256
        );
        let count = |v: &[String], none: &str| {
            if v.is_empty() {
                none.to_string()
            } else {
                format!("{} findings", v.len())
            }
        };
        let _ = writeln!(
            o,
            "coverage   rows against the job list rebuilt from the header: {}",
            count(&self.coverage, "every row is its job's")
        );
        let _ = writeln!(
            o,
            "published  {} of N={}: {}",
            self.published_figures,
            self.n,
            count(&self.published, "agree (where the export has them)")
        );
        let _ = writeln!(
            o,
            "plausible  every row's solutions against its free squares' bound: {}",
            count(&self.implausible, "all within")
        );
        let picked = match (&self.shard, self.seed) {
            (Some(shard), _) => format!("shard {shard}"),
            (None, Some(seed)) if self.seed_drawn => {
                format!("seed {seed}, drawn: --seed {seed} repeats this draw")
            }
            (None, Some(seed)) => format!("seed {seed}"),
            (None, None) => "every row".into(),
        };
        let _ = writeln!(
            o,
            "checked    {} rows solved again from their queens ({picked}) in {:.1}s: {} agree, {} wrong",
            self.checked,
            self.seconds,
            self.agreements,
            self.wrong.len()
        );
        self.findings(&mut o);
        let _ = writeln!(o, "{}", self.verdict());
        let _ = writeln!(o, "{}", self.not_shown());
        o
    }

    /// Each finding on a line of its own, tagged with its kind (the first few of each kind).
    fn findings(&self, o: &mut String) {
        let wrong: Vec<String> =
            self.wrong.iter().map(|w| format!("job {}: {}", w.job, w.reason)).collect();
        for (tag, list) in [
            ("DISAGREE", &self.disagreements),
            ("COVERAGE", &self.coverage),
            ("PUBLISHED", &self.published),
            ("IMPLAUSIBLE", &self.implausible),
            ("WRONG   ", &wrong),
        ] {
            for line in list.iter().take(SHOWN) {
                let _ = writeln!(o, "  {tag} {line}");
            }
            if list.len() > SHOWN {
                let _ =
                    writeln!(o, "  {tag} ... and {} more (--json lists all)", list.len() - SHOWN);
            }
        }
    }

    fn verdict(&self) -> String {
        if !self.ok() {
            return format!(
                "FAILED     {} disagreements, {} coverage, {} published, {} implausible, {} wrong rows",
                self.disagreements.len(),
                self.coverage.len(),
                self.published.len(),
                self.implausible.len(),
                self.wrong.len()
            );
        }
        let what = if self.complete { "OK" } else { "OK PARTIAL" };
        format!(
            "{what:<10} the digest, sums, coverage, published values and every row's bound hold; \
             the {} rows solved again agree",
            self.checked
        )
    }

    /// What the check did not show: the chance that it found one forged row.
    fn not_shown(&self) -> String {
        let partial = if self.complete {
            String::new()
        } else {
            format!(
                " This export is PARTIAL: its Total counts {} of {} jobs.",
                self.rows, self.jobs
            )
        };
        if self.checked == self.rows {
            return format!("shown      every row solved again: each count is its row's.{partial}");
        }
        let chance = if self.rows == 0 { 1.0 } else { self.checked as f64 / self.rows as f64 };
        format!(
            "not shown  re-solved {} of {} rows: a single forged row is found with probability \
             {}; re-solve more with --rows K, or every row over machines with --shard k/K.{partial}",
            self.checked,
            self.rows,
            percent(chance)
        )
    }
}

/// A probability as a percentage with two significant digits (at least).
pub(crate) fn percent(p: f64) -> String {
    let pct = p * 100.0;
    let decimals = if pct >= 10.0 || pct == 0.0 {
        1
    } else {
        (1.0 - pct.log10().floor()).clamp(1.0, 12.0) as usize
    };
    format!("{pct:.decimals$}%")
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
    let published_result = result.map(|r| read_result(r).map(|p| (r, p))).transpose()?;
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .thread_name(|i| format!("verify-exp-{i}"))
        .build()
        .map_err(|e| ExportError::Io {
            path: "(solver threads)".into(),
            source: std::io::Error::other(e),
        })?;
    let (end, rows, n) = (&export.recomputed, &export.rows, export.header.n);
    let mut disagreements = Vec::new();
    if export.end != *end {
        disagreements.push(format!(
            "the export's last line says {}, its rows give {}",
            serde_json::to_string(&export.end).expect("serializes"),
            serde_json::to_string(end).expect("serializes")
        ));
    }
    if let Some((path, published)) = &published_result {
        disagreements.extend(against_result(path, published, &export));
    }
    let classes = end.count2.zip(end.count4).zip(end.count8).map(|((a, b), c)| [a, b, c]);
    let (picked, seed) = pick(rows, sample);
    let (coverage, implausible, wrong) = pool.install(|| {
        let coverage = export_checks::coverage(&export.header, rows);
        let implausible = export_checks::implausible(n, rows);
        (coverage, implausible, solve_again(n, &picked))
    });
    Ok(ExportVerification {
        export: path.display().to_string(),
        n,
        rows: end.rows,
        jobs: export.header.jobs,
        complete: end.complete,
        total: end.total,
        unique: end.unique,
        rows_sha256: end.rows_sha256.clone(),
        disagreements,
        coverage,
        published_figures: export_checks::published_names(n),
        published: export_checks::published(n, end.total, end.unique, classes),
        implausible,
        checked: picked.len() as u64,
        agreements: (picked.len() - wrong.len()) as u64,
        wrong,
        seed,
        seed_drawn: matches!(sample, RowSample::Rows { drawn: true, .. }),
        shard: match sample {
            RowSample::Shard { index, of } => Some(format!("{index}/{of}")),
            _ => None,
        },
        seconds: started.elapsed().as_secs_f64(),
    })
}

/// The figures of the result file `path` (`published`) that differ from the export's.
fn against_result(path: &Path, published: &RunResult, export: &ReadExport) -> Vec<String> {
    let end = &export.recomputed;
    let mut found = Vec::new();
    let mut differ = |what: &str, published: String, rows: String| {
        if published != rows {
            found.push(format!(
                "{what}: the result file {} says {published}, the rows give {rows}",
                path.display()
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
    found
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

/// The rows to solve again: all, a shard, or `count` in the order of a generator seeded with
/// `seed`.
fn pick(rows: &[ExportRow], sample: RowSample) -> (Vec<&ExportRow>, Option<u64>) {
    match sample {
        RowSample::All => (rows.iter().collect(), None),
        RowSample::Shard { index, of } => {
            let shard = rows.iter().enumerate().filter(|(i, _)| *i as u64 % of == index - 1);
            (shard.map(|(_, r)| r).collect(), None)
        }
        RowSample::Rows { count, seed, .. } => {
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

/// Solves `rows` again from their queens alone (on the current rayon pool); the rows that do not
/// agree.
fn solve_again(n: u8, rows: &[&ExportRow]) -> Vec<WrongRow> {
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
    let mut wrong: Vec<WrongRow> = rows.par_iter().filter_map(check).collect();
    wrong.sort_by_key(|w| w.job);
    wrong
}
