//! The hot loop: an iterative bitboard depth-first search over the rows that hold no border queen.
//!
//! The border queens never move, so their attacks are folded into one static `blocked` mask per
//! searched row, and rows that hold a border queen are skipped by shifting the diagonal masks by
//! the row distance. The inner loop then only carries the queens it places itself: no row checks,
//! no recursion, no allocation, and every array index is masked to the array's size so the
//! compiler emits no bounds checks.
//!
//! The bottom of the tree, where nearly all the time would go, is not searched queen by queen.
//! On CPUs with AVX-512 (F, VL, BW, BITALG, VBMI2, VPOPCNTDQ) and BMI2:
//! - the last six searched rows, row `last` and the [`TAIL`] rows below it, are counted in closed
//!   form ([`crate::tail6`]), one state of row `last` per evaluation, without a branch;
//! - the three rows above them (`last - 3` to `last - 1`) are not searched depth first either:
//!   their states wait in batches and each is expanded into all of its children at once, a
//!   vector of them stored without a branch (`vpcompressb` of the free squares' positions). The
//!   depth-first loop mispredicts about once per node and these rows hold most of the nodes:
//!   the whole count takes 0.77-0.80 of the time it took with them searched depth first (N=16
//!   to 20).
//!
//! Elsewhere (the BMI2/AVX2 build and the portable build):
//! - the last [`TAIL`] searched rows are counted in closed form ([`crate::tail`]);
//! - the queens of the row above them (`last`) are queued, four slots written without a branch,
//!   and counted in batches: a loop over one or two squares would mispredict its exit every time;
//! - the row above that (`last - 1`) runs in a loop of its own, without the stack.
//!
//! The tests check every build that the CPU can run against a plain count, from every depth.

// The hot loops index several fixed-size arrays in step; that reads more plainly than zipped
// iterators and compiles to the same unrolled code.
#![allow(clippy::needless_range_loop)]

use crate::board::Cell;
use crate::constellation::Constellation;
use crate::tail::{allowed, gather_portable, PermSet, TailConflicts, TAIL};
#[cfg(test)]
use crate::tail6::gather6_portable;
use crate::tail6::{Conflicts6, PermSet6, ALLOWED_LEN, ROWS6};
use crate::CoreError;
use std::sync::Arc;

/// Arrays are 32 long (one slot per possible row); indexing with `& SLOT` keeps them in bounds.
const SLOT: usize = 31;

/// Search layout of one constellation: which rows are searched and what the border queens block.
#[derive(Debug, Clone)]
pub(crate) struct Layout {
    n: u8,
    /// Number of searched rows.
    rows: usize,
    /// Board row of each searched row, in search order (bottom to top).
    row_of: [u8; 32],
    /// Per searched row: columns of border queens, squares they attack, and every bit >= n.
    blocked: [u32; 32],
    /// Row distance from each searched row to the next one (1, or more across border-queen rows).
    shift: [u32; 32],
    /// One bit per column of the board.
    board: u32,
    /// Columns of the border queens: the searched queens fill exactly the others.
    border_cols: u32,
    /// The last `TAIL` searched rows: their board-row distance from the searched row just above
    /// them (the last row that is searched queen by queen), and their blocked masks.
    tail_reach: Lanes,
    tail_blocked: Lanes,
    tail_conflicts: TailConflicts,
    /// The diagonal conflicts of row `last` and the tail together, for the six-row closed form,
    /// and the distance from row `last` and the blocked mask of each of those six rows.
    six: Option<Arc<Conflicts6>>,
    six_reach: Lanes,
    six_blocked: Lanes,
}

/// The masks at one depth of the search: occupied columns and the two diagonal directions
/// (`down_right` moves one column right per searched row, `down_left` one column left), as seen in
/// the searched row `depth`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct State {
    pub depth: usize,
    cols: u32,
    down_right: u32,
    down_left: u32,
}

impl State {
    /// The occupied columns and the two diagonal masks, as seen in the searched row `depth`.
    pub fn masks(&self) -> (u32, u32, u32) {
        (self.cols, self.down_right, self.down_left)
    }
}

/// What a search found.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Found {
    pub solutions: u64,
    pub nodes: u64,
}

impl Layout {
    pub fn new(n: u8, constellation: &Constellation) -> Layout {
        let border = constellation.queens(n);
        let board = if n == 32 { !0 } else { (1u32 << n) - 1 };
        let border_cols = border.iter().fold(0, |m, &(_, c)| m | 1u32 << c);
        let mut layout = Layout {
            n,
            rows: 0,
            row_of: [0; 32],
            blocked: [0; 32],
            shift: [0; 32],
            board,
            border_cols,
            tail_reach: Lanes([0; LANES]),
            tail_blocked: Lanes([!0; LANES]),
            tail_conflicts: TailConflicts::placeholder(),
            six: None,
            six_reach: Lanes([0; LANES]),
            six_blocked: Lanes([!0; LANES]),
        };
        // Rows are searched bottom-up. Canonical constellations have their top queen near a corner,
        // where it constrains few squares; starting next to the bottom queen prunes far more
        // (about 1.6x fewer nodes, and within 10% of the best of all 8 orientations).
        for row in (0..n).rev() {
            if border.iter().any(|&(r, _)| r == row) {
                continue;
            }
            let mut blocked = if n == 32 { 0 } else { !0u32 << n };
            for &(qr, qc) in &border {
                let distance = (row as i32 - qr as i32).abs();
                for col in [qc as i32, qc as i32 - distance, qc as i32 + distance] {
                    if (0..n as i32).contains(&col) {
                        blocked |= 1 << col;
                    }
                }
            }
            let k = layout.rows;
            layout.row_of[k] = row;
            layout.blocked[k] = blocked;
            if k > 0 {
                layout.shift[k - 1] = (layout.row_of[k - 1] - row) as u32;
            }
            layout.rows += 1;
        }
        if layout.rows > TAIL {
            let last = layout.last();
            let mut offset = [0; TAIL];
            for i in 0..TAIL {
                layout.tail_reach.0[i] = (layout.row_of[last] - layout.row_of[last + 1 + i]) as u32;
                layout.tail_blocked.0[i] = layout.blocked[last + 1 + i];
                offset[i] = layout.tail_reach.0[i] - layout.tail_reach.0[0];
            }
            layout.tail_conflicts = TailConflicts::new(&offset);
            for i in 0..ROWS6 {
                layout.six_reach.0[i] = (layout.row_of[last] - layout.row_of[last + i]) as u32;
                layout.six_blocked.0[i] = layout.blocked[last + i];
            }
            let six: [u32; ROWS6] = std::array::from_fn(|i| layout.six_reach.0[i]);
            layout.six = Conflicts6::new(&six);
        }
        layout
    }

    /// Number of searched rows.
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// The searched row just above the tail, the last one whose queens are placed one by one
    /// (they complete through the tail). Only meaningful when there are more than `TAIL` rows.
    fn last(&self) -> usize {
        self.rows - TAIL - 1
    }

    /// Board row of the searched row `depth`.
    pub fn row_of(&self, depth: usize) -> u8 {
        self.row_of[depth & SLOT]
    }

    /// The blocked mask of the searched row `depth` (read by [`crate::Job::search_plan`]).
    pub fn blocked(&self, depth: usize) -> u32 {
        self.blocked[depth & SLOT]
    }

    /// Row distance from the searched row `depth` to the next one (read by [`crate::Job::search_plan`]).
    pub fn shift(&self, depth: usize) -> u32 {
        self.shift[depth & SLOT]
    }

    /// The state before any queen is searched.
    pub fn start(&self) -> State {
        State { depth: 0, cols: self.border_cols, down_right: 0, down_left: 0 }
    }

    /// Free columns of the searched row at `state.depth`.
    #[inline(always)]
    pub fn free(&self, state: &State) -> u32 {
        !(state.cols | state.down_right | state.down_left | self.blocked[state.depth & SLOT])
    }

    /// The state after placing a queen on column `col` of the current row, or an error if that
    /// square is not free.
    pub fn place(&self, state: &State, col: u8) -> Result<State, CoreError> {
        if state.depth >= self.rows || col >= self.n || self.free(state) & (1 << col) == 0 {
            return Err(CoreError::InvalidJob {
                reason: format!("column {col} is not free in searched row {}", state.depth),
            });
        }
        Ok(self.advance(state, 1 << col))
    }

    #[inline(always)]
    fn advance(&self, state: &State, bit: u32) -> State {
        let s = self.shift[state.depth & SLOT];
        State {
            depth: state.depth + 1,
            cols: state.cols | bit,
            down_right: (state.down_right | bit) << s,
            down_left: (state.down_left | bit) >> s,
        }
    }

    /// Every way to place queens in the next `extra` searched rows (fewer if the board runs out).
    pub fn expand(
        &self,
        state: &State,
        extra: usize,
        out: &mut Vec<(State, Vec<u8>)>,
        path: &mut Vec<u8>,
    ) {
        if extra == 0 || state.depth == self.rows {
            out.push((*state, path.clone()));
            return;
        }
        let mut free = self.free(state);
        while free != 0 {
            let col = free.trailing_zeros() as u8;
            free &= free - 1;
            path.push(col);
            self.expand(&self.advance(state, 1 << col), extra - 1, out, path);
            path.pop();
        }
    }

    /// The queens placed so far, as board squares, from the columns chosen for the searched rows.
    pub fn placed_queens(&self, columns: &[u8]) -> Vec<Cell> {
        columns.iter().enumerate().map(|(k, &c)| (self.row_of(k), c)).collect()
    }

    /// Counts the completions of `start`: the number of ways to fill every remaining searched row.
    pub fn count(&self, start: &State) -> Found {
        // The six-row tables exist only when there are more than `TAIL` rows (`last` is defined).
        #[cfg(target_arch = "x86_64")]
        if let Some(six) = self.six.as_deref().filter(|_| start.depth <= self.last()) {
            if has_avx512_six() {
                // SAFETY: the CPU supports the features the function is compiled for (checked above).
                return unsafe { self.count_avx512(start, six) };
            }
        }
        #[cfg(target_arch = "x86_64")]
        if has_bmi() {
            // SAFETY: the CPU supports the features the function is compiled for (checked above).
            return unsafe { self.count_bmi(start) };
        }
        self.count_body(start, rows_allow_portable)
    }

    /// The search compiled for BMI1/BMI2, POPCNT and AVX2 (`blsi`, `shlx`, `pext`, `popcnt`, and
    /// eight tail rows' masks in one vector): about half the instructions of the portable build.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "bmi1,bmi2,popcnt,avx2")]
    unsafe fn count_bmi(&self, start: &State) -> Found {
        use std::arch::x86_64::*;
        self.count_body(start, |bit, above: &Lanes, reach: &Lanes, open| {
            let vector = |l: &Lanes| {
                let v = l.0.map(|x| x as i32);
                _mm256_setr_epi32(v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7])
            };
            let (above, reach) = (vector(above), vector(reach));
            let queen = _mm256_set1_epi32(bit as i32);
            let free = _mm256_andnot_si256(
                _mm256_or_si256(_mm256_sllv_epi32(queen, reach), _mm256_srlv_epi32(queen, reach)),
                above,
            );
            let (low, high) = (_mm256_castsi256_si128(free), _mm256_extracti128_si256::<1>(free));
            let rows = [
                _mm_cvtsi128_si32(low),
                _mm_extract_epi32::<1>(low),
                _mm_extract_epi32::<2>(low),
                _mm_extract_epi32::<3>(low),
                _mm_cvtsi128_si32(high),
            ];
            allowed(open, &rows.map(|r| r as u32), |open, free: &[u32; TAIL]| {
                free.map(|f| _pext_u32(f, open))
            })
        })
    }

    /// The search with the six-row closed form, compiled for AVX-512 (F, VL, BW, BITALG, VBMI2,
    /// VPOPCNTDQ) and BMI2 (see [`has_avx512_six`]): depth first down to row `last - 3`, whose
    /// states are expanded row by row in batches ([`Layout::drain6`]) and whose descendants in
    /// row `last` are counted in closed form ([`Layout::count_children6`]).
    #[cfg(target_arch = "x86_64")]
    #[target_feature(
        enable = "bmi1,bmi2,popcnt,avx2,avx512f,avx512vl,avx512bw,avx512bitalg,avx512vbmi2,avx512vpopcntdq"
    )]
    unsafe fn count_avx512(&self, start: &State, six: &Conflicts6) -> Found {
        let mut batch = Batch6::new();
        let last = self.last();
        let (cols, right, left, free) =
            (start.cols, start.down_right, start.down_left, self.free(start));
        let mut found = Found::default();
        match last - start.depth {
            0 => {
                batch.last.push(cols, right, left, free);
                found.nodes = free.count_ones() as u64;
            }
            1 => batch.above1.push(cols, right, left, free),
            2 => batch.above2.push(cols, right, left, free),
            3 => batch.above3.push(cols, right, left, free),
            _ => self.search::<4>(start, &mut found, |found, cols, right, left, free| {
                // What the depth-first search checks before going down (see `search`).
                let s = self.shift[(last - 3) & SLOT];
                let after = !(cols | (right << s) | (left >> s) | self.blocked[(last - 2) & SLOT]);
                let free = free & 0u32.wrapping_sub((after != 0) as u32);
                batch.above3.push(cols, right, left, free);
                if batch.above3.len >= ABOVE3_BATCH {
                    self.drain6(&mut batch, six, found, false);
                }
            }),
        }
        self.drain6(&mut batch, six, &mut found, true);
        found
    }

    /// Moves the waiting states down the last rows: those of row `last - 3` to row `last - 2`
    /// always, those of row `last - 2` to row `last - 1` once enough wait, and those of row
    /// `last - 1` to row `last`, counting these, once enough wait there (every row when `all`,
    /// at the end of the search). Each row is expanded sixteen states at a time
    /// ([`Layout::expand_all`], [`Layout::expand_last`]): with the rows `last - 3` and `last - 2`
    /// expanded one state at a time instead (eight lanes), 1.03-1.10x the time (N=18..20).
    #[cfg(target_arch = "x86_64")]
    #[target_feature(
        enable = "bmi1,bmi2,popcnt,avx2,avx512f,avx512vl,avx512bw,avx512bitalg,avx512vbmi2,avx512vpopcntdq"
    )]
    unsafe fn drain6(&self, batch: &mut Batch6, six: &Conflicts6, found: &mut Found, all: bool) {
        let last = self.last();
        found.nodes +=
            self.expand_all::<true, _, _>(last - 3, &mut batch.above3, &mut batch.above2);
        if !all && batch.above2.len < ABOVE2_BATCH {
            return;
        }
        found.nodes +=
            self.expand_all::<false, _, _>(last - 2, &mut batch.above2, &mut batch.above1);
        if all || batch.above1.len >= ABOVE1_BATCH {
            found.nodes += self.expand_last(batch);
            found.solutions += self.count_children6(&mut batch.last, six);
        }
    }

    /// Appends to `to` the states of searched row `depth + 1` that the queens of the states of
    /// `from` (in row `depth`) give, with their own free squares, sixteen states at a time: a
    /// queen per lane per step (the lowest free square of each state, then the next), the
    /// children packed by `vpcompressd`. Returns the nodes (the queens placed). Empties `from`.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(
        enable = "bmi1,bmi2,popcnt,avx2,avx512f,avx512vl,avx512bw,avx512bitalg,avx512vbmi2,avx512vpopcntdq"
    )]
    unsafe fn expand_all<const PRUNE: bool, const FROM: usize, const TO: usize>(
        &self,
        depth: usize,
        from: &mut Waiting<FROM>,
        to: &mut Waiting<TO>,
    ) -> u64 {
        use std::arch::x86_64::*;
        let shift = _mm_cvtsi32_si128(self.shift[depth & SLOT] as i32);
        let blocked = _mm512_set1_epi32(self.blocked[(depth + 1) & SLOT] as i32);
        let next = _mm_cvtsi32_si128(self.shift[(depth + 1) & SLOT] as i32);
        let blocked_after = _mm512_set1_epi32(self.blocked[(depth + 2) & SLOT] as i32);
        let states = std::mem::take(&mut from.len).min(FROM - 16);
        let mut nodes = _mm512_setzero_si512();
        for at in (0..states).step_by(16) {
            let (c, r, l, f, valid) = from.slice(at, states);
            let mut rest = _mm512_maskz_mov_epi32(valid, f);
            nodes = _mm512_add_epi32(nodes, _mm512_popcnt_epi32(rest));
            loop {
                let some = _mm512_test_epi32_mask(rest, rest);
                if some == 0 {
                    break;
                }
                let bit = _mm512_and_si512(rest, _mm512_sub_epi32(_mm512_setzero_si512(), rest));
                rest = _mm512_xor_si512(rest, bit);
                let cc = _mm512_or_si512(c, bit);
                let rr = _mm512_sll_epi32(_mm512_or_si512(r, bit), shift);
                let ll = _mm512_srl_epi32(_mm512_or_si512(l, bit), shift);
                let mut ff =
                    _mm512_ternarylogic_epi32::<0x01>(cc, _mm512_or_si512(rr, ll), blocked);
                if PRUNE {
                    let after = _mm512_ternarylogic_epi32::<0x01>(
                        cc,
                        _mm512_or_si512(_mm512_sll_epi32(rr, next), _mm512_srl_epi32(ll, next)),
                        blocked_after,
                    );
                    ff = _mm512_maskz_mov_epi32(_mm512_test_epi32_mask(after, after), ff);
                }
                to.append(some, cc, rr, ll, Some(ff));
            }
        }
        _mm512_reduce_add_epi32(nodes) as u32 as u64
    }

    /// Turns the waiting states of row `last - 1` into the states of row `last` that their
    /// queens give, sixteen states at a time, and returns the nodes: the queens of both rows.
    ///
    /// States that surely have no completion ([`DeadTest`], over the seven rows from `last - 1`
    /// down: 8% of them at N=16, 24% at N=20) are not expanded. The nodes come in closed form, for
    /// every state, dropped or not: its queens (`free`, F), and for each, the free squares it
    /// leaves in row `last`, those of B (row `last`'s free squares before the queen) less the
    /// queen's column and diagonals: |F| + |F||B| - |F & B| - |F & (B >> d)| - |F & (B << d)|,
    /// with d the distance between the rows. The children are made a queen at a time for all
    /// sixteen states (the lowest free square of each, then the next), and packed by
    /// `vpcompressd`. This costs 0.88-0.95x the time of expanding one state at a time (eight
    /// lanes, the free squares' positions by `vpcompressb`) and counting nodes per child; testing
    /// the children here too, rather than in [`Layout::drop_dead`], 1.0-1.18x.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(
        enable = "bmi1,bmi2,popcnt,avx2,avx512f,avx512vl,avx512bw,avx512bitalg,avx512vbmi2,avx512vpopcntdq"
    )]
    unsafe fn expand_last(&self, batch: &mut Batch6) -> u64 {
        use std::arch::x86_64::*;
        let test = DeadTest::<{ ROWS6 + 1 }>::new(self, self.last() - 1);
        let d = test.reach[1];
        let (from, to) = (&batch.above1, &mut batch.last);
        let states = from.len.min(ABOVE1_CAP - 16);
        let mut nodes = _mm512_setzero_si512();
        for at in (0..states).step_by(16) {
            let (c, r, l, f, valid) = from.slice(at, states);
            let (alive, below) = test.alive(c, r, l);
            let count = |x: __m512i| _mm512_popcnt_epi32(x);
            let queens = count(f);
            let lost = _mm512_add_epi32(
                count(_mm512_and_si512(f, below)),
                _mm512_add_epi32(
                    count(_mm512_and_si512(f, _mm512_srl_epi32(below, d))),
                    count(_mm512_and_si512(f, _mm512_sll_epi32(below, d))),
                ),
            );
            let these = _mm512_sub_epi32(
                _mm512_add_epi32(queens, _mm512_mullo_epi32(queens, count(below))),
                lost,
            );
            nodes = _mm512_mask_add_epi32(nodes, valid, nodes, these);
            let mut rest = _mm512_maskz_mov_epi32(valid & alive, f);
            loop {
                let some = _mm512_test_epi32_mask(rest, rest);
                if some == 0 {
                    break;
                }
                let bit = _mm512_and_si512(rest, _mm512_sub_epi32(_mm512_setzero_si512(), rest));
                rest = _mm512_xor_si512(rest, bit);
                let rr = _mm512_sll_epi32(_mm512_or_si512(r, bit), d);
                let ll = _mm512_srl_epi32(_mm512_or_si512(l, bit), d);
                to.append(some, _mm512_or_si512(c, bit), rr, ll, None);
            }
        }
        batch.above1.len = 0;
        _mm512_reduce_add_epi32(nodes) as u32 as u64
    }

    /// Drops from the waiting states of row `last` those that surely have no completion
    /// ([`DeadTest`] over the six rows), moves the others to the front of the arrays, and sets
    /// the batch's length to their number.
    ///
    /// About a third of the states go (27% at N=16, 42% at N=19: the share grows with N), for
    /// some 40 vector instructions per sixteen states, and the count of the rest takes
    /// 0.74-0.83x the time (N=18..20). The survivors are packed in place (`vpcompressd` of every
    /// array, written at or behind where it was read), so that the count's loop reads them in
    /// order: reading them through a list of indices instead saved a third as much, and
    /// testing them as they are made was slower than not testing at all.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(
        enable = "bmi1,bmi2,popcnt,avx2,avx512f,avx512vl,avx512bw,avx512bitalg,avx512vbmi2,avx512vpopcntdq"
    )]
    unsafe fn drop_dead(&self, batch: &mut Waiting<LAST_CAP>) {
        let test = DeadTest::<ROWS6>::new(self, self.last());
        let states = std::mem::take(&mut batch.len).min(LAST_CAP - 16);
        for at in (0..states).step_by(16) {
            let (c, r, l, _, valid) = batch.slice(at, states);
            // The survivors go back into the same arrays: `batch.len` <= `at`, so they land at
            // or behind the states just read, never on those not read yet.
            batch.append(valid & test.alive(c, r, l).0, c, r, l, None);
        }
    }

    /// Counts the completions of every waiting state of row `last` through the last six rows, and
    /// empties the batch. The states that surely have none are dropped first
    /// ([`Layout::drop_dead`]); each other state costs about 75 instructions and no branch:
    /// - the six rows' free squares in one vector (`vpsllvd`, `vpsrlvd`), widened to 64-bit lanes;
    /// - the open columns' positions as bytes (`vpcompressb` of 0, 1, 2, ...), and every row's
    ///   bits at those positions at once (`vpshufbitqmb`, a `pext` of eight lanes);
    /// - the gaps between neighbouring open columns as bytes (`vpsubb`, `vpminub`), packed into
    ///   the three conflict-table indices by `pext`;
    /// - six 768-bit table rows ANDed, three ORed, and `vpopcntq` into a running vector sum.
    ///
    /// The vector ports bound it (with 512-bit operations in flight, two of them take every
    /// vector instruction), so the table offsets are computed in general registers: 0.83-0.93x
    /// the time of computing them in a vector and reading them back (N=16, 17).
    #[cfg(target_arch = "x86_64")]
    #[target_feature(
        enable = "bmi1,bmi2,popcnt,avx2,avx512f,avx512vl,avx512bw,avx512bitalg,avx512vbmi2,avx512vpopcntdq"
    )]
    unsafe fn count_children6(&self, batch: &mut Waiting<LAST_CAP>, six: &Conflicts6) -> u64 {
        use std::arch::x86_64::*;
        let allowed: &[PermSet6; ALLOWED_LEN] = &crate::tail6::ALLOWED;
        let (first, second, middle) = (&*six.first, &*six.second, &*six.middle);
        let lanes = |l: &Lanes| _mm256_load_si256(l.0.as_ptr() as *const __m256i);
        let (reach, blocked) = (lanes(&self.six_reach), lanes(&self.six_blocked));
        let iota = _mm256_loadu_si256(IOTA.0.as_ptr() as *const __m256i);
        let beyond = _mm256_set1_epi8(63);
        let clip = _mm_set1_epi8(six.clip as i8);
        let one = _mm_set1_epi8(1);
        let board = self.board;
        let load = |set: &PermSet6| {
            let p = set.0.as_ptr();
            (_mm512_loadu_si512(p as *const __m512i), _mm256_load_si256(p.add(8) as *const __m256i))
        };
        let mut sum = _mm512_setzero_si512();
        self.drop_dead(batch);
        let children = std::mem::take(&mut batch.len).min(LAST_CAP);
        for i in 0..children {
            let (cols, right, left) = (batch.cols[i], batch.right[i], batch.left[i]);
            let q = |x: u32| _mm256_set1_epi32(x as i32);
            let taken = _mm256_or_si256(
                _mm256_or_si256(q(cols), blocked),
                _mm256_or_si256(
                    _mm256_sllv_epi32(q(right), reach),
                    _mm256_srlv_epi32(q(left), reach),
                ),
            );
            let rows = _mm512_cvtepu32_epi64(_mm256_xor_si256(taken, _mm256_set1_epi32(-1)));
            let open = !cols & board;
            // The open columns' positions in bytes 0..6; the other bytes are 63, a bit that is 0
            // in every widened row, so that each byte of `compressed` holds one row's six bits.
            let position = _mm256_mask_compress_epi8(beyond, open, iota);
            let low = _mm256_castsi256_si128(position);
            let compressed = _mm512_bitshuffle_epi64_mask(rows, _mm512_broadcastq_epi64(low));
            // The byte offset of each row's entry of `allowed`, row * 64 * 128 + free * 128, in
            // general registers: the vector ports are the busy ones.
            let offset = |i: usize| ((compressed >> (8 * i)) & 63) as usize * 128 + i * 64 * 128;
            // Byte i of `gap`: the gap between open columns i and i + 1, clipped, less one; byte
            // 1 of `mixed`: the same for columns 1 and 4. `pext` packs three such 3-bit digits
            // into each table index.
            let digits = |d: __m128i| _mm_sub_epi8(_mm_min_epu8(_mm_sub_epi8(d, low), clip), one);
            let gap = digits(_mm_srli_si128::<1>(low));
            let mixed = _mm_mask_blend_epi8(0b10, gap, digits(_mm_srli_si128::<3>(low)));
            let (gap, mixed) = (_mm_cvtsi128_si64(gap) as u64, _mm_cvtsi128_si64(mixed) as u64);
            let key = |k: u64| k as usize & (crate::tail6::TABLE_LEN - 1);
            let (f0, f1) = load(&first[key(_pext_u64(gap, 0x07_0707))]);
            let (s0, s1) = load(&second[key(_pext_u64(gap, 0x07_0707_0000))]);
            let (m0, m1) = load(&middle[key(_pext_u64(mixed, 0x07_0000_0707))]);
            let conflicts0 = _mm512_ternarylogic_epi64::<0xfe>(f0, s0, m0);
            let conflicts1 = _mm256_ternarylogic_epi64::<0xfe>(f1, s1, m1);
            // SAFETY: each offset is below 6 * 64 * 128, inside `allowed` (each byte masked to 63).
            let row = |i: usize| load(&*allowed.as_ptr().byte_add(offset(i)));
            let (a0, a1) = row(0);
            let mut alive0 = _mm512_andnot_si512(conflicts0, a0);
            let mut alive1 = _mm256_andnot_si256(conflicts1, a1);
            for i in 1..ROWS6 {
                let (a0, a1) = row(i);
                alive0 = _mm512_and_si512(alive0, a0);
                alive1 = _mm256_and_si256(alive1, a1);
            }
            let counts = _mm512_add_epi64(
                _mm512_popcnt_epi64(alive0),
                _mm512_zextsi256_si512(_mm256_popcnt_epi64(alive1)),
            );
            sum = _mm512_add_epi64(sum, counts);
        }
        _mm512_reduce_add_epi64(sum) as u64
    }

    /// The search with the six-row closed form, with no special instructions: for the tests.
    #[cfg(test)]
    fn count_portable6(&self, start: &State, six: &Conflicts6) -> Found {
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

    /// The main loop of the search from `start` (at least three rows above row `last`): every
    /// state of searched row `last - 1` is handed to `at_penultimate` with its masks and free
    /// squares.
    #[inline(always)]
    fn search<const ABOVE: usize>(
        &self,
        start: &State,
        found: &mut Found,
        mut at_penultimate: impl FnMut(&mut Found, u32, u32, u32, u32),
    ) {
        let last = self.last();
        let base = start.depth;
        let mut stack = [Frame::default(); 32];
        let (mut k, mut cols, mut right, mut left, mut free) =
            (base, start.cols, start.down_right, start.down_left, self.free(start));
        loop {
            if free == 0 {
                if k == base {
                    break;
                }
                k -= 1;
                let f = stack[k & SLOT];
                (cols, right, left, free) = (f.cols, f.right, f.left, f.free);
                continue;
            }
            let bit = free & free.wrapping_neg();
            free ^= bit;
            found.nodes += 1;
            let s = self.shift[k & SLOT];
            let c = cols | bit;
            let r = (right | bit) << s;
            let l = (left | bit) >> s;
            let next_free = !(c | r | l | self.blocked[(k + 1) & SLOT]);
            if k + ABOVE == last {
                at_penultimate(found, c, r, l, next_free);
                continue;
            }
            // The row after next, before its own predecessor's queen is known: a superset of what
            // it will have, so an empty one means a dead end now.
            let s2 = self.shift[(k + 1) & SLOT];
            let after_next = !(c | (r << s2) | (l >> s2) | self.blocked[(k + 2) & SLOT]);
            if (next_free != 0) & (after_next != 0) {
                stack[k & SLOT] = Frame { cols, right, left, free };
                k += 1;
                (cols, right, left, free) = (c, r, l, next_free);
            }
        }
    }

    #[inline(always)]
    fn count_body(
        &self,
        start: &State,
        rows_allow: impl Fn(u32, &Lanes, &Lanes, u32) -> PermSet + Copy,
    ) -> Found {
        let rows = self.rows;
        let base = start.depth;
        if rows < TAIL + 2 || base > self.last() {
            return Found { solutions: self.count_partial(start, rows), nodes: 0 };
        }
        let last = self.last();
        let (cols, right, left, free) =
            (start.cols, start.down_right, start.down_left, self.free(start));
        let mut pending = Pending::new();
        if base == last {
            self.queue(&mut pending, cols, right, left, free);
            return Found {
                solutions: self.flush(&mut pending, rows_allow),
                nodes: free.count_ones() as u64,
            };
        }
        let mut found = Found::default();
        if base + 1 == last {
            self.penultimate(&mut pending, &mut found, cols, right, left, free, rows_allow);
            found.solutions += self.flush(&mut pending, rows_allow);
            return found;
        }
        self.search::<2>(start, &mut found, |found, c, r, l, f| {
            self.penultimate(&mut pending, found, c, r, l, f, rows_allow)
        });
        found.solutions += self.flush(&mut pending, rows_allow);
        found
    }

    /// Queues every queen of searched row `last - 1` (free squares `free`), with the queens of
    /// row `last` that each leaves. A loop of its own, without the stack of the main search.
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    fn penultimate(
        &self,
        pending: &mut Pending,
        found: &mut Found,
        cols: u32,
        right: u32,
        left: u32,
        mut free: u32,
        rows_allow: impl Fn(u32, &Lanes, &Lanes, u32) -> PermSet + Copy,
    ) {
        let last = self.last();
        let s = self.shift[(last - 1) & SLOT];
        let blocked = self.blocked[last & SLOT];
        while free != 0 {
            let bit = free & free.wrapping_neg();
            free ^= bit;
            let (c, r, l) = (cols | bit, (right | bit) << s, (left | bit) >> s);
            let last_free = !(c | r | l | blocked);
            found.nodes += 1 + last_free.count_ones() as u64;
            if self.queue(pending, c, r, l, last_free) {
                found.solutions += self.flush(pending, rows_allow);
            }
        }
    }

    /// Queues the queens of row `last` (free squares `free`) of one state for their tails to be
    /// counted. Returns true when the queue should be flushed.
    ///
    /// Most such rows have one or two free squares, a few three or four: a loop over them would
    /// mispredict its exit almost every time, so four slots are written without a branch and the
    /// queue advances by the number actually used.
    #[inline(always)]
    fn queue(&self, pending: &mut Pending, cols: u32, right: u32, left: u32, free: u32) -> bool {
        let state = pending.states & (BATCH - 1);
        let above = &mut pending.above[state].0;
        for i in 0..LANES {
            let d = self.tail_reach.0[i];
            above[i] = !(cols | (right << d) | (left >> d) | self.tail_blocked.0[i]);
        }
        pending.open[state] = !cols & self.board;
        let mut rest = free;
        let start = pending.queens;
        for slot in 0..4 {
            let bit = rest & rest.wrapping_neg();
            rest ^= bit;
            pending.queen[(start + slot) & (QUEUE - 1)] = (bit, state as u32);
        }
        pending.queens = start + (free ^ rest).count_ones() as usize;
        while rest != 0 {
            let bit = rest & rest.wrapping_neg();
            rest ^= bit;
            pending.queen[pending.queens & (QUEUE - 1)] = (bit, state as u32);
            pending.queens += 1;
        }
        pending.states += 1;
        (pending.states == BATCH) | (pending.queens > QUEUE - 32)
    }

    /// Counts the completions of every queued queen of row `last` and empties the queue.
    #[inline(always)]
    fn flush(
        &self,
        pending: &mut Pending,
        rows_allow: impl Fn(u32, &Lanes, &Lanes, u32) -> PermSet + Copy,
    ) -> u64 {
        // Two passes: the rows' free squares rule out every permutation in about two tails of
        // three, so only the survivors, packed without a branch, pay for the diagonal test.
        let mut survivors = 0;
        for &(bit, state) in &pending.queen[..pending.queens.min(QUEUE)] {
            let state = state as usize & (BATCH - 1);
            let open = pending.open[state] ^ bit;
            let alive = rows_allow(bit, &pending.above[state], &self.tail_reach, open);
            pending.survivor[survivors & (QUEUE - 1)] = (alive, open);
            survivors += (alive != 0) as usize;
        }
        let mut solutions = 0;
        for &(alive, open) in &pending.survivor[..survivors.min(QUEUE)] {
            solutions += self.tail_conflicts.completions(open, alive);
        }
        pending.states = 0;
        pending.queens = 0;
        solutions
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

/// Whether the CPU has every feature that [`Layout::count_bmi`] is compiled for.
#[cfg(target_arch = "x86_64")]
#[inline]
fn has_bmi() -> bool {
    widest_build() >= 1
        && std::arch::is_x86_feature_detected!("bmi1")
        && std::arch::is_x86_feature_detected!("bmi2")
        && std::arch::is_x86_feature_detected!("popcnt")
        && std::arch::is_x86_feature_detected!("avx2")
}

/// The widest build that `NQ_SOLVER_BUILD` allows (read once): `portable` 0, `bmi` 1, unset or
/// `avx512` 2 (then the CPU decides). For comparing the builds on one machine.
#[cfg(target_arch = "x86_64")]
fn widest_build() -> u8 {
    static WIDEST: std::sync::OnceLock<u8> = std::sync::OnceLock::new();
    *WIDEST.get_or_init(|| match std::env::var("NQ_SOLVER_BUILD").as_deref() {
        Ok("portable") => 0,
        Ok("bmi") => 1,
        _ => 2,
    })
}

/// Whether the CPU has every feature that [`Layout::count_avx512`] is compiled for.
#[cfg(target_arch = "x86_64")]
#[inline]
fn has_avx512_six() -> bool {
    widest_build() >= 2
        && has_bmi()
        && std::arch::is_x86_feature_detected!("avx512f")
        && std::arch::is_x86_feature_detected!("avx512vl")
        && std::arch::is_x86_feature_detected!("avx512bw")
        && std::arch::is_x86_feature_detected!("avx512bitalg")
        && std::arch::is_x86_feature_detected!("avx512vbmi2")
        && std::arch::is_x86_feature_detected!("avx512vpopcntdq")
}

/// The bytes 0, 1, ..., 63: compressed by a column mask, the positions of its columns.
#[cfg(target_arch = "x86_64")]
#[repr(C, align(64))]
struct Iota([u8; 64]);

#[cfg(target_arch = "x86_64")]
static IOTA: Iota = {
    let mut bytes = [0; 64];
    let mut i = 0;
    while i < 64 {
        bytes[i] = i as u8;
        i += 1;
    }
    Iota(bytes)
};

// Batch sizes of the six-row search. A state of searched row `d` has at most as many free
// squares as there are open columns, one per searched row left: nine in row `last - 3`, eight in
// `last - 2`, seven in `last - 1`. Each row's arrays hold what waits before it is drained, what
// one drain of the row above adds, and one vector store past the end.

/// States of row `last - 3` that wait before they are expanded.
#[cfg(target_arch = "x86_64")]
const ABOVE3_BATCH: usize = 16;
#[cfg(target_arch = "x86_64")]
const ABOVE3_CAP: usize = ABOVE3_BATCH + 16;
/// States of row `last - 2` that wait before the batch moves down (more rows of `last - 3` are
/// expanded into it until it holds this many).
#[cfg(target_arch = "x86_64")]
const ABOVE2_BATCH: usize = 64;
#[cfg(target_arch = "x86_64")]
const ABOVE2_CAP: usize = ABOVE2_BATCH - 1 + ABOVE3_BATCH * (TAIL + 4) + 16;
/// States of row `last - 1` that wait before their children in row `last` are counted.
#[cfg(target_arch = "x86_64")]
const ABOVE1_BATCH: usize = 64;
#[cfg(target_arch = "x86_64")]
const ABOVE1_CAP: usize = ABOVE1_BATCH - 1 + (ABOVE2_CAP - 16) * (TAIL + 3) + 16;
/// States of row `last`: every child of the states of row `last - 1`, and one 512-bit load more.
#[cfg(target_arch = "x86_64")]
const LAST_CAP: usize = (ABOVE1_CAP - 16) * (TAIL + 2) + 16;

/// States of one searched row waiting in the six-row search: their masks and free squares, in
/// separate arrays so that a vector of children is stored at once.
#[cfg(target_arch = "x86_64")]
#[repr(C, align(64))]
struct Waiting<const CAP: usize> {
    cols: [u32; CAP],
    right: [u32; CAP],
    left: [u32; CAP],
    free: [u32; CAP],
    len: usize,
}

#[cfg(target_arch = "x86_64")]
impl<const CAP: usize> Waiting<CAP> {
    fn new() -> Self {
        Waiting { cols: [0; CAP], right: [0; CAP], left: [0; CAP], free: [0; CAP], len: 0 }
    }

    /// Adds one state (a job that starts in this row).
    fn push(&mut self, cols: u32, right: u32, left: u32, free: u32) {
        let at = self.len.min(CAP - 1);
        (self.cols[at], self.right[at], self.left[at], self.free[at]) = (cols, right, left, free);
        self.len += 1;
    }

    /// The sixteen states from index `at` of the first `states` (masks, free squares), and the
    /// lanes that hold one of them.
    #[inline]
    #[target_feature(enable = "avx512f,bmi2")]
    unsafe fn slice(
        &self,
        at: usize,
        states: usize,
    ) -> (Lanes16, Lanes16, Lanes16, Lanes16, Mask16) {
        use std::arch::x86_64::*;
        // SAFETY: `min` keeps the sixteen lanes inside the arrays (callers read below
        // `CAP - 16`, so it never moves them).
        let at = at.min(CAP - 16);
        let load = |a: &[u32; CAP]| _mm512_loadu_si512(a.as_ptr().add(at) as *const _);
        // (`bzhi` reads the low byte of its count only: hence the `min`.)
        let valid = _bzhi_u32(0xffff, states.saturating_sub(at).min(16) as u32) as Mask16;
        (load(&self.cols), load(&self.right), load(&self.left), load(&self.free), valid)
    }

    /// Appends the lanes of `some`, packed by `vpcompressd` (`free` too, if given). Packing
    /// within the same arrays is safe when the states are appended at or behind where they were
    /// read (see [`Layout::drop_dead`]).
    #[inline]
    #[target_feature(enable = "avx512f")]
    unsafe fn append(
        &mut self,
        some: Mask16,
        cols: Lanes16,
        right: Lanes16,
        left: Lanes16,
        free: Option<Lanes16>,
    ) {
        use std::arch::x86_64::*;
        // SAFETY: `min` keeps the sixteen lanes inside the arrays; every capacity leaves room
        // for all the states that can wait and one store more.
        let at = self.len.min(CAP - 16);
        let store = |a: &mut [u32; CAP], v: Lanes16| {
            _mm512_storeu_si512(
                a.as_mut_ptr().add(at) as *mut _,
                _mm512_maskz_compress_epi32(some, v),
            )
        };
        store(&mut self.cols, cols);
        store(&mut self.right, right);
        store(&mut self.left, left);
        if let Some(free) = free {
            store(&mut self.free, free);
        }
        self.len += some.count_ones() as usize;
    }
}

/// Sixteen states' masks, one per 32-bit lane, and a mask of sixteen lanes.
#[cfg(target_arch = "x86_64")]
type Lanes16 = std::arch::x86_64::__m512i;
#[cfg(target_arch = "x86_64")]
type Mask16 = std::arch::x86_64::__mmask16;

/// The six-row search's waiting states of rows `last - 2`, `last - 1` and `last`.
#[cfg(target_arch = "x86_64")]
struct Batch6 {
    above3: Waiting<ABOVE3_CAP>,
    above2: Waiting<ABOVE2_CAP>,
    above1: Waiting<ABOVE1_CAP>,
    last: Waiting<LAST_CAP>,
}

#[cfg(target_arch = "x86_64")]
impl Batch6 {
    fn new() -> Batch6 {
        Batch6 {
            above3: Waiting::new(),
            above2: Waiting::new(),
            above1: Waiting::new(),
            last: Waiting::new(),
        }
    }
}

/// A test that a state of searched row `first` has no completion for sure: one of the `ROWS`
/// rows from `first` down (to the bottom) has no free square, or an open column is free in none
/// of them. Sixteen states at once, their masks in the lanes of three vectors.
#[cfg(target_arch = "x86_64")]
struct DeadTest<const ROWS: usize> {
    /// Per row, the distance from row `first`, as a shift count.
    reach: [std::arch::x86_64::__m128i; ROWS],
    /// Per row, its squares taken by the border queens, in every lane.
    blocked: [std::arch::x86_64::__m512i; ROWS],
    board: std::arch::x86_64::__m512i,
}

#[cfg(target_arch = "x86_64")]
impl<const ROWS: usize> DeadTest<ROWS> {
    #[target_feature(enable = "avx512f")]
    unsafe fn new(layout: &Layout, first: usize) -> Self {
        use std::arch::x86_64::*;
        let distance = |j: usize| layout.row_of[first & SLOT] - layout.row_of[(first + j) & SLOT];
        DeadTest {
            reach: std::array::from_fn(|j| _mm_cvtsi32_si128(distance(j) as i32)),
            blocked: std::array::from_fn(|j| {
                _mm512_set1_epi32(layout.blocked[(first + j) & SLOT] as i32)
            }),
            board: _mm512_set1_epi32(layout.board as i32),
        }
    }

    /// The lanes whose state may have a completion, and every lane's free squares in row
    /// `first + 1`.
    #[inline]
    #[target_feature(enable = "avx512f")]
    unsafe fn alive(
        &self,
        cols: std::arch::x86_64::__m512i,
        right: std::arch::x86_64::__m512i,
        left: std::arch::x86_64::__m512i,
    ) -> (std::arch::x86_64::__mmask16, std::arch::x86_64::__m512i) {
        use std::arch::x86_64::*;
        let mut alive = !0;
        let (mut union, mut next) = (_mm512_setzero_si512(), _mm512_setzero_si512());
        for j in 0..ROWS {
            let (reach, blocked) = (self.reach[j], self.blocked[j]);
            let shifted =
                _mm512_or_si512(_mm512_sll_epi32(right, reach), _mm512_srl_epi32(left, reach));
            let free = _mm512_ternarylogic_epi32::<0x01>(cols, shifted, blocked);
            alive &= _mm512_test_epi32_mask(free, free);
            union = _mm512_or_si512(union, free);
            if j == 1 {
                next = free;
            }
        }
        alive &= _mm512_cmpeq_epi32_mask(union, _mm512_andnot_si512(cols, self.board));
        (alive, next)
    }
}

/// One value per tail row, padded to a vector of eight so that all rows are computed at once.
#[derive(Debug, Clone, Copy)]
#[repr(C, align(32))]
struct Lanes([u32; LANES]);

const LANES: usize = 8;

/// States in searched row `last` and their queens, waiting for the tail count.
struct Pending {
    /// Per state: the squares of each tail row that the queens above leave free.
    above: [Lanes; BATCH],
    /// Per state: the open columns.
    open: [u32; BATCH],
    states: usize,
    /// Per queued queen: its column bit and its state.
    queen: [(u32, u32); QUEUE],
    queens: usize,
    /// Per queued queen whose tail rows allow some permutation: those permutations, open columns.
    survivor: [(PermSet, u32); QUEUE],
}

/// States per batch, and queens the queue holds (a power of two above 4 per state plus one row).
const BATCH: usize = 64;
const QUEUE: usize = 512;

impl Pending {
    fn new() -> Pending {
        Pending {
            above: [Lanes([0; LANES]); BATCH],
            open: [0; BATCH],
            states: 0,
            queen: [(0, 0); QUEUE],
            queens: 0,
            survivor: [(0, 0); QUEUE],
        }
    }
}

/// A saved search level: the masks of a row and the columns still to try in it.
#[derive(Debug, Clone, Copy, Default)]
struct Frame {
    cols: u32,
    right: u32,
    left: u32,
    free: u32,
}

impl Layout {
    /// Number of ways to place queens in the next `extra` searched rows (counting a placement that
    /// reaches the last row early once), matching the leaves of [`Layout::expand`].
    pub fn count_partial(&self, state: &State, extra: usize) -> u64 {
        if extra == 0 || state.depth == self.rows {
            return 1;
        }
        let mut free = self.free(state);
        let mut total = 0;
        while free != 0 {
            let bit = free & free.wrapping_neg();
            free ^= bit;
            total += self.count_partial(&self.advance(state, bit), extra - 1);
        }
        total
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{job_list, SplitParams};

    /// Completions by plain recursion over the layout, with no tail and no batching.
    fn plain(layout: &Layout, state: &State) -> u64 {
        layout.count_partial(state, layout.rows())
    }

    #[test]
    fn every_start_depth_and_every_build_match_a_plain_count() {
        for n in [9u32, 11, 12] {
            for job in job_list(n, &SplitParams::with_target(1)).unwrap().jobs {
                let (layout, start) = job.prepare().unwrap();
                // Start the search at every depth: above the tail, in the row above it, in it.
                let mut states = vec![start];
                for _ in start.depth..layout.rows() {
                    let mut deeper = Vec::new();
                    for state in &states {
                        let mut out = Vec::new();
                        layout.expand(state, 1, &mut out, &mut Vec::new());
                        deeper.extend(out.into_iter().map(|(s, _)| s));
                    }
                    for state in states.iter().take(40) {
                        let want = plain(&layout, state);
                        assert_eq!(
                            layout.count(state).solutions,
                            want,
                            "n={n} {job:?} depth {}",
                            state.depth
                        );
                        assert_eq!(
                            layout.count_body(state, rows_allow_portable).solutions,
                            want,
                            "portable, n={n}"
                        );
                        #[cfg(target_arch = "x86_64")]
                        if has_bmi() {
                            // SAFETY: the CPU supports the features (checked just above).
                            let bmi = unsafe { layout.count_bmi(state) };
                            assert_eq!(bmi.solutions, want, "BMI, n={n}");
                        }
                        let (Some(six), true) = (&layout.six, state.depth <= layout.last()) else {
                            continue;
                        };
                        // The six-row builds: the same solutions, and the same nodes as the
                        // five-row build where it has rows enough for its tail (with fewer, it
                        // counts without placing).
                        let five = layout.count_body(state, rows_allow_portable);
                        let expected = (want, (layout.rows() >= TAIL + 2).then_some(five.nodes));
                        let found = |f: Found| (f.solutions, expected.1.map(|_| f.nodes));
                        let portable6 = layout.count_portable6(state, six);
                        assert_eq!(found(portable6), expected, "six rows, portable, n={n}");
                        #[cfg(target_arch = "x86_64")]
                        if has_avx512_six() {
                            // SAFETY: the CPU supports the features (checked just above).
                            let fast6 = unsafe { layout.count_avx512(state, six) };
                            assert_eq!(found(fast6), expected, "six rows, AVX-512, n={n}");
                        }
                    }
                    states = deeper;
                }
            }
        }
    }

    /// Whole jobs, big enough that the six-row search's batches fill and drain many times: the
    /// same solutions and nodes as the five-row build, job by job.
    #[test]
    #[cfg(target_arch = "x86_64")]
    fn six_row_batches_match_the_five_row_build_on_whole_jobs() {
        if !has_avx512_six() {
            eprintln!(
                "no AVX-512 on this CPU: the six-row build is checked by the portable form only"
            );
            return;
        }
        for n in [13u32, 14, 15] {
            let (mut six_total, mut five_total, mut batched) = (0, 0, 0);
            for job in job_list(n, &SplitParams::with_target(1)).unwrap().jobs {
                let (layout, start) = job.prepare().unwrap();
                let Some(six) = layout.six.as_deref() else { continue };
                // SAFETY: the CPU supports the features (checked above).
                let fast6 = unsafe { layout.count_avx512(&start, six) };
                let five = layout.count_body(&start, rows_allow_portable);
                assert_eq!(fast6, five, "n={n} {job:?}");
                six_total += fast6.solutions * job.weight as u64;
                five_total += five.solutions * job.weight as u64;
                // A few tens of nodes per state of row `last - 3`: above 1,000, the batch of
                // that row (16 states) has drained at least twice.
                batched += (fast6.nodes > 1_000) as u32;
            }
            assert_eq!(six_total, five_total);
            assert!(batched > 10, "n={n}: too few big jobs ({batched}) to fill the batches");
        }
    }
}
