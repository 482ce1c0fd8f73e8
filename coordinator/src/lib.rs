//! The coordinator library: everything behind the `nqueens-coordinator` binary (`src/cli/`) that
//! the binary and the end-to-end tests drive. The modules are private; what they may use is
//! re-exported here or through the few public modules.

mod accept;
pub mod admin;
mod engine;
mod grpc;
mod http;
mod metrics;
mod referee;
mod run_result;
mod secrets;
mod server;
mod snapshot;
mod spot_checks;
mod status;
mod verify;

pub use grpc::GrpcLimits;
pub use http::escape_html;
pub use run_result::{hms, RunResult};
pub use server::{
    check_target_jobs, default_http_listen, result_file, serve, ConfigError, ServeConfig,
    ServeError, DEFAULT_HTTP_PORT, MAX_TARGET_JOBS,
};
pub use snapshot::{Progress, RunSnapshot, WorkerView};
pub use status::{Source, StatusReport, StatusView};
pub use verify::{verify_state, Sample, Verification, VerifyError};
// The store as the end-to-end tests and tools drive it.
pub use nqueens_store::{LocalCheckpoint, RunKind, Store, StoreError, WorkerRow};
