//! The final answer for one board size, as printed by `solve --json`, written to a run's result
//! file and shown by `status`.

use nqueens_core::Totals;
use nqueens_store::Evidence;
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// One board size's result: the fields of a `solve --json` line.
///
/// The counts are `u128` (Q(29) is past `u64::MAX`) and are written as plain JSON integers, every
/// digit exact however large: read them with a parser that keeps big integers exact (Python's
/// `json`, serde with `u128`, `jq` 1.7 or later), not into a double, which is exact only to 2^53.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunResult {
    /// Board size.
    pub n: u8,
    /// All solutions.
    pub total: u128,
    /// Fundamental solutions (up to rotation and reflection).
    pub unique: u128,
    /// Fundamental solutions with 2 variants; `null` for N=1 (its one solution is its own mirror).
    pub count2: Option<u128>,
    /// Fundamental solutions with 4 variants; `null` for N=1.
    pub count4: Option<u128>,
    /// Fundamental solutions with 8 variants; `null` for N=1.
    pub count8: Option<u128>,
    /// Jobs the board was split into.
    pub jobs: u64,
    /// Wall-clock seconds the run took.
    pub seconds: f64,
    /// Search nodes of all jobs (a measure of work; saturates at `u64::MAX`).
    pub nodes: u64,
    /// What the total rests on (a cluster run's): jobs counted on independent answers, on the
    /// coordinator's own solve, on one credential's word; the re-checks; the bound on wrong
    /// answers. Absent from `solve`'s results, where this machine solved every job itself.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub evidence: Option<Evidence>,
    /// The SHA-256 of the rows of the run's export (`export`'s `rows_sha256`): ties this total to
    /// the per-job counts anyone can check. Absent from `solve`'s results.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub export_sha256: Option<String>,
}

impl RunResult {
    /// The record of `totals`, over `jobs` jobs, after `elapsed` wall time and `nodes` nodes.
    pub fn new(totals: &Totals, jobs: u64, elapsed: Duration, nodes: u64) -> Self {
        RunResult {
            n: totals.n,
            total: totals.total,
            unique: totals.unique,
            count2: totals.classes.map(|c| c.count2),
            count4: totals.classes.map(|c| c.count4),
            count8: totals.classes.map(|c| c.count8),
            jobs,
            seconds: elapsed.as_secs_f64(),
            nodes,
            evidence: None,
            export_sha256: None,
        }
    }

    /// This record with the digest of its export's rows.
    pub fn with_export_digest(self, digest: String) -> Self {
        RunResult { export_sha256: Some(digest), ..self }
    }

    /// This record with what its total rests on.
    pub fn with_evidence(self, evidence: Evidence) -> Self {
        RunResult { evidence: Some(evidence), ..self }
    }

    /// The classic table line: `N: Total Unique hh:mm:ss.ms`.
    pub fn table_line(&self) -> String {
        format!("{:>2}: {:>20} {:>20} {}", self.n, self.total, self.unique, hms(self.seconds))
    }

    /// One JSON object on one line.
    pub fn json_line(&self) -> String {
        serde_json::to_string(self).expect("a result record always serializes")
    }
}

/// `hh:mm:ss.mmm`, hours growing past two digits for very long runs.
pub fn hms(seconds: f64) -> String {
    let ms = (seconds * 1000.0).round() as u64;
    format!("{:02}:{:02}:{:02}.{:03}", ms / 3_600_000, ms / 60_000 % 60, ms / 1000 % 60, ms % 1000)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A result file read back must equal what was written, time included: `status` and the tests
    /// compare records, and the default float parser is off by one ulp for values like this one.
    #[test]
    fn json_line_reads_back_exactly() {
        let mut record = RunResult {
            n: 15,
            total: 2_279_184,
            unique: 285_053,
            count2: Some(0),
            count4: Some(310),
            count8: Some(284_743),
            jobs: 2310,
            seconds: 1.039409637,
            nodes: 11_317_799,
            evidence: None,
            export_sha256: None,
        };
        for step in 0..10_000u32 {
            record.seconds = 1.039409637 + f64::from(step) * 1.000_000_7e-9;
            let back: RunResult = serde_json::from_str(&record.json_line()).unwrap();
            assert_eq!(back, record);
        }
    }

    /// Counts past 2^64 (and far past 2^53, where a double stops being exact) are written as JSON
    /// integers, digit for digit, and read back exactly.
    #[test]
    fn counts_past_u64_round_trip_exactly_as_json_integers() {
        let total = u128::from(u64::MAX) * 3 + 7;
        let record = RunResult {
            n: 29,
            total,
            unique: total / 8 + 1,
            count2: Some(0),
            count4: Some(u128::from(u64::MAX) + 1),
            count8: Some(total / 8 - 2),
            jobs: 1 << 21,
            seconds: 12.5,
            nodes: u64::MAX,
            evidence: None,
            export_sha256: None,
        };
        let line = record.json_line();
        assert!(line.contains(&format!("\"total\":{total},")), "{line}");
        assert!(line.contains("\"count4\":18446744073709551616,"), "{line}");
        let back: RunResult = serde_json::from_str(&line).unwrap();
        assert_eq!(back, record);
        // One more than a double can hold exactly stays itself.
        let odd = RunResult { total: (1 << 53) + 1, ..record };
        let back: RunResult = serde_json::from_str(&odd.json_line()).unwrap();
        assert_eq!(back.total, (1 << 53) + 1);
    }

    #[test]
    fn hms_rounds_to_milliseconds() {
        assert_eq!(hms(1.0394), "00:00:01.039");
        assert_eq!(hms(3725.5), "01:02:05.500");
    }
}
