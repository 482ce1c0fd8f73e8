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
//! fixed seed (the same command gives the same sample). The sampled jobs are spread over the
//! pool's threads, heaviest first, each job on one thread and timed in that thread's CPU time
//! (wall time where the platform has no thread clock): solved whole when at most
//! [`EstimateParams::whole_rows`] searched rows are left, else estimated down [`PATHS`] random
//! paths of its parts (`estimate/paths.rs`).
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

mod hardware;
mod paths;
mod projection;
mod speed;
pub use hardware::{Hardware, OnCards, OnCores};
pub use paths::draw_paths;
use paths::timed_sampled;
pub use projection::{project, Projection, Stratum, Timed};
pub use speed::{
    measure_host_speed, HostSpeed, Reference, REFERENCE_CORE_SECONDS, REFERENCE_N, REFERENCE_ROUNDS,
};

/// Samples drawn from each stratum (the number of strata is the sample size over this).
pub const SAMPLES_PER_STRATUM: usize = 4;

/// Core counts of [`Hardware::on_cores`].
pub const CORE_COUNTS: [u64; 5] = [8, 64, 512, 1_000, 10_000];

/// Card counts of [`Hardware::on_cards`].
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
/// A part of sixteen rows takes 2-3 ms at N = 24-25. Smaller parts run the batched
/// search below capacity: parts of 14 rows put the cost per solution 3-11% above the whole jobs'
/// (N = 22-24), parts of 16 rows within 3% (`docs/estimate.md`).
pub const WHOLE_ROWS: usize = 16;

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
    /// Cores of one host: the longest job runs split over them (see [`Hardware::longest_job_on_host_seconds`]).
    pub host_cores: u64,
    /// One card's speed in cores of this machine (see [`Hardware::on_cards`]).
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

/// How a job's time was measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Clock {
    /// The CPU time of the thread that solved it.
    ThreadCpu,
    /// Wall time, on platforms without a thread clock.
    Wall,
}

impl Clock {
    /// The name `estimate` prints and its JSON holds.
    pub fn as_str(self) -> &'static str {
        match self {
            Clock::ThreadCpu => "thread_cpu",
            Clock::Wall => "wall",
        }
    }
}

/// How the sample was drawn and solved on this machine. Field names are those of
/// `estimate --json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Sampling {
    /// Threads that solved the sample.
    pub threads: u64,
    /// Seed of the draw.
    pub seed: u64,
    /// Rows below each job's pre-placed queens whose partial placements were counted as its cost.
    pub cost_depth: u64,
    /// Wall seconds taken to count the costs.
    pub cost_seconds: f64,
    /// How the sampled jobs were timed.
    pub clock: Clock,
    /// Wall seconds taken to build the job list here (absent where the list was given).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job_list_seconds: Option<f64>,
    /// Wall seconds taken to solve the sample.
    pub sample_wall_seconds: f64,
}

/// The sizing of one board's run: how its sample was drawn and solved here, what the sample
/// projects, that projection on hosts and cards, and in reference units where this host's speed
/// was measured. `estimate --json` is this as one flat object: each part's fields side by side,
/// the reference figures left out where there are none.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Estimate {
    /// Board size.
    pub n: u8,
    /// How the sample was drawn and solved.
    #[serde(flatten)]
    pub sampling: Sampling,
    /// What the sample projects.
    #[serde(flatten)]
    pub projection: Projection,
    /// The projection on hosts and cards.
    #[serde(flatten)]
    pub hardware: Hardware,
    /// The CPU time in reference-core-years, where this host's speed was measured.
    #[serde(flatten)]
    pub reference: Option<Reference>,
}

impl Estimate {
    /// States the CPU time in reference-core-years too, at this host's `speed` (see
    /// [`Reference::new`]).
    pub fn set_speed(&mut self, speed: HostSpeed) {
        self.reference = Some(Reference::new(&self.projection, speed));
    }

    /// Restates the wall times for hosts of `host_cores` and cards of `card_cores`.
    pub fn set_hardware(&mut self, host_cores: u64, card_cores: f64) {
        self.hardware = Hardware::new(&self.projection, host_cores, card_cores);
    }

    /// The projected wall seconds on `cores` cores in hosts of [`Hardware::host_cores`].
    pub fn wall_seconds_on(&self, cores: u64) -> f64 {
        self.projection.wall_seconds_on(cores, self.hardware.host_cores)
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
        .thread_name(|i| format!("estimate-{i}"))
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
    let projection = project(&costs, &plan, &timed);
    Ok(Estimate {
        n: list.n,
        sampling: Sampling {
            threads: params.threads.max(1) as u64,
            seed: params.seed,
            cost_depth: depth as u64,
            cost_seconds,
            clock: if on_cpu { Clock::ThreadCpu } else { Clock::Wall },
            job_list_seconds: None,
            sample_wall_seconds,
        },
        hardware: Hardware::new(&projection, params.host_cores, params.card_cores),
        projection,
        reference: None,
    })
}

/// Builds the job list of an `n`-board (with `params.split`, on `params.threads` threads), then
/// [`estimate_list`]: the sizing of a whole run of that board.
pub fn estimate(n: u32, params: &EstimateParams) -> Result<Estimate, CoreError> {
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(params.threads.max(1))
        .thread_name(|i| format!("estimate-{i}"))
        .build()
        .map_err(|e| CoreError::Estimate { reason: format!("thread pool: {e}") })?;
    // Timed alone, on this thread, before and after the sample (whose threads would share
    // its core): the speed is their mean, and how far they differ widens the interval.
    let before = if params.measure_speed { Some(measure_host_speed()?) } else { None };
    let started = Instant::now();
    let list = pool.install(|| job_list(n, &params.split))?;
    let job_list_seconds = started.elapsed().as_secs_f64();
    let mut estimate = estimate_list(&list, params)?;
    estimate.sampling.job_list_seconds = Some(job_list_seconds);
    if let Some(before) = before {
        estimate.set_speed(before.combine(measure_host_speed()?));
    }
    Ok(estimate)
}

#[cfg(test)]
mod tests;
