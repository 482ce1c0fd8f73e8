//! What both binaries do as processes, kept out of the libraries (which take a shutdown future and
//! log through `tracing` without choosing where it goes) and out of the gRPC contract crate.

use std::future::Future;
use std::io::IsTerminal;

/// Logs to stderr, filtered by `RUST_LOG` (or `default_filter` when it is unset), coloured only on
/// a terminal and never when `NO_COLOR` is set (<https://no-color.org>), so log files and
/// `docker logs` stay plain text.
pub fn init_logging(default_filter: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default_filter));
    let no_color = std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty());
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal() && !no_color)
        .init();
}

/// Resolves on SIGTERM or Ctrl-C: how a terminal, systemd, Kubernetes, Slurm or Docker asks the
/// process to stop. The SIGTERM handler is installed when this is called, not when the future is
/// first polled, so a stop that arrives while a server is still starting is not lost (it would
/// otherwise kill the process outright). Call it inside a tokio runtime.
pub fn shutdown_signal() -> impl Future<Output = ()> {
    use tokio::signal::unix::{signal, SignalKind};
    let term = signal(SignalKind::terminate());
    async move {
        match term {
            Ok(mut term) => tokio::select! {
                _ = term.recv() => {}
                _ = tokio::signal::ctrl_c() => {}
            },
            Err(_) => drop(tokio::signal::ctrl_c().await),
        }
    }
}
