//! The stratified projection (see the parent module's docs): from a plan whose chosen jobs were
//! solved to the whole run's CPU time, longest job and solution count, each with its interval.
//! Pure arithmetic: no clock, no hardware, no run-level facts (those are [`super::Sampling`],
//! [`super::Hardware`] and [`super::Reference`]).

use super::{SamplePlan, YEAR_SECONDS};
use serde::{Deserialize, Serialize};

/// The normal quantile of a two-sided 95% interval.
const Z95: f64 = 1.96;

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

/// What solving one sampled job gave.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Timed {
    /// Seconds the job took.
    pub seconds: f64,
    /// Its weighted solutions: orbit weight times solutions found.
    pub weighted_solutions: f64,
}

/// What a solved sample says of the whole run. Field names are those of `estimate --json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Projection {
    /// Jobs in the list (the default split unless another was asked for).
    pub jobs: u64,
    /// Jobs solved for the sample.
    pub sampled: u64,
    /// Strata the list was cut into.
    pub strata: u64,
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
    /// Projected number of solutions (a sanity figure: it should be near the known count).
    pub projected_solutions: f64,
    /// Lower end of the 95% confidence interval of `projected_solutions`.
    pub projected_solutions_low: f64,
    /// Upper end of the 95% confidence interval of `projected_solutions`.
    pub projected_solutions_high: f64,
    /// The strata, lightest first.
    pub by_stratum: Vec<Stratum>,
}

impl Projection {
    /// The projected wall seconds on `cores` cores in hosts of `host_cores`: the CPU time spread
    /// evenly, but no less than the longest job split over one host's cores.
    pub fn wall_seconds_on(&self, cores: u64, host_cores: u64) -> f64 {
        let host = host_cores.clamp(1, cores.max(1));
        (self.total_cpu_seconds / cores.max(1) as f64).max(self.longest_job_seconds / host as f64)
    }

    /// The projected wall seconds on `cards` cards of `card_cores` cores each: the CPU time
    /// spread evenly, but no less than the longest job on one card.
    pub fn wall_seconds_on_cards(&self, cards: u64, card_cores: f64) -> f64 {
        let rate = card_cores.max(1e-9);
        (self.total_cpu_seconds / (cards.max(1) as f64 * rate)).max(self.longest_job_seconds / rate)
    }
}

/// The stratified projection of a plan (drawn from `costs`) whose chosen jobs were solved:
/// `timed(i)` is what job `i` gave (only chosen jobs are asked).
pub fn project(costs: &[u64], plan: &SamplePlan, timed: &dyn Fn(usize) -> Timed) -> Projection {
    let results: Vec<Vec<Timed>> =
        plan.chosen.iter().map(|chosen| chosen.iter().map(|&i| timed(i)).collect()).collect();
    let spread = Spread::of(&results);
    let mut sums = Sums::default();
    let by_stratum = plan
        .strata
        .iter()
        .zip(&plan.chosen)
        .zip(&results)
        .map(|((members, chosen), results)| sums.add(costs, members, chosen, results, &spread))
        .collect();
    sums.into_projection(costs.len() as u64, plan, by_stratum)
}

/// The seconds of a stratum's sampled jobs.
fn seconds_of(results: &[Timed]) -> Vec<f64> {
    results.iter().map(|t| t.seconds).collect()
}

/// The weighted solutions of a stratum's sampled jobs.
fn found_of(results: &[Timed]) -> Vec<f64> {
    results.iter().map(|t| t.weighted_solutions).collect()
}

/// The strata's pooled relative variances of time and of solutions (see
/// [`pooled_relative_variance`]).
struct Spread {
    seconds: f64,
    found: f64,
}

impl Spread {
    fn of(results: &[Vec<Timed>]) -> Spread {
        let pooled = |values: fn(&[Timed]) -> Vec<f64>| {
            pooled_relative_variance(results.iter().map(|r| {
                let (mean, var) = mean_var(&values(r));
                (mean, var, r.len())
            }))
        };
        Spread { seconds: pooled(seconds_of), found: pooled(found_of) }
    }
}

/// The running sums of the stratified estimator over the strata seen so far.
#[derive(Default)]
struct Sums {
    total: f64,
    total_var: f64,
    solutions: f64,
    solutions_var: f64,
    longest: f64,
    longest_sampled: f64,
    sample_cpu: f64,
}

impl Sums {
    /// Adds one stratum (`members`, of which `chosen` gave `results`) and describes it.
    fn add(
        &mut self,
        costs: &[u64],
        members: &[usize],
        chosen: &[usize],
        results: &[Timed],
        spread: &Spread,
    ) -> Stratum {
        let size = members.len() as f64;
        let seconds = seconds_of(results);
        let (mean, var) = mean_var(&seconds);
        let (mean_found, var_found) = mean_var(&found_of(results));
        let min_cost = members.iter().map(|&i| costs[i]).min().unwrap_or(0);
        let max_cost = members.iter().map(|&i| costs[i]).max().unwrap_or(0);
        if !chosen.is_empty() {
            let taken = chosen.len() as f64;
            // The variance of a stratum's projected sum, with the finite population correction.
            let variance = |var: f64| size * size * (1.0 - taken / size) * var / taken;
            self.total += mean * size;
            self.total_var += variance(var.max(spread.seconds * mean * mean));
            self.solutions += mean_found * size;
            self.solutions_var += variance(var_found.max(spread.found * mean_found * mean_found));
            // This stratum's largest job at the stratum's measured seconds per unit of cost.
            let sampled_cost: f64 = chosen.iter().map(|&i| costs[i] as f64).sum();
            let sampled_seconds: f64 = seconds.iter().sum();
            let scaled = if sampled_cost > 0.0 {
                max_cost as f64 * sampled_seconds / sampled_cost
            } else {
                seconds.iter().copied().fold(0.0, f64::max)
            };
            self.longest = self.longest.max(scaled);
            self.longest_sampled = seconds.iter().copied().fold(self.longest_sampled, f64::max);
            self.sample_cpu += sampled_seconds;
        }
        Stratum {
            jobs: members.len() as u64,
            sampled: chosen.len() as u64,
            min_cost,
            max_cost,
            mean_seconds: mean,
            projected_seconds: mean * size,
        }
    }

    /// The projection of a list of `jobs` once every stratum of `plan` was added.
    fn into_projection(self, jobs: u64, plan: &SamplePlan, by_stratum: Vec<Stratum>) -> Projection {
        let (total, solutions, sample_cpu) = (self.total, self.solutions, self.sample_cpu);
        let (half, half_found) = (Z95 * self.total_var.sqrt(), Z95 * self.solutions_var.sqrt());
        Projection {
            jobs,
            sampled: plan.chosen.iter().map(|c| c.len() as u64).sum(),
            strata: plan.strata.len() as u64,
            sample_cpu_seconds: sample_cpu,
            total_cpu_seconds: total,
            total_cpu_seconds_low: (total - half).max(sample_cpu.min(total)),
            total_cpu_seconds_high: total + half,
            core_hours: total / 3600.0,
            core_years: total / YEAR_SECONDS,
            longest_job_seconds: self.longest.max(self.longest_sampled),
            longest_sampled_seconds: self.longest_sampled,
            projected_solutions: solutions,
            projected_solutions_low: (solutions - half_found).max(0.0),
            projected_solutions_high: solutions + half_found,
            by_stratum,
        }
    }
}

/// Mean and sample variance (0 for fewer than two values).
pub(super) fn mean_var(xs: &[f64]) -> (f64, f64) {
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
pub(super) fn pooled_relative_variance(strata: impl Iterator<Item = (f64, f64, usize)>) -> f64 {
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
