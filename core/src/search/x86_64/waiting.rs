//! What the batched builds ([`super::avx512`], [`super::avx2`]) share: the states of the rows
//! above the six-row closed form, waiting in arrays to be expanded many at a time, and the walk
//! that fills them.
//!
//! Each build reads and writes these arrays with vectors of its own width (sixteen lanes or
//! eight), packing the live lanes as it stores them; the arrays, their sizes and the order in
//! which the rows are drained are the same for both.

use crate::search::{Found, Layout, State, SLOT};
use crate::tail::TAIL;
use std::arch::x86_64::{__m128i, _mm_cvtsi32_si128};

// Batch sizes of the six-row search. A state of searched row `d` has at most as many free
// squares as there are open columns, one per searched row left: ten in row `last - 4`, nine in
// `last - 3`, eight in `last - 2`, seven in `last - 1`. Each row's arrays hold what waits before it
// is drained, what one drain of the row above adds, and one vector store past the end (sixteen
// lanes, the widest build's). The rows' arrays together take about 1.6 MiB, allocated once per
// thread.

/// States of row `last - 4` that wait before they are expanded.
pub(super) const ABOVE4_BATCH: usize = 16;
pub(super) const ABOVE4_CAP: usize = ABOVE4_BATCH + 16;
/// States of row `last - 3`: the children of one batch of row `last - 4`, all expanded at once.
const ABOVE3_BATCH: usize = ABOVE4_BATCH * (TAIL + 5);
pub(super) const ABOVE3_CAP: usize = ABOVE3_BATCH + 16;
/// States of row `last - 2` that wait before the batch moves down (more rows of `last - 3` are
/// expanded into it until it holds this many).
pub(super) const ABOVE2_BATCH: usize = 64;
pub(super) const ABOVE2_CAP: usize = ABOVE2_BATCH - 1 + ABOVE3_BATCH * (TAIL + 4) + 16;
/// States of row `last - 1` that wait before their children in row `last` are counted.
pub(super) const ABOVE1_BATCH: usize = 64;
pub(super) const ABOVE1_CAP: usize = ABOVE1_BATCH - 1 + (ABOVE2_CAP - 16) * (TAIL + 3) + 16;
/// States of row `last`: every child of the states of row `last - 1`, and one 512-bit load more.
pub(super) const LAST_CAP: usize = (ABOVE1_CAP - 16) * (TAIL + 2) + 16;

/// The distances between the `ROWS` rows from searched row `first` down, as shift counts: what
/// both builds' dead-state tests shift the diagonals by, whatever their vectors' width.
pub(super) struct Shifts<const ROWS: usize> {
    /// Per row, the distance from row `first`.
    pub reach: [__m128i; ROWS],
    /// Per pair of rows, their distance.
    pub apart: [[__m128i; ROWS]; ROWS],
}

impl<const ROWS: usize> Shifts<ROWS> {
    /// The shift counts of the `ROWS` rows from searched row `first` down.
    pub fn new(layout: &Layout, first: usize) -> Self {
        let distance = |j: usize| layout.row_of[first & SLOT] - layout.row_of[(first + j) & SLOT];
        Shifts {
            reach: std::array::from_fn(|j| shift_count(distance(j))),
            apart: std::array::from_fn(|i| {
                std::array::from_fn(|j| shift_count(distance(i).abs_diff(distance(j))))
            }),
        }
    }
}

/// `n` as the count operand of a shift (SSE2, which every x86-64 CPU has).
fn shift_count(n: u8) -> __m128i {
    // SAFETY: SSE2 is part of x86-64 itself.
    unsafe { _mm_cvtsi32_si128(i32::from(n)) }
}

/// States of one searched row waiting in the six-row search: their masks and free squares, in
/// separate arrays so that a vector of children is stored at once.
#[repr(C, align(64))]
pub(super) struct Waiting<const CAP: usize> {
    pub cols: [u32; CAP],
    pub right: [u32; CAP],
    pub left: [u32; CAP],
    pub free: [u32; CAP],
    pub len: usize,
}

impl<const CAP: usize> Waiting<CAP> {
    /// Adds one state (a job that starts in this row).
    pub fn push(&mut self, cols: u32, right: u32, left: u32, free: u32) {
        let at = self.len.min(CAP - 1);
        (self.cols[at], self.right[at], self.left[at], self.free[at]) = (cols, right, left, free);
        self.len += 1;
    }
}

/// The six-row search's waiting states of rows `last - 4` to `last`.
pub(super) struct Batch6 {
    pub above4: Waiting<ABOVE4_CAP>,
    pub above3: Waiting<ABOVE3_CAP>,
    pub above2: Waiting<ABOVE2_CAP>,
    pub above1: Waiting<ABOVE1_CAP>,
    pub last: Waiting<LAST_CAP>,
}

thread_local! {
    /// This thread's batch arrays, between counts.
    static BATCH: std::cell::Cell<Option<Box<Batch6>>> = const { std::cell::Cell::new(None) };
}

impl Batch6 {
    /// This thread's batch, every row empty (the arrays keep their stale contents; only the
    /// first `len` of each are read). Kept per thread: zeroing the arrays (about 1.6 MiB) for
    /// every count cost a part of 0.1 ms (record sizes, a job's parts) several percent.
    pub fn take() -> Box<Batch6> {
        let mut batch = BATCH.take().unwrap_or_else(Batch6::new);
        (batch.above4.len, batch.above3.len) = (0, 0);
        (batch.above2.len, batch.above1.len, batch.last.len) = (0, 0, 0);
        batch
    }

    /// Gives the batch back to this thread, for its next count.
    pub fn give_back(batch: Box<Batch6>) {
        BATCH.set(Some(batch));
    }

    /// A batch with every row empty, made on the heap: it is too big for a thread's stack.
    fn new() -> Box<Batch6> {
        // SAFETY: every field is an array of `u32` or a `usize`, for which zero is a valid value.
        unsafe { Box::<Batch6>::new_zeroed().assume_init() }
    }
}

impl Layout {
    /// The six-row search from `start`, the part that both batched builds share: depth first
    /// down to row `last - 4`, whose states wait in `batch` (a state that starts lower waits in
    /// its own row), handed to `drain` whenever sixteen wait there, and once more at the end with
    /// `all` set. `drain(batch, found, all)` moves the states down the rows and counts them.
    #[inline(always)]
    pub(super) fn count_batched(
        &self,
        start: &State,
        batch: &mut Batch6,
        mut drain: impl FnMut(&mut Batch6, &mut Found, bool),
    ) -> Found {
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
            4 => batch.above4.push(cols, right, left, free),
            _ => self.search::<5>(start, &mut found, |found, cols, right, left, free| {
                // What the depth-first search checks before going down (see `search`).
                let s = self.shift[(last - 4) & SLOT];
                let after = !(cols | (right << s) | (left >> s) | self.blocked[(last - 3) & SLOT]);
                let free = free & 0u32.wrapping_sub((after != 0) as u32);
                batch.above4.push(cols, right, left, free);
                if batch.above4.len >= ABOVE4_BATCH {
                    drain(batch, found, false);
                }
            }),
        }
        drain(batch, &mut found, true);
        found
    }
}
