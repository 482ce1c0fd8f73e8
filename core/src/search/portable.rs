//! The portable build: plain Rust for any CPU, the five-row form of [`super::body`].

use super::{Found, Lanes, Layout, State};
use crate::tail::{allowed, gather_portable, PermSet, TAIL};
#[cfg(test)]
use {
    super::SLOT,
    crate::tail6::{gather6_portable, Conflicts6, ROWS6},
};

impl Layout {
    /// Counts the completions of `start` with no special instructions.
    pub(super) fn count_portable(&self, start: &State) -> Found {
        self.count_body(start, rows_allow_portable)
    }

    /// The search with the six-row closed form, with no special instructions: for the tests.
    #[cfg(test)]
    pub(super) fn count_portable6(&self, start: &State, six: &Conflicts6) -> Found {
        let mut solutions = 0;
        let nodes = self.count_body6(start, |cols, right, left| {
            let mut rows = [0; ROWS6];
            for (i, row) in rows.iter_mut().enumerate() {
                let d = self.six_reach.0[i];
                *row = !(cols | (right << d) | (left >> d) | self.six_blocked.0[i]);
            }
            let allowed = &crate::tail6::ALLOWED;
            solutions += six.completions(allowed, !cols & self.board, &rows, gather6_portable);
        });
        Found { solutions, nodes }
    }

    /// Walks the search from `start` down to the states of row `last`, handing each to `six_rows`
    /// (its occupied columns and diagonals as seen in row `last`), which counts its completions
    /// through the last six rows. Returns the nodes.
    #[cfg(test)]
    #[inline(always)]
    fn count_body6(&self, start: &State, mut six_rows: impl FnMut(u32, u32, u32)) -> u64 {
        let base = start.depth;
        assert!(self.rows > TAIL && base <= self.last(), "six-row count below row last");
        let last = self.last();
        let free = self.free(start);
        if base == last {
            six_rows(start.cols, start.down_right, start.down_left);
            return free.count_ones() as u64;
        }
        let s = self.shift[(last - 1) & SLOT];
        let blocked = self.blocked[last & SLOT];
        let mut penultimate =
            |found: &mut Found, cols: u32, right: u32, left: u32, mut free: u32| {
                while free != 0 {
                    let bit = free & free.wrapping_neg();
                    free ^= bit;
                    let (c, r, l) = (cols | bit, (right | bit) << s, (left | bit) >> s);
                    found.nodes += 1 + (!(c | r | l | blocked)).count_ones() as u64;
                    six_rows(c, r, l);
                }
            };
        let mut found = Found::default();
        if base + 1 == last {
            penultimate(&mut found, start.cols, start.down_right, start.down_left, free);
        } else {
            self.search::<2>(start, &mut found, penultimate);
        }
        found.nodes
    }
}

/// The permutations that queen `bit` of row `last` leaves the tail rows, given what the queens
/// above leave them (`above`) and how far below row `last` each lies (`reach`); see [`allowed`].
#[inline(always)]
fn rows_allow_portable(bit: u32, above: &Lanes, reach: &Lanes, open: u32) -> PermSet {
    let mut rows = [0; TAIL];
    for i in 0..TAIL {
        let d = reach.0[i];
        rows[i] = above.0[i] & !((bit << d) | (bit >> d));
    }
    allowed(open, &rows, gather_portable)
}
