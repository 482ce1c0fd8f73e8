//! Board size limits: one bit per column in a `u32` mask.

use crate::CoreError;

/// Smallest board size.
pub const MIN_N: u32 = 1;
/// Largest board size the 32-bit column masks can represent.
pub const MAX_N: u32 = 32;

/// Checks that `n` is a board size this library can count, returning it as `u8`.
pub fn check_board_size(n: i64) -> Result<u8, CoreError> {
    if (MIN_N as i64..=MAX_N as i64).contains(&n) {
        Ok(n as u8)
    } else {
        Err(CoreError::BoardSize { n, min: MIN_N, max: MAX_N })
    }
}

/// A queen's square: `(row, column)`.
pub(crate) type Cell = (u8, u8);
