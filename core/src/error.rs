use thiserror::Error;

/// Everything that can go wrong in the core library.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum CoreError {
    /// The board size is outside what the 32-bit masks can represent.
    #[error("board size N={n} is out of range: N must be between {min} and {max}")]
    BoardSize { n: i64, min: u32, max: u32 },
    /// A count or a sum of counts does not fit its integer type.
    #[error("count overflow: {what} does not fit its integer type")]
    Overflow { what: &'static str },
    /// A job does not describe a valid pre-placement for its board.
    #[error("invalid job: {reason}")]
    InvalidJob { reason: String },
    /// A sizing estimate could not be made.
    #[error("estimate: {reason}")]
    Estimate { reason: String },
    /// Aggregated counts contradict the symmetry identities (a lost, doubled or wrong result).
    #[error("inconsistent totals: {reason}")]
    Inconsistent { reason: String },
}
