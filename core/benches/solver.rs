//! Solver benchmark against the plain C bitboard counter in `shared/bench/baseline.c`.
//!
//!     cargo bench -p nqueens-core --bench solver -- [N ...] [--runs R]
//!
//! For each N (default 16 and 17) it alternates runs of the C baseline (one thread), this solver on
//! one thread and this solver on two threads, R times each (default 3), and prints the medians and
//! their ratios. Ratios measured side by side in one run are what to quote: these machines are
//! shared and absolute times drift. `NQ_BASELINE_SRC` overrides the baseline's path.

use nqueens_core::{job_list, parallel, SplitParams, Tally};
use std::path::PathBuf;
use std::process::Command;
use std::sync::Mutex;
use std::time::Instant;

fn main() {
    let mut sizes = Vec::new();
    let mut runs = 3usize;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--runs" => runs = args.next().and_then(|r| r.parse().ok()).expect("--runs takes a number"),
            "--bench" => {}
            other => sizes.push(other.parse::<u32>().unwrap_or_else(|_| panic!("not a board size: {other}"))),
        }
    }
    if sizes.is_empty() {
        sizes = vec![16, 17];
    }
    let baseline = build_baseline();
    println!("{:>3} {:>12} {:>12} {:>12} {:>14} {:>14}", "N", "baseline s", "1 thread s", "2 threads s", "1T vs baseline", "2T vs 1T");
    for n in sizes {
        let (mut base, mut one, mut two) = (Vec::new(), Vec::new(), Vec::new());
        for _ in 0..runs {
            base.push(run_baseline(&baseline, n));
            one.push(run_solver(n, 1));
            two.push(run_solver(n, 2));
        }
        let (b, o, t) = (median(&mut base), median(&mut one), median(&mut two));
        println!("{n:>3} {b:>12.3} {o:>12.3} {t:>12.3} {:>13.2}x {:>13.2}x", b / o, o / t);
    }
}

fn build_baseline() -> PathBuf {
    let src = std::env::var_os("NQ_BASELINE_SRC").map(PathBuf::from).unwrap_or_else(|| {
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/bench/baseline.c")
    });
    let exe = std::env::temp_dir().join(format!("nqueens-baseline-{}", std::process::id()));
    let status = Command::new("cc")
        .args(["-O3", "-march=native", "-o"])
        .arg(&exe)
        .arg(&src)
        .status()
        .expect("a C compiler (cc) to build the baseline");
    assert!(status.success(), "could not compile {}", src.display());
    exe
}

/// Seconds the baseline reports for itself (its own clock, around the search only).
fn run_baseline(exe: &PathBuf, n: u32) -> f64 {
    let out = Command::new(exe).arg(n.to_string()).output().expect("run the baseline");
    let text = String::from_utf8_lossy(&out.stdout);
    let fields: Vec<&str> = text.split_whitespace().collect();
    fields.get(2).and_then(|s| s.parse().ok()).unwrap_or_else(|| panic!("unexpected baseline output {text:?}"))
}

/// Seconds for the whole job: building the job list, solving every job, adding up (and checking
/// the symmetry identities of) the result.
fn run_solver(n: u32, threads: usize) -> f64 {
    let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().unwrap();
    let started = Instant::now();
    let list = job_list(n, &SplitParams::default()).unwrap();
    let tally = Mutex::new(Tally::new(n).unwrap());
    parallel::solve_all(&pool, &list.jobs, |i, counts, _| {
        tally.lock().unwrap().add(list.jobs[i].weight, counts).unwrap();
    })
    .unwrap();
    let totals = tally.into_inner().unwrap().totals().unwrap();
    let seconds = started.elapsed().as_secs_f64();
    std::hint::black_box(totals);
    seconds
}

fn median(xs: &mut [f64]) -> f64 {
    xs.sort_by(|a, b| a.partial_cmp(b).unwrap());
    xs[xs.len() / 2]
}
