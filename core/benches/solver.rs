//! Solver benchmark against the plain C bitboard counter in `shared/bench/baseline.c`.
//!
//!     cargo bench -p nqueens-core --bench solver -- [N ...] [--runs R]
//!
//! For each N (default 16 and 17) it runs R rounds (default 5) of: the C baseline (one thread), then
//! this solver on one thread and on two threads (in turn first). Each round gives two ratios from
//! runs taken back to back; the table shows the median time of each column and the median of the per-round
//! ratios (every round is also printed to stderr). Ratios measured side by side are what to quote:
//! these machines are shared, and their speed drifts by a third or more within minutes.
//! `NQ_BASELINE_SRC` overrides the baseline's path.

use nqueens_core::{job_list, parallel, SplitParams, Tally};
use std::path::PathBuf;
use std::process::Command;
use std::sync::Mutex;
use std::time::Instant;

fn main() {
    let mut sizes = Vec::new();
    let mut runs = 5usize;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--runs" => {
                runs = args.next().and_then(|r| r.parse().ok()).expect("--runs takes a number")
            }
            "--bench" => {}
            other => sizes
                .push(other.parse::<u32>().unwrap_or_else(|_| panic!("not a board size: {other}"))),
        }
    }
    if sizes.is_empty() {
        sizes = vec![16, 17];
    }
    let baseline = build_baseline();
    println!(
        "{:>3} {:>12} {:>12} {:>12} {:>14} {:>14}",
        "N", "baseline s", "1 thread s", "2 threads s", "1T vs baseline", "2T vs 1T"
    );
    for n in sizes {
        let (mut base, mut one, mut two) = (Vec::new(), Vec::new(), Vec::new());
        let (mut speedup, mut scaling) = (Vec::new(), Vec::new());
        for round in 1..=runs {
            let b = run_baseline(&baseline, n);
            // Swap the order of the two solver runs every round, so neither always runs first.
            let (o, t) = if round % 2 == 1 {
                (run_solver(n, 1), run_solver(n, 2))
            } else {
                let t = run_solver(n, 2);
                (run_solver(n, 1), t)
            };
            eprintln!(
                "N={n} round {round}: baseline {b:.3} s, 1 thread {o:.3} s, 2 threads {t:.3} s"
            );
            base.push(b);
            one.push(o);
            two.push(t);
            speedup.push(b / o);
            scaling.push(o / t);
        }
        let (b, o, t) = (median(&mut base), median(&mut one), median(&mut two));
        let (speedup, scaling) = (median(&mut speedup), median(&mut scaling));
        println!("{n:>3} {b:>12.3} {o:>12.3} {t:>12.3} {speedup:>13.2}x {scaling:>13.2}x");
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
    fields
        .get(2)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("unexpected baseline output {text:?}"))
}

/// Seconds for the whole job: building the job list, solving every job, adding up (and checking
/// the symmetry identities of) the result.
fn run_solver(n: u32, threads: usize) -> f64 {
    let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().unwrap();
    let started = Instant::now();
    let list = pool.install(|| job_list(n, &SplitParams::default())).unwrap();
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
