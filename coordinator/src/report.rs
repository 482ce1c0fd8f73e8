//! The final answer for one board size, as printed by `solve --json`, written to a run's result file
//! and shown by `status`.

use nqueens_core::Totals;
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// One board size's result: the fields of a `solve --json` line.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ResultRecord {
    pub n: u8,
    pub total: u64,
    pub unique: u64,
    /// `null` for N=1, whose single solution is its own mirror image.
    pub count2: Option<u64>,
    pub count4: Option<u64>,
    pub count8: Option<u64>,
    pub jobs: u64,
    pub seconds: f64,
    pub nodes: u64,
}

impl ResultRecord {
    pub fn new(totals: &Totals, jobs: u64, elapsed: Duration, nodes: u64) -> Self {
        ResultRecord {
            n: totals.n,
            total: totals.total,
            unique: totals.unique,
            count2: totals.classes.map(|c| c.count2),
            count4: totals.classes.map(|c| c.count4),
            count8: totals.classes.map(|c| c.count8),
            jobs,
            seconds: elapsed.as_secs_f64(),
            nodes,
        }
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
        let mut record = ResultRecord {
            n: 15,
            total: 2_279_184,
            unique: 285_053,
            count2: Some(0),
            count4: Some(310),
            count8: Some(284_743),
            jobs: 2310,
            seconds: 1.039409637,
            nodes: 11_317_799,
        };
        for step in 0..10_000u32 {
            record.seconds = 1.039409637 + f64::from(step) * 1.000_000_7e-9;
            let back: ResultRecord = serde_json::from_str(&record.json_line()).unwrap();
            assert_eq!(back, record);
        }
    }

    #[test]
    fn hms_rounds_to_milliseconds() {
        assert_eq!(hms(1.0394), "00:00:01.039");
        assert_eq!(hms(3725.5), "01:02:05.500");
    }
}
