//! `--record-trend`: the solver's cost per solution at record sizes, measured on whole jobs where a
//! job is affordable and on parts of jobs where it is not, with a 95% interval.
//!
//! Each size spec is `N` or `N@R`. For every spec, jobs are drawn uniformly at random (a seeded
//! shuffle of N's default job list): a drawn job is solved whole when it has at most `R` searched
//! rows left (by default every job of N <= `--whole-max`, 24), and otherwise through
//! `--paths` random paths down it to parts with `R` rows left (default [`DEFAULT_PART_ROWS`]),
//! drawn as `estimate` draws them (`nqueens_core::estimate::draw_paths`) and timed warm, back to
//! back, after one untimed part. A job's time and solutions are then Knuth's unbiased estimates
//! (each part's figures over its path's probability), and the figure is the ratio estimator
//! Σ time / Σ solutions over the drawn jobs, its interval ±1.96 standard errors by the delta method
//! (the jobs are the sampling units). `N@14,N@16,N@18,N` side by side shows whether the part size
//! still moves the figure.
//!
//! The specs take turns, a quarter of a second at a time, until each has had `--seconds` (default
//! 60) of turns (drawing the paths included; the figures time the solving alone, in thread CPU
//! time) and at least `--min-jobs` (default 8) jobs: a shared machine's speed drifts
//! within minutes, and specs measured one after the other would each see another state of it.
//!
//! Under each spec's line a second one gives the AVX-512 search's time per part, in timestamp
//! ticks per solution found by the search (before weights): the six-row count, the dead-state
//! test of row `last`, rows `last - 1` to `last - 4`, and the depth-first search above them; and
//! the states of rows `last` and `last - 1` tested and found dead, per solution. It needs the
//! probes compiled in: `cargo bench -p nqueens-core --features breakdown --bench solver --
//! --record-trend ...` (they cost a few percent; the ns/solution figures are for the build
//! without them).

use nqueens_core::breakdown::{self, Breakdown, Event, Part};
use nqueens_core::estimate::draw_paths;
use nqueens_core::{job_list, Job, SplitMix64, SplitParams};
use std::collections::HashMap;
use std::time::{Duration, Instant};

/// Rows left in the parts of a job too big to solve whole, by default: at N = 27 such a part takes
/// a few milliseconds (long enough to time, short enough to draw hundreds of jobs in a minute).
pub const DEFAULT_PART_ROWS: usize = 17;

/// The `--record-trend` command line.
pub struct RecordTrend {
    specs: Vec<Spec>,
    paths: usize,
    seconds: f64,
    min_jobs: usize,
    whole_max: u32,
    seed: u64,
}

/// One line of the output: a board size, and how its jobs are solved.
#[derive(Clone, Copy)]
struct Spec {
    n: u32,
    /// Rows left in the parts; `None`: the default for `n`.
    part_rows: Option<usize>,
}

impl RecordTrend {
    /// Parses the sizes after `--record-trend` (`18,20,24@16,26`).
    pub fn new(sizes: &str) -> RecordTrend {
        let specs = sizes
            .split(',')
            .filter(|s| !s.is_empty())
            .map(|s| match s.split_once('@') {
                Some((n, r)) => Spec {
                    n: n.parse().expect("--record-trend: N@ROWS"),
                    part_rows: Some(r.parse().expect("--record-trend: N@ROWS")),
                },
                None => Spec { n: s.parse().expect("--record-trend: N"), part_rows: None },
            })
            .collect();
        RecordTrend { specs, paths: 16, seconds: 60.0, min_jobs: 8, whole_max: 24, seed: 1 }
    }

    /// Takes one of this mode's own flags (and its value) if `flag` is one.
    pub fn parse_flag(&mut self, flag: &str, rest: &mut impl Iterator<Item = String>) -> bool {
        let mut value = |name: &str| {
            rest.next().and_then(|v| v.parse::<f64>().ok()).unwrap_or_else(|| {
                panic!("{name} takes a number");
            })
        };
        match flag {
            "--paths" => self.paths = value(flag).max(1.0) as usize,
            "--seconds" => self.seconds = value(flag),
            "--min-jobs" => self.min_jobs = value(flag).max(2.0) as usize,
            "--whole-max" => self.whole_max = value(flag) as u32,
            "--seed" => self.seed = value(flag) as u64,
            _ => return false,
        }
        true
    }

    /// Runs the measurement and prints one line per spec.
    pub fn run(&self, known: &HashMap<u32, u64>) {
        let mut sizes: Vec<Measured> = self.specs.iter().map(|&s| Measured::new(s, self)).collect();
        let turn = Duration::from_millis(250);
        let mut last_report = Instant::now();
        while sizes.iter().any(|m| !m.done(self)) {
            for m in sizes.iter_mut().filter(|m| !m.done(self)) {
                let started = Instant::now();
                while !m.done(self) && started.elapsed() < turn {
                    m.solve_next(self);
                }
                m.spent += started.elapsed().as_secs_f64();
            }
            if last_report.elapsed() > Duration::from_secs(10) {
                last_report = Instant::now();
                let progress: Vec<String> = sizes.iter().map(|m| m.progress()).collect();
                eprintln!("record trend: {}", progress.join(", "));
            }
        }
        println!(
            "ns per solution at record sizes (one thread, thread CPU time; jobs drawn at random, \
             solved whole or through random paths to parts of R rows; seed {}):",
            self.seed
        );
        for m in &sizes {
            println!("{}", m.line(known));
            println!("{}", m.probed.line());
        }
    }
}

/// What one spec has measured so far.
struct Measured {
    spec: Spec,
    /// Rows left in the parts (jobs with no more rows left are solved whole).
    part_rows: usize,
    /// The job list, in the order of a seeded shuffle (drawn from the front).
    jobs: Vec<Job>,
    /// Per solved job: its estimated seconds, weighted solutions and nodes.
    solved: Vec<(f64, f64, f64)>,
    parts: usize,
    whole: usize,
    /// Thread CPU time of the timed solves.
    seconds: f64,
    /// Wall time of this spec's turns (drawing the paths included): what `--seconds` limits.
    spent: f64,
    /// The probes' figures of the timed solves, scaled like their time.
    probed: Probed,
}

/// Sums of the search's probes (`nqueens_core::breakdown`), each solve's figures scaled as its
/// time is (over its path's probability and the paths drawn), and the solutions found by the
/// search (before weights) scaled alike.
#[derive(Default)]
struct Probed {
    ticks: [f64; 7],
    events: [f64; 4],
    solutions: f64,
}

impl Probed {
    fn add(&mut self, b: &Breakdown, solutions: u64, scale: f64) {
        for (sum, &t) in self.ticks.iter_mut().zip(&b.ticks) {
            *sum += t as f64 * scale;
        }
        for (sum, &e) in self.events.iter_mut().zip(&b.events) {
            *sum += e as f64 * scale;
        }
        self.solutions += solutions as f64 * scale;
    }

    /// `  ticks/solution 310: count 150, ... | dead states per solution: row last 7.1, ...`
    fn line(&self) -> String {
        if !breakdown::ENABLED {
            return String::from("  (per part: build with --features breakdown)");
        }
        let per = |x: f64| x / self.solutions;
        let ticks = |p: Part| per(self.ticks[p as usize]);
        let inside = [Part::Count, Part::DeadLast, Part::Row1, Part::Row2, Part::Row3, Part::Row4];
        let above = ticks(Part::Total) - inside.iter().map(|&p| ticks(p)).sum::<f64>();
        let events = |e: Event| per(self.events[e as usize]);
        format!(
            "  ticks/solution {:.0}: count {:.0}, dead-state test of row last {:.0}, row last-1 \
             {:.0}, last-2 {:.0}, last-3 {:.0}, last-4 {:.0}, search above {:.0} | per solution: \
             row last {:.2} states tested, {:.2} dead; row last-1 {:.2} tested, {:.2} dead",
            ticks(Part::Total),
            ticks(Part::Count),
            ticks(Part::DeadLast),
            ticks(Part::Row1),
            ticks(Part::Row2),
            ticks(Part::Row3),
            ticks(Part::Row4),
            above,
            events(Event::LastTested),
            events(Event::LastDead),
            events(Event::Row1Tested),
            events(Event::Row1Dead),
        )
    }
}

impl Measured {
    fn new(spec: Spec, options: &RecordTrend) -> Measured {
        let list = job_list(spec.n, &SplitParams::default()).expect("job list");
        let mut jobs = list.jobs;
        let mut rng = SplitMix64::new(options.seed ^ u64::from(spec.n).wrapping_mul(0x9e37_79b9));
        // Fisher-Yates: every order equally likely, so any prefix is a uniform sample.
        for i in (1..jobs.len()).rev() {
            let j = rng.below(i as u64 + 1) as usize;
            jobs.swap(i, j);
        }
        let part_rows = spec.part_rows.unwrap_or(if spec.n <= options.whole_max {
            usize::MAX
        } else {
            DEFAULT_PART_ROWS
        });
        Measured {
            spec,
            part_rows,
            jobs,
            solved: Vec::new(),
            parts: 0,
            whole: 0,
            seconds: 0.0,
            spent: 0.0,
            probed: Probed::default(),
        }
    }

    fn done(&self, options: &RecordTrend) -> bool {
        let enough = self.spent >= options.seconds && self.solved.len() >= options.min_jobs;
        enough || self.solved.len() == self.jobs.len()
    }

    /// Solves the next drawn job: whole, or its paths' parts, warm and back to back.
    fn solve_next(&mut self, options: &RecordTrend) {
        let job = &self.jobs[self.solved.len()];
        let seed = options.seed ^ 0x5eed;
        let drawn = draw_paths(job, self.part_rows, options.paths, seed).expect("paths");
        let whole = drawn.len() == 1 && drawn[0].0.prefix == job.prefix;
        let paths = if whole { 1.0 } else { options.paths as f64 };
        if !whole && drawn.len() > 1 {
            // Warm the caches on another part than the first one timed (see `estimate`).
            drawn[drawn.len() - 1].0.solve().expect("solve");
        }
        let (mut seconds, mut solutions, mut nodes) = (0.0, 0.0, 0.0);
        breakdown::take();
        for (part, scale) in &drawn {
            let before = thread_cpu();
            let counts = part.solve().expect("solve");
            let took = thread_cpu() - before;
            self.probed.add(&breakdown::take(), counts.solutions, scale / paths);
            self.seconds += took;
            seconds += took * scale;
            solutions += (counts.solutions * u64::from(part.weight)) as f64 * scale;
            nodes += counts.nodes as f64 * scale;
        }
        if whole {
            self.whole += 1;
        } else {
            self.parts += drawn.len();
        }
        self.solved.push((seconds / paths, solutions / paths, nodes / paths));
    }

    fn progress(&self) -> String {
        format!("N={} {} jobs {:.0} s", self.spec.n, self.solved.len(), self.seconds)
    }

    /// `N=27 ns/solution 19.2 (95%: 18.1 .. 20.3) ...`
    fn line(&self, known: &HashMap<u32, u64>) -> String {
        let k = self.solved.len() as f64;
        let sum = |f: fn(&(f64, f64, f64)) -> f64| self.solved.iter().map(f).sum::<f64>();
        let (t, s, nodes) = (sum(|x| x.0), sum(|x| x.1), sum(|x| x.2));
        let ratio = t / s;
        // Delta method: the variance of Σt/Σs from the spread of t_j − ratio·s_j.
        let spread = self.solved.iter().map(|x| (x.0 - ratio * x.1).powi(2)).sum::<f64>();
        let se = (spread / (k * (k - 1.0))).sqrt() / (s / k);
        let projected = s / k * self.jobs.len() as f64;
        let against = known
            .get(&self.spec.n)
            .map_or(String::from("unknown"), |&q| format!("{:.3}", projected / q as f64));
        let how = if self.part_rows == usize::MAX || self.parts == 0 {
            String::from("whole jobs")
        } else {
            format!(
                "parts of {} rows ({} parts, {} jobs whole)",
                self.part_rows, self.parts, self.whole
            )
        };
        format!(
            "N={} ns/solution {:.2} (95%: {:.2} .. {:.2}) nodes/solution {:.3} | {} of {} jobs, {}, \
             {:.1} s CPU | projected Total / true {}",
            self.spec.n,
            ratio * 1e9,
            (ratio - 1.96 * se) * 1e9,
            (ratio + 1.96 * se) * 1e9,
            nodes / s,
            self.solved.len(),
            self.jobs.len(),
            how,
            self.seconds,
            against
        )
    }
}

/// CPU time of the calling thread, in seconds.
fn thread_cpu() -> f64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid, writable timespec; the call only writes into it.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9
}
