//! `nqueens-coordinator`: the one-machine `solve` command and the cluster coordinator.

mod cluster_commands;
mod estimate;
mod solve;
mod token;

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
    Serve(cluster_commands::ServeArgs),
    /// Show progress of a run, from a live coordinator (--connect) or a state file (--state).
    Status(cluster_commands::StatusArgs),
    /// Give held and failed jobs of a stopped run another attempt (all of them, or --held /
    /// --failed).
    Requeue(cluster_commands::RequeueArgs),
    /// Solve a sample (or all) of a run's counted jobs again and compare; list rows whose checksum
    /// fails. Exit 0 only if everything agrees. Read-only: safe beside a running coordinator.
    Verify(VerifyArgs),
    /// Write a run's counted jobs as a file anyone can check without this project (JSON Lines;
    /// gzip for a name ending in .gz): each job's queens, counts, weight and what it rests on,
    /// with the digest the result file publishes. Read-only: safe beside a running coordinator.
    Export(ExportArgs),
    /// Exit 0 if the coordinator's gRPC health service reports SERVING (for container health
    /// checks).
    Healthcheck(cluster_commands::HealthcheckArgs),
    /// Size a run before starting it: solve a stratified sample of the job list of N and project
    /// the CPU time, the longest job (on a core, a host, a card) and the wall time on 8 to 10,000
    /// cores and on 1 to 64 cards.
    Estimate(estimate::EstimateArgs),
    /// Copy a run's state file, safely beside a running coordinator: one consistent snapshot
    /// (what its write-ahead log holds included), written to a new file that opens as the run.
    Backup(cluster_commands::BackupArgs),
    /// Per-host tokens of a run (add, list, revoke): workers under one token never confirm each
    /// other's answers.
    Token(token::TokenArgs),
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
        Command::Solve(_)
        | Command::Estimate(_)
        | Command::Token(_)
        | Command::Backup(_)
        | Command::Export(_) => "warn",
        _ => "warn,nqueens_coordinator=info,nqueens_core=info",
    };
    nqueens_process::init_logging(default_filter);
    let result = match cli.command {
        Command::Solve(args) => solve::run(args),
        Command::Serve(args) => cluster_commands::serve(args),
        Command::Status(args) => cluster_commands::status(args),
        Command::Requeue(args) => cluster_commands::requeue(args),
        Command::Healthcheck(args) => cluster_commands::healthcheck(args),
        Command::Verify(args) => verify(args),
        Command::Export(args) => export(args),
        Command::Estimate(args) => estimate::run(args),
        Command::Token(args) => token::run(args),
        Command::Backup(args) => cluster_commands::backup(args),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(1)
        }
    }
}

#[derive(clap::Args, Debug)]
struct VerifyArgs {
    /// The run's state file (opened read-only).
    #[arg(long, env = "NQ_STATE", default_value = "nqueens.db")]
    state: std::path::PathBuf,
    /// Check an export (from `export`) instead of a state file, from the file alone: its digest,
    /// sums, coverage, published values and every row's bound, and --rows of its rows solved
    /// again from their queens.
    #[arg(long, value_name = "FILE")]
    export: Option<std::path::PathBuf>,
    /// With --export: the published result file whose totals and export_sha256 the export must
    /// give.
    #[arg(long, value_name = "FILE", requires = "export")]
    result: Option<std::path::PathBuf>,
    /// With --export: the seed of the rows' sampling order [default: drawn from the operating
    /// system's entropy and printed, so that nobody can know the rows in advance].
    #[arg(long, requires = "export")]
    seed: Option<u64>,
    /// How many counted jobs (or rows of an export) to solve again, chosen by a pseudo-random
    /// order.
    #[arg(long, visible_alias = "rows", default_value_t = 64, conflicts_with = "all")]
    sample: usize,
    /// Solve every counted job (or every row of an export) again.
    #[arg(long)]
    all: bool,
    /// With --export: solve every K-th row again, from row k-1 (k from 1 to K): K machines with
    /// the shards 1/K to K/K re-solve every row once.
    #[arg(long, value_name = "k/K", requires = "export", conflicts_with_all = ["all", "seed"])]
    shard: Option<String>,
    /// Solver threads [default: all cores].
    #[arg(long, env = "NQ_THREADS")]
    threads: Option<usize>,
    /// One JSON object instead of text.
    #[arg(long)]
    json: bool,
}

/// `k/K`, with 1 <= k <= K.
fn shard(text: &str) -> anyhow::Result<(u64, u64)> {
    let parsed = text.split_once('/').and_then(|(k, of)| Some((k.parse().ok()?, of.parse().ok()?)));
    match parsed {
        Some((index, of)) if 1 <= index && index <= of => Ok((index, of)),
        _ => anyhow::bail!("--shard {text}: expected k/K with 1 <= k <= K, e.g. 3/10"),
    }
}

fn verify(args: VerifyArgs) -> anyhow::Result<ExitCode> {
    use nqueens_result::{verify_state, Sample};
    let threads =
        args.threads.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    anyhow::ensure!(threads > 0, "--threads must be at least 1");
    if let Some(export) = &args.export {
        use nqueens_result::{fresh_seed, verify_export, RowSample};
        let sample = match (&args.shard, args.all, args.seed) {
            (Some(text), _, _) => {
                let (index, of) = shard(text)?;
                RowSample::Shard { index, of }
            }
            (None, true, _) => RowSample::All,
            (None, false, Some(seed)) => RowSample::Rows { count: args.sample, seed, drawn: false },
            (None, false, None) => {
                RowSample::Rows { count: args.sample, seed: fresh_seed(), drawn: true }
            }
        };
        let report = verify_export(export, args.result.as_deref(), sample, threads)?;
        if args.json {
            println!("{}", report.json());
        } else {
            print!("{}", report.text());
        }
        return Ok(if report.ok() { ExitCode::SUCCESS } else { ExitCode::from(1) });
    }
    let sample = if args.all { Sample::All } else { Sample::Jobs(args.sample) };
    let report = verify_state(&args.state, nqueens_proto::PROTOCOL_MAJOR, sample, threads)?;
    if args.json {
        println!("{}", report.json());
    } else {
        print!("{}", report.text());
    }
    Ok(if report.ok() { ExitCode::SUCCESS } else { ExitCode::from(1) })
}

#[derive(clap::Args, Debug)]
struct ExportArgs {
    /// The run's state file (opened read-only).
    #[arg(long, env = "NQ_STATE", default_value = "nqueens.db")]
    state: std::path::PathBuf,
    /// Where to write the export (gzip-compressed if it ends in .gz). Never the state file; an
    /// existing file only with --force.
    #[arg(long, value_name = "FILE")]
    to: std::path::PathBuf,
    /// Replace an existing file at --to (never the state file or its -wal, -shm, .lock files).
    #[arg(long)]
    force: bool,
}

fn export(args: ExportArgs) -> anyhow::Result<ExitCode> {
    let started = std::time::Instant::now();
    let done = nqueens_result::export_state(
        &args.state,
        &args.to,
        nqueens_proto::PROTOCOL_MAJOR,
        args.force,
    )?;
    let end = &done.end;
    println!(
        "exported N={} {} of {} jobs to {} ({} bytes) in {:.1}s: Total {} Unique {}, rows_sha256 {}{}",
        done.header.n,
        end.rows,
        done.header.jobs,
        args.to.display(),
        done.bytes,
        started.elapsed().as_secs_f64(),
        end.total,
        end.unique.map_or("-".into(), |u| u.to_string()),
        end.rows_sha256,
        if end.complete { "" } else { " (NOT every job is counted yet: a partial export)" }
    );
    Ok(ExitCode::SUCCESS)
}
