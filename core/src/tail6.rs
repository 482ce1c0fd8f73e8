//! The last six rows of a search counted in closed form, for CPUs with AVX-512.
//!
//! The five-row closed form of [`crate::tail`] is evaluated once per queen of the row above the
//! tail (row `last`), and every state of that row first goes through a queue. Here that row joins
//! the tail: when six searched rows remain, exactly six columns are open, and every completion is
//! one of the 720 permutations of those columns over those rows, held as the bits of a
//! [`PermSet6`] (twelve 64-bit words: one 512-bit and one 256-bit vector). One state of row `last`
//! is then counted with no branch and no queue:
//! - six table rows give the permutations that each row's free squares allow;
//! - three tables, indexed by the gaps between neighbouring open columns, give the permutations
//!   that put two queens on a shared diagonal (the fifteen column pairs split into the pairs
//!   among the first four columns, the pairs among the last four, and the four pairs that span
//!   the middle, each group depending on three numbers only);
//! - a population count of what is left.
//!
//! `Conflicts6::completions` is the plain form, which the tests run on any CPU; the AVX-512
//! kernel in [`crate::search`] computes the same with vector instructions, about 75 per state of
//! row `last` where the five-row form spent some 80 per state plus 50 per queued queen and 30 per
//! surviving tail. The tables take 48 KiB (`ALLOWED`) and 192 KiB per pattern of rows (three
//! conflict tables of 512 entries, of which `(span + 1)^3` are used).
//!
//! Compiled for AVX2 and BMI2 only, one state at a time under the depth-first search, the same
//! form measured no faster than the five-row build (N=16, 1.04x slower). Under the batched
//! search, which drops most states of row `last` before they are counted, it is: the AVX2 build
//! counts with it (by columns, [`BY_COLUMN`], without `pext`), the BMI2 build and the portable
//! one keep the five-row form.

use parking_lot::Mutex;
use std::sync::{Arc, LazyLock};

/// Rows counted in closed form: row `last` and the five below it.
pub(crate) const ROWS6: usize = 6;

const PERM_COUNT: usize = 720;
const WORDS: usize = 12;

/// One bit per permutation of the six open columns over the six rows (bits 720..768 stay zero).
///
/// Aligned to 128 bytes (96 used): every table entry is then one aligned 512-bit load and one
/// aligned 256-bit load. At 96 bytes a stride, half the entries' 512-bit loads crossed a cache
/// line, and the six-row count ran 10-14% slower (N=16 to 19).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(C, align(128))]
pub(crate) struct PermSet6(pub [u64; WORDS]);

impl PermSet6 {
    const EMPTY: PermSet6 = PermSet6([0; WORDS]);

    fn set(&mut self, p: usize) {
        self.0[p / 64] |= 1 << (p % 64);
    }

    fn or(&mut self, other: &PermSet6) {
        for (a, b) in self.0.iter_mut().zip(&other.0) {
            *a |= b;
        }
    }
}

/// Every permutation: `PERMUTATIONS[p][row]` is the index of the open column holding that row's
/// queen.
static PERMUTATIONS: LazyLock<Vec<[usize; ROWS6]>> = LazyLock::new(|| {
    let mut perms = Vec::with_capacity(PERM_COUNT);
    for code in 0..ROWS6.pow(ROWS6 as u32) {
        let mut digits = [0; ROWS6];
        let (mut rest, mut seen) = (code, 0u32);
        for d in digits.iter_mut() {
            *d = rest % ROWS6;
            rest /= ROWS6;
            seen |= 1 << *d;
        }
        if seen == (1 << ROWS6) - 1 {
            perms.push(digits);
        }
    }
    assert_eq!(perms.len(), PERM_COUNT);
    perms
});

/// Entries of [`ALLOWED`]: one per row and six-bit set of free columns.
pub(crate) const ALLOWED_LEN: usize = ROWS6 << ROWS6;

/// `ALLOWED[row * 64 + free]`: the permutations that put `row`'s queen on one of the open
/// columns in the six-bit set `free` (bit `i` is the `i`-th open column). 48 KiB.
pub(crate) static ALLOWED: LazyLock<Box<[PermSet6; ALLOWED_LEN]>> = LazyLock::new(|| {
    let mut table = Box::new([PermSet6::EMPTY; ALLOWED_LEN]);
    for (p, perm) in PERMUTATIONS.iter().enumerate() {
        for (row, &col) in perm.iter().enumerate() {
            for free in 0..1usize << ROWS6 {
                if free & (1 << col) != 0 {
                    table[(row << ROWS6) + free].set(p);
                }
            }
        }
    }
    table
});

/// `BY_COLUMN[column][rows]`: the permutations that put the queen of the `column`-th open column
/// in one of the rows of the six-bit set `rows`. ANDed over the six columns, each with the rows
/// in which it is free, it gives what [`ALLOWED`] gives ANDed over the six rows (both are the
/// permutations whose every queen stands on a free square): the AVX2 build's form, which finds
/// a column's rows with `vmovmskps` where the rows' columns would need `pext`. 48 KiB.
pub(crate) static BY_COLUMN: LazyLock<Box<[[PermSet6; 1 << ROWS6]; ROWS6]>> = LazyLock::new(|| {
    let mut table = Box::new([[PermSet6::EMPTY; 1 << ROWS6]; ROWS6]);
    for (p, perm) in PERMUTATIONS.iter().enumerate() {
        for (row, &col) in perm.iter().enumerate() {
            for (rows, set) in table[col].iter_mut().enumerate() {
                if rows & (1 << row) != 0 {
                    set.set(p);
                }
            }
        }
    }
    table
});

/// The diagonal conflicts among the six rows of one search layout, by the gaps between
/// neighbouring open columns, each clipped to `span + 1` (a wider gap never matches a row
/// distance). Each table is indexed by three clipped gaps less one, three bits each: the six
/// rows lie within nine board rows (the first six rows below the top border row but for the rows
/// of the left and right border queens), so `span + 1` is at most 8.
pub(crate) struct Conflicts6 {
    /// `span + 1`, the largest value a clipped gap takes.
    pub clip: u32,
    /// Pairs among open columns 0..4, by gaps 1, 2, 3.
    pub first: Box<[PermSet6; TABLE_LEN]>,
    /// Pairs among open columns 2..6 but (2, 3), by gaps 3, 4, 5.
    pub second: Box<[PermSet6; TABLE_LEN]>,
    /// Pairs (0, 4), (0, 5), (1, 4), (1, 5), by gap 1, the distance from column 1 to column 4
    /// (clipped) and gap 5.
    pub middle: Box<[PermSet6; TABLE_LEN]>,
}

impl std::fmt::Debug for Conflicts6 {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Conflicts6").field("clip", &self.clip).finish_non_exhaustive()
    }
}

/// Largest `span + 1` the tables hold, and their length.
const MAX_CLIP: u32 = 8;
pub(crate) const TABLE_LEN: usize = 512;

/// Built tables, by the rows' pattern (bit `offset` set for each row).
static TABLES: Mutex<Vec<(u32, Arc<Conflicts6>)>> = Mutex::new(Vec::new());

impl Conflicts6 {
    /// `offset[row]` is the board-row distance from row `last` to each of the six rows (0 for
    /// the first, increasing, below 32). Tables are built once per pattern and shared. `None` if
    /// the rows span more than the tables hold (never for a layout of [`crate::search`]).
    pub fn new(offset: &[u32; ROWS6]) -> Option<Arc<Conflicts6>> {
        if offset[ROWS6 - 1] + 1 > MAX_CLIP {
            return None;
        }
        let pattern = offset.iter().fold(0u32, |m, &o| m | 1 << (o & 31));
        let mut tables = TABLES.lock();
        if let Some((_, table)) = tables.iter().find(|(p, _)| *p == pattern) {
            return Some(table.clone());
        }
        let table = Arc::new(Self::build(offset));
        tables.push((pattern, table.clone()));
        Some(table)
    }

    fn build(offset: &[u32; ROWS6]) -> Conflicts6 {
        let span = offset[ROWS6 - 1];
        let clip = span + 1;
        // by_pair_gap[a][b][gap]: conflicts when open columns a < b are `gap` apart.
        let mut by_pair_gap = vec![[[PermSet6::EMPTY; 33]; ROWS6]; ROWS6];
        for (p, perm) in PERMUTATIONS.iter().enumerate() {
            for i in 0..ROWS6 {
                for j in i + 1..ROWS6 {
                    let distance = (offset[j] - offset[i]) as usize;
                    let (a, b) = (perm[i].min(perm[j]), perm[i].max(perm[j]));
                    by_pair_gap[a][b][distance.min(32)].set(p);
                }
            }
        }
        let c = clip as usize;
        let at = |a: usize, b: usize, gap: usize| &by_pair_gap[a][b][gap.min(32)];
        let table = |pairs: &dyn Fn(usize, usize, usize, &mut PermSet6)| {
            let mut out = Box::new([PermSet6::EMPTY; TABLE_LEN]);
            for x in 1..=c {
                for y in 1..=c {
                    for z in 1..=c {
                        pairs(x, y, z, &mut out[(x - 1) | (y - 1) << 3 | (z - 1) << 6]);
                    }
                }
            }
            out
        };
        // Column positions from gaps; a clipped gap keeps every sum that contains it above span.
        let first = table(&|g1, g2, g3, out| {
            let pos = [0, g1, g1 + g2, g1 + g2 + g3];
            for a in 0..4 {
                for b in a + 1..4 {
                    out.or(at(a, b, pos[b] - pos[a]));
                }
            }
        });
        let second = table(&|g3, g4, g5, out| {
            let pos = [0, g3, g3 + g4, g3 + g4 + g5];
            for a in 0..4 {
                for b in a + 1..4 {
                    if (a, b) != (0, 1) {
                        out.or(at(a + 2, b + 2, pos[b] - pos[a]));
                    }
                }
            }
        });
        let middle = table(&|g1, s, g5, out| {
            // `s`: distance from column 1 to column 4, at least 3 when unclipped.
            out.or(at(1, 4, s));
            out.or(at(0, 4, g1 + s));
            out.or(at(1, 5, s + g5));
            out.or(at(0, 5, g1 + s + g5));
        });
        Conflicts6 { clip, first, second, middle }
    }

    /// Completions of the six rows: `open` holds exactly six columns, `free[row]` the squares of
    /// each row that no queen outside them attacks. `gather` is `pext` or [`gather6_portable`].
    /// The plain form of what the AVX-512 search computes, against which the tests check it.
    #[cfg(test)]
    pub fn completions(
        &self,
        allowed: &[PermSet6; ALLOWED_LEN],
        open: u32,
        free: &[u32; ROWS6],
        gather: impl Fn(u32, &[u32; ROWS6]) -> [u32; ROWS6],
    ) -> u64 {
        let compressed = gather(open, free);
        let mut alive = [!0u64; WORDS];
        for (row, &f) in compressed.iter().enumerate() {
            let entry = &allowed[(row << ROWS6) | (f as usize & 63)];
            for (a, e) in alive.iter_mut().zip(&entry.0) {
                *a &= e;
            }
        }
        let mut rest = open;
        let mut gap = [0u32; ROWS6];
        let mut previous = rest.trailing_zeros();
        for g in gap.iter_mut().skip(1) {
            rest &= rest.wrapping_sub(1);
            let column = rest.trailing_zeros();
            *g = (column - previous).min(self.clip) - 1;
            previous = column;
        }
        // Every digit is below `clip` <= 8; the masks only tell the compiler so.
        let s = (gap[2] + gap[3] + gap[4] + 2).min(self.clip - 1);
        let index = |x: u32, y: u32, z: u32| ((x | y << 3 | z << 6) as usize) & (TABLE_LEN - 1);
        let first = &self.first[index(gap[1], gap[2], gap[3])];
        let second = &self.second[index(gap[3], gap[4], gap[5])];
        let middle = &self.middle[index(gap[1], s, gap[5])];
        let conflicts = (first.0.iter().zip(&second.0).zip(&middle.0)).map(|((f, s), m)| f | s | m);
        alive.iter().zip(conflicts).map(|(a, c)| (a & !c).count_ones() as u64).sum()
    }
}

/// Portable `pext` of every row onto `open` (six bits set).
#[cfg(test)]
pub(crate) fn gather6_portable(open: u32, free: &[u32; ROWS6]) -> [u32; ROWS6] {
    let mut column = [0u32; ROWS6];
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
    use crate::SplitMix64;

    /// The permutations that the rows' free squares allow, found by rows (`ALLOWED`) and by
    /// columns (`BY_COLUMN`): the same sets, for random rows over random open columns.
    #[test]
    fn the_table_by_columns_allows_what_the_table_by_rows_allows() {
        let mut rng = SplitMix64::new(6);
        let mut some = 0;
        for _ in 0..2_000 {
            let (free, open) = (rng.next_u64(), rng.next_u64());
            let mut rows = [0u32; ROWS6];
            for (i, r) in rows.iter_mut().enumerate() {
                *r = (free >> (8 * i)) as u32 & 0xff;
            }
            // Six open columns of eight, where `open`'s two bits say which two are closed.
            let closed = 1u32 << (open & 7) | 1 << ((open >> 3) & 7);
            let open = if closed.count_ones() == 2 { 0xff & !closed } else { 0x3f };
            let by_row = gather6_portable(open, &rows);
            let mut want = [!0u64; WORDS];
            let mut got = [!0u64; WORDS];
            for row in 0..ROWS6 {
                let entry = &ALLOWED[(row << ROWS6) | by_row[row] as usize];
                want.iter_mut().zip(&entry.0).for_each(|(a, e)| *a &= e);
            }
            for column in 0..ROWS6 {
                let in_rows = (0..ROWS6).fold(0, |m, row| m | ((by_row[row] >> column) & 1) << row);
                let entry = &BY_COLUMN[column][in_rows as usize];
                got.iter_mut().zip(&entry.0).for_each(|(a, e)| *a &= e);
            }
            assert_eq!(got, want, "rows {rows:?}, open {open:#b}");
            some += want.iter().any(|&w| w != 0) as u32;
        }
        assert!(some > 100, "too few rows allow a permutation: {some}");
    }
}
