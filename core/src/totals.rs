//! Adding up weighted job results into Total, Unique and the symmetry classes.
//!
//! A single job's counts fit comfortably in 64 bits, but their weighted sums do not: Q(29) is past
//! `u64::MAX`. Every sum here is therefore a `u128` (good far beyond N=32), still checked for
//! overflow.

use crate::{check_board_size, CoreError, JobCounts};
use serde::{Deserialize, Serialize};

/// Weighted sums over the results of a job list (or part of it). Every sum is checked for overflow.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Tally {
    /// Board size.
    pub n: u8,
    /// Jobs added so far.
    pub jobs: u64,
    /// Sum of weight x solutions: the number of solutions of the board.
    pub total: u128,
    /// Sum of weight x sym180: the solutions equal to their own 180-degree rotation.
    pub sym180: u128,
    /// Sum of weight x sym90: the solutions equal to their own 90-degree rotation.
    pub sym90: u128,
    /// Sum of nodes over all jobs (not weighted); saturates at `u64::MAX`, being a measure of work
    /// only.
    pub nodes: u64,
}

/// How many fundamental solutions have 2, 4 or 8 distinct variants under the symmetries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Classes {
    /// Fundamental solutions with 2 variants (fixed by a 90-degree rotation).
    pub count2: u128,
    /// Fundamental solutions with 4 variants (fixed by a 180-degree rotation only).
    pub count4: u128,
    /// Fundamental solutions with 8 variants (no rotational symmetry).
    pub count8: u128,
}

impl Classes {
    /// Total solutions these classes stand for: `2*count2 + 4*count4 + 8*count8`, or `None` on
    /// overflow.
    pub fn total(&self) -> Option<u128> {
        self.count2
            .checked_mul(2)?
            .checked_add(self.count4.checked_mul(4)?)?
            .checked_add(self.count8.checked_mul(8)?)
    }

    /// Fundamental solutions: `count2 + count4 + count8`, or `None` on overflow.
    pub fn unique(&self) -> Option<u128> {
        self.count2.checked_add(self.count4)?.checked_add(self.count8)
    }
}

/// The answer for one board size.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Totals {
    /// Board size.
    pub n: u8,
    /// All solutions.
    pub total: u128,
    /// Solutions up to symmetry.
    pub unique: u128,
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
        let weighted = |count: u64| u128::from(count) * u128::from(weight);
        let sum = |a: u128, b: u128, what| a.checked_add(b).ok_or(CoreError::Overflow { what });
        self.total = sum(self.total, weighted(counts.solutions), "total")?;
        self.sym180 = sum(self.sym180, weighted(counts.sym180), "sym180")?;
        self.sym90 = sum(self.sym90, weighted(counts.sym90), "sym90")?;
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
        // Each class is at most an eighth, quarter or half of `q`, so neither sum can overflow.
        let unique = classes.count2 + classes.count4 + classes.count8;
        Ok(Totals { n: self.n, total: q, unique, classes: Some(classes) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Synthetic per-job counts whose weighted sums pass `u64::MAX`: the sums stay exact, and the
    /// classes satisfy `Total = 2*C2 + 4*C4 + 8*C8` and `Unique = C2 + C4 + C8`.
    #[test]
    fn sums_past_u64_stay_exact_and_keep_the_class_identities() {
        let mut tally = Tally::new(29).unwrap();
        // (weight, solutions, sym180, sym90), each a valid single-job count below 2^63.
        let big = (1u64 << 62) + 12_345;
        let jobs = [
            (8u8, big, 0, 0),
            (8, big + 1, 0, 0),
            (4, big - 3, 2, 0),
            (2, big + 7, 8, 4),
            (8, u64::MAX / 2, 0, 0),
        ];
        let (mut total, mut sym180, mut sym90) = (0u128, 0u128, 0u128);
        let mut wrapped = 0u64;
        for &(w, solutions, s180, s90) in &jobs {
            tally.add(w, &JobCounts { solutions, sym180: s180, sym90: s90, nodes: 1 }).unwrap();
            total += u128::from(w) * u128::from(solutions);
            sym180 += u128::from(w) * u128::from(s180);
            sym90 += u128::from(w) * u128::from(s90);
            wrapped = wrapped.wrapping_add(solutions.wrapping_mul(w.into()));
        }
        assert!(total > u128::from(u64::MAX), "the test must pass 2^64");
        assert_ne!(u128::from(wrapped), total, "a u64 sum would have wrapped");
        assert_eq!((tally.total, tally.sym180, tally.sym90, tally.jobs), (total, sym180, sym90, 5));
        // The counts were chosen per weight so that the sums form a consistent answer.
        let totals = tally.totals().unwrap();
        let classes = totals.classes.unwrap();
        assert_eq!(totals.total, total);
        assert_eq!(classes.total(), Some(totals.total));
        assert_eq!(classes.unique(), Some(totals.unique));
        assert_eq!(classes.count2 * 2, sym90);
        assert_eq!(classes.count4 * 4 + classes.count2 * 2, sym180);
        assert!(classes.count8 > u128::from(u64::MAX) / 8);
    }

    #[test]
    fn overflow_of_u128_is_refused_not_wrapped() {
        let mut tally = Tally::new(32).unwrap();
        tally.total = u128::MAX - 7;
        let counts = JobCounts { solutions: 1, ..JobCounts::default() };
        assert_eq!(tally.add(8, &counts), Err(CoreError::Overflow { what: "total" }));
    }

    #[test]
    fn sums_that_break_the_identities_are_refused() {
        let mut tally = Tally::new(29).unwrap();
        tally.add(8, &JobCounts { solutions: u64::MAX, ..JobCounts::default() }).unwrap();
        tally.add(8, &JobCounts { solutions: 3, sym180: 0, sym90: 1, nodes: 0 }).unwrap();
        assert!(matches!(tally.totals(), Err(CoreError::Inconsistent { .. })));
    }
}
