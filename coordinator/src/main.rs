//! `nqueens-coordinator`: the one-machine `solve` command and the cluster coordinator.

mod cluster;
mod solve;

use clap::{Parser, Subcommand};
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "nqueens-coordinator",
    version,
    about = "Count N-Queens solutions on one machine or across a cluster"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Solve board sizes on this machine with all local cores (no network).
    Solve(solve::SolveArgs),
    /// Coordinate a cluster run: create or resume the run in --state and hand its jobs to workers.
    Serve(cluster::ServeArgs),
    /// Show progress of a run, from a live coordinator (--connect) or a state file (--state).
    Status(cluster::StatusArgs),
    /// Give held and failed jobs of a stopped run another attempt (all of them, or --held / --failed).
    Requeue(cluster::RequeueArgs),
    /// Exit 0 if the coordinator's gRPC health service reports SERVING (for container health checks).
    Healthcheck(cluster::HealthcheckArgs),
}

fn main() -> ExitCode {
    // A file-size limit (`ulimit -f`) must fail the write, which the store reports and `serve`
    // exits on, rather than kill the process with SIGXFSZ in the middle of a transaction.
    // SAFETY: called before any other thread exists; SIG_IGN installs no handler code.
    unsafe {
        libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
    }
    let cli = Cli::parse();
    // `solve` prints its answer on stdout and keeps stderr for the progress bar: quiet by default.
    let default_filter = match cli.command {
        Command::Solve(_) => "warn",
        _ => "warn,nqueens_coordinator=info,nqueens_core=info",
    };
    nqueens_process::init_logging(default_filter);
    let result = match cli.command {
        Command::Solve(args) => solve::run(args),
        Command::Serve(args) => cluster::serve(args),
        Command::Status(args) => cluster::status(args),
        Command::Requeue(args) => cluster::requeue(args),
        Command::Healthcheck(args) => cluster::healthcheck(args),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(1)
        }
    }
}
