//! The final answer for one board size, as printed by `solve --json`, written to a run's result
//! file and shown by `status`, with how its figures compare with the published counts of its board
//! ([`PublishedCheck`]).

use nqueens_core::{published_counts, Totals};
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
    /// How the figures compare with the published counts of this board (COUNT2 and COUNT4 are
    /// published also where the Total is unknown): a mismatch means the result is not exact.
    /// Read as `none` from a result file written before the check.
    #[serde(default)]
    pub published: PublishedCheck,
}

/// The outcome of comparing a result with the published counts of its board.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PublishedOutcome {
    /// Every figure compared equals its published value.
    Match,
    /// At least one figure differs from its published value: the result is not exact.
    Mismatch,
    /// Nothing is published for this board (or the result has no figure that is).
    #[default]
    None,
}

/// How a result's figures compare with the published counts (`nqueens_core::published_counts`):
/// which figures were compared, the outcome, each figure that differs, and the line `status`,
/// the page and the result file show.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct PublishedCheck {
    /// `match`, `mismatch` or `none`.
    pub outcome: PublishedOutcome,
    /// The figures compared (`Total`, `Unique`, `COUNT2`, `COUNT4`, `COUNT8`, in that order).
    #[serde(default)]
    pub compared: Vec<String>,
    /// Each figure that differs, with both values.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mismatches: Vec<String>,
    /// The outcome in words, e.g. "COUNT2/COUNT4 match the published values".
    #[serde(default)]
    pub summary: String,
}

impl PublishedCheck {
    /// The figures of an `n`-board's result against the published ones.
    pub fn of(n: u8, total: u128, unique: u128, classes: Option<[u128; 3]>) -> Self {
        let Some(known) = published_counts(n.into()) else {
            return PublishedCheck::none(n);
        };
        let [c2, c4, c8] = classes.map_or([None; 3], |c| c.map(Some));
        let compared: Vec<String> = [
            ("Total", Some(total), known.total),
            ("Unique", Some(unique), known.unique),
            ("COUNT2", c2, known.count2),
            ("COUNT4", c4, known.count4),
            ("COUNT8", c8, known.count8),
        ]
        .iter()
        .filter(|(_, found, published)| found.is_some() && published.is_some())
        .map(|(figure, _, _)| figure.to_string())
        .collect();
        if compared.is_empty() {
            return PublishedCheck::none(n);
        }
        let mismatches: Vec<String> = known
            .mismatches(Some(total), Some(unique), classes)
            .iter()
            .map(|m| m.to_string())
            .collect();
        let figures = if compared == ["COUNT2", "COUNT4"] {
            "COUNT2/COUNT4".to_string()
        } else {
            compared.join(", ")
        };
        let (outcome, summary) = if mismatches.is_empty() {
            (PublishedOutcome::Match, format!("{figures} match the published values"))
        } else {
            let why = mismatches.join("; ");
            let summary =
                format!("MISMATCH with the published values: {why}; this result is not exact");
            (PublishedOutcome::Mismatch, summary)
        };
        PublishedCheck { outcome, compared, mismatches, summary }
    }

    fn none(n: u8) -> Self {
        PublishedCheck { summary: format!("no published values for N = {n}"), ..Default::default() }
    }

    /// Whether a figure differs from its published value (the result is then not exact).
    pub fn is_mismatch(&self) -> bool {
        self.outcome == PublishedOutcome::Mismatch
    }
}

impl RunResult {
    /// The record of `totals`, over `jobs` jobs, after `elapsed` wall time and `nodes` nodes.
    pub fn new(totals: &Totals, jobs: u64, elapsed: Duration, nodes: u64) -> Self {
        let classes = totals.classes.map(|c| [c.count2, c.count4, c.count8]);
        RunResult {
            published: PublishedCheck::of(totals.n, totals.total, totals.unique, classes),
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

    /// Why this result is not exact, where it is not: a figure differs from its published value.
    /// A run with such a result logs it as an error and ends non-zero.
    pub fn not_exact(&self) -> Option<&str> {
        self.published.is_mismatch().then_some(self.published.summary.as_str())
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
            published: PublishedCheck::of(15, 2_279_184, 285_053, Some([0, 310, 284_743])),
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
            published: PublishedCheck::default(),
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

    /// The totals of an `n`-board with these classes (Total and Unique summed from them).
    fn totals(n: u8, [count2, count4, count8]: [u128; 3]) -> Totals {
        Totals {
            n,
            total: 2 * count2 + 4 * count4 + 8 * count8,
            unique: count2 + count4 + count8,
            classes: Some(nqueens_core::Classes { count2, count4, count8 }),
        }
    }

    /// A known board is compared on every figure; N = 28 on its rotation classes alone, the
    /// line `status`, the page and the result file show saying which.
    #[test]
    fn a_result_matching_the_published_values_says_which_it_matched() {
        let eight = RunResult::new(&totals(8, [0, 1, 11]), 10, Duration::ZERO, 0);
        assert_eq!(eight.published.outcome, PublishedOutcome::Match);
        assert_eq!(eight.published.compared, ["Total", "Unique", "COUNT2", "COUNT4", "COUNT8"]);
        assert_eq!(
            eight.published.summary,
            "Total, Unique, COUNT2, COUNT4, COUNT8 match the published values"
        );
        assert_eq!(eight.not_exact(), None);
        let n28 = RunResult::new(&totals(28, [16_448, 312_717_136, 5]), 10, Duration::ZERO, 0);
        assert_eq!(n28.published.outcome, PublishedOutcome::Match);
        assert_eq!(n28.published.compared, ["COUNT2", "COUNT4"]);
        assert_eq!(n28.published.summary, "COUNT2/COUNT4 match the published values");
        let line = n28.json_line();
        assert!(
            line.contains("\"summary\":\"COUNT2/COUNT4 match the published values\""),
            "{line}"
        );
        assert_eq!(serde_json::from_str::<RunResult>(&line).unwrap(), n28);
    }

    /// A figure that differs from its published value makes the result not exact, and says so.
    #[test]
    fn a_result_differing_from_a_published_value_is_not_exact() {
        let n28 = RunResult::new(&totals(28, [16_448, 312_717_137, 5]), 10, Duration::ZERO, 0);
        assert_eq!(n28.published.outcome, PublishedOutcome::Mismatch);
        assert_eq!(
            n28.published.mismatches,
            ["COUNT4 is 312717137 but the published value is 312717136"]
        );
        let why = n28.not_exact().expect("not exact");
        assert!(why.starts_with("MISMATCH") && why.contains("COUNT4 is 312717137"), "{why}");
        assert!(n28.json_line().contains("\"outcome\":\"mismatch\""));
        // A wrong Total on a known board, its classes adding up to it.
        let eight = RunResult::new(&totals(8, [1, 1, 11]), 10, Duration::ZERO, 0);
        assert!(eight.not_exact().unwrap().contains("Total is 94"), "{:?}", eight.published);
    }

    /// Nothing published: nothing compared; a result file written before the check reads so.
    #[test]
    fn a_board_with_nothing_published_compares_nothing() {
        let n29 = RunResult::new(&totals(29, [1, 2, 3]), 10, Duration::ZERO, 0);
        assert_eq!(n29.published.outcome, PublishedOutcome::None);
        assert!(n29.published.compared.is_empty() && n29.not_exact().is_none());
        assert_eq!(n29.published.summary, "no published values for N = 29");
        let old = r#"{"n":8,"total":92,"unique":12,"count2":0,"count4":1,"count8":11,"jobs":1,"seconds":0.5,"nodes":3}"#;
        let read: RunResult = serde_json::from_str(old).unwrap();
        assert_eq!(read.published, PublishedCheck::default());
    }

    #[test]
    fn hms_rounds_to_milliseconds() {
        assert_eq!(hms(1.0394), "00:00:01.039");
        assert_eq!(hms(3725.5), "01:02:05.500");
    }
}
