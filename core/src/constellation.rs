//! Border constellations and the 8 symmetries of the square.
//!
//! Every solution has exactly one queen in its top row, bottom row, left column and right column; a
//! corner queen stands on two borders. These (up to four) queens form the solution's constellation.
//! A symmetry of the board maps the solutions of one constellation one-to-one onto the solutions of
//! the image constellation, so it is enough to search one representative per orbit and weight it
//! with the orbit's size.

use crate::board::Cell;
use serde::{Deserialize, Serialize};

/// The queens on the border of the board: the column of the queen in the top row (row 0), the
/// column of the queen in the bottom row (row N-1), the row of the queen in the left column
/// (column 0) and the row of the queen in the right column (column N-1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Constellation {
    /// Column of the queen in row 0.
    pub top: u8,
    /// Column of the queen in row N-1.
    pub bottom: u8,
    /// Row of the queen in column 0.
    pub left: u8,
    /// Row of the queen in column N-1.
    pub right: u8,
}

/// The 8 symmetries of the square (the dihedral group D4).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Symmetry {
    /// Leaves the board as it is.
    Identity,
    /// A quarter turn.
    Rotate90,
    /// A half turn.
    Rotate180,
    /// Three quarter turns.
    Rotate270,
    /// Reflection in the vertical axis (columns reversed).
    MirrorColumns,
    /// Reflection in the horizontal axis (rows reversed).
    MirrorRows,
    /// Reflection in the main diagonal.
    Transpose,
    /// Reflection in the anti-diagonal.
    AntiTranspose,
}

impl Symmetry {
    /// All 8 symmetries, identity first.
    pub const ALL: [Symmetry; 8] = [
        Symmetry::Identity,
        Symmetry::Rotate90,
        Symmetry::Rotate180,
        Symmetry::Rotate270,
        Symmetry::MirrorColumns,
        Symmetry::MirrorRows,
        Symmetry::Transpose,
        Symmetry::AntiTranspose,
    ];

    /// Where the square `(row, column)` of an `n`-board goes.
    pub fn apply(self, n: u8, (r, c): (u8, u8)) -> (u8, u8) {
        let m = n - 1;
        match self {
            Symmetry::Identity => (r, c),
            Symmetry::Rotate90 => (c, m - r),
            Symmetry::Rotate180 => (m - r, m - c),
            Symmetry::Rotate270 => (m - c, r),
            Symmetry::MirrorColumns => (r, m - c),
            Symmetry::MirrorRows => (m - r, c),
            Symmetry::Transpose => (c, r),
            Symmetry::AntiTranspose => (m - c, m - r),
        }
    }
}

impl Constellation {
    /// The distinct border queens (one to four of them) as `(row, column)` squares.
    pub fn queens(&self, n: u8) -> Vec<Cell> {
        let m = n - 1;
        let mut cells = vec![(0, self.top), (m, self.bottom), (self.left, 0), (self.right, m)];
        cells.sort_unstable();
        cells.dedup();
        cells
    }

    /// The constellation of a set of queens that has exactly one queen on each border, if it has.
    pub(crate) fn from_queens(n: u8, queens: &[Cell]) -> Option<Constellation> {
        let m = n - 1;
        let one = |pick: &dyn Fn(&Cell) -> Option<u8>| -> Option<u8> {
            let mut found = queens.iter().filter_map(pick);
            let first = found.next()?;
            found.next().is_none().then_some(first)
        };
        Some(Constellation {
            top: one(&|&(r, c)| (r == 0).then_some(c))?,
            bottom: one(&|&(r, c)| (r == m).then_some(c))?,
            left: one(&|&(r, c)| (c == 0).then_some(r))?,
            right: one(&|&(r, c)| (c == m).then_some(r))?,
        })
    }

    /// The constellation of a complete solution given as one column per row.
    pub fn of_solution(columns: &[u8]) -> Constellation {
        let n = columns.len() as u8;
        let queens: Vec<Cell> = columns.iter().enumerate().map(|(r, &c)| (r as u8, c)).collect();
        Constellation::from_queens(n, &queens).expect("a solution has one queen on each border")
    }

    /// The image of this constellation under a symmetry.
    pub fn transformed(&self, n: u8, symmetry: Symmetry) -> Constellation {
        let queens: Vec<Cell> = self.queens(n).into_iter().map(|q| symmetry.apply(n, q)).collect();
        Constellation::from_queens(n, &queens).expect("symmetries map borders onto borders")
    }

    /// Whether the border queens are consistent: each row and column holds at most one of them
    /// (a corner queen is shared by two borders) and no two of them share a diagonal.
    pub(crate) fn is_valid_for(&self, n: u8) -> bool {
        let m = n - 1;
        // A corner square belongs to two borders: both must name the same queen.
        let corner_ok = |on_first: bool, on_second: bool| on_first == on_second;
        if !(corner_ok(self.top == 0, self.left == 0)
            && corner_ok(self.top == m, self.right == 0)
            && corner_ok(self.bottom == 0, self.left == m)
            && corner_ok(self.bottom == m, self.right == m))
        {
            return false;
        }
        let queens = self.queens(n);
        queens.iter().enumerate().all(|(i, &(r1, c1))| {
            queens[i + 1..].iter().all(|&(r2, c2)| {
                r1 != r2
                    && c1 != c2
                    && (r1 as i32 - r2 as i32).abs() != (c1 as i32 - c2 as i32).abs()
            })
        })
    }

    /// The orbit size of this constellation under the symmetry group: 8, 4 (mapped onto itself by a
    /// 180-degree rotation only) or 2 (also by a 90-degree rotation). No reflection can map a valid
    /// constellation onto itself.
    pub fn orbit_size(&self, n: u8) -> u8 {
        let mut images: Vec<Constellation> =
            Symmetry::ALL.iter().map(|&s| self.transformed(n, s)).collect();
        images.sort_unstable();
        images.dedup();
        images.len() as u8
    }

    /// Whether this constellation is the smallest of its orbit, the one that represents it.
    pub fn is_canonical(&self, n: u8) -> bool {
        Symmetry::ALL.iter().all(|&s| *self <= self.transformed(n, s))
    }
}

/// All canonical constellations of an `n`-board in ascending order, each with its orbit size.
/// (The 1-board's single queen is all four borders at once: one constellation of weight 1.)
/// Every solution of the board is the image under some symmetry of a solution of exactly one of
/// them.
pub fn canonical_constellations(n: u8) -> Vec<(Constellation, u8)> {
    let mut out = Vec::new();
    for top in 0..n {
        for bottom in 0..n {
            for left in 0..n {
                for right in 0..n {
                    let c = Constellation { top, bottom, left, right };
                    if c.is_valid_for(n) && c.is_canonical(n) {
                        out.push((c, c.orbit_size(n)));
                    }
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn weights_are_orbit_sizes_and_orbits_cover_every_valid_constellation() {
        for n in 4..=12u8 {
            let reps = canonical_constellations(n);
            let covered: usize = reps.iter().map(|&(_, w)| w as usize).sum();
            let mut all = 0;
            for t in 0..n {
                for b in 0..n {
                    for l in 0..n {
                        for r in 0..n {
                            all += Constellation { top: t, bottom: b, left: l, right: r }
                                .is_valid_for(n) as usize;
                        }
                    }
                }
            }
            assert_eq!(covered, all, "n={n}");
            assert!(reps.iter().all(|&(_, w)| w == 2 || w == 4 || w == 8), "n={n}");
        }
    }

    #[test]
    fn symmetries_form_a_group_on_squares() {
        let n = 7;
        for s in Symmetry::ALL {
            let mut image: Vec<_> =
                (0..n).flat_map(|r| (0..n).map(move |c| s.apply(n, (r, c)))).collect();
            image.sort_unstable();
            image.dedup();
            assert_eq!(image.len(), (n * n) as usize);
        }
        let q = (1, 5);
        let r90 = Symmetry::Rotate90;
        assert_eq!(r90.apply(n, r90.apply(n, q)), Symmetry::Rotate180.apply(n, q));
    }
}
