//! The coordinator library: the cluster's server behind `nqueens-coordinator serve` (the binary is
//! the `nqueens-cli` package) and the status views that the binary and the end-to-end tests read.
//! The modules are private; what they may use is re-exported here or through the few public
//! modules.

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
pub use snapshot::{Progress, RunSnapshot, WorkerView};
pub use status::StatusView;
// A run's result and its checks live in their own crate (no network); re-exported for the binary
// and the tests.
pub use nqueens_result::{
    export_state, fresh_seed, hms, read_export, verify_export, verify_state, ExportEnd,
    ExportError, ExportHeader, ExportRow, ExportVerification, Exported, ReadExport, RowSample,
    RunResult, Sample, Verification, VerifyError, WrongRow, EXPORT_FORMAT, EXPORT_VERSION,
};
// The store as the end-to-end tests and tools drive it.
pub use nqueens_store::{
    Evidence, LocalCheckpoint, RunKind, RunPolicy, Store, StoreError, WorkerRow,
};
