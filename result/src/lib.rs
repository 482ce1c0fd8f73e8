//! A run's result, and the checks anyone can make of it on one machine: the result record
//! written beside a state file (`run_result.rs`), the export of a run's counted jobs with the
//! digest that ties a published total to it (`export.rs`), `verify --state` (`verify.rs`: counted
//! jobs solved again from the state file) and `verify --export` (`verify_export.rs`: an export
//! checked from the file alone).
//!
//! It knows nothing of the network: the cluster coordinator writes its result through it, and the
//! one-machine commands (`solve`, `verify`, `export`) use it without a port or a runtime.

mod export;
mod export_checks;
mod run_result;
mod verify;
mod verify_export;

pub use export::{
    export_digest, export_state, read_export, ExportEnd, ExportError, ExportHeader, ExportRow,
    Exported, ReadExport, EXPORT_FORMAT, EXPORT_VERSION,
};
pub use run_result::{hms, PublishedCheck, PublishedOutcome, RunResult};
pub use verify::{verify_state, Sample, Verification, VerifyError};
pub use verify_export::{fresh_seed, verify_export, ExportVerification, RowSample, WrongRow};
