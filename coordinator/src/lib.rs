//! The coordinator library: everything behind the `nqueens-coordinator` binary that other crates
//! (the end-to-end tests) may want to drive directly.

pub mod report;
