//! Sizing a run before starting it: solve a stratified random sample of its jobs and project the
//! whole run's CPU time, its longest job, the wall time on a given number of cores and its total.
//!
//! The jobs of a list differ in cost by orders of magnitude, so a plain random sample is dominated by
//! luck: whether it happens to draw one of the few heavy jobs. Instead the list is cut into strata by
//! a cost: the list's own [`Job::estimate`] (partial placements two rows below the job's pre-placed
//! queens, what the schedulers use to hand out the longest jobs first), refined here by counting the
//! placements a few rows deeper for every job, as deep as [`EstimateParams::budget`] allows (at most
//! [`MAX_DEPTH`] rows). The deeper count predicts a job's time much better: at N=16 and 17, with 64
//! samples, the projection's spread (RMS error over 300 draws) falls from 8-10% at two rows to 2-3%
//! at five. The jobs are sorted by cost and cut where each stratum holds an equal share of the summed
//! cost, so the few heavy jobs form small strata of their own and the many light ones large strata. Every stratum gets an equal share of the sample, drawn at random with a fixed
//! seed (the same command gives the same sample). Each sampled job is solved alone on one thread
//! and timed in that thread's CPU time (wall time where the platform has no thread clock).
//!
//!
//! The projection is the stratified estimator: each stratum's mean sampled time times the number of
//! its jobs, summed. Its 95% confidence interval is `±1.96·√Σ N_h²(1 − n_h/N_h)·s_h²/n_h` from the
//! per-stratum sample variances `s_h²` (`N_h` jobs, `n_h` sampled). The longest job is projected
//! per stratum as its largest cost times the stratum's measured seconds per unit of cost (sampled
//! time over sampled cost), the largest over all strata and never less than the longest sampled job.

use crate::{job_list, CoreError, Job, JobList, SplitParams};
use rayon::prelude::*;
use serde::{Deserialize, Serialize};
use std::time::{Duration, Instant};

/// Samples drawn from each stratum (the number of strata is the sample size over this).
pub const SAMPLES_PER_STRATUM: usize = 4;

/// Core counts for which [`Estimate::on_cores`] is filled in by [`estimate`].
pub const CORE_COUNTS: [u64; 5] = [8, 64, 512, 1_000, 10_000];

/// Card counts for which [`Estimate::on_cards`] is filled in by [`estimate`].
pub const CARD_COUNTS: [u64; 3] = [1, 8, 64];

/// Cores of one host, by default: a worker splits a job over all of its cores.
pub const DEFAULT_HOST_CORES: u64 = 64;

/// One card's speed in cores of the machine that ran the estimate, by default: an assumption
/// until a card measures it (`estimate N --gpu` on the card, then `--card-cores`).
pub const DEFAULT_CARD_CORES: f64 = 1_000.0;

/// The deepest count of partial placements used as a job's cost.
pub const MAX_DEPTH: usize = 6;

/// Default budget of placements counted for the costs of all jobs (a second or so of one core).
pub const DEFAULT_BUDGET: u64 = 200_000_000;

/// A sampled job with more searched rows than this left below its pre-placed queens is too big to
/// solve whole (at N = 27 a job takes hours): it is sampled down random paths of its parts instead.
/// Fourteen rows take a few milliseconds at N = 18.
pub const WHOLE_ROWS: usize = 14;

/// Random paths sampled down a job too big to solve whole (see [`timed_sampled`]).
pub const PATHS: usize = 16;

/// Rows below a part whose partial placements weigh its draw on a path: the nearer a weight is to
/// the part's true time, the smaller the spread of the estimate.
const PATH_COST_DEPTH: usize = 4;

/// Seconds in a (Julian) year, for core-years.
const YEAR_SECONDS: f64 = 365.25 * 24.0 * 3600.0;

/// What to sample and how.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct EstimateParams {
    /// How many jobs to solve (all of them if the list is smaller).
    pub sample: usize,
    /// Threads solving the sample (each job on one thread).
    pub threads: usize,
    /// Seed of the random draw within strata.
    pub seed: u64,
    /// The split of the job list: the run's own, so that the projection is of its jobs.
    pub split: SplitParams,
    /// Placements that may be counted to refine the cost of every job (see the module docs): the
    /// costs are counted one row deeper at a time while the next row's count is projected to stay
    /// within this.
    pub budget: u64,
    /// Jobs with more searched rows than this left are sampled down random paths of their parts
    /// rather than solved whole ([`WHOLE_ROWS`] by default).
    pub whole_rows: usize,
    /// Cores of one host: the longest job runs split over them (see [`Estimate::wall_seconds_on`]).
    pub host_cores: u64,
    /// One card's speed in cores of this machine (see [`Estimate::on_cards`]).
    pub card_cores: f64,
}

impl Default for EstimateParams {
    fn default() -> Self {
        EstimateParams {
            sample: 64,
            threads: 1,
            seed: 0x6e71_7565_656e_7321,
            budget: DEFAULT_BUDGET,
            whole_rows: WHOLE_ROWS,
            host_cores: DEFAULT_HOST_CORES,
            card_cores: DEFAULT_CARD_CORES,
            split: SplitParams::default(),
        }
    }
}

/// One stratum: the jobs whose costs fall in `[min_cost, max_cost]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Stratum {
    /// Jobs in the stratum.
    pub jobs: u64,
    /// Jobs of the stratum that were sampled.
    pub sampled: u64,
    /// Smallest cost in the stratum.
    pub min_cost: u64,
    /// Largest cost in the stratum.
    pub max_cost: u64,
    /// Mean CPU seconds of the sampled jobs.
    pub mean_seconds: f64,
    /// Projected CPU seconds of the whole stratum: `mean_seconds * jobs`.
    pub projected_seconds: f64,
}

/// The projected wall time of the run on some number of cores.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct OnCores {
    /// Cores (one solver thread each).
    pub cores: u64,
    /// `max(total_cpu_seconds / cores, longest_job_seconds)`: a run can finish no sooner than its
    /// longest job, however many cores it has.
    pub wall_seconds: f64,
    /// The same in hours.
    pub wall_hours: f64,
}

/// The projected wall time of the run on some number of cards.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct OnCards {
    /// Cards, each as fast as [`Estimate::card_cores`] cores.
    pub cards: u64,
    /// `max(total_cpu_seconds / (cards * card_cores), longest_job_seconds / card_cores)`.
    pub wall_seconds: f64,
    /// The same in days.
    pub wall_days: f64,
}

/// The projection for one board size. Field names are those of `estimate --json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Estimate {
    /// Board size.
    pub n: u8,
    /// Jobs in the list (the default split unless another was asked for).
    pub jobs: u64,
    /// Jobs solved for the sample.
    pub sampled: u64,
    /// Strata the list was cut into.
    pub strata: u64,
    /// Threads that solved the sample.
    pub threads: u64,
    /// Seed of the draw.
    pub seed: u64,
    /// Rows below each job's pre-placed queens whose partial placements were counted as its cost.
    pub cost_depth: u64,
    /// Wall seconds taken to count the costs.
    pub cost_seconds: f64,
    /// `"thread_cpu"` if jobs were timed in their thread's CPU time, `"wall"` otherwise.
    pub clock: String,
    /// Wall seconds taken to build the job list here.
    pub job_list_seconds: f64,
    /// Wall seconds taken to solve the sample.
    pub sample_wall_seconds: f64,
    /// Summed CPU seconds of the sampled jobs.
    pub sample_cpu_seconds: f64,
    /// Projected CPU seconds to solve every job (job list building excluded).
    pub total_cpu_seconds: f64,
    /// Lower end of the 95% confidence interval of `total_cpu_seconds`.
    pub total_cpu_seconds_low: f64,
    /// Upper end of the 95% confidence interval of `total_cpu_seconds`.
    pub total_cpu_seconds_high: f64,
    /// `total_cpu_seconds` in core-hours.
    pub core_hours: f64,
    /// `total_cpu_seconds` in core-years.
    pub core_years: f64,
    /// Projected CPU seconds of the longest job.
    pub longest_job_seconds: f64,
    /// The longest sampled job, measured.
    pub longest_sampled_seconds: f64,
    /// Cores of one host: a worker splits a job over all of them, so the longest job takes
    /// `longest_job_seconds / host_cores` of wall time on one (1: one thread per job).
    pub host_cores: u64,
    /// The longest job's wall seconds on one host of `host_cores` cores.
    pub longest_job_on_host_seconds: f64,
    /// Projected wall time on [`CORE_COUNTS`] cores, in hosts of `host_cores`.
    pub on_cores: Vec<OnCores>,
    /// One card's speed in cores of this machine (a parameter until a card measures it).
    pub card_cores: f64,
    /// The longest job's wall seconds on one card.
    pub longest_job_on_card_seconds: f64,
    /// Projected wall time on [`CARD_COUNTS`] cards of `card_cores` each.
    pub on_cards: Vec<OnCards>,
    /// Projected number of solutions (a sanity figure: it should be near the known count).
    pub projected_solutions: f64,
    /// Lower end of the 95% confidence interval of `projected_solutions`.
    pub projected_solutions_low: f64,
    /// Upper end of the 95% confidence interval of `projected_solutions`.
    pub projected_solutions_high: f64,
    /// The strata, lightest first.
    pub by_stratum: Vec<Stratum>,
}

impl Estimate {
    /// The projected wall seconds on `cores` cores: the CPU time spread evenly, but no less than
    /// the longest job split over one host's cores.
    pub fn wall_seconds_on(&self, cores: u64) -> f64 {
        let host = self.host_cores.clamp(1, cores.max(1));
        (self.total_cpu_seconds / cores.max(1) as f64).max(self.longest_job_seconds / host as f64)
    }

    /// The projected wall seconds on `cards` cards of `card_cores` cores each: the CPU time
    /// spread evenly, but no less than the longest job on one card.
    pub fn wall_seconds_on_cards(&self, cards: u64) -> f64 {
        let rate = self.card_cores.max(1e-9);
        (self.total_cpu_seconds / (cards.max(1) as f64 * rate)).max(self.longest_job_seconds / rate)
    }

    /// Fills in the host and card figures for hosts of `host_cores` and cards of `card_cores`.
    pub fn set_hardware(&mut self, host_cores: u64, card_cores: f64) {
        self.host_cores = host_cores.max(1);
        self.card_cores = card_cores;
        self.longest_job_on_host_seconds = self.longest_job_seconds / self.host_cores as f64;
        self.longest_job_on_card_seconds = self.longest_job_seconds / card_cores.max(1e-9);
        self.on_cores = CORE_COUNTS
            .iter()
            .map(|&c| {
                let wall_seconds = self.wall_seconds_on(c);
                OnCores { cores: c, wall_seconds, wall_hours: wall_seconds / 3600.0 }
            })
            .collect();
        self.on_cards = CARD_COUNTS
            .iter()
            .map(|&cards| {
                let wall_seconds = self.wall_seconds_on_cards(cards);
                OnCards { cards, wall_seconds, wall_days: wall_seconds / 86_400.0 }
            })
            .collect();
    }
}

/// Which jobs to solve: the strata of a list and the jobs drawn from each.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SamplePlan {
    /// Each stratum's job indices (into the list), sorted by cost.
    pub strata: Vec<Vec<usize>>,
    /// Each stratum's sampled job indices, a subset of its jobs.
    pub chosen: Vec<Vec<usize>>,
}

/// What solving one sampled job gave.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Timed {
    /// Seconds the job took.
    pub seconds: f64,
    /// Its weighted solutions: orbit weight times solutions found.
    pub weighted_solutions: f64,
}

/// Cuts jobs of costs `costs` into strata and draws `sample` of them (see the module
/// documentation). Strata hold indices into `costs`.
pub fn plan_sample(costs: &[u64], sample: usize, seed: u64) -> SamplePlan {
    if costs.is_empty() || sample == 0 {
        return SamplePlan { strata: Vec::new(), chosen: Vec::new() };
    }
    let mut order: Vec<usize> = (0..costs.len()).collect();
    order.sort_by_key(|&i| (costs[i], i));
    let wanted = (sample / SAMPLES_PER_STRATUM).max(1);
    let sum: u128 = costs.iter().map(|&c| u128::from(c)).sum();
    // Cut where the running sum of costs passes each h/wanted share of the whole; a list whose
    // costs are all zero is cut into equal counts instead.
    let mut strata: Vec<Vec<usize>> = Vec::new();
    let mut current = Vec::new();
    let mut running: u128 = 0;
    let mut cut = 1u128;
    let (w, len) = (wanted as u128, order.len() as u128);
    for (position, &i) in order.iter().enumerate() {
        current.push(i);
        running += u128::from(costs[i]);
        // How many of the `wanted` shares the jobs so far make up (whole shares).
        let reached = (running * w).checked_div(sum).unwrap_or((position as u128 + 1) * w / len);
        if reached >= cut {
            strata.push(std::mem::take(&mut current));
            cut = reached + 1;
        }
    }
    if !current.is_empty() {
        strata.push(current);
    }
    // An equal share of the sample per stratum, capped by its size; what a small stratum cannot
    // take goes to the others in turn, heaviest first.
    let mut take = vec![0usize; strata.len()];
    let mut left = sample.min(costs.len());
    while left > 0 {
        let mut gave = false;
        for h in (0..strata.len()).rev() {
            if left > 0 && take[h] < strata[h].len() {
                take[h] += 1;
                left -= 1;
                gave = true;
            }
        }
        if !gave {
            break;
        }
    }
    let mut rng = crate::SplitMix64::new(seed);
    let chosen = strata
        .iter()
        .zip(&take)
        .map(|(members, &k)| {
            // A partial Fisher-Yates shuffle: the first `k` of a random permutation.
            let mut pool = members.clone();
            for slot in 0..k {
                let pick = slot + rng.below((pool.len() - slot) as u64) as usize;
                pool.swap(slot, pick);
            }
            let mut picked = pool[..k].to_vec();
            picked.sort_unstable();
            picked
        })
        .collect();
    SamplePlan { strata, chosen }
}

/// Mean and sample variance (0 for fewer than two values).
fn mean_var(xs: &[f64]) -> (f64, f64) {
    if xs.is_empty() {
        return (0.0, 0.0);
    }
    let mean = xs.iter().sum::<f64>() / xs.len() as f64;
    if xs.len() < 2 {
        return (mean, 0.0);
    }
    let var = xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (xs.len() - 1) as f64;
    (mean, var)
}

/// The stratified projection of a plan (drawn from `costs`) whose chosen jobs were solved:
/// `timed(i)` is what job `i` gave (only chosen jobs are asked). The run-level fields that this
/// cannot know (board size, threads, seed, clock, cost depth, wall times) are left to the caller,
/// zero or empty.
pub fn project(
    costs: &[u64],
    plan: &SamplePlan,
    timed: &dyn Fn(usize) -> Timed,
    cores: &[u64],
) -> Estimate {
    let z = 1.96;
    let (mut total, mut total_var) = (0.0, 0.0);
    let (mut solutions, mut solutions_var) = (0.0, 0.0);
    let (mut longest, mut longest_sampled, mut sample_cpu) = (0.0f64, 0.0f64, 0.0);
    let mut by_stratum = Vec::with_capacity(plan.strata.len());
    for (members, chosen) in plan.strata.iter().zip(&plan.chosen) {
        let size = members.len() as f64;
        let results: Vec<Timed> = chosen.iter().map(|&i| timed(i)).collect();
        let seconds: Vec<f64> = results.iter().map(|t| t.seconds).collect();
        let found: Vec<f64> = results.iter().map(|t| t.weighted_solutions).collect();
        let (mean, var) = mean_var(&seconds);
        let (mean_found, var_found) = mean_var(&found);
        let taken = chosen.len() as f64;
        let min_cost = members.iter().map(|&i| costs[i]).min().unwrap_or(0);
        let max_cost = members.iter().map(|&i| costs[i]).max().unwrap_or(0);
        if !chosen.is_empty() {
            let fpc = 1.0 - taken / size;
            total += mean * size;
            total_var += size * size * fpc * var / taken;
            solutions += mean_found * size;
            solutions_var += size * size * fpc * var_found / taken;
            // This stratum's largest job at the stratum's measured seconds per unit of cost.
            let sampled_cost: f64 = chosen.iter().map(|&i| costs[i] as f64).sum();
            let sampled_seconds: f64 = seconds.iter().sum();
            let scaled = if sampled_cost > 0.0 {
                max_cost as f64 * sampled_seconds / sampled_cost
            } else {
                seconds.iter().copied().fold(0.0, f64::max)
            };
            longest = longest.max(scaled);
            longest_sampled = seconds.iter().copied().fold(longest_sampled, f64::max);
            sample_cpu += sampled_seconds;
        }
        by_stratum.push(Stratum {
            jobs: members.len() as u64,
            sampled: chosen.len() as u64,
            min_cost,
            max_cost,
            mean_seconds: mean,
            projected_seconds: mean * size,
        });
    }
    let longest = longest.max(longest_sampled);
    let (half, half_found) = (z * total_var.sqrt(), z * solutions_var.sqrt());
    let mut estimate = Estimate {
        n: 0,
        jobs: costs.len() as u64,
        sampled: plan.chosen.iter().map(|c| c.len() as u64).sum(),
        strata: plan.strata.len() as u64,
        threads: 0,
        seed: 0,
        cost_depth: 0,
        cost_seconds: 0.0,
        clock: String::new(),
        job_list_seconds: 0.0,
        sample_wall_seconds: 0.0,
        sample_cpu_seconds: sample_cpu,
        total_cpu_seconds: total,
        total_cpu_seconds_low: (total - half).max(sample_cpu.min(total)),
        total_cpu_seconds_high: total + half,
        core_hours: total / 3600.0,
        core_years: total / YEAR_SECONDS,
        longest_job_seconds: longest,
        longest_sampled_seconds: longest_sampled,
        host_cores: 1,
        longest_job_on_host_seconds: longest,
        on_cores: Vec::new(),
        card_cores: 0.0,
        longest_job_on_card_seconds: 0.0,
        on_cards: Vec::new(),
        projected_solutions: solutions,
        projected_solutions_low: (solutions - half_found).max(0.0),
        projected_solutions_high: solutions + half_found,
        by_stratum,
    };
    estimate.on_cores = cores
        .iter()
        .map(|&c| {
            let wall_seconds = estimate.wall_seconds_on(c);
            OnCores { cores: c, wall_seconds, wall_hours: wall_seconds / 3600.0 }
        })
        .collect();
    estimate
}

/// CPU time of the calling thread, where the platform has a thread clock.
fn thread_cpu_time() -> Option<Duration> {
    #[cfg(unix)]
    {
        let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
        // SAFETY: `ts` is a valid, writable timespec; the call only writes into it.
        let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
        if rc == 0 {
            return Some(Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32));
        }
    }
    None
}

/// Solves `job` on the calling thread, returning the counts and the seconds it took (thread CPU
/// time if available, else wall time) and whether that was CPU time.
fn timed_solve(job: &Job) -> Result<(Timed, bool), CoreError> {
    let cpu = thread_cpu_time();
    let wall = Instant::now();
    let counts = job.solve()?;
    let (seconds, on_cpu) = match (cpu, thread_cpu_time()) {
        (Some(a), Some(b)) => ((b.saturating_sub(a)).as_secs_f64(), true),
        _ => (wall.elapsed().as_secs_f64(), false),
    };
    let weighted_solutions = counts.solutions as f64 * f64::from(job.weight);
    Ok((Timed { seconds, weighted_solutions }, on_cpu))
}

/// Solves `job`, or when it has more than `whole_rows` searched rows left, [`PATHS`] random paths
/// down it: from the job, one row deeper at a time ([`Job::split`]), a part drawn with probability
/// proportional to its partial placements [`PATH_COST_DEPTH`] rows deeper (plus one), until `whole_rows` rows are left; that part is
/// solved and its time and solutions scaled by one over the path's probability. Averaged over the
/// paths this is an unbiased estimate of the whole job's time and solutions (Knuth's estimator of
/// a search tree's size, with importance sampling by the estimate), for a few milliseconds of work.
fn timed_sampled(job: &Job, whole_rows: usize, seed: u64) -> Result<(Timed, bool), CoreError> {
    let rows = job.prepare()?.0.rows();
    let left = |j: &Job| rows.saturating_sub(j.prefix.len());
    if left(job) <= whole_rows {
        return timed_solve(job);
    }
    let mut rng = crate::SplitMix64::new(seed ^ job.id.wrapping_mul(0x9e37_79b9_7f4a_7c15));
    let (mut seconds, mut solutions, mut on_cpu) = (0.0, 0.0, true);
    'paths: for _ in 0..PATHS {
        let mut item = job.clone();
        let mut scale = 1.0f64;
        while left(&item) > whole_rows {
            let parts = item.split(1)?;
            if parts.is_empty() {
                // A dead end: this path found nothing and took no time.
                continue 'paths;
            }
            let weights = costs_at(&parts, PATH_COST_DEPTH)?;
            let total: u64 = weights.iter().map(|w| w + 1).sum();
            let mut pick = rng.below(total);
            let (chosen, weight) = parts
                .into_iter()
                .zip(weights)
                .find(|(_, w)| {
                    let take = pick <= *w;
                    pick = pick.saturating_sub(w + 1);
                    take
                })
                .expect("the draw falls within the parts");
            if chosen.prefix.len() <= item.prefix.len() {
                break;
            }
            scale *= total as f64 / (weight + 1) as f64;
            item = chosen;
        }
        let (t, cpu) = timed_solve(&item)?;
        seconds += t.seconds * scale;
        solutions += t.weighted_solutions * scale;
        on_cpu &= cpu;
    }
    let paths = PATHS as f64;
    Ok((Timed { seconds: seconds / paths, weighted_solutions: solutions / paths }, on_cpu))
}

/// Each job's partial placements `depth` rows below its pre-placed queens (`Job::estimate` is this
/// at depth 2). Jobs of one constellation share its layout. Runs on the current rayon pool.
pub fn costs_at(jobs: &[Job], depth: usize) -> Result<Vec<u64>, CoreError> {
    let groups: Vec<&[Job]> = jobs.chunk_by(|a, b| a.constellation == b.constellation).collect();
    let parts: Vec<Vec<u64>> = groups
        .par_iter()
        .map(|group| {
            let (layout, _) = group[0].prepare()?;
            group
                .iter()
                .map(|job| {
                    let mut state = layout.start();
                    for &col in &job.prefix {
                        state = layout.place(&state, col)?;
                    }
                    Ok(layout.count_partial(&state, depth))
                })
                .collect::<Result<Vec<u64>, CoreError>>()
        })
        .collect::<Result<_, _>>()?;
    Ok(parts.concat())
}

/// The costs of `jobs` counted as deep as `budget` allows (see [`EstimateParams::budget`]), and
/// that depth. Runs on the current rayon pool.
pub fn refined_costs(jobs: &[Job], budget: u64) -> Result<(Vec<u64>, usize), CoreError> {
    let mut costs: Vec<u64> = jobs.iter().map(|j| j.estimate).collect();
    let mut depth = 2;
    let sum = |c: &[u64]| c.iter().map(|&x| u128::from(x)).sum::<u128>();
    let mut placements = sum(&costs);
    // Each row multiplies the count by roughly the number of free columns; until one deeper row
    // has been counted, guess a third of the board.
    let mut growth = jobs.first().map_or(2, |j| u128::from(j.n / 3).max(2));
    while depth < MAX_DEPTH && placements.saturating_mul(growth) <= u128::from(budget) {
        let deeper = costs_at(jobs, depth + 1)?;
        let deeper_sum = sum(&deeper);
        growth = (deeper_sum / placements.max(1)).max(1);
        (costs, placements) = (deeper, deeper_sum);
        depth += 1;
    }
    Ok((costs, depth))
}

/// Solves the sample of `list` drawn by `params` on `params.threads` threads and projects the run.
pub fn estimate_list(list: &JobList, params: &EstimateParams) -> Result<Estimate, CoreError> {
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(params.threads.max(1))
        .build()
        .map_err(|e| CoreError::Estimate { reason: format!("thread pool: {e}") })?;
    let started = Instant::now();
    let (costs, depth) = pool.install(|| refined_costs(&list.jobs, params.budget))?;
    let cost_seconds = started.elapsed().as_secs_f64();
    let plan = plan_sample(&costs, params.sample, params.seed);
    let mut chosen: Vec<usize> = plan.chosen.iter().flatten().copied().collect();
    // Heaviest first, so that the threads finish together.
    chosen.sort_by_key(|&i| std::cmp::Reverse(costs[i]));
    let started = Instant::now();
    let solved: Vec<(usize, Timed, bool)> = pool.install(|| {
        chosen
            .par_iter()
            .with_max_len(1)
            .map(|&i| {
                timed_sampled(&list.jobs[i], params.whole_rows, params.seed)
                    .map(|(t, cpu)| (i, t, cpu))
            })
            .collect::<Result<_, _>>()
    })?;
    let sample_wall_seconds = started.elapsed().as_secs_f64();
    let on_cpu = solved.iter().all(|s| s.2);
    let mut by_job = std::collections::HashMap::with_capacity(solved.len());
    for (i, t, _) in solved {
        by_job.insert(i, t);
    }
    let timed = |i: usize| by_job[&i];
    let mut estimate = project(&costs, &plan, &timed, &CORE_COUNTS);
    estimate.n = list.n;
    estimate.cost_depth = depth as u64;
    estimate.cost_seconds = cost_seconds;
    estimate.threads = params.threads.max(1) as u64;
    estimate.seed = params.seed;
    estimate.clock = if on_cpu { "thread_cpu" } else { "wall" }.into();
    estimate.sample_wall_seconds = sample_wall_seconds;
    estimate.set_hardware(params.host_cores, params.card_cores);
    Ok(estimate)
}

/// Builds the job list of an `n`-board (with `params.split`, on `params.threads` threads), then
/// [`estimate_list`]: the sizing of a whole run of that board.
pub fn estimate(n: u32, params: &EstimateParams) -> Result<Estimate, CoreError> {
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(params.threads.max(1))
        .build()
        .map_err(|e| CoreError::Estimate { reason: format!("thread pool: {e}") })?;
    let started = Instant::now();
    let list = pool.install(|| job_list(n, &params.split))?;
    let job_list_seconds = started.elapsed().as_secs_f64();
    let mut estimate = estimate_list(&list, params)?;
    estimate.job_list_seconds = job_list_seconds;
    Ok(estimate)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Costs of a skewed list: many light jobs, a few heavy ones.
    fn skewed(count: usize) -> Vec<u64> {
        (0..count as u64).map(|i| 1 + (i * 7919 % 1000).pow(3) / 1_000_000).collect()
    }

    #[test]
    fn the_draw_is_deterministic_spread_over_strata_and_within_them() {
        let jobs = skewed(5000);
        let plan = plan_sample(&jobs, 64, 7);
        assert_eq!(plan, plan_sample(&jobs, 64, 7), "same seed, same sample");
        assert_ne!(plan.chosen, plan_sample(&jobs, 64, 8).chosen, "another seed, another sample");
        assert_eq!(plan.chosen.iter().map(Vec::len).sum::<usize>(), 64);
        // Every job is in exactly one stratum, strata are ordered by estimate, and each stratum
        // is sampled from its own jobs.
        let mut all: Vec<usize> = plan.strata.iter().flatten().copied().collect();
        all.sort_unstable();
        assert_eq!(all, (0..jobs.len()).collect::<Vec<_>>());
        for pair in plan.strata.windows(2) {
            let top = pair[0].iter().map(|&i| jobs[i]).max().unwrap();
            let bottom = pair[1].iter().map(|&i| jobs[i]).min().unwrap();
            assert!(top <= bottom);
        }
        for (members, chosen) in plan.strata.iter().zip(&plan.chosen) {
            assert!(!chosen.is_empty() && chosen.iter().all(|i| members.contains(i)));
        }
        // The heavy tail is sampled far above its share of the jobs.
        let heaviest = plan.strata.last().unwrap();
        assert!(heaviest.len() < jobs.len() / 10, "{} jobs in the top stratum", heaviest.len());
        assert!(plan.strata.len() >= 8, "{} strata", plan.strata.len());
    }

    #[test]
    fn a_census_projects_exactly() {
        let jobs = skewed(300);
        let plan = plan_sample(&jobs, 10_000, 1);
        assert_eq!(plan.chosen.iter().map(Vec::len).sum::<usize>(), jobs.len());
        let cost = |i: usize| Timed {
            seconds: jobs[i] as f64 * 0.01 + (i % 3) as f64,
            weighted_solutions: 8.0 * i as f64,
        };
        let e = project(&jobs, &plan, &cost, &[1, 1000]);
        let exact: f64 = (0..jobs.len()).map(|i| cost(i).seconds).sum();
        let longest = (0..jobs.len()).map(|i| cost(i).seconds).fold(0.0, f64::max);
        assert!((e.total_cpu_seconds - exact).abs() < 1e-6 * exact);
        assert!((e.total_cpu_seconds_high - e.total_cpu_seconds).abs() < 1e-6, "no sampling error");
        assert!((e.longest_sampled_seconds - longest).abs() < 1e-9);
        assert!(e.longest_job_seconds >= longest);
        let solutions: f64 = (0..jobs.len()).map(|i| cost(i).weighted_solutions).sum();
        assert!((e.projected_solutions - solutions).abs() < 1e-6 * solutions);
        assert!((e.on_cores[0].wall_seconds - exact).abs() < 1e-6 * exact);
        assert_eq!(e.on_cores[1].wall_seconds, e.longest_job_seconds, "bounded by the longest");
    }

    /// Times proportional to the estimate with noise: a sample of 64 projects within its interval,
    /// and the interval is narrow; a plain uniform sample would miss the heavy tail.
    #[test]
    fn a_sample_projects_within_its_interval() {
        let jobs = skewed(20_000);
        let noise = |i: usize| 0.8 + 0.4 * ((i * 2_654_435_761) % 1000) as f64 / 1000.0;
        let cost = |i: usize| Timed {
            seconds: (jobs[i] as f64 * 1e-3 + 1e-4) * noise(i),
            weighted_solutions: jobs[i] as f64 * 4.0,
        };
        let exact: f64 = (0..jobs.len()).map(|i| cost(i).seconds).sum();
        let mut hits = 0;
        for seed in 0..20 {
            let plan = plan_sample(&jobs, 64, seed);
            let e = project(&jobs, &plan, &cost, &[64]);
            assert!((e.total_cpu_seconds - exact).abs() < 0.15 * exact, "seed {seed}: {e:?}");
            if (e.total_cpu_seconds_low..=e.total_cpu_seconds_high).contains(&exact) {
                hits += 1;
            }
        }
        assert!(hits >= 16, "the 95% interval held {hits} times in 20");
    }

    #[test]
    fn a_real_sample_solves_and_projects_the_solutions() {
        let list = job_list(11, &SplitParams::default()).unwrap();
        let params = EstimateParams { sample: list.jobs.len(), threads: 2, ..Default::default() };
        let e = estimate_list(&list, &params).unwrap();
        assert_eq!(e.sampled, list.jobs.len() as u64);
        // A census counts every solution: Q(11) = 2680.
        let q = crate::reference::count_all(11).unwrap() as f64;
        assert!((e.projected_solutions - q).abs() < 1e-6, "{}", e.projected_solutions);
        assert!(e.total_cpu_seconds > 0.0 && e.longest_job_seconds > 0.0);
        let small = estimate_list(&list, &EstimateParams { sample: 8, ..params }).unwrap();
        assert_eq!(small.sampled, 8);
        assert!(small.projected_solutions_low <= small.projected_solutions_high);
        assert!(small.cost_depth > 2, "a small board's costs are counted deeper");
    }

    #[test]
    fn deeper_costs_refine_the_list_estimate_within_the_budget() {
        let list = job_list(12, &SplitParams::default()).unwrap();
        let at2 = costs_at(&list.jobs, 2).unwrap();
        assert_eq!(at2, list.jobs.iter().map(|j| j.estimate).collect::<Vec<_>>());
        let (costs, depth) = refined_costs(&list.jobs, 0).unwrap();
        assert_eq!((costs, depth), (at2, 2), "no budget: the list's own estimate");
        let (costs, depth) = refined_costs(&list.jobs, u64::MAX).unwrap();
        assert_eq!(depth, MAX_DEPTH);
        assert_eq!(costs, costs_at(&list.jobs, MAX_DEPTH).unwrap());
        // A job split one row deeper has as many parts as its cost one row deeper.
        let at1 = costs_at(&list.jobs, 1).unwrap();
        for (job, &c) in list.jobs.iter().zip(&at1).take(50) {
            assert_eq!(job.split(1).unwrap().len() as u64, c, "{job:?}");
        }
    }

    /// Jobs sampled down random paths (forced here by a small `whole_rows`) project the count of
    /// a census within a few percent: the path estimator is unbiased.
    #[test]
    fn paths_down_big_jobs_project_the_solutions() {
        let list = job_list(14, &SplitParams::default()).unwrap();
        let params = EstimateParams {
            sample: list.jobs.len(),
            threads: 2,
            whole_rows: 5,
            ..Default::default()
        };
        let e = estimate_list(&list, &params).unwrap();
        let q = crate::reference::count_all(14).unwrap() as f64;
        assert!((e.projected_solutions / q - 1.0).abs() < 0.05, "{} vs {q}", e.projected_solutions);
        assert!(e.total_cpu_seconds > 0.0);
    }
}
