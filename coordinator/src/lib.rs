//! The coordinator library: everything behind the `nqueens-coordinator` binary that other crates
//! (the end-to-end tests) may want to drive directly.

pub mod accept;
pub mod engine;
pub mod grpc_conn;
pub mod http;
pub mod metrics;
pub mod referee;
pub mod reference;
pub mod report;
pub mod secrets;
pub mod server;
pub mod service;
pub mod status;
pub mod token;
pub mod verify;
pub mod wire;

pub use server::{
    check_target_jobs, result_file, serve, ConfigError, ServeConfig, ServeError, MAX_TARGET_JOBS,
};
// The store as the end-to-end tests and tools drive it.
pub use nqueens_store::{LocalCheckpoint, RunKind, Store, StoreError, WorkerRow};
