//! Adding up weighted job results into Total, Unique and the symmetry classes.

use crate::{check_board_size, CoreError, JobCounts};
use serde::{Deserialize, Serialize};

/// Weighted sums over the results of a job list (or part of it). Every sum is checked for overflow.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Tally {
    pub n: u8,
    /// Jobs added so far.
    pub jobs: u64,
    /// Sum of weight x solutions: the number of solutions of the board.
    pub total: u64,
    /// Sum of weight x sym180: the solutions equal to their own 180-degree rotation.
    pub sym180: u64,
    /// Sum of weight x sym90: the solutions equal to their own 90-degree rotation.
    pub sym90: u64,
    /// Sum of nodes over all jobs (not weighted).
    pub nodes: u64,
}

/// How many fundamental solutions have 2, 4 or 8 distinct variants under the symmetries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Classes {
    pub count2: u64,
    pub count4: u64,
    pub count8: u64,
}

/// The answer for one board size.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Totals {
    pub n: u8,
    /// All solutions.
    pub total: u64,
    /// Solutions up to symmetry.
    pub unique: u64,
    /// The symmetry classes; `None` for the degenerate 1-board, whose one queen is its own mirror.
    pub classes: Option<Classes>,
}

impl Tally {
    /// An empty tally for an `n`-board.
    pub fn new(n: u32) -> Result<Tally, CoreError> {
        Ok(Tally { n: check_board_size(n as i64)?, ..Tally::default() })
    }

    /// Adds the result of one job of orbit weight `weight`.
    pub fn add(&mut self, weight: u8, counts: &JobCounts) -> Result<(), CoreError> {
        let weighted =
            |count: u64, what| count.checked_mul(weight as u64).ok_or(CoreError::Overflow { what });
        let sum = |a: u64, b: u64, what| a.checked_add(b).ok_or(CoreError::Overflow { what });
        self.total = sum(self.total, weighted(counts.solutions, "total")?, "total")?;
        self.sym180 = sum(self.sym180, weighted(counts.sym180, "sym180")?, "sym180")?;
        self.sym90 = sum(self.sym90, weighted(counts.sym90, "sym90")?, "sym90")?;
        self.nodes = self.nodes.saturating_add(counts.nodes);
        self.jobs += 1;
        Ok(())
    }

    /// Total, Unique and the classes, from Burnside's lemma: a solution fixed by a 90-degree
    /// rotation has 2 variants, one fixed by 180 degrees only has 4, any other has 8.
    /// Fails if the sums contradict the identities, which no complete, correct tally can do.
    pub fn totals(&self) -> Result<Totals, CoreError> {
        let inconsistent = |reason: String| CoreError::Inconsistent { reason };
        if self.n == 1 {
            return Ok(Totals { n: 1, total: self.total, unique: self.total, classes: None });
        }
        let (q, p, r) = (self.total, self.sym180, self.sym90);
        if !(r <= p && p <= q) || r % 2 != 0 || (p - r) % 4 != 0 || (q - p) % 8 != 0 {
            return Err(inconsistent(format!(
                "total={q} sym180={p} sym90={r} break the symmetry identities"
            )));
        }
        let classes = Classes { count2: r / 2, count4: (p - r) / 4, count8: (q - p) / 8 };
        let unique = classes.count2 + classes.count4 + classes.count8;
        Ok(Totals { n: self.n, total: q, unique, classes: Some(classes) })
    }
}
