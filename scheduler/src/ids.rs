//! The typed ids the scheduler decides over: [`JobId`], [`WorkerId`] and [`LeaseId`] are
//! `nqueens_core`'s, shared with the coordinator and the worker.

pub use nqueens_core::{JobId, LeaseId, WorkerId};

/// Worker id standing for the coordinator itself in result and conflict records.
pub const COORDINATOR: WorkerId = WorkerId::new(0);
