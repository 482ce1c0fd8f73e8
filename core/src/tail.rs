//! The last rows of a search, counted without a branch.
//!
//! When [`TAIL`] searched rows remain, exactly [`TAIL`] columns are still open, so every completion
//! is a permutation of those columns over those rows. All 120 permutations are tested at once, as
//! the bits of a `u128`: one table gives the permutations that each row's free squares allow,
//! another the ones that put two of the queens on a shared diagonal, given how far apart the open
//! columns are. This replaces the deepest and busiest levels of the search tree, and the branch
//! mispredictions that dominate them, with some eighty straight-line instructions.

use parking_lot::Mutex;
use std::sync::{Arc, LazyLock};

/// Searched rows counted in closed form at the end of every search.
pub(crate) const TAIL: usize = 5;

/// One bit per permutation of the open columns over the tail rows.
pub(crate) type PermSet = u128;

const PERM_COUNT: usize = 120;

/// Pairs of tail positions (the open columns in increasing order, or the tail rows in search
/// order).
const PAIR_COUNT: usize = TAIL * (TAIL - 1) / 2;

/// Every pair `(a, b)` of tail positions with `a < b`.
const PAIRS: [(usize, usize); PAIR_COUNT] = {
    let mut pairs = [(0, 0); PAIR_COUNT];
    let (mut a, mut k) = (0, 0);
    while a < TAIL {
        let mut b = a + 1;
        while b < TAIL {
            pairs[k] = (a, b);
            k += 1;
            b += 1;
        }
        a += 1;
    }
    pairs
};

/// Every permutation: `PERMUTATIONS[p][row]` is the index of the open column holding that row's
/// queen.
const PERMUTATIONS: [[usize; TAIL]; PERM_COUNT] = {
    let mut perms = [[0; TAIL]; PERM_COUNT];
    let mut count = 0;
    let mut code = 0;
    // Walk all TAIL^TAIL digit strings and keep those whose digits are distinct.
    while code < TAIL.pow(TAIL as u32) {
        let mut digits = [0; TAIL];
        let (mut rest, mut i, mut seen, mut distinct) = (code, 0, 0u32, true);
        while i < TAIL {
            digits[i] = rest % TAIL;
            rest /= TAIL;
            distinct &= seen & (1 << digits[i]) == 0;
            seen |= 1 << digits[i];
            i += 1;
        }
        if distinct {
            perms[count] = digits;
            count += 1;
        }
        code += 1;
    }
    assert!(count == PERM_COUNT);
    perms
};

/// `ALLOWED[row][free]`: the permutations that put `row`'s queen on one of the open columns in the
/// `TAIL`-bit set `free` (bit `i` is the `i`-th open column).
static ALLOWED: [[PermSet; 1 << TAIL]; TAIL] = {
    let mut table = [[0; 1 << TAIL]; TAIL];
    let mut row = 0;
    while row < TAIL {
        let mut p = 0;
        while p < PERM_COUNT {
            let mut free = 0;
            while free < 1 << TAIL {
                if free & (1 << PERMUTATIONS[p][row]) != 0 {
                    table[row][free] |= 1 << p;
                }
                free += 1;
            }
            p += 1;
        }
        row += 1;
    }
    table
};

/// `PAIR_PLACEMENTS[row_pair][col_pair]`: the permutations that put the two rows of
/// `PAIRS[row_pair]` on the two columns of `PAIRS[col_pair]`, in either order.
static PAIR_PLACEMENTS: [[PermSet; PAIR_COUNT]; PAIR_COUNT] = {
    let mut table = [[0; PAIR_COUNT]; PAIR_COUNT];
    let mut p = 0;
    while p < PERM_COUNT {
        let mut row_pair = 0;
        while row_pair < PAIR_COUNT {
            let (ci, cj) = (PERMUTATIONS[p][PAIRS[row_pair].0], PERMUTATIONS[p][PAIRS[row_pair].1]);
            let (low, high) = if ci < cj { (ci, cj) } else { (cj, ci) };
            let mut col_pair = 0;
            while col_pair < PAIR_COUNT {
                if PAIRS[col_pair].0 == low && PAIRS[col_pair].1 == high {
                    table[row_pair][col_pair] |= 1 << p;
                }
                col_pair += 1;
            }
            row_pair += 1;
        }
        p += 1;
    }
    table
};

/// The diagonal conflicts among the tail rows of one search layout.
///
/// Which permutations put two queens on a diagonal depends only on the gaps between neighbouring
/// open columns, and a gap wider than the tail's row span can never match a row distance, so the
/// gaps are clipped to `span + 1` and the `TAIL - 1` clipped gaps index one precomputed set.
///
/// Only a few dozen row patterns occur (the tail rows are consecutive but for the rows of up to
/// three border queens), so each table is built once per process and shared by every job.
#[derive(Debug, Clone)]
pub(crate) struct TailConflicts {
    /// `span + 1`: the largest gap value kept apart.
    clip: u32,
    /// Indexed by the clipped neighbour gaps as the digits of a number in base `clip`.
    by_gaps: Arc<[PermSet]>,
}

/// Built tables, by the tail's row pattern (bit `offset` set for each tail row).
static TABLES: Mutex<Vec<(u32, Arc<[PermSet]>)>> = Mutex::new(Vec::new());

impl TailConflicts {
    /// `offset[row]` is the board-row distance from the first tail row to tail row `row` (0 for
    /// the first, increasing, below 32). Two queens share a diagonal when their column gap equals
    /// their row distance.
    pub fn new(offset: &[u32; TAIL]) -> TailConflicts {
        let pattern = offset.iter().fold(0u32, |m, &o| m | 1 << (o & 31));
        let clip = offset[TAIL - 1] + 1;
        let mut tables = TABLES.lock();
        let by_gaps = match tables.iter().find(|(p, _)| *p == pattern) {
            Some((_, table)) => table.clone(),
            None => {
                let table = Self::build(offset);
                tables.push((pattern, table.clone()));
                table
            }
        };
        TailConflicts { clip, by_gaps }
    }

    /// The placeholder of a layout too short to have a tail, which never asks for completions:
    /// no lock, no table build.
    pub fn placeholder() -> TailConflicts {
        static EMPTY: LazyLock<Arc<[PermSet]>> = LazyLock::new(|| Arc::from([0 as PermSet]));
        TailConflicts { clip: 1, by_gaps: EMPTY.clone() }
    }

    fn build(offset: &[u32; TAIL]) -> Arc<[PermSet]> {
        // by_pair_gap[col_pair][gap]: conflicts when the open columns of `col_pair` are `gap`
        // apart.
        let mut by_pair_gap = [[0 as PermSet; 32]; PAIR_COUNT];
        for (row_pair, &(row_i, row_j)) in PAIRS.iter().enumerate() {
            let distance = (offset[row_j] - offset[row_i]) as usize;
            for (col_pair, by_gap) in by_pair_gap.iter_mut().enumerate() {
                by_gap[distance & 31] |= PAIR_PLACEMENTS[row_pair][col_pair];
            }
        }
        let clip = offset[TAIL - 1] + 1;
        let size = (clip as usize).pow(TAIL as u32 - 1);
        (0..size)
            .map(|key| {
                let mut column = [0usize; TAIL];
                let mut rest = key;
                for i in 1..TAIL {
                    column[i] = column[i - 1] + rest % clip as usize + 1;
                    rest /= clip as usize;
                }
                PAIRS.iter().zip(&by_pair_gap).fold(0, |conflicts, (&(a, b), by_gap)| {
                    conflicts | by_gap[(column[b] - column[a]).min(31)]
                })
            })
            .collect()
    }

    /// Completions of the tail, given the permutations its rows allow (see [`allowed`]): those of
    /// them that put no two queens on a diagonal. `open` holds exactly `TAIL` columns.
    #[inline(always)]
    pub fn completions(&self, open: u32, alive: PermSet) -> u64 {
        let mut rest = open;
        let mut previous = rest.trailing_zeros();
        let (mut key, mut place) = (0, 1);
        for _ in 1..TAIL {
            rest &= rest.wrapping_sub(1);
            let column = rest.trailing_zeros();
            key += ((column - previous).min(self.clip) - 1) * place;
            place *= self.clip;
            previous = column;
        }
        // `key` < clip^(TAIL-1) = by_gaps.len(): every digit is below `clip`. The check is kept
        // (it is one predictable branch) so that a mask with too few bits cannot read past the end.
        let conflicts = self.by_gaps[key as usize];
        (alive & !conflicts).count_ones() as u64
    }
}

/// The permutations that the tail rows' free squares allow: `open` holds exactly `TAIL` columns,
/// and `free[row]` the squares of tail row `row` that no queen outside the tail attacks.
/// `gather(open, free)` moves each row's bits at the open columns into its low `TAIL` bits (the
/// BMI2 `pext` instruction, or [`gather_portable`]). Most tails end here: no permutation is left.
#[inline(always)]
pub(crate) fn allowed(
    open: u32,
    free: &[u32; TAIL],
    gather: impl Fn(u32, &[u32; TAIL]) -> [u32; TAIL],
) -> PermSet {
    let mut alive = PermSet::MAX;
    for (row, compressed) in gather(open, free).into_iter().enumerate() {
        alive &= ALLOWED[row][(compressed as usize) & ((1 << TAIL) - 1)];
    }
    alive
}

/// Portable `pext` of every tail row onto `open`, which has `TAIL` bits set: the open columns are
/// found once, then each row's bit at each of them is moved into place.
#[inline(always)]
pub(crate) fn gather_portable(open: u32, free: &[u32; TAIL]) -> [u32; TAIL] {
    let mut column = [0u32; TAIL];
    let mut rest = open;
    for c in column.iter_mut() {
        *c = rest.trailing_zeros() & 31;
        rest &= rest.wrapping_sub(1);
    }
    free.map(|f| column.iter().enumerate().fold(0, |out, (i, &c)| out | ((f >> c) & 1) << i))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn permutations_are_distinct_and_complete() {
        let mut seen = std::collections::HashSet::new();
        for perm in PERMUTATIONS {
            let mut cols = perm;
            cols.sort();
            assert_eq!(cols, [0, 1, 2, 3, 4]);
            assert!(seen.insert(perm));
        }
    }

    #[test]
    fn portable_gather_matches_pext() {
        let open = 0b1010_0110_0001;
        let rows = [0b1000_0100_0001, !0, 0, 0b0010_0010_0000, 0b1000_0000_0001];
        assert_eq!(gather_portable(open, &rows), [0b10101, 0b11111, 0, 0b01010, 0b10001]);
    }
}
