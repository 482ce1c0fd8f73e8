//! Solver benchmark against the plain C bitboard counter in `shared/bench/baseline.c`.
//!
//! cargo bench -p nqueens-core --bench solver -- [N ...] [--runs R] [--threads 1] [--no-baseline]
//!         [--sample K] [--trend]
//!
//! For each N (default 16 to 19; `A..B` names a range) it runs R rounds (default 3) of: the C
//! baseline (one thread), then this solver on one thread and on two threads (in turn first;
//! `--threads 1` leaves out the two-thread runs). Each round gives ratios from runs taken back to
//! back; the table shows the median time of each column, the nodes (queens placed by the search)
//! and nanoseconds per solution of both programs, and the median of the per-round ratios (every
//! round is also printed to stderr). Ratios measured side by side are what to quote: these machines
//! are shared, and their speed drifts by a third or more within minutes.
//!
//! `--sample K` solves only every K-th job of the list (for boards too big to solve whole, N=20
//! and up): the total, nodes and ns per solution are those of the sampled jobs, the time is the
//! solving alone (the list is built first, untimed), and the baseline, which cannot be sampled,
//! is left out, as is the check against the reference table.
//!
//! The baseline prints no node count, so that column is ours only. Without the baseline's source
//! (or a C compiler), or with `--no-baseline`, its columns are left out with a message.
//! `NQ_BASELINE_SRC` overrides the baseline's path. Every total is checked against the reference
//! table (`NQ_KNOWN_COUNTS`, or `shared/reference/known-counts.tsv`) where it has the board.
//!
//! `--record-trend 18,20,22,24,26,27,28` prints the cost per solution at record sizes, each with a
//! 95% interval: whole jobs where they are affordable, parts of jobs beyond (`N@R` for parts of R
//! rows left; `--paths`, `--seconds`, `--min-jobs`, `--whole-max`, `--seed`): see
//! `solver/record_trend.rs`.
//!
//! `--trend` prints ns per solution across board sizes instead (default 18 to 20, ours only, one
//! thread), the sizes measured in the same minutes: each solves every K-th job of its list, with K
//! divided by 8 per size below the largest (`--sample K` for the largest, default 128, so that
//! every size gets about the same work), and the sizes take turns, a quarter of a second at a
//! time, until all are done. Sizes solved one after the other would each see another state of a
//! shared machine, whose speed drifts by a third within minutes.
//!
//! The first line names the solver's build (`nqueens_core::solver_build`: the widest that the CPU
//! runs; `NQ_SOLVER_BUILD=avx2`, `bmi` or `portable` limits it).
//!
//! After the table it prints the sizing estimate (`nqueens_core::estimate`, what
//! `nqueens-coordinator estimate` prints) for N=20 and N=21 from a sample of 32 jobs each:
//! `--estimate-sample K` changes the sample, `--estimate-sizes A..B` the boards, `--no-estimate`
//! leaves it out.

/// What `--help` prints: the flags (the module's comment says what each run measures).
const USAGE: &str = "\
usage: solver [N | A..B ...] [--runs R] [--threads 1|2] [--no-baseline] [--sample K] [--trend]
              [--record-trend SIZES [--seconds S] [--paths P] [--min-jobs J] [--whole-max N] [--seed X]]
              [--no-estimate | --estimate-sample K | --estimate-sizes A..B]
  N, A..B           boards to time against the C baseline (default 16..19)
  --runs R          rounds per board (default 3)
  --threads 1|2     leave out (1) or keep (2, default) the two-thread runs
  --no-baseline     leave out the C baseline's columns
  --sample K        solve every K-th job only (boards of 20 and up)
  --trend           ns per solution across board sizes, taking turns
  --record-trend S  ns per solution at record sizes, e.g. 18,20,24@16,27 (N@R: parts of R rows)
NQ_SOLVER_BUILD=portable|bmi|avx2|avx512 limits the solver's build.";

#[path = "solver/record_trend.rs"]
mod record_trend;

use nqueens_core::{job_list, parallel, SplitParams, Tally};
use record_trend::RecordTrend;
use std::collections::HashMap;
use std::path::PathBuf;
use std::process::Command;
use std::sync::Mutex;
use std::time::Instant;

/// The command line (see the module comment).
struct Options {
    sizes: Vec<u32>,
    runs: usize,
    two_threads: bool,
    want_baseline: bool,
    sample: usize,
    estimates: EstimateArgs,
    trend: bool,
    record_trend: Option<RecordTrend>,
}

impl Options {
    fn parse() -> Options {
        let mut o = Options {
            sizes: Vec::new(),
            runs: 3,
            two_threads: true,
            want_baseline: true,
            sample: 1,
            estimates: EstimateArgs::default(),
            trend: false,
            record_trend: None,
        };
        let mut args = std::env::args().skip(1);
        while let Some(arg) = args.next() {
            match arg.as_str() {
                "--runs" => {
                    o.runs =
                        args.next().and_then(|r| r.parse().ok()).expect("--runs takes a number")
                }
                "--threads" => match args.next().as_deref() {
                    Some("1") => o.two_threads = false,
                    Some("2") => o.two_threads = true,
                    other => panic!("--threads takes 1 or 2, not {other:?}"),
                },
                "--no-baseline" => o.want_baseline = false,
                "--sample" => {
                    o.sample =
                        args.next().and_then(|k| k.parse().ok()).expect("--sample takes a number")
                }
                "--no-estimate" | "--estimate-sample" | "--estimate-sizes" => {
                    o.estimates.parse(&arg, &mut args)
                }
                "--trend" => o.trend = true,
                "--record-trend" => {
                    let sizes = args.next().expect("--record-trend takes sizes: 18,20,24@16,...");
                    o.record_trend = Some(RecordTrend::new(&sizes));
                }
                flag if o.record_trend.as_mut().is_some_and(|r| r.parse_flag(flag, &mut args)) => {}
                "--bench" => {}
                "--help" | "-h" => {
                    println!("{USAGE}");
                    std::process::exit(0);
                }
                other => o.sizes.extend(parse_sizes(other)),
            }
        }
        o
    }
}

fn main() {
    let mut options = Options::parse();
    let build = nqueens_core::solver_build();
    println!("solver build: {} ({})", build.name, build.features.join(", "));
    if let Some(record_trend) = &options.record_trend {
        record_trend.run(&known_totals());
        return;
    }
    if options.trend {
        if options.sizes.is_empty() {
            options.sizes = (18..=20).collect();
        }
        print_trend(&options.sizes, if options.sample > 1 { options.sample } else { 128 });
        return;
    }
    if options.sizes.is_empty() {
        options.sizes = (16..=19).collect();
    }
    options.runs = options.runs.max(1);
    options.sample = options.sample.max(1);
    let sample = options.sample;
    if sample > 1 && options.want_baseline {
        eprintln!("--sample {sample}: the baseline cannot be sampled, its columns are left out");
    }
    let baseline = if options.want_baseline && sample == 1 { build_baseline() } else { None };
    let known = known_totals();
    println!(
        "{:>3} {:>15} {:>11} {:>9} {:>11} {:>14} {:>9} {:>12} {:>11} {:>9}",
        "N",
        "total",
        "baseline s",
        "ns/sol",
        "1 thread s",
        "nodes",
        "ns/sol",
        "vs baseline",
        "2 threads s",
        "2T vs 1T"
    );
    for &n in &options.sizes {
        print_size(n, &options, baseline.as_ref(), &known);
    }
    if let Some(exe) = baseline {
        let _ = std::fs::remove_file(exe);
    }
    print_estimates(&options.estimates, &known);
}

/// One row of the table: N=`n` over the rounds of `options`, beside the `baseline` if built.
fn print_size(n: u32, options: &Options, baseline: Option<&PathBuf>, known: &HashMap<u32, u64>) {
    let (runs, two_threads, sample) = (options.runs, options.two_threads, options.sample);
    let (mut base, mut one, mut two) = (Vec::new(), Vec::new(), Vec::new());
    let (mut speedup, mut scaling) = (Vec::new(), Vec::new());
    let mut result = None;
    for round in 1..=runs {
        let b = baseline.map(|exe| run_baseline(exe, n));
        // Swap the order of the two solver runs every round, so neither always runs first.
        let (o, t) = match (two_threads, round % 2 == 1) {
            (false, _) => (run_solver(n, 1, sample), None),
            (true, true) => {
                let o = run_solver(n, 1, sample);
                (o, Some(run_solver(n, 2, sample)))
            }
            (true, false) => {
                let t = run_solver(n, 2, sample);
                (run_solver(n, 1, sample), Some(t))
            }
        };
        let fmt = |x: Option<f64>| x.map_or("-".to_string(), |s| format!("{s:.3} s"));
        eprintln!(
            "N={n} round {round}: baseline {}, 1 thread {:.3} s, 2 threads {}",
            fmt(b.map(|b| b.1)),
            o.seconds,
            fmt(t.map(|t| t.seconds))
        );
        for r in std::iter::once(&o).chain(&t).filter(|_| sample == 1) {
            check(n, r.total, known, "solver");
        }
        if let Some((total, s)) = b {
            check(n, total, known, "baseline");
            base.push(s);
            speedup.push(s / o.seconds);
        }
        one.push(o.seconds);
        if let Some(t) = t {
            two.push(t.seconds);
            scaling.push(o.seconds / t.seconds);
        }
        result = Some(o);
    }
    let result = result.expect("at least one round");
    let ns = |seconds: f64| seconds * 1e9 / result.total.max(1) as f64;
    let o = median(&mut one).unwrap();
    let cell = |x: Option<f64>, width: usize, digits: usize, unit: &str| match x {
        Some(x) => format!("{:>w$}", format!("{x:.digits$}{unit}"), w = width),
        None => format!("{:>width$}", "-"),
    };
    let b = median(&mut base);
    println!(
        "{n:>3} {:>15} {} {} {o:>11.3} {:>14} {:>9.1} {} {} {}",
        result.total,
        cell(b, 11, 3, ""),
        cell(b.map(ns), 9, 1, ""),
        result.nodes,
        ns(o),
        cell(median(&mut speedup), 12, 2, "x"),
        cell(median(&mut two), 11, 3, ""),
        cell(median(&mut scaling), 9, 2, "x"),
    );
}

/// ns per solution of every size in `sizes`, the sizes taking turns (see the module comment).
fn print_trend(sizes: &[u32], sample: usize) {
    struct Size {
        n: u32,
        step: usize,
        jobs: Vec<nqueens_core::Job>,
        next: usize,
        seconds: f64,
        total: u128,
        nodes: u64,
    }
    let largest = *sizes.iter().max().expect("at least one size");
    let mut all: Vec<Size> = sizes
        .iter()
        .map(|&n| {
            let step = (sample >> (3 * (largest - n)).min(63)).max(1);
            let list = job_list(n, &SplitParams::default()).expect("job list");
            let jobs = list.jobs.into_iter().step_by(step).collect();
            Size { n, step, jobs, next: 0, seconds: 0.0, total: 0, nodes: 0 }
        })
        .collect();
    let turn = std::time::Duration::from_millis(250);
    while all.iter().any(|s| s.next < s.jobs.len()) {
        for size in all.iter_mut() {
            let started = Instant::now();
            while size.next < size.jobs.len() && started.elapsed() < turn {
                let job = &size.jobs[size.next];
                let solved = Instant::now();
                let counts = job.solve().expect("solve");
                size.seconds += solved.elapsed().as_secs_f64();
                size.total += job.weight as u128 * counts.solutions as u128;
                size.nodes += counts.nodes;
                size.next += 1;
            }
        }
    }
    println!(
        "ns per solution, sizes interleaved (one thread; every K-th job of the default list):"
    );
    println!(
        "{:>3} {:>6} {:>7} {:>11} {:>17} {:>15} {:>9}",
        "N", "K", "jobs", "seconds", "solutions", "nodes", "ns/sol"
    );
    for s in &all {
        println!(
            "{:>3} {:>6} {:>7} {:>11.3} {:>17} {:>15} {:>9.2}",
            s.n,
            s.step,
            s.jobs.len(),
            s.seconds,
            s.total,
            s.nodes,
            s.seconds * 1e9 / s.total.max(1) as f64
        );
    }
}

/// What the sizing estimate after the table covers.
struct EstimateArgs {
    sizes: Vec<u32>,
    sample: usize,
}

impl Default for EstimateArgs {
    fn default() -> Self {
        EstimateArgs { sizes: vec![20, 21], sample: 32 }
    }
}

impl EstimateArgs {
    /// Takes one of the estimate flags (and its value from `rest`).
    fn parse(&mut self, flag: &str, rest: &mut impl Iterator<Item = String>) {
        match flag {
            "--no-estimate" => self.sizes.clear(),
            "--estimate-sample" => {
                self.sample = rest
                    .next()
                    .and_then(|k| k.parse().ok())
                    .filter(|&k| k > 0)
                    .expect("--estimate-sample takes a positive number")
            }
            _ => self.sizes = parse_sizes(&rest.next().expect("--estimate-sizes takes N or A..B")),
        }
    }
}

/// The sizing estimate of each board in `args`, on this machine's cores: projected CPU time with
/// its 95% interval, the longest job, wall time on 8/64/512 cores, and the projected solutions
/// against the reference table.
fn print_estimates(args: &EstimateArgs, known: &HashMap<u32, u64>) {
    use nqueens_core::estimate::{estimate, EstimateParams};
    if args.sizes.is_empty() {
        return;
    }
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    println!();
    println!("estimate (a sample of {} jobs per board, {threads} threads):", args.sample);
    println!(
        "{:>3} {:>8} {:>7} {:>13} {:>25} {:>11} {:>11} {:>11} {:>11} {:>11} {:>10}",
        "N",
        "jobs",
        "sampled",
        "CPU s",
        "95% interval",
        "longest s",
        "8 cores h",
        "64 cores h",
        "512 cores h",
        "core-years",
        "sol. error"
    );
    for &n in &args.sizes {
        let params = EstimateParams { sample: args.sample, threads, ..EstimateParams::default() };
        let e = estimate(n, &params).expect("estimate");
        let hours = |cores| e.wall_seconds_on(cores) / 3600.0;
        let p = &e.projection;
        let error = known.get(&n).map_or("-".to_string(), |&q| {
            format!("{:+.1}%", (p.projected_solutions / q as f64 - 1.0) * 100.0)
        });
        println!(
            "{n:>3} {:>8} {:>7} {:>13.1} {:>25} {:>11.2} {:>11.3} {:>11.3} {:>11.3} {:>11.6} {error:>10}",
            p.jobs,
            p.sampled,
            p.total_cpu_seconds,
            format!("{:.1} .. {:.1}", p.total_cpu_seconds_low, p.total_cpu_seconds_high),
            p.longest_job_seconds,
            hours(8),
            hours(64),
            hours(512),
            p.core_years,
        );
    }
}

/// `N` or a range `A..B` (both ends included).
fn parse_sizes(arg: &str) -> Vec<u32> {
    let size = |s: &str| s.parse::<u32>().unwrap_or_else(|_| panic!("not a board size: {arg}"));
    match arg.split_once("..") {
        Some((a, b)) => (size(a)..=size(b)).collect(),
        None => vec![size(arg)],
    }
}

/// The compiled baseline, or `None` (with a message) if its source or a C compiler is missing.
fn build_baseline() -> Option<PathBuf> {
    let src = std::env::var_os("NQ_BASELINE_SRC").map(PathBuf::from).unwrap_or_else(|| {
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/bench/baseline.c")
    });
    if !src.is_file() {
        eprintln!(
            "baseline source {} not found (set NQ_BASELINE_SRC): baseline columns skipped",
            src.display()
        );
        return None;
    }
    let exe = std::env::temp_dir().join(format!("nqueens-baseline-{}", std::process::id()));
    match Command::new("cc").args(["-O3", "-march=native", "-o"]).arg(&exe).arg(&src).status() {
        Ok(status) if status.success() => Some(exe),
        Ok(status) => {
            eprintln!("cc {} failed ({status}): baseline columns skipped", src.display());
            None
        }
        Err(e) => {
            eprintln!("no C compiler (cc: {e}): baseline columns skipped");
            None
        }
    }
}

/// The total and the seconds that the baseline reports for itself (its own clock, around the
/// search only).
fn run_baseline(exe: &PathBuf, n: u32) -> (u64, f64) {
    let out = Command::new(exe).arg(n.to_string()).output().expect("run the baseline");
    let text = String::from_utf8_lossy(&out.stdout);
    let fields: Vec<&str> = text.split_whitespace().collect();
    match (fields.get(1).and_then(|s| s.parse().ok()), fields.get(2).and_then(|s| s.parse().ok())) {
        (Some(total), Some(seconds)) => (total, seconds),
        _ => panic!("unexpected baseline output {text:?}"),
    }
}

#[derive(Clone, Copy)]
struct SolverRun {
    seconds: f64,
    total: u64,
    nodes: u64,
}

/// Seconds for the whole job: building the job list, solving every job, adding up (and checking
/// the symmetry identities of) the result. With `sample` above 1, the seconds for solving every
/// `sample`-th job and adding up their weighted counts.
fn run_solver(n: u32, threads: usize, sample: usize) -> SolverRun {
    let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().unwrap();
    if sample > 1 {
        let list = pool.install(|| job_list(n, &SplitParams::default())).unwrap();
        let jobs: Vec<_> = list.jobs.into_iter().step_by(sample).collect();
        let started = Instant::now();
        let sums = Mutex::new((0u64, 0u64));
        parallel::solve_all(&pool, &jobs, |i, counts, _| {
            let mut sums = sums.lock().unwrap();
            sums.0 += jobs[i].weight as u64 * counts.solutions;
            sums.1 += counts.nodes;
        })
        .unwrap();
        let seconds = started.elapsed().as_secs_f64();
        let (total, nodes) = sums.into_inner().unwrap();
        return SolverRun { seconds, total, nodes };
    }
    let started = Instant::now();
    let list = pool.install(|| job_list(n, &SplitParams::default())).unwrap();
    let tally = Mutex::new(Tally::new(n).unwrap());
    parallel::solve_all(&pool, &list.jobs, |i, counts, _| {
        tally.lock().unwrap().add(list.jobs[i].weight, counts).unwrap();
    })
    .unwrap();
    let tally = tally.into_inner().unwrap();
    let totals = tally.totals().unwrap();
    let seconds = started.elapsed().as_secs_f64();
    // Benchmarked boards (N <= 28) have totals below 2^64.
    let total = u64::try_from(totals.total).expect("a benchmarked total fits 64 bits");
    SolverRun { seconds, total, nodes: tally.nodes }
}

/// Total solutions by board size from the reference table, if it can be read.
fn known_totals() -> HashMap<u32, u64> {
    let path = std::env::var_os("NQ_KNOWN_COUNTS").map(PathBuf::from).unwrap_or_else(|| {
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/reference/known-counts.tsv")
    });
    let Ok(text) = std::fs::read_to_string(&path) else {
        eprintln!("reference table {} not found: totals not checked", path.display());
        return HashMap::new();
    };
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let mut fields = l.split('\t');
            Some((fields.next()?.parse().ok()?, fields.next()?.parse().ok()?))
        })
        .collect()
}

fn check(n: u32, total: u64, known: &HashMap<u32, u64>, who: &str) {
    if let Some(&want) = known.get(&n) {
        assert_eq!(total, want, "N={n}: the {who} counted {total}, the reference table {want}");
    }
}

fn median(xs: &mut [f64]) -> Option<f64> {
    xs.sort_by(|a, b| a.partial_cmp(b).unwrap());
    xs.get(xs.len() / 2).copied()
}
