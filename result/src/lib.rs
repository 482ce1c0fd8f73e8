//! A run's result, and the checks anyone can make of it on one machine: the result record
//! written beside a state file (`run_result.rs`), the export of a run's counted jobs with the
//! digest that ties a published total to it (`export.rs`), `verify --state` (`verify.rs`: counted
//! jobs solved again from the state file) and `verify --export` (`verify_export.rs`: an export
//! checked from the file alone).
//!
//! It knows nothing of the network: the cluster coordinator writes its result through it, and the
//! one-machine commands (`solve`, `verify`, `export`) use it without a port or a runtime.
//!
//! The `checks` feature (on by default) holds the one-machine commands: `verify --state`,
//! `verify --export` and writing an export (`export_state`). They rebuild job lists and solve
//! jobs on threads (rayon); without it the crate is the formats alone (the result record, the
//! export's rows and digest, reading an export), what the coordinator needs.

mod export;
#[cfg(feature = "checks")]
mod export_checks;
mod run_result;
#[cfg(feature = "checks")]
mod verify;
#[cfg(feature = "checks")]
mod verify_export;

pub use export::{
    export_digest, read_export, ExportEnd, ExportError, ExportHeader, ExportRow, ReadExport,
    EXPORT_FORMAT, EXPORT_VERSION,
};
#[cfg(feature = "checks")]
pub use export::{export_state, Exported};
pub use run_result::{hms, PublishedCheck, PublishedOutcome, RunResult};
#[cfg(feature = "checks")]
pub use verify::{verify_state, Sample, Verification, VerifyError};
#[cfg(feature = "checks")]
pub use verify_export::{fresh_seed, verify_export, ExportVerification, RowSample, WrongRow};
