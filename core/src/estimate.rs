//! Sizing a run before starting it: solve a stratified random sample of its jobs and project the
//! whole run's CPU time, its longest job, the wall time on a given number of cores and its total.
//!
//! The jobs of a list differ in cost by orders of magnitude, so a plain random sample is dominated
//! by luck: whether it happens to draw one of the few heavy jobs. Instead the list is cut into
//! strata by a cost: the list's own [`Job::estimate`] (partial placements two rows below the job's
//! pre-placed queens, what the schedulers use to hand out the longest jobs first), refined here by
//! counting the placements a few rows deeper for every job, as deep as [`EstimateParams::budget`]
//! allows (at most [`MAX_DEPTH`] rows). The deeper count predicts a job's time much better: at N=16
//! and 17, with 64 samples, the projection's spread (RMS error over 300 draws) falls from 8-10% at
//! two rows to 2-3% at five. The jobs are sorted by cost and cut where each stratum holds an equal
//! share of the summed cost, so the few heavy jobs form small strata of their own and the many
//! light ones large strata. Every stratum gets an equal share of the sample, drawn at random with a
//! fixed seed (the same command gives the same sample). Each sampled job is solved alone on one
//! thread and timed in that thread's CPU time (wall time where the platform has no thread clock).
//!
//!
//! The projection is the stratified estimator: each stratum's mean sampled time times the number of
//! its jobs, summed. Its 95% confidence interval is `±1.96·√Σ N_h²(1 − n_h/N_h)·s_h²/n_h` from the
//! per-stratum sample variances `s_h²` (`N_h` jobs, `n_h` sampled). The longest job is projected
//! per stratum as its largest cost times the stratum's measured seconds per unit of cost (sampled
//! time over sampled cost), the largest over all strata and never less than the longest sampled
//! job.

use crate::{job_list, CoreError, Job, JobList, SplitParams};
use rayon::prelude::*;
use serde::{Deserialize, Serialize};
use std::time::Instant;

mod paths;
mod speed;
pub use paths::draw_paths;
use paths::timed_sampled;
pub use speed::{
    measure_host_speed, HostSpeed, REFERENCE_CORE_SECONDS, REFERENCE_N, REFERENCE_ROUNDS,
};

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

/// Random paths sampled down a job too big to solve whole (see `estimate/paths.rs`).
pub const PATHS: usize = 16;

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
    /// Whether [`estimate`] measures this host's speed on the reference list first (a second
    /// or so of one core), to state the CPU time in reference-core-years too.
    pub measure_speed: bool,
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
            measure_speed: true,
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
    /// This host's speed on the reference list (see [`HostSpeed`]), where it was measured.
    pub speed: Option<HostSpeed>,
    /// `total_cpu_seconds` in reference-core-years (see [`HostSpeed`]), where the speed was measured.
    pub reference_core_years: Option<f64>,
    /// Lower end of the 95% interval of `reference_core_years`.
    pub reference_core_years_low: Option<f64>,
    /// Upper end of the 95% interval of `reference_core_years`.
    pub reference_core_years_high: Option<f64>,
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
    /// States the CPU time in reference-core-years too, at this host's `speed`; its interval
    /// is widened by the speed's drift (a host whose speed moved during the estimate cannot
    /// say its CPU time in reference units more closely than that).
    pub fn set_speed(&mut self, speed: HostSpeed) {
        let years = |seconds: f64| speed.reference_core_years(seconds);
        self.speed = Some(speed);
        self.reference_core_years = Some(years(self.total_cpu_seconds));
        self.reference_core_years_low =
            Some(years(self.total_cpu_seconds_low) * (1.0 - speed.drift));
        self.reference_core_years_high =
            Some(years(self.total_cpu_seconds_high) * (1.0 + speed.drift));
    }

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

/// The strata's squared coefficient of variation (variance over squared mean), pooled by degrees
/// of freedom. A sampled job's figure is heavy tailed where it comes from random paths (a rare
/// path draws a part far heavier than its weight said), so a stratum's own variance from a few
/// values is most often too small and now and then far too large; each stratum's variance is
/// taken as at least this pooled spread times its squared mean, so that the rare heavy draws
/// seen anywhere widen the interval everywhere.
///
/// `strata` gives each stratum's mean, sample variance and number of values.
fn pooled_relative_variance(strata: impl Iterator<Item = (f64, f64, usize)>) -> f64 {
    let (mut sum, mut df) = (0.0, 0.0);
    for (mean, var, n) in strata {
        if n >= 2 && mean > 0.0 {
            sum += (n - 1) as f64 * var / (mean * mean);
            df += (n - 1) as f64;
        }
    }
    if df > 0.0 {
        sum / df
    } else {
        0.0
    }
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
    let results: Vec<Vec<Timed>> =
        plan.chosen.iter().map(|chosen| chosen.iter().map(|&i| timed(i)).collect()).collect();
    let seconds_of = |r: &[Timed]| r.iter().map(|t| t.seconds).collect::<Vec<f64>>();
    let found_of = |r: &[Timed]| r.iter().map(|t| t.weighted_solutions).collect::<Vec<f64>>();
    let spread = |values: &dyn Fn(&[Timed]) -> Vec<f64>| {
        pooled_relative_variance(results.iter().map(|r| {
            let (mean, var) = mean_var(&values(r));
            (mean, var, r.len())
        }))
    };
    let (spread_seconds, spread_found) = (spread(&seconds_of), spread(&found_of));
    for ((members, chosen), results) in plan.strata.iter().zip(&plan.chosen).zip(&results) {
        let size = members.len() as f64;
        let seconds = seconds_of(results);
        let (mean, var) = mean_var(&seconds);
        let (mean_found, var_found) = mean_var(&found_of(results));
        let taken = chosen.len() as f64;
        let min_cost = members.iter().map(|&i| costs[i]).min().unwrap_or(0);
        let max_cost = members.iter().map(|&i| costs[i]).max().unwrap_or(0);
        if !chosen.is_empty() {
            let fpc = 1.0 - taken / size;
            total += mean * size;
            total_var += size * size * fpc * var.max(spread_seconds * mean * mean) / taken;
            solutions += mean_found * size;
            solutions_var +=
                size * size * fpc * var_found.max(spread_found * mean_found * mean_found) / taken;
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
        speed: None,
        reference_core_years: None,
        reference_core_years_low: None,
        reference_core_years_high: None,
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
    // Timed alone, on this thread, before and after the sample (whose threads would share
    // its core): the speed is their mean, and how far they differ widens the interval.
    let before = if params.measure_speed { Some(measure_host_speed()?) } else { None };
    let started = Instant::now();
    let list = pool.install(|| job_list(n, &params.split))?;
    let job_list_seconds = started.elapsed().as_secs_f64();
    let mut estimate = estimate_list(&list, params)?;
    estimate.job_list_seconds = job_list_seconds;
    if let Some(before) = before {
        estimate.set_speed(before.combine(measure_host_speed()?));
    }
    Ok(estimate)
}

#[cfg(test)]
mod tests;
