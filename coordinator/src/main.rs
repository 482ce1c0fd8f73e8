//! `nqueens-coordinator`: the one-machine `solve` command and the cluster coordinator.

mod solve;

use clap::{Parser, Subcommand};
use std::process::ExitCode;

#[derive(Parser)]
#[command(name = "nqueens-coordinator", version, about = "Count N-Queens solutions on one machine or across a cluster")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Solve board sizes on this machine with all local cores (no network).
    Solve(solve::SolveArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    init_tracing();
    let result = match cli.command {
        Command::Solve(args) => solve::run(args),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(1)
        }
    }
}

/// Logs go to stderr, filtered by RUST_LOG (default: info for our crates, warn for the rest).
fn init_tracing() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn,nqueens_coordinator=info,nqueens_core=info"));
    tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).init();
}
