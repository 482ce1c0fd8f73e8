//! `nqueens-worker`: connects to a coordinator and solves leased jobs until the run is complete.

use anyhow::{Context, Result};
use clap::Parser;
use nqueens_process::shutdown_signal;
use nqueens_worker::{
    run, CheckedWorkerConfig, GpuMode, WorkerConfig, WorkerExit, DEFAULT_GPU_SLOTS,
    DEFAULT_MAX_BACKOFF,
};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

#[derive(Parser, Debug)]
#[command(
    name = "nqueens-worker",
    version,
    about = "Lease N-Queens jobs from a coordinator and solve them on this machine's cores"
)]
struct Args {
    /// Coordinator URL, e.g. http://coord:7447 (https:// needs --tls-ca).
    #[arg(long, env = "NQ_CONNECT")]
    connect: String,
    /// Solver threads (default: all available cores).
    #[arg(long, env = "NQ_THREADS")]
    threads: Option<usize>,
    /// Shared secret of the coordinator.
    #[arg(long, env = "NQ_TOKEN", hide_env_values = true)]
    token: Option<String>,
    /// Name shown in `status` (default: the host name).
    #[arg(long, env = "NQ_NAME")]
    name: Option<String>,
    /// PEM of the CA that signed the coordinator's TLS certificate.
    #[arg(long, env = "NQ_TLS_CA")]
    tls_ca: Option<PathBuf>,
    /// Count on a GPU: `auto` (also a bare `--gpu`) uses the first GPU found (OpenCL, else CUDA)
    /// and says so, or the CPU if there is none (an OpenCL CPU device such as pocl's is not
    /// taken); INDEX an OpenCL device by number, `cuda` or `cuda:ORDINAL` a CUDA device through
    /// the CUDA driver and NVRTC (an error if unusable); `off` the CPU only. With a GPU, CPU
    /// threads solve beside it only if --threads is given.
    #[arg(long, env = "NQ_GPU", value_name = "auto|INDEX|cuda[:ORDINAL]|off", num_args = 0..=1, default_missing_value = "auto", default_value_t = GpuMode::default())]
    gpu: GpuMode,
    /// With a GPU: how many CPU threads' worth of jobs to lease for it.
    #[arg(long, env = "NQ_GPU_SLOTS", default_value_t = DEFAULT_GPU_SLOTS)]
    gpu_slots: usize,
    /// Longest wait between reconnect attempts, in seconds.
    #[arg(long, env = "NQ_MAX_BACKOFF_SECONDS", default_value_t = DEFAULT_MAX_BACKOFF.as_secs())]
    max_backoff_seconds: u64,
}

fn main() -> ExitCode {
    let args = Args::parse();
    // Settings are checked before the first log line, so a typo is one clear error and no more.
    let config = match settings(args) {
        Ok(config) => config,
        Err(e) => return fail(e),
    };
    nqueens_process::init_logging("warn,nqueens_worker=info");
    match start(config) {
        Ok(code) => code,
        Err(e) => fail(e),
    }
}

/// Prints the error chain once, each layer's context followed by its cause; exit code 2.
fn fail(e: anyhow::Error) -> ExitCode {
    eprintln!("error: {e:#}");
    ExitCode::from(2)
}

/// The worker's settings from the command line, checked once: nothing has been logged or
/// connected yet.
fn settings(args: Args) -> Result<CheckedWorkerConfig> {
    let threads =
        args.threads.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    let mut config = WorkerConfig::new(args.connect, threads);
    config.gpu = args.gpu;
    config.cpu_beside_gpu = args.threads.is_some();
    config.gpu_slots = args.gpu_slots;
    config.token = args.token.filter(|t| !t.is_empty());
    if let Some(name) = args.name {
        config.name = name;
    }
    if let Some(path) = &args.tls_ca {
        let pem =
            std::fs::read(path).with_context(|| format!("reading --tls-ca {}", path.display()))?;
        config.tls_ca = Some(pem);
    }
    config.max_backoff = Duration::from_secs(args.max_backoff_seconds.max(1));
    Ok(config.check()?)
}

fn start(config: CheckedWorkerConfig) -> Result<ExitCode> {
    // Networking gets its own two threads, separate from the solver pool, so heartbeats are never
    // starved by the solving.
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("starting the tokio runtime")?;
    let outcome = runtime.block_on(async { run(config, shutdown_signal()).await })?;
    match outcome {
        WorkerExit::RunComplete => eprintln!("run complete"),
        WorkerExit::Stopped => eprintln!("stopped"),
    }
    Ok(ExitCode::SUCCESS)
}
