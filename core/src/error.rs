use thiserror::Error;

/// Everything that can go wrong in the core library.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum CoreError {
    /// The board size is outside what the 32-bit masks can represent.
    #[error("board size N={n} is out of range: N must be between {min} and {max}")]
    BoardSize {
        /// The size asked for.
        n: i64,
        /// The smallest size supported.
        min: u32,
        /// The largest size supported.
        max: u32,
    },
    /// A count or a sum of counts does not fit its integer type.
    #[error("count overflow: {what} does not fit its integer type")]
    Overflow {
        /// The count that overflowed.
        what: &'static str,
    },
    /// A job does not describe a valid pre-placement for its board.
    #[error("invalid job: {reason}")]
    InvalidJob {
        /// What is wrong with it.
        reason: String,
    },
    /// A sizing estimate could not be made.
    #[error("estimate: {reason}")]
    Estimate {
        /// Why not.
        reason: String,
    },
    /// Aggregated counts contradict the symmetry identities (a lost, doubled or wrong result).
    #[error("inconsistent totals: {reason}")]
    Inconsistent {
        /// Which identity fails, with the numbers.
        reason: String,
    },
}
