//! `estimate`: how long a run of N would take, from a stratified sample of its jobs.

use anyhow::Result;
use clap::Args;
use nqueens_core::estimate::{
    estimate, Estimate, EstimateParams, REFERENCE_CORE_SECONDS, REFERENCE_N,
};
use nqueens_core::{check_board_size, SplitParams};
use nqueens_result::hms;
use std::fmt::Write as _;
use std::process::ExitCode;

/// The default card rate and where it comes from: the fastest published GPU counter we know of,
/// measured by its authors (docs/estimate.md, "Cards").
pub const PUBLISHED_CARD_RATE: f64 = 1.49e10;
const PUBLISHED_CARD: &str =
    "an RTX 5090 running Yao & Li's kernel, 1.49e10 solutions/s at N = 22 (published)";

/// How fast one card is taken to be, and why.
#[derive(Debug, serde::Serialize)]
struct CardRate {
    /// Solutions per second of one card (absent when given as cores).
    solutions_per_second: Option<f64>,
    /// Where that figure comes from.
    source: String,
    /// This host's solutions per core-second at this N (the estimate's projection).
    host_solutions_per_core_second: f64,
    /// One card in cores of this host: the rate over the host's.
    cores: f64,
}

impl CardRate {
    /// The card of `args` against the host speed `e` measured.
    fn of(args: &EstimateArgs, e: &Estimate) -> Result<CardRate> {
        let p = &e.projection;
        let host = if p.total_cpu_seconds > 0.0 {
            p.projected_solutions / p.total_cpu_seconds
        } else {
            0.0
        };
        if let Some(cores) = args.card_cores {
            anyhow::ensure!(
                cores.is_finite() && cores > 0.0,
                "--card-cores must be a positive number"
            );
            return Ok(CardRate {
                solutions_per_second: None,
                source: "given with --card-cores".into(),
                host_solutions_per_core_second: host,
                cores,
            });
        }
        let (rate, source) = match args.card_rate {
            Some(rate) => (rate, format!("given with --card-rate ({rate:.3e} solutions/s)")),
            None => (PUBLISHED_CARD_RATE, PUBLISHED_CARD.to_string()),
        };
        anyhow::ensure!(rate.is_finite() && rate > 0.0, "--card-rate must be a positive number");
        anyhow::ensure!(
            host > 0.0,
            "N={} has no solutions to measure this host's rate by: give --card-cores",
            e.n
        );
        Ok(CardRate {
            solutions_per_second: Some(rate),
            source,
            host_solutions_per_core_second: host,
            cores: rate / host,
        })
    }
}

/// `estimate`'s JSON: the estimate, the card rate behind its card figures, and the solver build
/// that solved the sample (`avx512`, `avx2`, `bmi` or `portable`).
#[derive(serde::Serialize)]
struct Report<'a> {
    #[serde(flatten)]
    estimate: &'a Estimate,
    card: &'a CardRate,
    build: &'static str,
}

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
    /// Cores of one host: a worker splits each job over all of its cores, so the longest job
    /// takes its CPU time over this many cores.
    #[arg(long, default_value_t = EstimateParams::default().host_cores)]
    pub host_cores: u64,
    /// One card's speed in solutions per second: the card figures take a card as this rate over
    /// this host's measured solutions per core-second [default: a published figure, printed with
    /// its source; `estimate N --gpu` on a card measures its own].
    #[arg(long, value_name = "SOLUTIONS_PER_SECOND", conflicts_with = "card_cores")]
    pub card_rate: Option<f64>,
    /// One card's speed in cores of this machine, given directly instead of --card-rate.
    #[arg(long)]
    pub card_cores: Option<f64>,
    /// Jobs with more searched rows than this left below their queens are sampled down random
    /// paths of their parts instead of solved whole (raise it to check the paths against whole
    /// solves at a size where both are affordable).
    #[arg(long, default_value_t = EstimateParams::default().whole_rows)]
    pub whole_rows: usize,
    /// Leave out measuring this host's speed on the reference list (a second or so of one core),
    /// and with it the reference-core-years.
    #[arg(long)]
    pub no_reference: bool,
    /// One JSON object instead of text.
    #[arg(long)]
    pub json: bool,
    /// Project GPU time instead: time every K-th job of the list on a device (`auto`: the first
    /// GPU, as `solve --gpu` takes it; `INDEX` an OpenCL device; `cuda[:ORDINAL]` a CUDA device)
    /// and print GPU-hours and days on 1 to 512 cards.
    #[arg(long, value_name = "auto|INDEX|cuda[:ORDINAL]", num_args = 0..=1, default_missing_value = "auto")]
    pub gpu: Option<nqueens_gpu::DeviceSelector>,
    /// With --gpu: the stride K of the sample [default: about 4096 jobs sampled].
    #[arg(long)]
    pub gpu_stride: Option<usize>,
}

/// `estimate N --gpu`: a GPU time projected from a timed, evenly strided sample of the job list.
#[derive(Debug, serde::Serialize)]
struct GpuEstimate {
    n: u32,
    device: String,
    jobs: usize,
    sampled: usize,
    stride: usize,
    sample_seconds: f64,
    gpu_seconds: f64,
    gpu_hours: f64,
    /// (cards, days).
    on_cards: Vec<(u64, f64)>,
    projected_solutions: f64,
}

fn run_gpu(n: u32, args: &EstimateArgs, selector: nqueens_gpu::DeviceSelector) -> Result<()> {
    use anyhow::Context as _;
    let list = nqueens_core::job_list(n, &SplitParams { target_jobs: args.target_jobs })?;
    let stride = args.gpu_stride.unwrap_or(list.jobs.len() / 4096).max(1);
    let sample: Vec<nqueens_core::Job> = list.jobs.iter().step_by(stride).cloned().collect();
    let mut gpu = nqueens_gpu::GpuSolver::new(selector).context("opening the GPU")?;
    // Untimed warm-up: the kernel build for this board's stack depth.
    gpu.solve_jobs(&sample[..sample.len().min(16)])?;
    let started = std::time::Instant::now();
    let counts = gpu.solve_jobs(&sample)?;
    let sample_seconds = started.elapsed().as_secs_f64();
    let scale = list.jobs.len() as f64 / sample.len().max(1) as f64;
    let weighted: f64 =
        sample.iter().zip(&counts).map(|(j, c)| j.weight as f64 * c.solutions as f64).sum();
    let gpu_seconds = sample_seconds * scale;
    let e = GpuEstimate {
        n,
        device: gpu.device().to_string(),
        jobs: list.jobs.len(),
        sampled: sample.len(),
        stride,
        sample_seconds,
        gpu_seconds,
        gpu_hours: gpu_seconds / 3600.0,
        on_cards: [1u64, 8, 64, 512].map(|k| (k, gpu_seconds / k as f64 / 86_400.0)).to_vec(),
        projected_solutions: weighted * scale,
    };
    if args.json {
        println!("{}", serde_json::to_string(&e)?);
        return Ok(());
    }
    println!(
        "N={n}: {} jobs; 1 in {stride} ({} jobs) timed on {} in {}",
        e.jobs,
        e.sampled,
        e.device,
        hms(sample_seconds)
    );
    println!("GPU      {} s = {:.3} GPU-hours", seconds(gpu_seconds), e.gpu_hours);
    for (k, days) in &e.on_cards {
        println!("on {k:>4} cards  {:>16}", span(days * 86_400.0));
    }
    println!("solutions ~{:.4e} (from the sample)", e.projected_solutions);
    if gpu_seconds > 0.0 {
        println!(
            "card     {:.3e} solutions/s measured on {}: pass --card-rate {:.3e} to the CPU estimate of N={n}",
            e.projected_solutions / gpu_seconds,
            e.device,
            e.projected_solutions / gpu_seconds
        );
    }
    Ok(())
}

pub fn run(args: EstimateArgs) -> Result<ExitCode> {
    let n = check_board_size(args.n.into())? as u32;
    let threads =
        args.threads.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    anyhow::ensure!(threads > 0, "--threads must be at least 1");
    anyhow::ensure!(args.sample > 0, "--sample must be at least 1");
    if let Some(selector) = args.gpu {
        run_gpu(n, &args, selector)?;
        return Ok(ExitCode::SUCCESS);
    }
    let params = EstimateParams {
        sample: args.sample,
        threads,
        seed: args.seed,
        split: SplitParams { target_jobs: args.target_jobs },
        budget: args.cost_budget,
        whole_rows: args.whole_rows,
        host_cores: args.host_cores,
        card_cores: args.card_cores.unwrap_or(EstimateParams::default().card_cores),
        measure_speed: !args.no_reference,
    };
    anyhow::ensure!(args.host_cores > 0, "--host-cores must be at least 1");
    let mut e = estimate(n, &params)?;
    let card = CardRate::of(&args, &e)?;
    e.set_hardware(args.host_cores, card.cores);
    if args.json {
        println!(
            "{}",
            serde_json::to_string(&Report {
                estimate: &e,
                card: &card,
                build: nqueens_core::solver_build().name
            })?
        );
    } else {
        print!("{}", text(&e, &card));
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
fn text(e: &Estimate, card: &CardRate) -> String {
    let mut o = String::new();
    sample_text(&mut o, e);
    cpu_text(&mut o, e);
    wall_text(&mut o, e, card);
    let p = &e.projection;
    let _ = writeln!(
        o,
        "solutions ~{:.4e} (95%: {:.4e} .. {:.4e})",
        p.projected_solutions, p.projected_solutions_low, p.projected_solutions_high
    );
    o
}

/// The report's first line: the list, its strata and how the sample was solved.
fn sample_text(o: &mut String, e: &Estimate) {
    let (s, p) = (&e.sampling, &e.projection);
    let list =
        s.job_list_seconds.map_or(String::new(), |t| format!("; job list built in {}", hms(t)));
    let _ = writeln!(
        o,
        "N={}: {} jobs in {} strata (costs {} rows deep); sampled {} on {} threads in {} wall (projected CPU of the sampled jobs {}, clock {}){list}",
        e.n,
        p.jobs,
        p.strata,
        s.cost_depth,
        p.sampled,
        s.threads,
        hms(s.sample_wall_seconds),
        hms(p.sample_cpu_seconds),
        s.clock.as_str(),
    );
}

/// The CPU time, in core-years and where measured in reference-core-years.
fn cpu_text(o: &mut String, e: &Estimate) {
    let p = &e.projection;
    let _ = writeln!(
        o,
        "CPU      {} s = {:.3} core-hours = {:.3e} core-years (95%: {} .. {} s)",
        seconds(p.total_cpu_seconds),
        p.core_hours,
        p.core_years,
        seconds(p.total_cpu_seconds_low),
        seconds(p.total_cpu_seconds_high)
    );
    if let Some(r) = &e.reference {
        let _ = writeln!(
            o,
            "         = {:.3e} reference-core-years (95%: {:.3e} .. {:.3e}): this host \
             solved the reference list (every job of N={REFERENCE_N}, one thread) in {:.3} s \
             (before and after the sample, {:.0}% apart), a reference core in \
             {REFERENCE_CORE_SECONDS:.3} s ({:.2} reference cores per core)",
            r.core_years,
            r.core_years_low,
            r.core_years_high,
            r.speed.reference_seconds,
            200.0 * r.speed.drift,
            r.speed.reference_cores_per_core
        );
    }
}

/// The longest job, the card taken and the wall time on cores and cards.
fn wall_text(o: &mut String, e: &Estimate, card: &CardRate) {
    let (p, h) = (&e.projection, &e.hardware);
    let _ = writeln!(
        o,
        "longest  job ~{} (projected; longest sampled {})",
        span(p.longest_job_seconds),
        span(p.longest_sampled_seconds)
    );
    let _ = writeln!(
        o,
        "longest  job on a host of {} cores ~{}; on one card ~{}",
        h.host_cores,
        span(h.longest_job_on_host_seconds),
        span(h.longest_job_on_card_seconds),
    );
    let _ = writeln!(
        o,
        "card     taken as {:.0} cores of this host: {}, over this host's {:.3e} solutions/s per core at N={}",
        card.cores, card.source, card.host_solutions_per_core_second, e.n
    );
    for c in &h.on_cores {
        let bound = if c.wall_seconds <= h.longest_job_on_host_seconds * 1.000_001 {
            "  (the longest job)"
        } else {
            ""
        };
        let _ = writeln!(o, "on {:>5} cores  {:>16}{bound}", c.cores, span(c.wall_seconds));
    }
    for c in &h.on_cards {
        let _ = writeln!(o, "on {:>5} cards  {:>16}", c.cards, span(c.wall_seconds));
    }
}
