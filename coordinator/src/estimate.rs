//! `estimate`: how long a run of N would take, from a stratified sample of its jobs.

use anyhow::Result;
use clap::Args;
use nqueens_coordinator::report::hms;
use nqueens_core::estimate::{estimate, Estimate, EstimateParams};
use nqueens_core::{check_board_size, SplitParams};
use std::fmt::Write as _;
use std::process::ExitCode;

#[derive(Args, Debug)]
pub struct EstimateArgs {
    /// Board size N.
    pub n: u32,
    /// Jobs to solve for the sample (spread over strata of the cost estimate).
    #[arg(long, default_value_t = 64)]
    pub sample: usize,
    /// Threads solving the sample [default: all cores].
    #[arg(long, env = "NQ_THREADS")]
    pub threads: Option<usize>,
    /// The run's wanted number of jobs, if it is not the default [default: 2^(N-5), at most 2^21].
    #[arg(long, env = "NQ_TARGET_JOBS")]
    pub target_jobs: Option<u64>,
    /// Seed of the random draw (the same seed draws the same sample).
    #[arg(long, default_value_t = EstimateParams::default().seed)]
    pub seed: u64,
    /// Placements that may be counted to refine every job's cost before stratifying (deeper costs
    /// stratify better; the default takes a second or so of one core).
    #[arg(long, default_value_t = EstimateParams::default().budget)]
    pub cost_budget: u64,
    /// One JSON object instead of text.
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: EstimateArgs) -> Result<ExitCode> {
    let n = check_board_size(args.n.into())? as u32;
    let threads =
        args.threads.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    anyhow::ensure!(threads > 0, "--threads must be at least 1");
    anyhow::ensure!(args.sample > 0, "--sample must be at least 1");
    let params = EstimateParams {
        sample: args.sample,
        threads,
        seed: args.seed,
        split: SplitParams { target_jobs: args.target_jobs },
        budget: args.cost_budget,
    };
    let e = estimate(n, &params)?;
    if args.json {
        println!("{}", serde_json::to_string(&e)?);
    } else {
        print!("{}", text(&e));
    }
    Ok(ExitCode::SUCCESS)
}

/// Seconds as a readable span: `hh:mm:ss.mmm` up to a day, then days or years.
fn span(seconds: f64) -> String {
    const DAY: f64 = 86_400.0;
    if seconds < DAY {
        hms(seconds)
    } else if seconds < 365.25 * DAY {
        format!("{:.1} days", seconds / DAY)
    } else {
        format!("{:.2} years", seconds / (365.25 * DAY))
    }
}

/// Seconds with four significant digits (at least one decimal).
fn seconds(s: f64) -> String {
    let digits = if s > 0.0 { (3 - s.log10().floor() as i32).clamp(1, 6) as usize } else { 1 };
    format!("{s:.digits$}")
}

/// The human-readable report.
fn text(e: &Estimate) -> String {
    let mut o = String::new();
    let _ = writeln!(
        o,
        "N={}: {} jobs in {} strata (costs {} rows deep); sampled {} on {} threads in {} wall ({} CPU, clock {}); job list built in {}",
        e.n,
        e.jobs,
        e.strata,
        e.cost_depth,
        e.sampled,
        e.threads,
        hms(e.sample_wall_seconds),
        hms(e.sample_cpu_seconds),
        e.clock,
        hms(e.job_list_seconds)
    );
    let _ = writeln!(
        o,
        "CPU      {} s = {:.3} core-hours = {:.3e} core-years (95%: {} .. {} s)",
        seconds(e.total_cpu_seconds),
        e.core_hours,
        e.core_years,
        seconds(e.total_cpu_seconds_low),
        seconds(e.total_cpu_seconds_high)
    );
    let _ = writeln!(
        o,
        "longest  job ~{} (projected; longest sampled {})",
        span(e.longest_job_seconds),
        span(e.longest_sampled_seconds)
    );
    for c in &e.on_cores {
        let bound =
            if c.wall_seconds <= e.longest_job_seconds { "  (the longest job)" } else { "" };
        let _ = writeln!(o, "on {:>4} cores  {:>16}{bound}", c.cores, span(c.wall_seconds));
    }
    let _ = writeln!(
        o,
        "solutions ~{:.4e} (95%: {:.4e} .. {:.4e})",
        e.projected_solutions, e.projected_solutions_low, e.projected_solutions_high
    );
    o
}
