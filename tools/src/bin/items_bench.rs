//! `nqueens-items-bench`: does one long job use every core?
//!
//! Takes the longest job of N (by its estimate) from the job list split to `--target-jobs` (1: the
//! whole constellations, the longest jobs a list can hold) and solves it through the worker's CPU
//! lane (`nqueens_worker::cpu`, the code a worker runs) on one thread and on `--threads` threads,
//! alternating `--rounds` times so that load on a shared machine falls on both. Prints each time,
//! the medians and their ratio; the counts of every run must agree.
//!
//!     cargo run --release -p nqueens-tools --bin nqueens-items-bench -- --n 21 --threads 2

use anyhow::{bail, ensure, Context, Result};
use clap::Parser;
use nqueens_core::{job_list, Job, JobCounts, SplitParams};
use nqueens_worker::cpu::{CpuLane, Solved};
use std::sync::Arc;
use std::time::Instant;

#[derive(Parser, Debug)]
#[command(about = "One long job solved by the worker's CPU lane on 1 and on T threads")]
struct Args {
    /// Board size (at 21 the longest whole constellation takes a few seconds of one core).
    #[arg(long, default_value_t = 21)]
    n: u32,
    /// Split target of the job list the job is taken from.
    #[arg(long, default_value_t = 1)]
    target_jobs: u64,
    /// Threads of the second lane (the first has one).
    #[arg(long, default_value_t = std::thread::available_parallelism().map_or(2, |n| n.get()))]
    threads: usize,
    /// Pairs of runs.
    #[arg(long, default_value_t = 3)]
    rounds: usize,
}

fn main() -> Result<()> {
    let args = Args::parse();
    ensure!(args.threads >= 2, "--threads must be at least 2");
    let list = job_list(args.n, &SplitParams::with_target(args.target_jobs))?;
    let job = list.jobs.iter().max_by_key(|j| j.estimate).context("an empty job list")?.clone();
    println!(
        "N={} longest of {} jobs: job {} (estimate {})",
        args.n,
        list.jobs.len(),
        job.id,
        job.estimate
    );
    let one = CpuLane::new(1)?;
    let many = CpuLane::new(args.threads)?;
    let (mut t1, mut tn) = (Vec::new(), Vec::new());
    let mut expected = None;
    for round in 1..=args.rounds {
        for (lane, times) in [(&one, &mut t1), (&many, &mut tn)] {
            let (counts, seconds) = timed(lane, &job)?;
            ensure!(
                *expected.get_or_insert(counts.solutions) == counts.solutions,
                "the counts disagree"
            );
            println!("round {round}: {} thread(s) {seconds:.3} s", lane.threads());
            times.push(seconds);
        }
    }
    let (m1, mn) = (median(&mut t1), median(&mut tn));
    println!(
        "median: 1 thread {m1:.3} s, {} threads {mn:.3} s, speed-up {:.2}x ({} solutions)",
        args.threads,
        m1 / mn,
        expected.unwrap_or(0)
    );
    Ok(())
}

/// Solves `job` on `lane`: its counts and the wall seconds.
fn timed(lane: &Arc<CpuLane>, job: &Job) -> Result<(JobCounts, f64)> {
    let (tx, rx) = std::sync::mpsc::channel();
    let started = Instant::now();
    lane.solve(job.clone(), move |solved| {
        let _ = tx.send(solved);
    });
    match rx.recv()? {
        Solved::Counts { counts, .. } => Ok((counts, started.elapsed().as_secs_f64())),
        other => bail!("the job was not solved: {other:?}"),
    }
}

fn median(times: &mut [f64]) -> f64 {
    times.sort_by(f64::total_cmp);
    times[times.len() / 2]
}
