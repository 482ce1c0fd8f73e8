//! `nqueens-worker`: connects to a coordinator and solves leased jobs until the run is complete.

use anyhow::{Context, Result};
use clap::Parser;
use nqueens_worker::{run, WorkerConfig, WorkerExit};
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
    /// Longest wait between reconnect attempts, in seconds.
    #[arg(long, env = "NQ_MAX_BACKOFF_SECONDS", default_value_t = 5)]
    max_backoff_seconds: u64,
}

fn main() -> ExitCode {
    let args = Args::parse();
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn,nqueens_worker=info"));
    tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).init();
    match start(args) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(2)
        }
    }
}

fn start(args: Args) -> Result<ExitCode> {
    let threads = match args.threads {
        Some(0) => anyhow::bail!("--threads must be at least 1"),
        Some(t) => t,
        None => std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1),
    };
    let mut config = WorkerConfig::new(args.connect, threads);
    config.token = args.token.filter(|t| !t.is_empty());
    if let Some(name) = args.name {
        config.name = name;
    }
    config.tls_ca =
        args.tls_ca.as_ref().map(std::fs::read).transpose().context("reading --tls-ca")?;
    config.max_backoff = Duration::from_secs(args.max_backoff_seconds.max(1));
    // Networking gets its own two threads, separate from the solver pool, so heartbeats are never
    // starved by the solving.
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("starting the tokio runtime")?;
    let outcome = runtime.block_on(run(config, shutdown_signal()))?;
    match outcome {
        WorkerExit::RunComplete => eprintln!("run complete"),
        WorkerExit::Stopped => eprintln!("stopped"),
    }
    Ok(ExitCode::SUCCESS)
}

/// Resolves on SIGTERM or Ctrl-C: how a terminal, systemd, Kubernetes, Slurm or Docker asks the
/// process to stop.
async fn shutdown_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    match signal(SignalKind::terminate()) {
        Ok(mut term) => tokio::select! { _ = term.recv() => {}, _ = tokio::signal::ctrl_c() => {} },
        Err(_) => drop(tokio::signal::ctrl_c().await),
    }
}
