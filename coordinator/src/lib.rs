//! The coordinator library: the cluster's server behind `nqueens-coordinator serve` (the binary is
//! the `nqueens-cli` package) and the status views that the binary and the end-to-end tests read.
//! The modules are private; what the binary and the tests use of them is re-exported here or is
//! in the few public modules. Nothing of other crates is re-exported: a run's result, its export
//! and `verify` are `nqueens_result`'s, the state file is `nqueens_store`'s.

mod accept;
pub mod admin;
mod engine;
pub mod fd_limit;
mod grpc;
mod http;
mod metrics;
mod referee;
mod secrets;
mod server;
mod snapshot;
mod spot_checks;
mod status;
mod waiting;

pub use grpc::GrpcLimits;
pub use http::{escape_html, MAX_CONNECTIONS as MAX_HTTP_CONNECTIONS};
pub use server::{
    check_target_jobs, default_http_listen, result_file, serve, CheckedServeConfig, ServeConfig,
    ServeConfigError, ServeError, DEFAULT_HTTP_PORT, MAX_TARGET_JOBS,
};
pub use snapshot::fleet::{Fleet, WorkerQuery};
pub use snapshot::{LiveFigures, Progress, RunSnapshot, WorkerView};
pub use status::{Origin, RowFigures, StatusView};
