//! What a worker is told: where the coordinator is, how many threads, how to authenticate; and the
//! checks that turn a setting that can never work into an error before anything connects.

use nqueens_proto as pb;
use std::time::Duration;
use thiserror::Error;

/// How many CPU threads' worth of jobs a GPU asks for, unless told (`--gpu-slots`): the one
/// source of this default, for [`WorkerConfig::new`] and the command line alike.
pub const DEFAULT_GPU_SLOTS: usize = 256;
/// The longest wait between reconnect attempts, unless told (`--max-backoff-seconds`).
pub const DEFAULT_MAX_BACKOFF: Duration = Duration::from_secs(5);

/// Settings of one worker; [`WorkerConfig::check`] makes them a [`CheckedWorkerConfig`], what
/// [`crate::run`] takes, or says why they cannot work.
#[derive(Debug, Clone)]
pub struct WorkerConfig {
    /// Coordinator URL (`http://host:7447`, or `https://` with `tls_ca`; a bare `host:port` means
    /// http).
    pub connect: String,
    /// Threads of the CPU lane, at least 1. Not the lease slots the worker declares
    /// (`RegisterRequest.slots`), though without a GPU they are as many; with one, the slots are
    /// `gpu_slots` plus these threads if `cpu_beside_gpu`.
    pub threads: usize,
    /// Shared secret of the coordinator, sent with every call; printable ASCII.
    pub token: Option<String>,
    /// Name shown in the coordinator's `status` (default: the host name).
    pub name: String,
    /// PEM of the CA that signed the coordinator's certificate.
    pub tls_ca: Option<Vec<u8>>,
    /// Longest wait between reconnect attempts.
    pub max_backoff: Duration,
    /// Whether to count on a GPU.
    pub gpu: GpuMode,
    /// With a GPU in use: whether `threads` CPU threads also take leased jobs (else the CPU pool
    /// only re-solves the jobs of a GPU fault).
    pub cpu_beside_gpu: bool,
    /// With a GPU in use: how many CPU threads' worth of jobs the GPU asks the coordinator for
    /// (the lease size follows the slots a worker declares).
    pub gpu_slots: usize,
}

/// Whether a worker counts on a GPU (`--gpu`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum GpuMode {
    /// CPU only.
    #[default]
    Off,
    /// The first GPU found, if any (else CPU only, and the log says so); never an OpenCL CPU
    /// device such as pocl's, which is slower than the CPU solver.
    Auto,
    /// The OpenCL device with this index (in the order of the OpenCL platforms and their
    /// devices); not usable is an error at start.
    Index(usize),
    /// The CUDA device with this ordinal, through the CUDA driver and NVRTC (cards whose OpenCL
    /// is missing); not usable is an error at start.
    Cuda(usize),
}

/// The form [`GpuMode`]'s `FromStr` reads back (`--gpu`'s default is written this way).
impl std::fmt::Display for GpuMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            GpuMode::Off => f.write_str("off"),
            GpuMode::Auto => f.write_str("auto"),
            GpuMode::Index(i) => write!(f, "{i}"),
            GpuMode::Cuda(ordinal) => write!(f, "cuda:{ordinal}"),
        }
    }
}

impl std::str::FromStr for GpuMode {
    type Err = String;

    /// `off`, `auto`, an OpenCL device index, or `cuda` / `cuda:ORDINAL`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = |other: &str| {
            format!("{other:?} is not `auto`, `off`, a device index, `cuda` or `cuda:ORDINAL`")
        };
        // Device names as the GPU crate reads them; a worker's `auto` is its own (a GPU only).
        match s.trim() {
            "off" => Ok(GpuMode::Off),
            "auto" => Ok(GpuMode::Auto),
            other => match other.parse::<nqueens_gpu::DeviceSelector>() {
                Ok(nqueens_gpu::DeviceSelector::Index(i)) => Ok(GpuMode::Index(i)),
                Ok(nqueens_gpu::DeviceSelector::Cuda(ordinal)) => Ok(GpuMode::Cuda(ordinal)),
                _ => Err(bad(other)),
            },
        }
    }
}

impl WorkerConfig {
    /// Settings for `threads` solver threads against `connect`, named after this host, without
    /// token, TLS or GPU, with the defaults [`DEFAULT_MAX_BACKOFF`] and [`DEFAULT_GPU_SLOTS`].
    pub fn new(connect: impl Into<String>, threads: usize) -> Self {
        WorkerConfig {
            connect: connect.into(),
            threads,
            token: None,
            name: host_name(),
            tls_ca: None,
            max_backoff: DEFAULT_MAX_BACKOFF,
            gpu: GpuMode::default(),
            cpu_beside_gpu: false,
            gpu_slots: DEFAULT_GPU_SLOTS,
        }
    }

    /// Checks the settings once, rejecting those that no retry can make work, so that a typo is
    /// one clear error at start instead of a worker that reconnects forever: what passes is
    /// what [`crate::run`] runs.
    pub fn check(self) -> Result<CheckedWorkerConfig, WorkerConfigError> {
        self.validate()?;
        Ok(CheckedWorkerConfig(self))
    }

    fn validate(&self) -> Result<(), WorkerConfigError> {
        let url = self.connect.trim();
        if url.is_empty() {
            return Err(WorkerConfigError::NoUrl);
        }
        let full = if url.contains("://") { url.to_owned() } else { format!("http://{url}") };
        tonic::transport::Endpoint::from_shared(full.clone())
            .map_err(|source| WorkerConfigError::BadUrl { url: url.to_owned(), source })?;
        if full.starts_with("https://") && self.tls_ca.is_none() {
            return Err(WorkerConfigError::HttpsWithoutCa { url: url.to_owned() });
        }
        if self.tls_ca.as_ref().is_some_and(|pem| !is_pem_certificate(pem)) {
            return Err(WorkerConfigError::CaNotPem);
        }
        if self.threads == 0 {
            return Err(WorkerConfigError::NoThreads);
        }
        if self.gpu != GpuMode::Off && self.gpu_slots == 0 {
            return Err(WorkerConfigError::NoGpuSlots);
        }
        if pb::TokenInterceptor::new(self.token.as_deref()).is_err() {
            return Err(WorkerConfigError::BadToken);
        }
        Ok(())
    }
}

/// A [`WorkerConfig`] whose settings [`WorkerConfig::check`] passed: what [`crate::run`] takes,
/// so that the binary checks them before it logs anything and nothing checks them again.
#[derive(Debug, Clone)]
pub struct CheckedWorkerConfig(pub(crate) WorkerConfig);

impl std::ops::Deref for CheckedWorkerConfig {
    type Target = WorkerConfig;

    fn deref(&self) -> &WorkerConfig {
        &self.0
    }
}

/// A setting that cannot work, found by [`WorkerConfig::check`].
#[derive(Debug, Error)]
pub enum WorkerConfigError {
    /// The coordinator URL is empty.
    #[error("no coordinator URL (--connect), e.g. http://coordinator-host:7447")]
    NoUrl,
    /// The coordinator URL does not parse.
    #[error("the coordinator URL {url:?} is not a valid URL")]
    BadUrl {
        /// The URL as given.
        url: String,
        /// Why it does not parse.
        #[source]
        source: tonic::transport::Error,
    },
    /// `https://` needs the CA that signed the coordinator's certificate.
    #[error("the coordinator URL {url} is https:// but no CA certificate was given (--tls-ca)")]
    HttpsWithoutCa {
        /// The URL as given.
        url: String,
    },
    /// The CA file holds no PEM certificate.
    #[error("the CA file holds no PEM certificate (-----BEGIN CERTIFICATE-----)")]
    CaNotPem,
    /// Zero solver threads.
    #[error("--threads must be at least 1 (the worker needs a solver thread)")]
    NoThreads,
    /// A GPU that asks for no jobs.
    #[error("--gpu-slots must be at least 1")]
    NoGpuSlots,
    /// The token cannot be sent as a gRPC header.
    #[error("the token must be printable ASCII")]
    BadToken,
}

fn is_pem_certificate(pem: &[u8]) -> bool {
    pem.windows(27).any(|w| w == b"-----BEGIN CERTIFICATE-----")
}

/// This machine's host name, as the default worker name and the `host` it registers with.
pub(crate) fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|s| s.trim().to_owned())
        .filter(|s| !s.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_else(|| "worker".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(url: &str) -> WorkerConfig {
        WorkerConfig::new(url, 1)
    }

    #[test]
    fn plain_urls_pass() {
        for url in ["http://127.0.0.1:7447", "coord:7447", "http://[::1]:7447"] {
            config(url).check().unwrap_or_else(|e| panic!("{url}: {e}"));
        }
    }

    #[test]
    fn settings_that_cannot_work_are_refused() {
        assert!(matches!(config("  ").check(), Err(WorkerConfigError::NoUrl)));
        assert!(matches!(config("http://a b").check(), Err(WorkerConfigError::BadUrl { .. })));
        assert!(matches!(
            config("https://c:1").check(),
            Err(WorkerConfigError::HttpsWithoutCa { .. })
        ));
        let mut c = config("https://c:1");
        c.tls_ca = Some(b"not a certificate".to_vec());
        assert!(matches!(c.clone().check(), Err(WorkerConfigError::CaNotPem)));
        c.tls_ca = Some(b"-----BEGIN CERTIFICATE-----\nMII=\n-----END CERTIFICATE-----\n".to_vec());
        c.clone().check().unwrap();
        let mut c = config("c:1");
        c.threads = 0;
        assert!(matches!(c.clone().check(), Err(WorkerConfigError::NoThreads)));
        c.threads = 1;
        c.token = Some("line\nbreak".into());
        assert!(matches!(c.check(), Err(WorkerConfigError::BadToken)));
    }
}

#[cfg(test)]
mod gpu_mode_tests {
    use super::GpuMode;

    #[test]
    fn gpu_modes_parse() {
        let parse = |s: &str| s.parse::<GpuMode>();
        assert_eq!(parse("off"), Ok(GpuMode::Off));
        assert_eq!(parse("auto"), Ok(GpuMode::Auto));
        assert_eq!(parse("1"), Ok(GpuMode::Index(1)));
        assert_eq!(parse("cuda"), Ok(GpuMode::Cuda(0)));
        assert_eq!(parse("cuda:2"), Ok(GpuMode::Cuda(2)));
        for mode in [GpuMode::Off, GpuMode::Auto, GpuMode::Index(3), GpuMode::Cuda(1)] {
            assert_eq!(parse(&mode.to_string()), Ok(mode));
        }
        for bad in ["gpu", "cuda:x", "", "-1"] {
            assert!(parse(bad).unwrap_err().contains("cuda:ORDINAL"), "{bad:?}");
        }
    }
}
