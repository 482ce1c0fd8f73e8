//! The hot loop: an iterative bitboard depth-first search over the rows that hold no border queen.
//!
//! The border queens never move, so their attacks are folded into one static `blocked` mask per
//! searched row, and rows that hold a border queen are skipped by shifting the diagonal masks by
//! the row distance. The inner loop then only carries the queens it places itself: no row checks,
//! no recursion, no allocation, and every array index is masked to the array's size so the
//! compiler emits no bounds checks. The last searched row is never pushed: a queen placed in the
//! second-to-last row is counted at once if the one remaining column is not attacked.

use crate::board::Cell;
use crate::constellation::Constellation;
use crate::CoreError;

/// Arrays are 32 long (one slot per possible row); indexing with `& SLOT` keeps them in bounds.
const SLOT: usize = 31;

/// Search layout of one constellation: which rows are searched and what the border queens block.
#[derive(Debug, Clone)]
pub(crate) struct Layout {
    n: u8,
    /// Number of searched rows.
    rows: usize,
    /// Board row of each searched row, top to bottom.
    row_of: [u8; 32],
    /// Per searched row: columns of border queens, squares they attack, and every bit >= n.
    blocked: [u32; 32],
    /// Row distance from each searched row to the next one (1, or more across border-queen rows).
    shift: [u32; 32],
}

/// The masks at one depth of the search: occupied columns and the two diagonal directions
/// (`down_right` moves one column right per row, `down_left` one column left), as seen in the
/// searched row `depth`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct State {
    pub depth: usize,
    cols: u32,
    down_right: u32,
    down_left: u32,
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
        let mut layout = Layout { n, rows: 0, row_of: [0; 32], blocked: [0; 32], shift: [0; 32] };
        for row in 0..n {
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
                layout.shift[k - 1] = (row - layout.row_of[k - 1]) as u32;
            }
            layout.rows += 1;
        }
        layout
    }

    /// Number of searched rows.
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Board row of the searched row `depth`.
    pub fn row_of(&self, depth: usize) -> u8 {
        self.row_of[depth & SLOT]
    }

    /// The state before any queen is searched.
    pub fn start(&self) -> State {
        State { depth: 0, cols: 0, down_right: 0, down_left: 0 }
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
    pub fn expand(&self, state: &State, extra: usize, out: &mut Vec<(State, Vec<u8>)>, path: &mut Vec<u8>) {
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
        let last = self.rows;
        if start.depth >= last {
            return Found { solutions: 1, nodes: 0 };
        }
        let first_free = self.free(start);
        if start.depth + 1 == last {
            return Found { solutions: (first_free != 0) as u64, nodes: 0 };
        }
        // Depth k in [start.depth, last - 2] lives on the stack; the queen of row last - 1 is
        // only checked, never pushed.
        let leaf_parent = last - 2;
        let base = start.depth;
        let mut cols = [0u32; 32];
        let mut down_right = [0u32; 32];
        let mut down_left = [0u32; 32];
        let mut free = [0u32; 32];
        cols[base & SLOT] = start.cols;
        down_right[base & SLOT] = start.down_right;
        down_left[base & SLOT] = start.down_left;
        free[base & SLOT] = first_free;
        let mut solutions = 0u64;
        let mut nodes = 0u64;
        let mut k = base;
        loop {
            let i = k & SLOT;
            let f = free[i];
            if f == 0 {
                if k == base {
                    break;
                }
                k -= 1;
                continue;
            }
            let bit = f & f.wrapping_neg();
            free[i] = f ^ bit;
            let s = self.shift[i];
            let c = cols[i] | bit;
            let dr = (down_right[i] | bit) << s;
            let dl = (down_left[i] | bit) >> s;
            let next_free = !(c | dr | dl | self.blocked[(k + 1) & SLOT]);
            nodes += 1;
            if k == leaf_parent {
                solutions += (next_free != 0) as u64;
                continue;
            }
            // Look one row further: a queen that leaves the row after next with no square, even
            // before that row's own queen is chosen, is a dead end now.
            let s2 = self.shift[(k + 1) & SLOT];
            let after_next = !(c | (dr << s2) | (dl >> s2) | self.blocked[(k + 2) & SLOT]);
            if next_free != 0 && after_next != 0 {
                k += 1;
                let j = k & SLOT;
                cols[j] = c;
                down_right[j] = dr;
                down_left[j] = dl;
                free[j] = next_free;
            }
        }
        Found { solutions, nodes }
    }
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
