//! Pace: how long jobs take, and what follows from it. Each worker's seconds per unit of cost
//! estimate (learnt from its counted results) give a job's expected time; a job leased far
//! longer than that is copied to another worker; and a lease's size follows the observed job
//! time and what the worker has shown it can finish.

use crate::config::SchedulerConfig;
use crate::ids::{JobId, WorkerId};
use crate::jobs::Standing;
use crate::Scheduler;
use std::collections::HashMap;
use std::time::{Duration, Instant};

/// Reported solve times are clamped to this (a week) before they teach the duration model.
pub(crate) const MAX_REPORTED_SECONDS: f64 = 7.0 * 86_400.0;

/// What the scheduler knows of the workers' speed.
#[derive(Debug, Default)]
pub(crate) struct Pace {
    /// Per worker: seconds per unit of cost estimate, from its counted results. A job's expected
    /// time comes from the lower median over trusted workers ([`Scheduler::seconds_per_estimate`]).
    worker_rates: HashMap<WorkerId, f64>,
    /// A moving average of job seconds, from workers past probation: sizes batches.
    mean_job_seconds: Option<f64>,
    /// No scan for overdue jobs before this (they are looked for at most once a second).
    next_overdue_scan: Option<Instant>,
}

/// The jobs of one lease: `base` (the batch for `claimed` threads at the observed job time) for a
/// worker on probation, at most one per thread and `probation_lease`; afterwards it grows with
/// `earned` (results counted in the last lease period), a quarter of it at a time, but never
/// past `earned` (or one job per thread), nor `max_lease`.
pub(crate) fn sized_lease(
    config: &SchedulerConfig,
    claimed: u32,
    base: usize,
    on_probation: bool,
    earned: usize,
) -> usize {
    if on_probation {
        return base.min(claimed.min(config.probation_lease) as usize);
    }
    base.max(earned / 4).min((claimed as usize).max(earned)).min(config.max_lease)
}

impl Scheduler {
    /// Learns from one counted result how long a unit of cost estimate takes on `worker_id`,
    /// and (from workers past probation) how long a job takes. Only results that count teach
    /// it (never duplicates); times are clamped, and each sample moves the worker's figure a
    /// little and by at most a factor of ten.
    pub(crate) fn learn_duration(&mut self, job_id: JobId, worker_id: WorkerId, seconds: f64) {
        if !(seconds.is_finite() && seconds > 0.0) {
            return;
        }
        let seconds = seconds.min(MAX_REPORTED_SECONDS);
        if !self.on_probation(worker_id) {
            let mean = self.pace.mean_job_seconds.get_or_insert(seconds);
            *mean = *mean * 0.95 + seconds * 0.05;
        }
        let estimate = self.jobs.entry(job_id).estimate;
        if estimate == 0 {
            return;
        }
        let sample = seconds / estimate as f64;
        let rate = self.pace.worker_rates.entry(worker_id).or_insert(sample);
        *rate = *rate * 0.98 + sample.clamp(*rate / 10.0, *rate * 10.0) * 0.02;
    }

    /// Seconds per unit of cost estimate: the lower median of the trusted workers' own figures.
    /// One worker cannot move it past an honest one's: a slow claim (to hide a hoarder's overdue
    /// jobs) loses to the faster figure, and a fast one only makes copies sooner, a few per job.
    pub(crate) fn seconds_per_estimate(&self) -> Option<f64> {
        let mut rates: Vec<f64> = self
            .pace
            .worker_rates
            .iter()
            .filter(|(w, _)| !self.is_untrusted(**w))
            .map(|(_, r)| *r)
            .collect();
        rates.sort_by(f64::total_cmp);
        rates.get(rates.len().checked_sub(1)? / 2).copied()
    }

    /// Up to `room` jobs leased to other workers for much longer than their expected time, each
    /// given to `max_copies` extra workers at most. Looked for at most once a second.
    pub(crate) fn overdue_copies(
        &mut self,
        worker_id: WorkerId,
        room: usize,
        now: Instant,
        out: &mut Vec<JobId>,
    ) {
        let Some(rate) = self.seconds_per_estimate() else { return };
        if self.pace.next_overdue_scan.is_some_and(|next| now < next) {
            return;
        }
        self.pace.next_overdue_scan = Some(now + Duration::from_secs(1));
        let grace = self.config.lease_duration.as_secs_f64();
        for id in self.jobs.ids() {
            if out.len() >= room {
                break;
            }
            let job = self.jobs.entry(id);
            let Standing::Leased { worker_id: holder, since, .. } = job.standing() else {
                continue;
            };
            if holder == worker_id
                || job.copies >= self.config.max_copies
                || self.answered(worker_id, id)
            {
                continue;
            }
            let expected = rate * job.estimate as f64;
            let overdue = self.config.overdue_factor * expected + grace;
            let held = now.duration_since(since).as_secs_f64();
            // The last copy's holder gets the same time as the first holder before another.
            let copy_overdue =
                job.last_copy.is_none_or(|t| now.duration_since(t).as_secs_f64() > overdue);
            if held > overdue && copy_overdue {
                tracing::info!(
                    job = %id,
                    %holder,
                    to = %worker_id,
                    held_seconds = held,
                    expected_seconds = expected,
                    "job overdue: also given to another worker; the first agreeing answer counts"
                );
                let job = self.jobs.entry_mut(id);
                job.copies += 1;
                job.last_copy = Some(now);
                out.push(id);
            }
        }
    }

    /// Batch size for `free_slots` threads: jobs per slot such that one slot's share lasts about
    /// a quarter of a lease at the observed job duration.
    pub(crate) fn batch_size(&self, free_slots: u32) -> usize {
        let per_slot = match self.pace.mean_job_seconds {
            Some(s) if s > 0.0 => {
                ((self.config.lease_duration.as_secs_f64() / 4.0) / s).clamp(1.0, 64.0) as usize
            }
            _ => 2,
        };
        (free_slots.max(1) as usize).saturating_mul(per_slot).min(4096)
    }

    /// How many jobs a lease gives `worker_id`, working `claimed` threads, having finished
    /// `earned` results in the last lease period, at the observed job time. A newcomer on
    /// probation: one per thread, at most `probation_lease`. Afterwards the batch grows with
    /// what it has shown it can do, never past what it finished in the last lease period (or one
    /// job per thread): a slow or lying worker cannot hoard, and a fast one (a GPU) does not
    /// starve.
    pub fn lease_size(&self, worker_id: WorkerId, claimed: u32, earned: usize) -> usize {
        let base = self.batch_size(claimed);
        sized_lease(&self.config, claimed, base, self.on_probation(worker_id), earned)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::MAX_LEASE;

    #[test]
    fn leases_grow_with_throughput_after_probation_and_never_past_it() {
        let c = SchedulerConfig::default();
        // A GPU worker claims one thread; on probation it gets one job per lease.
        assert_eq!(sized_lease(&c, 1, 2, true, 50_000), 1);
        // After probation its leases follow what it finished in the last lease period.
        assert_eq!(sized_lease(&c, 1, 2, false, 0), 1);
        assert_eq!(sized_lease(&c, 1, 2, false, 40), 10);
        assert_eq!(sized_lease(&c, 1, 2, false, 60_000), 15_000);
        assert_eq!(sized_lease(&c, 1, 2, false, 1 << 30), MAX_LEASE);
        for earned in [0, 1, 3, 100, 10_000, 1 << 20] {
            for claimed in [1, 8, 64, 1024] {
                let size = sized_lease(&c, claimed, 4 * claimed as usize, false, earned);
                assert!(size <= (claimed as usize).max(earned), "{claimed} {earned} -> {size}");
                assert!(size <= MAX_LEASE);
                assert!(sized_lease(&c, claimed, 4 * claimed as usize, true, earned) <= 64);
            }
        }
    }
}
