//! A plain row-by-row bitboard search with no symmetry tricks: the yardstick that the
//! constellation solver is checked against.

use crate::check_board_size;
use crate::CoreError;

/// Counts all solutions of an `n`-board the textbook way (slow beyond n = 15).
pub fn count_all(n: u32) -> Result<u64, CoreError> {
    let n = check_board_size(n as i64)?;
    let full = if n == 32 { !0 } else { (1u32 << n) - 1 };
    fn go(full: u32, cols: u32, left: u32, right: u32) -> u64 {
        if cols == full {
            return 1;
        }
        let mut free = full & !(cols | left | right);
        let mut total = 0;
        while free != 0 {
            let bit = free & free.wrapping_neg();
            free ^= bit;
            total += go(full, cols | bit, (left | bit) << 1, (right | bit) >> 1);
        }
        total
    }
    Ok(go(full, 0, 0, 0))
}

/// Every solution of an `n`-board as one column per row (meant for small n).
pub fn all_solutions(n: u32) -> Result<Vec<Vec<u8>>, CoreError> {
    let n = check_board_size(n as i64)?;
    fn go(n: u8, cols: u32, left: u32, right: u32, path: &mut Vec<u8>, out: &mut Vec<Vec<u8>>) {
        if path.len() == n as usize {
            out.push(path.clone());
            return;
        }
        let full = if n == 32 { !0 } else { (1u32 << n) - 1 };
        let mut free = full & !(cols | left | right);
        while free != 0 {
            let col = free.trailing_zeros();
            free &= free - 1;
            let bit = 1 << col;
            path.push(col as u8);
            go(n, cols | bit, (left | bit) << 1, (right | bit) >> 1, path, out);
            path.pop();
        }
    }
    let mut out = Vec::new();
    go(n, 0, 0, 0, &mut Vec::new(), &mut out);
    Ok(out)
}
