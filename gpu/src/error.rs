use nqueens_core::CoreError;
use thiserror::Error;

/// Everything that can go wrong on the GPU path. Every error ends the call that met it: a batch
/// that saw an error yields no counts at all.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum GpuError {
    /// No GPU library could be loaded (OpenCL's loader, CUDA's driver or NVRTC), or it lists no
    /// platform (no driver installed).
    #[error("no GPU platform: {reason}")]
    NoPlatform {
        /// What was missing.
        reason: String,
    },
    /// No device matches the selection.
    #[error("no GPU device: {reason}")]
    NoDevice {
        /// What was asked for and what exists.
        reason: String,
    },
    /// The kernel did not compile for the device.
    #[error("the GPU kernel failed to build on {device}:\n{log}")]
    BuildFailed {
        /// The device it was built for.
        device: String,
        /// The compiler's log.
        log: String,
    },
    /// The device has not enough memory for a batch (or reported running out).
    #[error("out of device memory: {what}")]
    OutOfMemory {
        /// What did not fit.
        what: String,
    },
    /// The device stopped answering or reported a failed kernel (a crash or watchdog reset).
    #[error("GPU device lost while {what} ({api} error {code})")]
    DeviceLost {
        /// The API that reported it (OpenCL or CUDA).
        api: &'static str,
        /// The API's error code.
        code: i32,
        /// What the host was doing.
        what: String,
    },
    /// Any other error of the device's API.
    #[error("{api} error {code} ({name}) while {what}")]
    Runtime {
        /// The API that reported it (OpenCL or CUDA).
        api: &'static str,
        /// The API's error code.
        code: i32,
        /// Its name.
        name: String,
        /// What the host was doing.
        what: String,
    },
    /// A batch ended with an item never counted (a kernel that stopped early): no result.
    #[error("the device finished a batch with item {item} not counted")]
    Incomplete {
        /// Index of the first uncounted item in its batch.
        item: usize,
    },
    /// A job is invalid (the CPU solver refuses it too).
    #[error(transparent)]
    Job(#[from] CoreError),
    /// An option that cannot work.
    #[error("GPU options: {reason}")]
    Config {
        /// Why.
        reason: String,
    },
}

impl GpuError {
    /// The error for OpenCL status `code` met while doing `what`.
    pub(crate) fn from_cl(code: i32, what: &str) -> GpuError {
        let what = what.to_owned();
        match code {
            // CL_MEM_OBJECT_ALLOCATION_FAILURE, CL_OUT_OF_HOST_MEMORY, CL_INVALID_BUFFER_SIZE
            -4 | -6 | -61 => {
                GpuError::OutOfMemory { what: format!("{what} (OpenCL error {code})") }
            }
            // CL_OUT_OF_RESOURCES: how NVIDIA reports a kernel that crashed or was killed;
            // CL_DEVICE_NOT_AVAILABLE; -9999: NVIDIA's code for an illegal access / lost device.
            -5 | -2 | -9999 => GpuError::DeviceLost { api: "OpenCL", code, what },
            _ => GpuError::Runtime {
                api: "OpenCL",
                code,
                name: opencl3::error_codes::error_text(code).to_owned(),
                what,
            },
        }
    }

    /// The error for CUDA driver status `code` (named `name`) met while doing `what`.
    pub(crate) fn from_cuda(code: i32, name: String, what: &str) -> GpuError {
        let what = what.to_owned();
        match code {
            // CUDA_ERROR_OUT_OF_MEMORY
            2 => GpuError::OutOfMemory { what: format!("{what} (CUDA error {code}, {name})") },
            // ECC uncorrectable, illegal address, launch out of resources, launch timeout (the
            // watchdog), launch failed, illegal instruction and the other sticky kernel faults.
            214 | 700 | 701 | 702 | 714..=720 => GpuError::DeviceLost { api: "CUDA", code, what },
            _ => GpuError::Runtime { api: "CUDA", code, name, what },
        }
    }

    /// The same error, its reason followed by `note` (for a platform or device that was not
    /// found, with why the other API did not serve either).
    pub(crate) fn with_note(self, note: &str) -> GpuError {
        match self {
            GpuError::NoPlatform { reason } => {
                GpuError::NoPlatform { reason: format!("{reason}; {note}") }
            }
            GpuError::NoDevice { reason } => {
                GpuError::NoDevice { reason: format!("{reason}; {note}") }
            }
            other => other,
        }
    }

    /// Whether the device may work again for another batch (false after a lost device or a
    /// build failure: those do not heal).
    pub fn is_device_fatal(&self) -> bool {
        !matches!(self, GpuError::Job(_) | GpuError::OutOfMemory { .. })
    }
}
