//! Which device to use and what it is: the plain types the backends and callers share (the
//! backends fill in a [`DeviceInfo`]; opening one is `open_device` in `lib.rs`, above them).

use std::fmt;

/// Which device to use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DeviceSelector {
    /// The first GPU of all platforms, else the first device of any kind.
    #[default]
    Auto,
    /// The first GPU (or accelerator card) of all platforms, never a CPU device such as pocl's
    /// (slower than the CPU solver on the same cores): what a worker's `--gpu auto` wants.
    GpuOnly,
    /// The OpenCL device at this position in [`crate::list_devices`].
    Index(usize),
    /// The CUDA device with this ordinal, driven through the CUDA driver API with the kernel
    /// compiled by NVRTC (for cards whose OpenCL is missing or lags).
    Cuda(usize),
}

impl std::str::FromStr for DeviceSelector {
    type Err = String;

    /// `auto`, `gpu`, an OpenCL device index, or `cuda` / `cuda:ORDINAL`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = |other: &str| {
            format!("{other:?} is not `auto`, `gpu`, a device index, `cuda` or `cuda:ORDINAL`")
        };
        match s.trim() {
            "auto" => Ok(DeviceSelector::Auto),
            "gpu" => Ok(DeviceSelector::GpuOnly),
            "cuda" => Ok(DeviceSelector::Cuda(0)),
            other => match other.strip_prefix("cuda:") {
                Some(ordinal) => ordinal.parse().map(DeviceSelector::Cuda).map_err(|_| bad(other)),
                None => other.parse().map(DeviceSelector::Index).map_err(|_| bad(other)),
            },
        }
    }
}

/// Kind of a device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeviceKind {
    /// A graphics card.
    Gpu,
    /// A CPU (such as pocl's).
    Cpu,
    /// An accelerator card.
    Accelerator,
    /// Anything else.
    Other,
}

impl fmt::Display for DeviceKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            DeviceKind::Gpu => "GPU",
            DeviceKind::Cpu => "CPU",
            DeviceKind::Accelerator => "accelerator",
            DeviceKind::Other => "other",
        })
    }
}

/// One device, as [`crate::list_devices`] reports it or as it was opened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceInfo {
    /// Position in [`crate::list_devices`] (for [`DeviceSelector::Index`]), or the CUDA ordinal.
    pub index: usize,
    /// Name of its platform (the OpenCL driver, or CUDA with the driver's and NVRTC's versions).
    pub platform: String,
    /// Device name.
    pub name: String,
    /// Kind of device.
    pub kind: DeviceKind,
    /// Compute units (streaming multiprocessors, cores).
    pub compute_units: u32,
    /// Global memory in bytes.
    pub global_mem_bytes: u64,
    /// Largest single buffer in bytes.
    pub max_alloc_bytes: u64,
    /// Local (shared) memory per work group in bytes.
    pub local_mem_bytes: u64,
    /// Version string of the device (OpenCL version, or CUDA compute capability).
    pub version: String,
}

impl fmt::Display for DeviceInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "#{} {} ({}, {}, {} compute units, {} MiB)",
            self.index,
            self.name,
            self.kind,
            self.platform,
            self.compute_units,
            self.global_mem_bytes >> 20
        )
    }
}

#[cfg(test)]
mod tests {
    use super::DeviceSelector;

    #[test]
    fn selectors_parse() {
        let parse = |s: &str| s.parse::<DeviceSelector>();
        assert_eq!(parse("auto"), Ok(DeviceSelector::Auto));
        assert_eq!(parse("gpu"), Ok(DeviceSelector::GpuOnly));
        assert_eq!(parse(" 2 "), Ok(DeviceSelector::Index(2)));
        assert_eq!(parse("cuda"), Ok(DeviceSelector::Cuda(0)));
        assert_eq!(parse("cuda:3"), Ok(DeviceSelector::Cuda(3)));
        for bad in ["cuda:", "cuda:x", "-1", "opencl", ""] {
            let e = parse(bad).unwrap_err();
            assert!(e.contains("cuda:ORDINAL"), "{bad:?}: {e}");
        }
    }
}
