//! The coordinator library: everything behind the `nqueens-coordinator` binary (`src/cli/`) that
//! the binary and the end-to-end tests drive. The modules are private; what they may use is
//! re-exported here or through the few public modules.

mod accept;
pub mod admin;
mod engine;
mod export;
pub mod fd_limit;
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
mod verify_export;
mod waiting;

pub use export::{
    export_state, read_export, ExportEnd, ExportError, ExportHeader, ExportRow, Exported,
    ReadExport, EXPORT_FORMAT, EXPORT_VERSION,
};
pub use grpc::GrpcLimits;
pub use http::{escape_html, MAX_CONNECTIONS as MAX_HTTP_CONNECTIONS};
pub use run_result::{hms, RunResult};
pub use server::{
    check_target_jobs, default_http_listen, result_file, serve, ServeConfig, ServeConfigError,
    ServeError, DEFAULT_HTTP_PORT, MAX_TARGET_JOBS,
};
pub use snapshot::fleet::{Fleet, WorkerQuery};
pub use snapshot::{Progress, RunSnapshot, WorkerView};
pub use status::StatusView;
pub use verify::{verify_state, Sample, Verification, VerifyError};
pub use verify_export::{verify_export, ExportVerification, RowSample, WrongRow};
// The store as the end-to-end tests and tools drive it.
pub use nqueens_store::{
    Evidence, LocalCheckpoint, RunKind, RunPolicy, Store, StoreError, WorkerRow,
};
