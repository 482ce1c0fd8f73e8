//! The AVX2 build: the batched six-row search of [`super::avx512`], eight lanes at a time, for
//! CPUs without AVX-512. Compiled for AVX2, BMI1 and POPCNT only: no `pext` or `pdep`, which
//! AMD's family 0x17 (Zen 1, Zen+, Zen 2) runs in microcode, tens to hundreds of cycles each.
//!
//! The states wait in the same arrays, drained in the same order ([`super::waiting`]); what
//! AVX-512 does in one instruction is done here with a few:
//! - packing the live lanes (`vpcompressd`): a permutation (`vpermd`) from a table of 256
//!   entries, one per 8-bit lane mask, each the eight lane indices as nibbles of a `u32` (1 KiB),
//!   unpacked by `vpsrlvd`; the eight lanes are stored whole and the length advanced by the
//!   number of live ones;
//! - population counts (`vpopcntd`): the queens placed in a step are its live lanes (a scalar
//!   `popcnt` of the lane mask); the closed-form node count and the six-row count take per-byte
//!   counts from a nibble table (`vpshufb`), summed by `vpmaddubsw`/`vpmaddwd` or `vpsadbw`;
//!   "one free square" is `x & (x - 1) == 0`;
//! - the six rows gathered onto the open columns (`vpcompressb`, `vpshufbitqmb`): the other way
//!   round, each open column's bit moved to the sign of every row's lane (`vpsllvd` by a count
//!   from a table) and collected by `vmovmskps`, the rows in which that column is free, which
//!   index a table by column ([`crate::tail6::BY_COLUMN`]) instead of by row; the gaps between
//!   the open columns come from `tzcnt`;
//! - the forced squares' columns and diagonals (`vpternlogd` per pair of rows): carried down the
//!   rows and back up, four shifts per row.

use super::waiting::{Batch6, Shifts, Waiting, ABOVE1_BATCH, ABOVE1_CAP, ABOVE2_BATCH, LAST_CAP};
use crate::search::{Found, Lanes, Layout, State, SLOT};
use crate::tail6::{Conflicts6, PermSet6, ROWS6, TABLE_LEN};
use std::arch::x86_64::*;

cpu_features!($ avx2 = ["bmi1", "popcnt", "avx2"]);

/// Eight states' masks, one per 32-bit lane.
type Lanes8 = __m256i;

impl Layout {
    avx2! {
        /// Counts the completions of `start` with the six-row closed form, eight lanes at a time:
        /// depth first down to row `last - 4`, whose states are expanded row by row in batches
        /// ([`Layout::drain8`]) and whose descendants in row `last` are counted in closed form
        /// ([`Layout::count_children8`]). `six` is [`Layout::six_for`] of `start`.
        ///
        /// # Safety
        ///
        /// Compiled for [`FEATURES`]: call it only where the CPU has them ([`detected`]), as
        /// [`crate::search::Detected`] does. On a CPU without them it is undefined behaviour.
        pub(in crate::search) fn count_avx2(&self, start: &State, six: &Conflicts6) -> Found {
            let mut batch = Batch6::take();
            let found = self.count_batched(start, &mut batch, |batch, found, all| {
                self.drain8(batch, six, found, all)
            });
            Batch6::give_back(batch);
            found
        }
    }

    avx2! {
        /// Moves the waiting states down the last rows, as [`Layout::drain6`] does: rows
        /// `last - 4` and `last - 3` always, row `last - 2` once enough wait, row `last - 1` (its
        /// dead states dropped) and the count of row `last` (its dead states dropped first) once
        /// enough wait there; every row when `all`.
        fn drain8(&self, batch: &mut Batch6, six: &Conflicts6, found: &mut Found, all: bool) {
            let last = self.last();
            found.nodes +=
                self.expand_all8::<true, _, _>(last - 4, &mut batch.above4, &mut batch.above3);
            found.nodes +=
                self.expand_all8::<true, _, _>(last - 3, &mut batch.above3, &mut batch.above2);
            if !all && batch.above2.len < ABOVE2_BATCH {
                return;
            }
            found.nodes +=
                self.expand_all8::<false, _, _>(last - 2, &mut batch.above2, &mut batch.above1);
            if all || batch.above1.len >= ABOVE1_BATCH {
                found.nodes += self.expand_last8(batch);
                self.drop_dead8(&mut batch.last);
                found.solutions += self.count_children8(&mut batch.last, six);
            }
        }
    }

    avx2! {
        /// Appends to `to` the states of searched row `depth + 1` that the queens of the states of
        /// `from` (in row `depth`) give, eight states at a time, a queen per lane per step, as
        /// [`Layout::expand_all`] does sixteen. Returns the nodes (the queens placed: the live
        /// lanes of each step). Empties `from`.
        fn expand_all8<const PRUNE: bool, const FROM: usize, const TO: usize>(
            &self,
            depth: usize,
            from: &mut Waiting<FROM>,
            to: &mut Waiting<TO>,
        ) -> u64 {
            let shift = _mm_cvtsi32_si128(self.shift[depth & SLOT] as i32);
            let open = _mm256_set1_epi32(!self.blocked[(depth + 1) & SLOT] as i32);
            let next = _mm_cvtsi32_si128(self.shift[(depth + 1) & SLOT] as i32);
            let open_after = _mm256_set1_epi32(!self.blocked[(depth + 2) & SLOT] as i32);
            let zero = _mm256_setzero_si256();
            let states = std::mem::take(&mut from.len).min(FROM - 16);
            let mut nodes = 0;
            for at in (0..states).step_by(8) {
                let (c, r, l, f, valid) = from.slice8(at, states);
                let mut rest = _mm256_and_si256(valid, f);
                loop {
                    let some = !zero_lanes(rest) & 0xff;
                    if some == 0 {
                        break;
                    }
                    nodes += some.count_ones() as u64;
                    let bit = _mm256_and_si256(rest, _mm256_sub_epi32(zero, rest));
                    rest = _mm256_xor_si256(rest, bit);
                    let cc = _mm256_or_si256(c, bit);
                    let rr = _mm256_sll_epi32(_mm256_or_si256(r, bit), shift);
                    let ll = _mm256_srl_epi32(_mm256_or_si256(l, bit), shift);
                    let mut ff = free_of(cc, rr, ll, open);
                    if PRUNE {
                        let (r2, l2) = (_mm256_sll_epi32(rr, next), _mm256_srl_epi32(ll, next));
                        let after = free_of(cc, r2, l2, open_after);
                        ff = _mm256_andnot_si256(_mm256_cmpeq_epi32(after, zero), ff);
                    }
                    // A child with no free square places no queen and has no completion.
                    to.append8(some & !zero_lanes(ff), cc, rr, ll, Some(ff));
                }
            }
            nodes
        }
    }

    avx2! {
        /// Turns the waiting states of row `last - 1` into the states of row `last` that their
        /// queens give, eight states at a time, and returns the nodes, as [`Layout::expand_last`]
        /// does sixteen: the dead states dropped first ([`DeadTest8::alive`]), the nodes of every
        /// state in closed form, the live states packed, then their children made.
        fn expand_last8(&self, batch: &mut Batch6) -> u64 {
            let test = DeadTest8::<{ ROWS6 + 1 }>::new(self, self.last() - 1);
            let d = test.shifts.reach[1];
            let from = &mut batch.above1;
            let states = std::mem::take(&mut from.len).min(ABOVE1_CAP - 16);
            let mut nodes = _mm256_setzero_si256();
            for at in (0..states).step_by(8) {
                let (c, r, l, f, valid) = from.slice8(at, states);
                let f = _mm256_and_si256(f, valid);
                let (alive, below) = test.alive(c, r, l);
                // |F| + |F||B| - |F & B| - |F & (B >> d)| - |F & (B << d)|, per lane: the queens
                // of row `last - 1` and those of row `last` below each (see `expand_last`).
                let queens = lane_sums(byte_counts(f));
                let lost = _mm256_add_epi8(
                    byte_counts(_mm256_and_si256(f, below)),
                    _mm256_add_epi8(
                        byte_counts(_mm256_and_si256(f, _mm256_srl_epi32(below, d))),
                        byte_counts(_mm256_and_si256(f, _mm256_sll_epi32(below, d))),
                    ),
                );
                let these = _mm256_sub_epi32(
                    _mm256_mullo_epi32(queens, lane_sums(byte_counts(below))),
                    lane_sums(lost),
                );
                nodes = _mm256_add_epi32(nodes, _mm256_add_epi32(queens, these));
                // The live states go back into the same arrays, packed (as in `drop_dead8`).
                from.append8(lanes_of(valid) & alive, c, r, l, Some(f));
            }
            let (from, to) = (&batch.above1, &mut batch.last);
            let live = from.len;
            let zero = _mm256_setzero_si256();
            for at in (0..live).step_by(8) {
                let (c, r, l, f, valid) = from.slice8(at, live);
                let mut rest = _mm256_and_si256(valid, f);
                loop {
                    let some = !zero_lanes(rest) & 0xff;
                    if some == 0 {
                        break;
                    }
                    let bit = _mm256_and_si256(rest, _mm256_sub_epi32(zero, rest));
                    rest = _mm256_xor_si256(rest, bit);
                    let rr = _mm256_sll_epi32(_mm256_or_si256(r, bit), d);
                    let ll = _mm256_srl_epi32(_mm256_or_si256(l, bit), d);
                    to.append8(some, _mm256_or_si256(c, bit), rr, ll, None);
                }
            }
            batch.above1.len = 0;
            sum_lanes(nodes)
        }
    }

    avx2! {
        /// Drops from the waiting states of row `last` those that surely have no completion, and
        /// packs the others to the front of the arrays, as [`Layout::drop_dead`] does: the plain
        /// test over the six rows, then the forced squares over what it leaves.
        fn drop_dead8(&self, batch: &mut Waiting<LAST_CAP>) {
            let test = DeadTest8::<ROWS6>::new(self, self.last());
            let states = std::mem::take(&mut batch.len).min(LAST_CAP - 16);
            for at in (0..states).step_by(8) {
                let (c, r, l, _, valid) = batch.slice8(at, states);
                // `batch.len` <= `at`: the survivors land at or behind the states just read.
                batch.append8(lanes_of(valid) & test.alive(c, r, l).0, c, r, l, None);
            }
            let plain = std::mem::take(&mut batch.len);
            for at in (0..plain).step_by(8) {
                let (c, r, l, _, valid) = batch.slice8(at, plain);
                batch.append8(lanes_of(valid) & test.alive_forced(c, r, l), c, r, l, None);
            }
        }
    }

    avx2! {
        /// Counts the completions of every waiting state of row `last` through the last six rows,
        /// and empties the batch, as [`Layout::count_children6`] does with AVX-512. Per state:
        /// the six rows' taken squares in one vector; the six open columns' positions (`tzcnt`);
        /// for each open column, the rows in which it is free (its bit shifted to every lane's
        /// sign, `vmovmskps`), which index [`crate::tail6::BY_COLUMN`]; the gaps between the
        /// columns index the three conflict tables; six 768-bit entries ANDed (three vectors
        /// each), three ORed, and the bits counted from a nibble table into a running sum.
        fn count_children8(&self, batch: &mut Waiting<LAST_CAP>, six: &Conflicts6) -> u64 {
            let by_column: &[[PermSet6; 64]; ROWS6] = &crate::tail6::BY_COLUMN;
            let (first, second, middle) = (&*six.first, &*six.second, &*six.middle);
            // SAFETY: `Lanes` is eight `u32`, aligned to 32 bytes.
            let lanes = |l: &Lanes| unsafe { _mm256_load_si256(l.0.as_ptr() as *const __m256i) };
            let (reach, blocked) = (lanes(&self.six_reach), lanes(&self.six_blocked));
            // SAFETY: a `PermSet6` is twelve `u64` aligned to 128 bytes: three aligned vectors.
            let load = |set: &PermSet6| unsafe {
                let p = set.0.as_ptr() as *const __m256i;
                [_mm256_load_si256(p), _mm256_load_si256(p.add(1)), _mm256_load_si256(p.add(2))]
            };
            let (board, clip) = (self.board, six.clip);
            let zero = _mm256_setzero_si256();
            let six_rows = _mm256_setr_epi32(-1, -1, -1, -1, -1, -1, 0, 0);
            let mut sum = zero;
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
                // The free squares of the six rows (lanes 6 and 7 left empty).
                let free = _mm256_andnot_si256(taken, six_rows);
                let mut rest = !cols & board;
                let column: [u32; ROWS6] = std::array::from_fn(|_| {
                    let c = rest.trailing_zeros() & 31;
                    rest &= rest.wrapping_sub(1);
                    c
                });
                // The rows in which open column `k` is free.
                // The shift counts come from a table (`vpsllvd` with a memory operand): an `xmm`
                // count would cost a move from a general register and a second micro-operation,
                // both on the port that the other shuffles need.
                let rows_free = |k: usize| {
                    // SAFETY: `column[k]` is below 32, and each entry is 32 bytes, aligned.
                    let count = unsafe {
                        _mm256_load_si256(TO_SIGN.0.as_ptr().add(column[k] as usize) as *const __m256i)
                    };
                    let at_sign = _mm256_castsi256_ps(_mm256_sllv_epi32(free, count));
                    _mm256_movemask_ps(at_sign) as usize & 63
                };
                let mut alive = load(&by_column[0][rows_free(0)]);
                for k in 1..ROWS6 {
                    let entry = load(&by_column[k][rows_free(k)]);
                    alive = std::array::from_fn(|w| _mm256_and_si256(alive[w], entry[w]));
                }
                // The gap between open columns `a` and `b`, clipped, less one: a 3-bit digit.
                let gap = |a: usize, b: usize| (column[b] - column[a]).min(clip) - 1;
                let index = |x: u32, y: u32, z: u32| (x | y << 3 | z << 6) as usize & (TABLE_LEN - 1);
                let f = load(&first[index(gap(0, 1), gap(1, 2), gap(2, 3))]);
                let s = load(&second[index(gap(2, 3), gap(3, 4), gap(4, 5))]);
                let m = load(&middle[index(gap(0, 1), gap(1, 4), gap(4, 5))]);
                let mut counts = zero;
                for w in 0..3 {
                    let conflicts = _mm256_or_si256(_mm256_or_si256(f[w], s[w]), m[w]);
                    let left = _mm256_andnot_si256(conflicts, alive[w]);
                    counts = _mm256_add_epi8(counts, byte_counts(left));
                }
                sum = _mm256_add_epi64(sum, _mm256_sad_epu8(counts, zero));
            }
            let (low, high) = (_mm256_castsi256_si128(sum), _mm256_extracti128_si256::<1>(sum));
            let half = _mm_add_epi64(low, high);
            (_mm_cvtsi128_si64(half) + _mm_extract_epi64::<1>(half)) as u64
        }
    }
}

impl<const CAP: usize> Waiting<CAP> {
    avx2! {
        /// The eight states from index `at` of the first `states` (masks, free squares), and the
        /// lanes that hold one of them (all ones in those lanes).
        #[inline]
        fn slice8(&self, at: usize, states: usize) -> (Lanes8, Lanes8, Lanes8, Lanes8, Lanes8) {
            // `min` keeps the eight lanes inside the arrays (callers read below `CAP - 16`, so it
            // never moves them).
            let at = at.min(CAP - 8);
            // SAFETY: lanes `at..at + 8` are inside the array (above).
            let load = |a: &[u32; CAP]| unsafe {
                _mm256_loadu_si256(a.as_ptr().add(at) as *const __m256i)
            };
            let held = _mm256_set1_epi32(states.saturating_sub(at).min(8) as i32);
            let valid = _mm256_cmpgt_epi32(held, _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
            (load(&self.cols), load(&self.right), load(&self.left), load(&self.free), valid)
        }
    }

    avx2! {
        /// Appends the lanes of `some` (bit `i` for lane `i`), packed by a permutation from
        /// [`PACK`] (`free` too, if given). Packing within the same arrays is safe when the states
        /// are appended at or behind where they were read.
        #[inline]
        fn append8(
            &mut self,
            some: u32,
            cols: Lanes8,
            right: Lanes8,
            left: Lanes8,
            free: Option<Lanes8>,
        ) {
            // `min` keeps the eight lanes inside the arrays; every capacity leaves room for all
            // the states that can wait and one store more.
            let at = self.len.min(CAP - 8);
            let nibbles = _mm256_set1_epi32(PACK[some as usize & 255] as i32);
            let index = _mm256_srlv_epi32(nibbles, _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28));
            let store = |a: &mut [u32; CAP], v: Lanes8| {
                let packed = _mm256_permutevar8x32_epi32(v, index);
                // SAFETY: lanes `at..at + 8` are inside the array (above).
                unsafe { _mm256_storeu_si256(a.as_mut_ptr().add(at) as *mut __m256i, packed) }
            };
            store(&mut self.cols, cols);
            store(&mut self.right, right);
            store(&mut self.left, left);
            if let Some(free) = free {
                store(&mut self.free, free);
            }
            self.len += (some & 255).count_ones() as usize;
        }
    }
}

/// `TO_SIGN.0[c]`: the shift count that moves bit `c` of a lane to its sign, in every lane.
#[repr(C, align(32))]
struct ToSign([[u32; 8]; 32]);

static TO_SIGN: ToSign = {
    let mut table = [[0; 8]; 32];
    let mut c = 0;
    while c < 32 {
        table[c] = [31 - c as u32; 8];
        c += 1;
    }
    ToSign(table)
};

/// `PACK[mask]`: the indices of the lanes set in the 8-bit `mask`, in order, one per nibble from
/// the lowest (the rest 0): the permutation that moves those lanes to the front.
static PACK: [u32; 256] = {
    let mut table = [0; 256];
    let mut mask = 0;
    while mask < 256 {
        let (mut lane, mut packed) = (0, 0);
        while lane < 8 {
            if mask >> lane & 1 != 0 {
                table[mask] |= (lane as u32) << (4 * packed);
                packed += 1;
            }
            lane += 1;
        }
        mask += 1;
    }
    table
};

avx2! {
    /// The squares of `open` that `cols`, `right` and `left` leave free.
    #[inline]
    fn free_of(cols: Lanes8, right: Lanes8, left: Lanes8, open: Lanes8) -> Lanes8 {
        _mm256_andnot_si256(_mm256_or_si256(_mm256_or_si256(cols, right), left), open)
    }
}

avx2! {
    /// Bit `i` set where lane `i` of `x` is zero.
    #[inline]
    fn zero_lanes(x: Lanes8) -> u32 {
        let zero = _mm256_cmpeq_epi32(x, _mm256_setzero_si256());
        _mm256_movemask_ps(_mm256_castsi256_ps(zero)) as u32
    }
}

avx2! {
    /// Bit `i` set where lane `i` of the lane mask `mask` is all ones.
    #[inline]
    fn lanes_of(mask: Lanes8) -> u32 {
        _mm256_movemask_ps(_mm256_castsi256_ps(mask)) as u32
    }
}

avx2! {
    /// Each byte's number of set bits, from a table of the sixteen nibbles (`vpshufb`).
    #[inline]
    fn byte_counts(x: Lanes8) -> Lanes8 {
        let table = _mm256_setr_epi8(
            0, 1, 1, 2, 1, 2, 2, 3, 1, 2, 2, 3, 2, 3, 3, 4, 0, 1, 1, 2, 1, 2, 2, 3, 1, 2, 2, 3, 2,
            3, 3, 4,
        );
        let low = _mm256_set1_epi8(0x0f);
        let high = _mm256_and_si256(_mm256_srli_epi16::<4>(x), low);
        let low = _mm256_and_si256(x, low);
        _mm256_add_epi8(_mm256_shuffle_epi8(table, low), _mm256_shuffle_epi8(table, high))
    }
}

avx2! {
    /// The sum of each 32-bit lane's four bytes (each below 128).
    #[inline]
    fn lane_sums(bytes: Lanes8) -> Lanes8 {
        let pairs = _mm256_maddubs_epi16(bytes, _mm256_set1_epi8(1));
        _mm256_madd_epi16(pairs, _mm256_set1_epi16(1))
    }
}

avx2! {
    /// The sum of the eight lanes.
    #[inline]
    fn sum_lanes(x: Lanes8) -> u64 {
        let half = _mm_add_epi32(_mm256_castsi256_si128(x), _mm256_extracti128_si256::<1>(x));
        let quarter = _mm_add_epi32(half, _mm_unpackhi_epi64(half, half));
        let one = _mm_add_epi32(quarter, _mm_shuffle_epi32::<0b01>(quarter));
        _mm_cvtsi128_si32(one) as u32 as u64
    }
}

/// The test of [`super::avx512`]'s `DeadTest`, eight states at a time: a state of searched row
/// `first` surely has no completion when one of the `ROWS` rows from `first` down has no free
/// square, or an open column is free in none of them ([`DeadTest8::alive`]; in
/// [`DeadTest8::alive_forced`] after the rows with one free square have taken their column and
/// diagonals from the others).
struct DeadTest8<const ROWS: usize> {
    /// The rows' distances, as shift counts.
    shifts: Shifts<ROWS>,
    /// Per row, the squares of the board that the border queens leave, in every lane.
    open: [Lanes8; ROWS],
    board: Lanes8,
}

impl<const ROWS: usize> DeadTest8<ROWS> {
    avx2! {
        /// The test of the `ROWS` rows from searched row `first` down.
        fn new(layout: &Layout, first: usize) -> Self {
            DeadTest8 {
                shifts: Shifts::new(layout, first),
                open: std::array::from_fn(|j| {
                    _mm256_set1_epi32(!layout.blocked[(first + j) & SLOT] as i32)
                }),
                board: _mm256_set1_epi32(layout.board as i32),
            }
        }
    }

    avx2! {
        /// The lanes (bits) whose state may have a completion, and every lane's free squares in
        /// row `first + 1`.
        #[inline]
        fn alive(&self, cols: Lanes8, right: Lanes8, left: Lanes8) -> (u32, Lanes8) {
            let free = self.free(cols, right, left);
            (self.covered(cols, &free), free[1 % ROWS])
        }
    }

    avx2! {
        /// The lanes (bits) whose state may have a completion, by the stronger test: a row with
        /// one free square must hold its queen there, so that square's column and diagonals are
        /// taken from every other row before the rows are tested.
        #[inline]
        fn alive_forced(&self, cols: Lanes8, right: Lanes8, left: Lanes8) -> u32 {
            let free = self.free(cols, right, left);
            let (zero, ones) = (_mm256_setzero_si256(), _mm256_set1_epi32(-1));
            let forced: [Lanes8; ROWS] = std::array::from_fn(|i| {
                let rest = _mm256_and_si256(free[i], _mm256_add_epi32(free[i], ones));
                _mm256_and_si256(free[i], _mm256_cmpeq_epi32(rest, zero))
            });
            // What the forced squares of the rows above row `j` take from it, carried down row by
            // row (the rows' distances grow with their index, so the shifts compose), and likewise
            // from below: four shifts per row instead of two per pair of rows.
            let mut taken = [zero; ROWS];
            let (mut column, mut rising, mut falling) = (zero, zero, zero);
            for j in 1..ROWS {
                let d = self.shifts.apart[j - 1][j];
                column = _mm256_or_si256(column, forced[j - 1]);
                rising = _mm256_sll_epi32(_mm256_or_si256(rising, forced[j - 1]), d);
                falling = _mm256_srl_epi32(_mm256_or_si256(falling, forced[j - 1]), d);
                taken[j] = _mm256_or_si256(column, _mm256_or_si256(rising, falling));
            }
            let (mut column, mut rising, mut falling) = (zero, zero, zero);
            for j in (0..ROWS - 1).rev() {
                let d = self.shifts.apart[j][j + 1];
                column = _mm256_or_si256(column, forced[j + 1]);
                rising = _mm256_sll_epi32(_mm256_or_si256(rising, forced[j + 1]), d);
                falling = _mm256_srl_epi32(_mm256_or_si256(falling, forced[j + 1]), d);
                let below = _mm256_or_si256(column, _mm256_or_si256(rising, falling));
                taken[j] = _mm256_or_si256(taken[j], below);
            }
            let left: [Lanes8; ROWS] =
                std::array::from_fn(|j| _mm256_andnot_si256(taken[j], free[j]));
            self.covered(cols, &left)
        }
    }

    avx2! {
        /// The lanes (bits) in which every row has a free square and every open column is free
        /// in some row.
        #[inline]
        fn covered(&self, cols: Lanes8, rows: &[Lanes8; ROWS]) -> u32 {
            let zero = _mm256_setzero_si256();
            let (mut empty, mut union) = (zero, zero);
            for &row in rows {
                empty = _mm256_or_si256(empty, _mm256_cmpeq_epi32(row, zero));
                union = _mm256_or_si256(union, row);
            }
            let all = _mm256_cmpeq_epi32(union, _mm256_andnot_si256(cols, self.board));
            lanes_of(_mm256_andnot_si256(empty, all))
        }
    }

    avx2! {
        /// Every lane's free squares in each of the `ROWS` rows.
        #[inline]
        fn free(&self, cols: Lanes8, right: Lanes8, left: Lanes8) -> [Lanes8; ROWS] {
            std::array::from_fn(|j| {
                let right = _mm256_sll_epi32(right, self.shifts.reach[j]);
                free_of(cols, right, _mm256_srl_epi32(left, self.shifts.reach[j]), self.open[j])
            })
        }
    }
}
