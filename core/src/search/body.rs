//! The search that every build shares: the depth-first loop, and the five-row form's queue of
//! row `last` and its batched tail count.
//!
//! Everything here is `#[inline(always)]`, and the build-specific part (the tail rows' test,
//! `rows_allow`) is a closure argument: each build's `#[target_feature]` entry gets its own copy,
//! compiled for its CPU features. A call that is not inlined would run without them.

use super::{Found, Lanes, Layout, State, LANES, SLOT};
use crate::tail::{PermSet, TAIL};

impl Layout {
    /// The main loop of the search from `start` (at least three rows above row `last`): every
    /// state of searched row `last - 1` is handed to `at_penultimate` with its masks and free
    /// squares.
    #[inline(always)]
    pub(super) fn search<const ABOVE: usize>(
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

    /// Counts the completions of `start` with the five-row form: the depth-first loop down to row
    /// `last - 1`, whose queens are queued with those of row `last` (see [`Layout::penultimate`]),
    /// and the tail rows counted in batches, each queen of row `last` tested by `rows_allow` (the
    /// permutations of the open columns that the tail rows allow, see [`crate::tail::allowed`]).
    /// Boards with too few rows for the form are counted plainly.
    #[inline(always)]
    pub(super) fn count_body(
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
