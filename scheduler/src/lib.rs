//! The scheduler of a cluster run: the job state machine (pending -> leased -> done, held,
//! failed), leases, trust and probation, spot checks and pace. Pure bookkeeping: it never touches
//! the disk, the network or a clock of its own; the coordinator's engine drives it and commits the
//! [`Change`]s it returns.

mod ids;
mod lifecycle;
pub mod state;

pub use ids::{JobId, LeaseId, WorkerId, COORDINATOR};
pub use lifecycle::*;
pub use state::{JobState, JobsByState, ResultKind};
