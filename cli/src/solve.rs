//! `solve`: the whole job list of one or more board sizes on this machine's cores, with no network.

use anyhow::{bail, Context, Result};
use clap::Args;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use nqueens_core::{check_board_size, job_list, parallel, Job, SplitParams, Tally};
use nqueens_result::RunResult;
use nqueens_store::FinalTally;
use nqueens_store::LocalCheckpoint;
use parking_lot::Mutex;
use std::collections::HashSet;
use std::io::IsTerminal;
use std::ops::RangeInclusive;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};
use tracing::info;

#[derive(Args, Debug)]
pub struct SolveArgs {
    /// Board size N, or an inclusive range such as `4..18` (one line per N).
    #[arg(allow_hyphen_values = true)]
    pub sizes: String,
    /// Solver threads [default: all cores].
    #[arg(long, env = "NQ_THREADS")]
    pub threads: Option<usize>,
    /// Print one JSON object per N (fields n, total, unique, count2, count4, count8, jobs, seconds,
    /// nodes, published: how they compare with the published counts, a figure that differs
    /// ending `solve` with exit code 1, and build: the CPU build that counted, `avx512`, `avx2`,
    /// `bmi` or `portable`, absent with `--gpu`).
    #[arg(long)]
    pub json: bool,
    /// Wanted number of jobs per board size [default: 2^(N-5), at most 2^21 = 2,097,152, also the
    /// largest accepted].
    #[arg(long, env = "NQ_TARGET_JOBS")]
    pub target_jobs: Option<u64>,
    /// Never draw the progress bar (it is drawn only on a terminal, for runs over a second).
    #[arg(long)]
    pub no_progress: bool,
    /// Checkpoint every solved job to this SQLite file (created if missing). Run the same command
    /// again after an interruption and it resumes, solving only the jobs not yet recorded. A file
    /// of another board size, split or version is refused. Takes a single board size.
    #[arg(long, env = "NQ_STATE")]
    pub state: Option<PathBuf>,
    /// Count on a GPU instead of the cores: `--gpu` or `--gpu auto` takes the first GPU (OpenCL,
    /// else CUDA; else any OpenCL device, such as pocl's CPU device), `--gpu gpu` a GPU only,
    /// `--gpu INDEX` an OpenCL device by its number, `--gpu cuda[:ORDINAL]` a CUDA device through
    /// the CUDA driver and NVRTC. The symmetric counts stay on the CPU. The device used is
    /// printed on stderr.
    #[arg(long, value_name = "auto|gpu|INDEX|cuda[:ORDINAL]", num_args = 0..=1, default_missing_value = "auto")]
    pub gpu: Option<nqueens_gpu::DeviceSelector>,
}

/// Parses `16`, `4..18` or `4..=18` into a range of valid board sizes.
pub fn parse_sizes(text: &str) -> Result<RangeInclusive<u32>> {
    let number = |s: &str| -> Result<u32> {
        let n: i64 = s.trim().parse().with_context(|| format!("{s:?} is not a board size"))?;
        Ok(check_board_size(n)? as u32)
    };
    let (first, last) = match text.split_once("..") {
        Some((a, b)) => (number(a)?, number(b.strip_prefix('=').unwrap_or(b))?),
        None => (number(text)?, number(text)?),
    };
    if first > last {
        bail!("empty range {text:?}: the first board size is larger than the last");
    }
    Ok(first..=last)
}

pub fn run(args: SolveArgs) -> Result<ExitCode> {
    let sizes = parse_sizes(&args.sizes)?;
    nqueens_coordinator::check_target_jobs(args.target_jobs)?;
    let threads =
        args.threads.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    if threads == 0 {
        bail!("--threads must be at least 1");
    }
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .thread_name(|i| format!("solver-{i}"))
        .build()
        .context("starting the solver threads")?;
    let params = SplitParams { target_jobs: args.target_jobs };
    let table = !args.json && sizes.start() != sizes.end();
    if args.state.is_some() && sizes.start() != sizes.end() {
        bail!("--state checkpoints a single board size, not the range {}", args.sizes);
    }
    let mut gpu = match args.gpu {
        Some(selector) => {
            let solver = nqueens_gpu::GpuSolver::new(selector).context("opening the GPU")?;
            eprintln!("GPU: {}", solver.device());
            Some(solver)
        }
        None => None,
    };
    if table {
        println!(" N: {:>20} {:>20} hh:mm:ss.ms", "Total", "Unique");
    }
    let mut not_exact = false;
    for n in sizes {
        let state = args.state.as_deref();
        let record = solve_one_size(&pool, gpu.as_mut(), n, &params, !args.no_progress, state)?;
        if let Some(why) = record.not_exact() {
            tracing::error!(n, %why, "the result differs from the published counts: NOT exact");
            not_exact = true;
        }
        if args.json {
            let build = gpu.is_none().then(|| nqueens_core::solver_build().name);
            println!("{}", serde_json::to_string(&JsonLine { record: &record, build })?);
        } else if table {
            println!("{}", record.table_line());
        } else {
            print_detailed(&record, threads);
        }
    }
    Ok(if not_exact { ExitCode::from(1) } else { ExitCode::SUCCESS })
}

/// A `solve --json` line: the result's fields, and the solver build that counted them.
#[derive(serde::Serialize)]
struct JsonLine<'a> {
    #[serde(flatten)]
    record: &'a RunResult,
    #[serde(skip_serializing_if = "Option::is_none")]
    build: Option<&'static str>,
}

fn solve_one_size(
    pool: &rayon::ThreadPool,
    gpu: Option<&mut nqueens_gpu::GpuSolver>,
    n: u32,
    params: &SplitParams,
    progress: bool,
    state: Option<&Path>,
) -> Result<RunResult> {
    let _span = tracing::info_span!("solve", n).entered();
    let started = Instant::now();
    let list = pool.install(|| job_list(n, params))?;
    info!(jobs = list.jobs.len(), depth = list.depth, fingerprint = %list.fingerprint(), "job list ready");
    let checkpoint = match state {
        Some(path) => Some(
            LocalCheckpoint::open(path, &list, nqueens_proto::PROTOCOL_MAJOR)
                .with_context(|| format!("opening checkpoint {}", path.display()))?,
        ),
        None => None,
    };
    // With a checkpoint, only the jobs it has not recorded yet are solved.
    let done: HashSet<nqueens_core::JobId> = match &checkpoint {
        Some(c) => c.done_ids()?.into_iter().collect(),
        None => HashSet::new(),
    };
    if !done.is_empty() {
        info!(done = done.len(), total = list.jobs.len(), "resuming from the checkpoint");
    }
    let todo: Vec<Job> = list.jobs.iter().filter(|j| !done.contains(&j.id)).cloned().collect();

    let bar = Progress::start(list.jobs.len() as u64, done.len() as u64, progress);
    let tally = Mutex::new(Tally::new(n)?);
    let failure = Mutex::new(None);
    let on_result = |index: usize, counts: &nqueens_core::JobCounts, took: Duration| {
        let job = &todo[index];
        let outcome = match &checkpoint {
            Some(c) => c.record(job.id, counts, took.as_secs_f64()).map_err(anyhow::Error::from),
            None => tally.lock().add(job.weight, counts).map_err(anyhow::Error::from),
        };
        if let Err(e) = outcome {
            failure.lock().get_or_insert(e);
        }
        bar.inc();
    };
    match gpu {
        Some(gpu) => pool.install(|| solve_on_gpu(gpu, &todo, &on_result))?,
        None => parallel::solve_all(pool, &todo, on_result)?,
    }
    bar.finish();
    if let Some(e) = failure.into_inner() {
        return Err(e);
    }
    // The checkpoint's answer is summed from its committed rows, never from memory.
    let (tally, totals) = match &checkpoint {
        Some(c) => match c.finish()? {
            (tally, FinalTally::Exact(totals)) => (tally, totals),
            (_, FinalTally::Incomplete) => bail!("the checkpoint is missing results after the run"),
            (_, FinalTally::Inconsistent { reason }) => bail!("inconsistent totals: {reason}"),
        },
        None => {
            let tally = tally.into_inner();
            (tally, tally.totals()?)
        }
    };
    let record = RunResult::new(&totals, list.jobs.len() as u64, started.elapsed(), tally.nodes);
    info!(total = record.total, unique = record.unique, seconds = record.seconds, "solved");
    Ok(record)
}

/// Solves `todo` on the GPU in one call, reporting every job like [`parallel::solve_all`] does as
/// soon as its batch is counted (so that a checkpoint and the progress bar advance during a long
/// run); a job's time is the average so far. Prints the device's figures on stderr.
fn solve_on_gpu(
    gpu: &mut nqueens_gpu::GpuSolver,
    todo: &[Job],
    on_result: &(dyn Fn(usize, &nqueens_core::JobCounts, Duration) + Sync),
) -> Result<()> {
    let started = Instant::now();
    let mut done = 0u32;
    gpu.solve_jobs_each(todo, &mut |i, counts| {
        done += 1;
        on_result(i, counts, started.elapsed() / done);
    })
    .context("counting on the GPU")?;
    let s = gpu.last_stats();
    eprintln!(
        "GPU: {} jobs in {:.2} s ({:.2} s on the device): {} items, {} batches, {} dispatches, \
         {:.3e} kernel steps/s",
        s.jobs,
        s.seconds,
        s.device_seconds,
        s.items,
        s.batches,
        s.dispatches,
        s.steps as f64 / s.device_seconds.max(1e-9)
    );
    Ok(())
}

fn print_detailed(r: &RunResult, threads: usize) {
    let class = |c: Option<u128>| c.map_or_else(|| "-".to_string(), |c| c.to_string());
    println!("N:       {}", r.n);
    println!("Total:   {}", r.total);
    println!("Unique:  {}", r.unique);
    println!("COUNT2:  {}", class(r.count2));
    println!("COUNT4:  {}", class(r.count4));
    println!("COUNT8:  {}", class(r.count8));
    println!("Jobs:    {}", r.jobs);
    println!("Nodes:   {}", r.nodes);
    println!("Threads: {threads}");
    println!("Time:    {}", nqueens_result::hms(r.seconds));
    println!("Check:   {}", r.published.summary);
}

/// A progress bar on stderr, shown only on a terminal and only once the run has lasted a second.
struct Progress {
    bar: ProgressBar,
    started: Instant,
    enabled: bool,
    shown: std::sync::atomic::AtomicBool,
}

impl Progress {
    fn start(jobs: u64, already_done: u64, wanted: bool) -> Progress {
        let bar = ProgressBar::with_draw_target(Some(jobs), ProgressDrawTarget::hidden());
        bar.set_position(already_done);
        bar.reset_eta();
        bar.set_style(
            ProgressStyle::with_template(
                "{elapsed_precise} [{bar:40}] {pos}/{len} jobs  {rate}  ETA {eta}",
            )
            .expect("valid template")
            .with_key("rate", |state: &indicatif::ProgressState, w: &mut dyn std::fmt::Write| {
                let _ = write!(w, "{:.0} jobs/s", state.per_sec());
            })
            .progress_chars("=> "),
        );
        let enabled = wanted && std::io::stderr().is_terminal();
        Progress { bar, started: Instant::now(), enabled, shown: false.into() }
    }

    fn inc(&self) {
        self.bar.inc(1);
        use std::sync::atomic::Ordering::Relaxed;
        if self.enabled
            && !self.shown.load(Relaxed)
            && self.started.elapsed() > Duration::from_secs(1)
        {
            self.shown.store(true, Relaxed);
            self.bar.set_draw_target(ProgressDrawTarget::stderr());
        }
    }

    fn finish(&self) {
        self.bar.finish_and_clear();
    }
}

#[cfg(test)]
mod tests {
    use super::parse_sizes;

    #[test]
    fn sizes_parse_as_single_values_and_ranges() {
        assert_eq!(parse_sizes("16").unwrap(), 16..=16);
        assert_eq!(parse_sizes("4..18").unwrap(), 4..=18);
        assert_eq!(parse_sizes("4..=18").unwrap(), 4..=18);
        for bad in ["0", "33", "-1", "x", "9..4", "4..40", ""] {
            assert!(parse_sizes(bad).is_err(), "{bad:?} should be rejected");
        }
    }
}
