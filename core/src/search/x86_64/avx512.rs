//! The AVX-512 build: the six-row closed form ([`crate::tail6`]), with the four rows above it
//! expanded in batches, sixteen states at a time, instead of searched depth first. Compiled for
//! AVX-512 (F, VL, BW, BITALG, VBMI2, VPOPCNTDQ) and the BMI2/AVX2 build's features.

use super::waiting::{Batch6, Shifts, Waiting, ABOVE1_BATCH, ABOVE1_CAP, ABOVE2_BATCH, LAST_CAP};
use crate::breakdown::{self, Event, Part};
use crate::search::{Found, Lanes, Layout, State, SLOT};
use crate::tail6::{Conflicts6, PermSet6, ALLOWED_LEN, ROWS6};
use std::arch::x86_64::*;

// A superset of `bmi2::FEATURES` (a unit test checks it): where this build is detected, the
// dispatch may run the BMI2/AVX2 build for the searches that this one cannot take.
cpu_features!($ avx512 = [
    "bmi1",
    "bmi2",
    "popcnt",
    "avx2",
    "avx512f",
    "avx512vl",
    "avx512bw",
    "avx512bitalg",
    "avx512vbmi2",
    "avx512vpopcntdq",
]);

impl Layout {
    avx512! {
        /// Counts the completions of `start` with the six-row closed form: depth first down to row
        /// `last - 4`, whose states are expanded row by row in batches ([`Layout::drain6`]) and
        /// whose descendants in row `last` are counted in closed form
        /// ([`Layout::count_children6`]). `six` is [`Layout::six_for`] of `start`.
        ///
        /// # Safety
        ///
        /// Compiled for [`FEATURES`]: call it only where the CPU has them ([`detected`]), as
        /// [`crate::search::Detected`] does. On a CPU without them it is undefined behaviour.
        pub(in crate::search) fn count_avx512(&self, start: &State, six: &Conflicts6) -> Found {
            let started = breakdown::start();
            let mut batch = Batch6::take();
            let found = self.count_batched(start, &mut batch, |batch, found, all| {
                self.drain6(batch, six, found, all)
            });
            Batch6::give_back(batch);
            breakdown::stop(Part::Total, started);
            found
        }
    }

    avx512! {
        /// Moves the waiting states down the last rows: those of rows `last - 4` and `last - 3` to
        /// row `last - 2` always, those of row `last - 2` to row `last - 1` once enough wait, and
        /// those of row `last - 1` to row `last`, dropping the dead ones there and counting the
        /// others, once enough wait there (every row when `all`, at the end of the search). Each
        /// row is expanded sixteen states at a time ([`Layout::expand_all`],
        /// [`Layout::expand_last`]).
        fn drain6(&self, batch: &mut Batch6, six: &Conflicts6, found: &mut Found, all: bool) {
            let last = self.last();
            let started = breakdown::start();
            found.nodes +=
                self.expand_all::<true, _, _>(last - 4, &mut batch.above4, &mut batch.above3);
            breakdown::stop(Part::Row4, started);
            let started = breakdown::start();
            found.nodes +=
                self.expand_all::<true, _, _>(last - 3, &mut batch.above3, &mut batch.above2);
            breakdown::stop(Part::Row3, started);
            if !all && batch.above2.len < ABOVE2_BATCH {
                return;
            }
            let started = breakdown::start();
            found.nodes +=
                self.expand_all::<false, _, _>(last - 2, &mut batch.above2, &mut batch.above1);
            breakdown::stop(Part::Row2, started);
            if all || batch.above1.len >= ABOVE1_BATCH {
                let started = breakdown::start();
                found.nodes += self.expand_last(batch);
                breakdown::stop(Part::Row1, started);
                self.drop_dead(&mut batch.last);
                let started = breakdown::start();
                found.solutions += self.count_children6(&mut batch.last, six);
                breakdown::stop(Part::Count, started);
            }
        }
    }

    avx512! {
        /// Appends to `to` the states of searched row `depth + 1` that the queens of the states of
        /// `from` (in row `depth`) give, with their own free squares, sixteen states at a time: a
        /// queen per lane per step (the lowest free square of each state, then the next), the
        /// children packed by `vpcompressd`. Returns the nodes (the queens placed). Empties `from`.
        fn expand_all<const PRUNE: bool, const FROM: usize, const TO: usize>(
            &self,
            depth: usize,
            from: &mut Waiting<FROM>,
            to: &mut Waiting<TO>,
        ) -> u64 {
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
                    let zero = _mm512_setzero_si512();
                    let bit = _mm512_and_si512(rest, _mm512_sub_epi32(zero, rest));
                    rest = _mm512_xor_si512(rest, bit);
                    let cc = _mm512_or_si512(c, bit);
                    let rr = _mm512_sll_epi32(_mm512_or_si512(r, bit), shift);
                    let ll = _mm512_srl_epi32(_mm512_or_si512(l, bit), shift);
                    let mut ff =
                        _mm512_ternarylogic_epi32::<0x01>(cc, _mm512_or_si512(rr, ll), blocked);
                    if PRUNE {
                        let after = _mm512_ternarylogic_epi32::<0x01>(
                            cc,
                            _mm512_or_si512(
                                _mm512_sll_epi32(rr, next),
                                _mm512_srl_epi32(ll, next),
                            ),
                            blocked_after,
                        );
                        ff = _mm512_maskz_mov_epi32(_mm512_test_epi32_mask(after, after), ff);
                    }
                    // A child with no free square places no queen and has no completion: it is
                    // left out (its nodes, none, are counted alike).
                    to.append(some & _mm512_test_epi32_mask(ff, ff), cc, rr, ll, Some(ff));
                }
            }
            _mm512_reduce_add_epi32(nodes) as u32 as u64
        }
    }

    avx512! {
        /// Turns the waiting states of row `last - 1` into the states of row `last` that their
        /// queens give, sixteen states at a time, and returns the nodes: the queens of both rows.
        ///
        /// States that surely have no completion ([`DeadTest`], over the seven rows from
        /// `last - 1` down) are not expanded. The nodes come in closed form, for every state,
        /// dropped or not: its queens (`free`, F), and for each, the free squares it leaves in row
        /// `last`, those of B (row `last`'s free squares before the queen) less the queen's column
        /// and diagonals: |F| + |F||B| - |F & B| - |F & (B >> d)| - |F & (B << d)|, with d the
        /// distance between the rows. The live states are then packed to the front of the arrays
        /// (as in [`Layout::drop_dead`]), and their children made sixteen live states at a time, a
        /// queen per lane per step (the lowest free square of each, then the next), packed by
        /// `vpcompressd`; the children are tested in [`Layout::drop_dead`], not here. Packing first
        /// made the search 1.2x faster (N = 18 and 27): about 45% of these states are dead at
        /// N = 27, and each vector of children used to carry them as empty lanes.
        fn expand_last(&self, batch: &mut Batch6) -> u64 {
            let test = DeadTest::<{ ROWS6 + 1 }>::new(self, self.last() - 1);
            let d = test.shifts.reach[1];
            let from = &mut batch.above1;
            let states = std::mem::take(&mut from.len).min(ABOVE1_CAP - 16);
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
                // The live states go back into the same arrays, packed (as in `drop_dead`): the
                // children are then made sixteen live states at a time.
                from.append(valid & alive, c, r, l, Some(f));
            }
            let (from, to) = (&batch.above1, &mut batch.last);
            let live = from.len;
            for at in (0..live).step_by(16) {
                let (c, r, l, f, valid) = from.slice(at, live);
                let mut rest = _mm512_maskz_mov_epi32(valid, f);
                loop {
                    let some = _mm512_test_epi32_mask(rest, rest);
                    if some == 0 {
                        break;
                    }
                    let zero = _mm512_setzero_si512();
                    let bit = _mm512_and_si512(rest, _mm512_sub_epi32(zero, rest));
                    rest = _mm512_xor_si512(rest, bit);
                    let rr = _mm512_sll_epi32(_mm512_or_si512(r, bit), d);
                    let ll = _mm512_srl_epi32(_mm512_or_si512(l, bit), d);
                    to.append(some, _mm512_or_si512(c, bit), rr, ll, None);
                }
            }
            breakdown::count(Event::Row1Tested, states as u64);
            breakdown::count(Event::Row1Dead, (states - live) as u64);
            batch.above1.len = 0;
            _mm512_reduce_add_epi32(nodes) as u32 as u64
        }
    }

    avx512! {
        /// Drops from the waiting states of row `last` those that surely have no completion,
        /// moves the others to the front of the arrays, and sets the batch's length to their
        /// number. Two passes: [`DeadTest::alive`] over the six rows (some 40 vector instructions
        /// per sixteen states), then [`DeadTest::alive_forced`] (forced squares, some 200) over
        /// what the first leaves.
        ///
        /// The first drops three states in ten at N = 18 and one in two at N = 27, the second
        /// as many again: three in five and three in four go in all, each costing a fraction of
        /// the count it saves. The survivors are packed in place (`vpcompressd` of every array,
        /// written at or behind where it was read), so that the count's loop reads them in order.
        fn drop_dead(&self, batch: &mut Waiting<LAST_CAP>) {
            let started = breakdown::start();
            let test = DeadTest::<ROWS6>::new(self, self.last());
            let states = std::mem::take(&mut batch.len).min(LAST_CAP - 16);
            for at in (0..states).step_by(16) {
                let (c, r, l, _, valid) = batch.slice(at, states);
                // The survivors go back into the same arrays: `batch.len` <= `at`, so they land at
                // or behind the states just read, never on those not read yet.
                batch.append(valid & test.alive(c, r, l).0, c, r, l, None);
            }
            // The forced squares cost five times the plain test: only for its survivors.
            let plain = std::mem::take(&mut batch.len);
            for at in (0..plain).step_by(16) {
                let (c, r, l, _, valid) = batch.slice(at, plain);
                batch.append(valid & test.alive_forced(c, r, l), c, r, l, None);
            }
            breakdown::count(Event::LastTested, states as u64);
            breakdown::count(Event::LastDead, (states - batch.len) as u64);
            breakdown::stop(Part::DeadLast, started);
        }
    }

    avx512! {
        /// Counts the completions of every waiting state of row `last` through the last six rows,
        /// and empties the batch. The caller drops first the states that surely have none
        /// ([`Layout::drop_dead`]); each other state costs about 75 instructions and no branch:
        /// - the six rows' free squares in one vector (`vpsllvd`, `vpsrlvd`), widened to 64-bit
        ///   lanes;
        /// - the open columns' positions as bytes (`vpcompressb` of 0, 1, 2, ...), and every row's
        ///   bits at those positions at once (`vpshufbitqmb`, a `pext` of eight lanes);
        /// - the gaps between neighbouring open columns as bytes (`vpsubb`, `vpminub`), packed into
        ///   the three conflict-table indices by `pext`;
        /// - six 768-bit table rows ANDed, three ORed, and `vpopcntq` into a running vector sum.
        ///
        /// The vector ports bound it (with 512-bit operations in flight, two of them take every
        /// vector instruction), so the table offsets are computed in general registers.
        fn count_children6(&self, batch: &mut Waiting<LAST_CAP>, six: &Conflicts6) -> u64 {
            let allowed: &[PermSet6; ALLOWED_LEN] = &crate::tail6::ALLOWED;
            let (first, second, middle) = (&*six.first, &*six.second, &*six.middle);
            // SAFETY: `Lanes` is eight `u32`, aligned to 32 bytes.
            let lanes = |l: &Lanes| unsafe { _mm256_load_si256(l.0.as_ptr() as *const __m256i) };
            let (reach, blocked) = (lanes(&self.six_reach), lanes(&self.six_blocked));
            // SAFETY: `IOTA` holds 64 bytes.
            let iota = unsafe { _mm256_loadu_si256(IOTA.0.as_ptr() as *const __m256i) };
            let beyond = _mm256_set1_epi8(63);
            let clip = _mm_set1_epi8(six.clip as i8);
            let one = _mm_set1_epi8(1);
            let board = self.board;
            // SAFETY: a `PermSet6` is twelve `u64` aligned to 128 bytes: eight from its start,
            // and four 32-byte aligned from the ninth.
            let load = |set: &PermSet6| unsafe {
                let p = set.0.as_ptr();
                let high = p.add(8) as *const __m256i;
                (_mm512_loadu_si512(p as *const __m512i), _mm256_load_si256(high))
            };
            let mut sum = _mm512_setzero_si512();
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
                let rows =
                    _mm512_cvtepu32_epi64(_mm256_xor_si256(taken, _mm256_set1_epi32(-1)));
                let open = !cols & board;
                // The open columns' positions in bytes 0..6; the other bytes are 63, a bit that is
                // 0 in every widened row, so that each byte of `compressed` holds one row's six
                // bits.
                let position = _mm256_mask_compress_epi8(beyond, open, iota);
                let low = _mm256_castsi256_si128(position);
                let compressed =
                    _mm512_bitshuffle_epi64_mask(rows, _mm512_broadcastq_epi64(low));
                // The byte offset of each row's entry of `allowed`, row * 64 * 128 + free * 128,
                // in general registers: the vector ports are the busy ones.
                let offset =
                    |i: usize| ((compressed >> (8 * i)) & 63) as usize * 128 + i * 64 * 128;
                // Byte i of `gap`: the gap between open columns i and i + 1, clipped, less one;
                // byte 1 of `mixed`: the same for columns 1 and 4. `pext` packs three such 3-bit
                // digits into each table index.
                let digits =
                    |d: __m128i| _mm_sub_epi8(_mm_min_epu8(_mm_sub_epi8(d, low), clip), one);
                let gap = digits(_mm_srli_si128::<1>(low));
                let mixed = _mm_mask_blend_epi8(0b10, gap, digits(_mm_srli_si128::<3>(low)));
                let (gap, mixed) =
                    (_mm_cvtsi128_si64(gap) as u64, _mm_cvtsi128_si64(mixed) as u64);
                let key = |k: u64| k as usize & (crate::tail6::TABLE_LEN - 1);
                let (f0, f1) = load(&first[key(_pext_u64(gap, 0x07_0707))]);
                let (s0, s1) = load(&second[key(_pext_u64(gap, 0x07_0707_0000))]);
                let (m0, m1) = load(&middle[key(_pext_u64(mixed, 0x07_0000_0707))]);
                let conflicts0 = _mm512_ternarylogic_epi64::<0xfe>(f0, s0, m0);
                let conflicts1 = _mm256_ternarylogic_epi64::<0xfe>(f1, s1, m1);
                // SAFETY: each offset is below 6 * 64 * 128, inside `allowed` (each byte masked to
                // 63), and a multiple of 128, the size of a `PermSet6`.
                let row = |i: usize| load(unsafe { &*allowed.as_ptr().byte_add(offset(i)) });
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
    }
}

/// The bytes 0, 1, ..., 63: compressed by a column mask, the positions of its columns.
#[repr(C, align(64))]
struct Iota([u8; 64]);

static IOTA: Iota = {
    let mut bytes = [0; 64];
    let mut i = 0;
    while i < 64 {
        bytes[i] = i as u8;
        i += 1;
    }
    Iota(bytes)
};

impl<const CAP: usize> Waiting<CAP> {
    avx512! {
        /// The sixteen states from index `at` of the first `states` (masks, free squares), and the
        /// lanes that hold one of them.
        #[inline]
        fn slice(
            &self,
            at: usize,
            states: usize,
        ) -> (Lanes16, Lanes16, Lanes16, Lanes16, Mask16) {
            // `min` keeps the sixteen lanes inside the arrays (callers read below `CAP - 16`, so
            // it never moves them).
            let at = at.min(CAP - 16);
            // SAFETY: lanes `at..at + 16` are inside the array (above).
            let load =
                |a: &[u32; CAP]| unsafe { _mm512_loadu_si512(a.as_ptr().add(at) as *const _) };
            // (`bzhi` reads the low byte of its count only: hence the `min`.)
            let valid = _bzhi_u32(0xffff, states.saturating_sub(at).min(16) as u32) as Mask16;
            (load(&self.cols), load(&self.right), load(&self.left), load(&self.free), valid)
        }
    }

    avx512! {
        /// Appends the lanes of `some`, packed by `vpcompressd` (`free` too, if given). Packing
        /// within the same arrays is safe when the states are appended at or behind where they were
        /// read (see [`Layout::drop_dead`]).
        #[inline]
        fn append(
            &mut self,
            some: Mask16,
            cols: Lanes16,
            right: Lanes16,
            left: Lanes16,
            free: Option<Lanes16>,
        ) {
            // `min` keeps the sixteen lanes inside the arrays; every capacity leaves room for all
            // the states that can wait and one store more.
            let at = self.len.min(CAP - 16);
            let store = |a: &mut [u32; CAP], v: Lanes16| {
                // Merged into its own source, not zeroed: Zen 4 and 5 give the zero-masked form
                // a false dependency on its destination (LLVM issue 206849), and the four stores
                // here would wait on one another. The lanes past the packed ones are not read.
                let packed = _mm512_mask_compress_epi32(v, some, v);
                // SAFETY: lanes `at..at + 16` are inside the array (above).
                unsafe { _mm512_storeu_si512(a.as_mut_ptr().add(at) as *mut _, packed) }
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
}

/// Sixteen states' masks, one per 32-bit lane, and a mask of sixteen lanes.
type Lanes16 = __m512i;
type Mask16 = __mmask16;

/// A test that a state of searched row `first` has no completion for sure: one of the `ROWS`
/// rows from `first` down (to the bottom) has no free square, or an open column is free in none
/// of them ([`DeadTest::alive`]; [`DeadTest::alive_forced`] first takes from every row what the
/// rows with one free square force). Sixteen states at once, their masks in the lanes of three
/// vectors.
struct DeadTest<const ROWS: usize> {
    /// The rows' distances, as shift counts.
    shifts: Shifts<ROWS>,
    /// Per row, its squares taken by the border queens, in every lane.
    blocked: [__m512i; ROWS],
    board: __m512i,
}

impl<const ROWS: usize> DeadTest<ROWS> {
    avx512! {
        /// The test of the `ROWS` rows from searched row `first` down.
        fn new(layout: &Layout, first: usize) -> Self {
            DeadTest {
                shifts: Shifts::new(layout, first),
                blocked: std::array::from_fn(|j| {
                    _mm512_set1_epi32(layout.blocked[(first + j) & SLOT] as i32)
                }),
                board: _mm512_set1_epi32(layout.board as i32),
            }
        }
    }

    avx512! {
        /// The lanes whose state may have a completion, and every lane's free squares in row
        /// `first + 1`.
        #[inline]
        fn alive(
            &self,
            cols: __m512i,
            right: __m512i,
            left: __m512i,
        ) -> (__mmask16, __m512i) {
            let free = self.free(cols, right, left);
            let mut alive = !0;
            let mut union = _mm512_setzero_si512();
            for row in free {
                alive &= _mm512_test_epi32_mask(row, row);
                union = _mm512_or_si512(union, row);
            }
            alive &= _mm512_cmpeq_epi32_mask(union, _mm512_andnot_si512(cols, self.board));
            (alive, free[1 % ROWS])
        }
    }

    avx512! {
        /// The lanes whose state may have a completion, by a stronger test than [`Self::alive`]:
        /// a row with one free square must hold its queen there, so that square's column and
        /// diagonals are taken from every other row before the rows are tested.
        ///
        /// It costs some 200 vector instructions per sixteen states (every pair of rows), and is
        /// worth it only where each state it drops would cost more: before the six-row closed
        /// form, on the states that [`Self::alive`] leaves, it drops about half of them (N = 18-27)
        /// and the search runs 1.2x faster; over the seven rows of `last - 1` it cost more than it
        /// saved (1.1x slower, there too after the plain test).
        #[inline]
        fn alive_forced(&self, cols: __m512i, right: __m512i, left: __m512i) -> __mmask16 {
            let free = self.free(cols, right, left);
            let one = _mm512_set1_epi32(1);
            let forced: [__m512i; ROWS] = std::array::from_fn(|i| {
                let single = _mm512_cmpeq_epi32_mask(_mm512_popcnt_epi32(free[i]), one);
                _mm512_maskz_mov_epi32(single, free[i])
            });
            let mut alive = !0;
            let mut union = _mm512_setzero_si512();
            for j in 0..ROWS {
                let mut taken = _mm512_setzero_si512();
                for i in (0..ROWS).filter(|&i| i != j) {
                    let d = self.shifts.apart[i][j];
                    let diagonals = _mm512_or_si512(
                        _mm512_sll_epi32(forced[i], d),
                        _mm512_srl_epi32(forced[i], d),
                    );
                    taken = _mm512_ternarylogic_epi32::<0xfe>(taken, forced[i], diagonals);
                }
                let left = _mm512_andnot_si512(taken, free[j]);
                alive &= _mm512_test_epi32_mask(left, left);
                union = _mm512_or_si512(union, left);
            }
            alive & _mm512_cmpeq_epi32_mask(union, _mm512_andnot_si512(cols, self.board))
        }
    }

    avx512! {
        /// Every lane's free squares in each of the `ROWS` rows.
        #[inline]
        fn free(&self, cols: __m512i, right: __m512i, left: __m512i) -> [__m512i; ROWS] {
            std::array::from_fn(|j| {
                let shifted = _mm512_or_si512(
                    _mm512_sll_epi32(right, self.shifts.reach[j]),
                    _mm512_srl_epi32(left, self.shifts.reach[j]),
                );
                _mm512_ternarylogic_epi32::<0x01>(cols, shifted, self.blocked[j])
            })
        }
    }
}
