//! GPU against CPU on the same job lists, side by side.
//!
//! cargo bench -p nqueens-gpu --bench gpu_vs_cpu -- [N ...] [--runs R] [--sample K] [--device I]
//!         [--lookahead R | --no-lookahead]
//!
//! For each N (default 16; `A..B` names a range) it runs R rounds (default 3) of: the whole job
//! list on all CPU cores (`parallel::solve_all`), then on the OpenCL device (the first GPU, else
//! any device; `--device I` picks one). The table shows the median time of each and the median of
//! the per-round ratios CPU time / GPU time (above 1: the GPU is faster); totals are checked
//! against each other. `--sample K` solves every K-th job only (boards too big to solve whole).
//! The GPU time includes splitting jobs into items and the symmetric counts on the CPU (what
//! `solve --gpu` pays), not the one kernel build per stack depth (done in an untimed warm-up).
//! `--lookahead R` builds the kernel checking R rows below a child before it is searched (0, 1 or
//! 2; default 1, the row after next; `--no-lookahead` is 0). `GPU nodes` is the
//! queens the kernel placed (its steps) plus those placed by the host while splitting.

use nqueens_core::{job_list, parallel, Job, SplitParams, Tally};
use nqueens_gpu::{DeviceSelector, GpuOptions, GpuSolver};
use std::time::Instant;

/// What to compare: the command line.
struct Args {
    sizes: Vec<u32>,
    runs: usize,
    sample: usize,
    device: DeviceSelector,
    options: GpuOptions,
}

impl Args {
    fn parse() -> Args {
        let mut a = Args {
            sizes: Vec::new(),
            runs: 3,
            sample: 1,
            device: DeviceSelector::Auto,
            options: GpuOptions::from_env(),
        };
        let mut args = std::env::args().skip(1);
        while let Some(arg) = args.next() {
            let mut number = |what: &str| -> usize {
                args.next()
                    .and_then(|v| v.parse().ok())
                    .unwrap_or_else(|| panic!("{what} takes a number"))
            };
            match arg.as_str() {
                "--runs" => a.runs = number("--runs").max(1),
                "--sample" => a.sample = number("--sample").max(1),
                "--device" => a.device = DeviceSelector::Index(number("--device")),
                "--no-lookahead" => a.options.lookahead_rows = 0,
                "--lookahead" => a.options.lookahead_rows = number("--lookahead").min(2) as u32,
                "--bench" => {}
                other => match other.split_once("..") {
                    Some((x, y)) => {
                        a.sizes.extend(x.parse::<u32>().unwrap()..=y.parse::<u32>().unwrap())
                    }
                    None => a
                        .sizes
                        .push(other.parse().unwrap_or_else(|_| panic!("bad argument {other}"))),
                },
            }
        }
        if a.sizes.is_empty() {
            a.sizes.push(16);
        }
        a
    }
}

/// One round's times of one board: CPU and GPU seconds, the solutions and the GPU's nodes.
struct Round {
    cpu: f64,
    gpu: f64,
    solutions: u128,
    nodes: u64,
}

/// Solves `jobs` of board `n` on all CPU cores, then on the GPU, and checks that they agree.
fn round(n: u32, jobs: &[Job], pool: &rayon::ThreadPool, gpu: &mut GpuSolver) -> Round {
    let started = Instant::now();
    let cpu_tally = std::sync::Mutex::new(Tally::new(n).unwrap());
    parallel::solve_all(pool, jobs, |i, c, _| {
        cpu_tally.lock().unwrap().add(jobs[i].weight, c).unwrap();
    })
    .unwrap();
    let cpu = started.elapsed().as_secs_f64();
    let started = Instant::now();
    let counts = pool.install(|| gpu.solve_jobs(jobs)).unwrap();
    let gpu_s = started.elapsed().as_secs_f64();
    let mut gpu_tally = Tally::new(n).unwrap();
    for (job, c) in jobs.iter().zip(&counts) {
        gpu_tally.add(job.weight, c).unwrap();
    }
    let cpu_tally = cpu_tally.into_inner().unwrap();
    assert_eq!(
        (gpu_tally.total, gpu_tally.sym180, gpu_tally.sym90),
        (cpu_tally.total, cpu_tally.sym180, cpu_tally.sym90),
        "N={n}: GPU and CPU disagree"
    );
    let nodes = counts.iter().map(|c| c.nodes).sum();
    Round { cpu, gpu: gpu_s, solutions: cpu_tally.total, nodes }
}

fn main() {
    let Args { sizes, runs, sample, device, options } = Args::parse();
    let mut gpu = match GpuSolver::with_options(device, options) {
        Ok(g) => g,
        Err(e) => {
            eprintln!("no GPU to compare: {e}");
            std::process::exit(1);
        }
    };
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().unwrap();
    println!("GPU: {}", gpu.device());
    println!("CPU: {threads} threads");
    println!(
        "{:>3} {:>9} {:>20} {:>12} {:>12} {:>10} {:>12} {:>16}",
        "N", "jobs", "solutions", "CPU s", "GPU s", "CPU/GPU", "GPU items", "GPU nodes"
    );
    for n in sizes {
        let list = job_list(n, &SplitParams::default()).unwrap();
        let jobs: Vec<Job> = list.jobs.iter().step_by(sample).cloned().collect();
        // Warm-up: builds the kernel for this board's stack depth.
        gpu.solve_jobs(&jobs[..jobs.len().min(64)]).unwrap();
        let (mut cpu_times, mut gpu_times, mut ratios) = (Vec::new(), Vec::new(), Vec::new());
        let (mut solutions, mut nodes) = (0u128, 0u64);
        for r in 0..runs {
            let Round { cpu, gpu: gpu_s, solutions: s, nodes: k } =
                round(n, &jobs, &pool, &mut gpu);
            (solutions, nodes) = (s, k);
            eprintln!("N={n} round {r}: CPU {cpu:.3} s, GPU {gpu_s:.3} s, {:?}", gpu.last_stats());
            cpu_times.push(cpu);
            gpu_times.push(gpu_s);
            ratios.push(cpu / gpu_s);
        }
        println!(
            "{n:>3} {:>9} {solutions:>20} {:>12.3} {:>12.3} {:>10.2} {:>12} {nodes:>16}",
            jobs.len(),
            median(&mut cpu_times),
            median(&mut gpu_times),
            median(&mut ratios),
            gpu.last_stats().items
        );
    }
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}
