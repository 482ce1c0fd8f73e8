//! The hot loop: an iterative bitboard depth-first search over the rows that hold no border queen.
//!
//! The border queens never move, so their attacks are folded into one static `blocked` mask per
//! searched row, and rows that hold a border queen are skipped by shifting the diagonal masks by
//! the row distance. The inner loop then only carries the queens it places itself: no row checks,
//! no recursion, no allocation, and every array index is masked to the array's size so the
//! compiler emits no bounds checks.
//!
//! The bottom of the tree, where nearly all the time would go, is not searched queen by queen.
//! The search comes in several builds, one module each, and [`dispatch`] picks one per process
//! from the CPU's features:
//! - [`x86_64::avx512`] (AVX-512 F, VL, BW, BITALG, VBMI2, VPOPCNTDQ and BMI2): the last six
//!   searched rows, row `last` and the [`TAIL`] rows below it, are counted in closed form
//!   ([`crate::tail6`]), one state of row `last` per evaluation, without a branch; the four rows
//!   above them (`last - 4` to `last - 1`) are not searched depth first either: their states wait
//!   in batches and are expanded sixteen at a time, the children stored without a branch, and
//!   states that surely have no completion are dropped before rows `last - 1` and `last` (the
//!   survivors packed, so that vectors carry no dead lanes). The depth-first loop mispredicts
//!   about once per node, and these rows hold most of the nodes.
//! - [`x86_64::avx2`] (AVX2, BMI1, POPCNT: no `pext`, which AMD's family 0x17 runs in
//!   microcode): the same batched design eight lanes at a time, for the CPUs without AVX-512;
//!   the waiting states and the walk that fills them are shared ([`x86_64::waiting`]).
//! - [`x86_64::bmi2`] (BMI1/BMI2, POPCNT, AVX2) and [`portable`] (any CPU): the last [`TAIL`]
//!   searched rows are counted in closed form ([`crate::tail`]); the queens of the row above them
//!   (`last`) are queued, four slots written without a branch, and counted in batches (a loop over
//!   one or two squares would mispredict its exit every time); the row above that (`last - 1`)
//!   runs in a loop of its own, without the stack ([`body`]).
//!
//! The code every build shares ([`body`], and the [`Layout`] here) is `#[inline(always)]`: a
//! build's CPU features reach only the code inlined into its `#[target_feature]` functions.
//! Measurements behind these choices are in `docs/benchmarks.md`. The tests check every build that
//! the CPU can run against a plain count, from every depth.

// The hot loops index several fixed-size arrays in step; that reads more plainly than zipped
// iterators and compiles to the same unrolled code.
#![allow(clippy::needless_range_loop)]
// The only `unsafe` entry into a build is in `dispatch`; the unsafe operations inside a build
// (raw-pointer loads and stores) each sit in a block of their own with their reason.
#![deny(unsafe_op_in_unsafe_fn)]

mod body;
mod dispatch;
mod portable;
#[cfg(test)]
mod tests;
#[cfg(target_arch = "x86_64")]
mod x86_64;

use crate::board::Cell;
use crate::constellation::Constellation;
use crate::tail::{TailConflicts, TAIL};
use crate::tail6::{Conflicts6, ROWS6};
use crate::CoreError;
#[cfg(test)]
use dispatch::Build;
pub(crate) use dispatch::Detected;
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
        // where it constrains few squares; starting next to the bottom queen prunes far more.
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

    /// Row distance from the searched row `depth` to the next one (read by
    /// [`crate::Job::search_plan`]).
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

    /// Counts the completions of `start`: the number of ways to fill every remaining searched row,
    /// with the build [`dispatch`] picked for this process.
    pub fn count(&self, start: &State) -> Found {
        Detected::selected().count(self, start)
    }

    /// The six-row tables, if the six-row search can count `start`: they exist only when there
    /// are more than [`TAIL`] rows, and the search starts at row `last` or above.
    fn six_for(&self, start: &State) -> Option<&Conflicts6> {
        self.six.as_deref().filter(|_| start.depth <= self.last())
    }

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

/// One value per tail row, padded to a vector of eight so that all rows are computed at once.
#[derive(Debug, Clone, Copy)]
#[repr(C, align(32))]
struct Lanes([u32; LANES]);

const LANES: usize = 8;
