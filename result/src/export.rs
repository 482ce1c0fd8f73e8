//! `export`: a run's counted jobs as a file that anyone can check without this project, and the
//! digest that ties a published total to it.
//!
//! The file is JSON Lines (gzip-compressed when its name ends in `.gz`), version 2:
//! - line 1, the header: `{"format":"nqueens-export","version":2,"n":14,"fingerprint":"…","jobs":J,
//!   "target_jobs":T,"depth":D}`: what rebuilds the run's job list (`target_jobs` picks `depth`,
//!   the searched rows pre-placed in every job) and its fingerprint;
//! - one line per counted job, in job order: the job's id, its fixed queens as `[row, column]`
//!   pairs in row order (the border queens and the pre-placed ones), the rows still to fill, the
//!   orbit weight, the unweighted counts, and what the count rests on (the coordinator's own solve;
//!   the independent credentials that gave it);
//! - the last line: rows, whether every job is there, the weighted sums, Total, Unique and the
//!   classes, and `rows_sha256`.
//!
//! `rows_sha256` is the SHA-256 of the row lines exactly as written, each with its newline. Rows
//! are written in one canonical form (compact JSON, fields in the order above), so the digest
//! names their content; the result file of a cluster run carries the same digest as
//! `export_sha256`. docs/cluster.md ("Checking a published result") describes the checks.

use nqueens_core::{Job, JobCounts, Tally};

/// A square: (row, column).
type Cell = (u8, u8);
use nqueens_store::{CountedJob, Store, StoreError};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use thiserror::Error;

// Writing an export rebuilds the run's job list as `verify --state` does: a one-machine command.
#[cfg(feature = "checks")]
mod write;
#[cfg(feature = "checks")]
pub use write::{export_state, Exported};

/// The export's `format` field.
pub const EXPORT_FORMAT: &str = "nqueens-export";
/// The export's `version` field: bumped whenever a line would change.
pub const EXPORT_VERSION: u32 = 2;

/// Why an export could not be written or read.
#[derive(Debug, Error)]
pub enum ExportError {
    /// Reading the state file failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The state file's job list could not be rebuilt (see `verify`).
    #[cfg(feature = "checks")]
    #[error(transparent)]
    Verify(#[from] crate::verify::VerifyError),
    /// Reading or writing the export file failed.
    #[error("{path}")]
    Io {
        /// The export file.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// `export` will not write there.
    #[error("will not write the export to {path}: {reason}")]
    Refused {
        /// The export file named.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// A line of the export is not what the format says.
    #[error("{path}, line {line}: {reason}")]
    Format {
        /// The export file.
        path: PathBuf,
        /// The line (1 is the header).
        line: u64,
        /// What is wrong.
        reason: String,
    },
    /// The rows' sums break the symmetry identities or overflow.
    #[error("the rows' sums: {0}")]
    Sums(#[from] nqueens_core::CoreError),
}

/// The first line of an export.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExportHeader {
    /// Always [`EXPORT_FORMAT`].
    pub format: String,
    /// Always [`EXPORT_VERSION`].
    pub version: u32,
    /// Board size.
    pub n: u8,
    /// The run fingerprint of the state file it was read from.
    pub fingerprint: String,
    /// Jobs in the run's list (rows: those counted).
    pub jobs: u64,
    /// The split's target job count in force (`SplitParams::target_for`): with `n` it rebuilds
    /// the job list.
    pub target_jobs: u64,
    /// Searched rows pre-placed in every job of the list (fewer where a board runs out of rows).
    pub depth: u64,
}

/// The first two fields of a header, read before the rest so that another version is named as
/// such rather than as a missing field.
#[derive(Deserialize)]
struct Version {
    format: String,
    version: u32,
}

/// One counted job of an export.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExportRow {
    /// The job's id in the run's list (the rows are in this order).
    pub job: u64,
    /// Its fixed queens as `(row, column)` squares, in row order: one on each border, the
    /// others in the rows searched first.
    pub queens: Vec<Cell>,
    /// Rows still to fill: the board size less the queens.
    pub fill: u8,
    /// Orbit weight of its border queens under the 8 symmetries: each solution stands for this
    /// many.
    pub weight: u8,
    /// Solutions that contain the queens (unweighted).
    pub solutions: u64,
    /// Of these, those a half turn maps onto themselves.
    pub sym180: u64,
    /// Of these, those a quarter turn maps onto themselves.
    pub sym90: u64,
    /// The coordinator's own solve gave this count.
    pub coordinator: bool,
    /// Independent credentials (worker parties) that gave this count.
    pub credentials: u64,
}

impl ExportRow {
    fn new(job: &Job, counted: &CountedJob) -> Self {
        let mut queens = job.fixed_queens();
        queens.sort_unstable();
        ExportRow {
            job: counted.job_id,
            fill: job.n - queens.len() as u8,
            queens,
            weight: job.weight,
            solutions: counted.counts.solutions,
            sym180: counted.counts.sym180,
            sym90: counted.counts.sym90,
            coordinator: counted.support.coordinator,
            credentials: counted.support.credentials as u64,
        }
    }

    /// The row's counts (nodes are not exported).
    pub fn counts(&self) -> JobCounts {
        JobCounts { solutions: self.solutions, sym180: self.sym180, sym90: self.sym90, nodes: 0 }
    }
}

/// The last line of an export.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExportEnd {
    /// Always true: marks the last line (a cut file has none).
    pub end: bool,
    /// Row lines.
    pub rows: u64,
    /// Every job of the run has its row: the sums are the board's.
    pub complete: bool,
    /// Sum of weight x solutions.
    pub total: u128,
    /// Sum of weight x sym180.
    pub sym180: u128,
    /// Sum of weight x sym90.
    pub sym90: u128,
    /// Fundamental solutions, if complete (and N > 1).
    pub unique: Option<u128>,
    /// Fundamental solutions with 2 variants, if complete.
    pub count2: Option<u128>,
    /// Fundamental solutions with 4 variants, if complete.
    pub count4: Option<u128>,
    /// Fundamental solutions with 8 variants, if complete.
    pub count8: Option<u128>,
    /// SHA-256 of the row lines as written, in lowercase hex.
    pub rows_sha256: String,
}

/// The running digest and sums of an export's rows, in the one canonical form.
struct RowSums {
    sha: Sha256,
    tally: Tally,
    rows: u64,
}

impl RowSums {
    fn new(n: u8) -> Result<Self, ExportError> {
        Ok(RowSums { sha: Sha256::new(), tally: Tally::new(n as u32)?, rows: 0 })
    }

    /// Adds a row; its canonical line, newline included.
    fn add(&mut self, row: &ExportRow) -> Result<String, ExportError> {
        let mut line = serde_json::to_string(row).expect("a row always serializes");
        line.push('\n');
        self.sha.update(line.as_bytes());
        self.tally.add(row.weight, &row.counts())?;
        self.rows += 1;
        Ok(line)
    }

    fn end(self, jobs: u64) -> Result<ExportEnd, ExportError> {
        let complete = self.rows == jobs;
        let totals = if complete { Some(self.tally.totals()?) } else { None };
        let classes = totals.and_then(|t| t.classes);
        Ok(ExportEnd {
            end: true,
            rows: self.rows,
            complete,
            total: self.tally.total,
            sym180: self.tally.sym180,
            sym90: self.tally.sym90,
            unique: totals.map(|t| t.unique),
            count2: classes.map(|c| c.count2),
            count4: classes.map(|c| c.count4),
            count8: classes.map(|c| c.count8),
            rows_sha256: hex(&self.sha.finalize()),
        })
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Calls `each` with every row of the run in `store`, whose jobs are `jobs`, in job order.
fn for_each_row(
    store: &Store,
    jobs: &[Job],
    mut each: impl FnMut(&ExportRow) -> Result<(), ExportError>,
) -> Result<(), ExportError> {
    for counted in store.counted_jobs()? {
        let job = jobs.get(counted.job_id as usize).ok_or_else(|| StoreError::Corrupt {
            path: store.path().to_path_buf(),
            reason: format!("a counted result for job {}, not in the list", counted.job_id),
        })?;
        each(&ExportRow::new(job, &counted))?;
    }
    Ok(())
}

/// The `rows_sha256` an export of the run in `store` would carry: what the result file
/// publishes as `export_sha256`.
pub fn export_digest(store: &Store, jobs: &[Job]) -> Result<String, ExportError> {
    let mut sums = RowSums::new(store.meta().n)?;
    for_each_row(store, jobs, |row| sums.add(row).map(drop))?;
    Ok(sums.end(jobs.len() as u64)?.rows_sha256)
}

/// An export read back: every row in canonical form and in job order, and the figures its rows
/// give beside those its last line states (a reader compares them).
#[derive(Debug, Clone)]
pub struct ReadExport {
    /// Its header.
    pub header: ExportHeader,
    /// Its rows.
    pub rows: Vec<ExportRow>,
    /// Its last line as written.
    pub end: ExportEnd,
    /// The last line recomputed from the rows.
    pub recomputed: ExportEnd,
}

/// Reads the export in `path` (gzip or plain). A line that is not of the format (not JSON of the
/// right fields, not canonical, out of job order, the last line missing) is an error; figures
/// that disagree are left to the caller to compare.
pub fn read_export(path: &Path) -> Result<ReadExport, ExportError> {
    let io = |source| ExportError::Io { path: path.to_path_buf(), source };
    let mut file = BufReader::new(std::fs::File::open(path).map_err(io)?);
    let gz = file.fill_buf().map_err(io)?.starts_with(&[0x1f, 0x8b]);
    let reader: Box<dyn BufRead> = if gz {
        Box::new(BufReader::new(flate2::read::MultiGzDecoder::new(file)))
    } else {
        Box::new(file)
    };
    let bad = |line: u64, reason: String| ExportError::Format { path: path.into(), line, reason };
    let mut lines = reader.lines();
    let mut number = 1;
    let first = lines.next().ok_or_else(|| bad(1, "empty file".into()))?.map_err(io)?;
    let version: Version =
        serde_json::from_str(&first).map_err(|e| bad(1, format!("not a header: {e}")))?;
    if version.format != EXPORT_FORMAT || version.version != EXPORT_VERSION {
        return Err(bad(
            1,
            format!(
                "format {} version {}: this program reads {EXPORT_FORMAT} version {EXPORT_VERSION}",
                version.format, version.version
            ),
        ));
    }
    let header: ExportHeader =
        serde_json::from_str(&first).map_err(|e| bad(1, format!("not a header: {e}")))?;
    let mut sums = RowSums::new(header.n)?;
    let mut rows = Vec::new();
    let mut end = None;
    for line in lines {
        number += 1;
        let line = line.map_err(io)?;
        if end.is_some() {
            return Err(bad(number, "a line after the last line".into()));
        }
        if line.starts_with("{\"end\"") {
            end = Some(
                serde_json::from_str::<ExportEnd>(&line)
                    .map_err(|e| bad(number, format!("not a last line: {e}")))?,
            );
            continue;
        }
        let row: ExportRow =
            serde_json::from_str(&line).map_err(|e| bad(number, format!("not a row: {e}")))?;
        let in_order = rows.last().is_none_or(|prev: &ExportRow| prev.job < row.job);
        if !in_order || row.job >= header.jobs {
            return Err(bad(number, format!("job {} out of order or not in the list", row.job)));
        }
        let canonical = sums.add(&row)?;
        if canonical.trim_end() != line {
            return Err(bad(number, format!("not in canonical form (expected {canonical:?})")));
        }
        rows.push(row);
    }
    let end = end.ok_or_else(|| bad(number, "no last line: the file is cut short".into()))?;
    // Sums that break the identities are a finding, not a reason to stop reading.
    let recomputed = match sums.end(header.jobs) {
        Ok(end) => end,
        Err(ExportError::Sums(e)) => return Err(bad(number, format!("the rows' sums: {e}"))),
        Err(e) => return Err(e),
    };
    Ok(ReadExport { header, rows, end, recomputed })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_have_one_canonical_line() {
        let row = ExportRow {
            job: 3,
            queens: vec![(0, 2), (3, 0), (5, 7), (7, 4)],
            fill: 4,
            weight: 8,
            solutions: 12,
            sym180: 0,
            sym90: 0,
            coordinator: false,
            credentials: 2,
        };
        let mut sums = RowSums::new(8).unwrap();
        let line = sums.add(&row).unwrap();
        assert_eq!(
            line,
            "{\"job\":3,\"queens\":[[0,2],[3,0],[5,7],[7,4]],\"fill\":4,\"weight\":8,\
             \"solutions\":12,\"sym180\":0,\"sym90\":0,\"coordinator\":false,\"credentials\":2}\n"
        );
        let end = sums.end(10).unwrap();
        assert!(!end.complete);
        assert_eq!((end.total, end.unique), (96, None));
        // The SHA-256 of exactly that line.
        assert_eq!(end.rows_sha256, hex(&Sha256::digest(line.as_bytes())));
    }
}
