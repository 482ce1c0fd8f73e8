//! Counting the solutions that a rotation maps onto themselves.
//!
//! Such a solution is fixed by the queens of one half (180 degrees) or one quarter (90 degrees) of
//! the board, so it is found by placing whole orbits of squares at once: a small search that costs
//! next to nothing beside the full count. Only jobs whose constellation is itself fixed by the
//! rotation can hold such solutions.

use crate::board::Cell;
use crate::constellation::Symmetry;

/// Occupied rows, columns and diagonals of a partial board.
#[derive(Clone, Copy)]
struct Occupied {
    n: u8,
    rows: u32,
    cols: u32,
    sums: u64,
    diffs: u64,
}

impl Occupied {
    fn try_place(&mut self, (r, c): Cell) -> bool {
        let (row, col) = (1u32 << r, 1u32 << c);
        let sum = 1u64 << (r + c);
        let diff = 1u64 << (r + self.n - 1 - c);
        if self.rows & row != 0
            || self.cols & col != 0
            || self.sums & sum != 0
            || self.diffs & diff != 0
        {
            return false;
        }
        self.rows |= row;
        self.cols |= col;
        self.sums |= sum;
        self.diffs |= diff;
        true
    }

    /// Places the whole orbit of `cell` under `rotation`; false if any of its squares is attacked.
    fn try_place_orbit(&mut self, cell: Cell, rotation: Symmetry) -> bool {
        let mut square = cell;
        loop {
            if !self.try_place(square) {
                return false;
            }
            square = rotation.apply(self.n, square);
            if square == cell {
                return true;
            }
        }
    }

    fn count_completions(&self, rotation: Symmetry) -> u64 {
        let full = if self.n == 32 { !0 } else { (1u32 << self.n) - 1 };
        if self.rows == full {
            return 1;
        }
        let row = (!self.rows & full).trailing_zeros() as u8;
        let mut total = 0;
        let mut free = !self.cols & full;
        while free != 0 {
            let col = free.trailing_zeros() as u8;
            free &= free - 1;
            let mut next = *self;
            if next.try_place_orbit((row, col), rotation) {
                total += next.count_completions(rotation);
            }
        }
        total
    }
}

/// Number of solutions of an `n`-board that contain every queen of `fixed` and are mapped onto
/// themselves by `rotation` (`Rotate180` or `Rotate90`).
pub(crate) fn count_rotation_symmetric(n: u8, fixed: &[Cell], rotation: Symmetry) -> u64 {
    debug_assert!(matches!(rotation, Symmetry::Rotate90 | Symmetry::Rotate180));
    let mut board = Occupied { n, rows: 0, cols: 0, sums: 0, diffs: 0 };
    let mut orbits: Vec<Cell> = Vec::new();
    for &queen in fixed {
        // A queen placed as the image of an earlier one is already there; skip its orbit.
        let mut square = queen;
        let seen = loop {
            if orbits.contains(&square) {
                break true;
            }
            square = rotation.apply(n, square);
            if square == queen {
                break false;
            }
        };
        if !seen {
            if !board.try_place_orbit(queen, rotation) {
                return 0;
            }
            orbits.push(queen);
        }
    }
    board.count_completions(rotation)
}
