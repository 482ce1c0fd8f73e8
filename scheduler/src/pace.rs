//! Pace: how long jobs take, as the coordinator measured it, and what follows from it. Every
//! figure here comes from the coordinator's own clock: the time from a lease to each of its
//! results, and the answers each group delivered within the last lease period. What a worker
//! reports about its speed (its job seconds, its thread count) is never believed: a claimed
//! thread count only ever makes a lease smaller.
//!
//! From them: a job's expected time (the lower median of the trusted groups' seconds per unit of
//! cost estimate), the overdue copies of jobs held far past it and the hard end of a lease that
//! heartbeats cannot push back, and how many jobs a group may hold at once.

use crate::config::SchedulerConfig;
use crate::ids::{JobId, WorkerId};
use crate::jobs::Standing;
use crate::state::JobState;
use crate::Scheduler;
use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

/// A group counts as active while it delivered verified work within this many lease periods.
pub const ACTIVE_LEASES: u32 = 3;

/// The most jobs one slot is given in one lease, however short its jobs: leases are sized by the
/// measured job time; this only bounds what a mis-measured one could ask.
pub const MAX_JOBS_PER_SLOT: usize = 4096;

/// What the scheduler measured of the groups' speed.
#[derive(Debug, Default)]
pub(crate) struct Pace {
    /// Per group: seconds per unit of cost estimate, lease to result on the coordinator's clock,
    /// from its counted and verified answers.
    group_rates: HashMap<u64, f64>,
    /// Per group: answers counted or verified, per second of arrival (oldest first).
    delivered: HashMap<u64, VecDeque<(Instant, u32)>>,
    /// Per group: when it last delivered an answer that counted or was verified.
    last_verified: HashMap<u64, Instant>,
    /// A moving average of lease-to-result seconds of trusted groups' jobs: sizes batches.
    mean_job_seconds: Option<f64>,
    /// No scan for overdue jobs before this (they are looked for at most once a second).
    next_overdue_scan: Option<Instant>,
}

impl Pace {
    /// `group` delivered one more answer that counted or was verified: kept per second of
    /// arrival for `window` (a lease period).
    fn delivered(&mut self, group: u64, now: Instant, window: Duration) {
        self.last_verified.insert(group, now);
        let delivered = self.delivered.entry(group).or_default();
        while delivered.front().is_some_and(|(t, _)| now.saturating_duration_since(*t) > window) {
            delivered.pop_front();
        }
        match delivered.back_mut() {
            Some((t, k)) if now.saturating_duration_since(*t) < Duration::from_secs(1) => *k += 1,
            _ => delivered.push_back((now, 1)),
        }
    }

    /// Learns that a job of cost `estimate` took `group` `seconds` on the coordinator's clock:
    /// each sample moves the group's figure a little and by at most a factor of ten. Only a
    /// `trusted` group's times size batches.
    fn timed(&mut self, group: u64, seconds: f64, estimate: u64, trusted: bool) {
        if trusted {
            let mean = self.mean_job_seconds.get_or_insert(seconds);
            *mean = *mean * 0.95 + seconds * 0.05;
        }
        if estimate == 0 {
            return;
        }
        let sample = seconds / estimate as f64;
        let rate = self.group_rates.entry(group).or_insert(sample);
        *rate = *rate * 0.98 + sample.clamp(*rate / 10.0, *rate * 10.0) * 0.02;
    }

    /// Answers `group` delivered within `window` before `now`.
    fn delivered_within(&self, group: u64, window: Duration, now: Instant) -> usize {
        self.delivered.get(&group).map_or(0, |d| {
            d.iter()
                .filter(|(t, _)| now.saturating_duration_since(*t) <= window)
                .map(|(_, k)| *k as usize)
                .sum()
        })
    }

    /// Whether `group` delivered anything within `window` before `now`.
    fn delivered_lately(&self, group: u64, window: Duration, now: Instant) -> bool {
        self.last_verified.get(&group).is_some_and(|t| now.saturating_duration_since(*t) <= window)
    }

    /// Whether the (at most once a second) scan for overdue jobs is due; if so it is now.
    fn overdue_scan_due(&mut self, now: Instant) -> bool {
        if self.next_overdue_scan.is_some_and(|next| now < next) {
            return false;
        }
        self.next_overdue_scan = Some(now + Duration::from_secs(1));
        true
    }

    /// Jobs per slot such that one slot's share lasts about a quarter of `lease` at the
    /// measured job time (2 before anything was measured).
    fn jobs_per_slot(&self, lease: Duration) -> usize {
        match self.mean_job_seconds {
            Some(s) if s > 0.0 => {
                ((lease.as_secs_f64() / 4.0) / s).clamp(1.0, MAX_JOBS_PER_SLOT as f64) as usize
            }
            _ => 2,
        }
    }

    /// `group`'s share of the answers every group delivered within `window` before `now`, and
    /// never less than an equal share among the groups that delivered and `group` (a newcomer's
    /// small leases must not keep its share small).
    fn share(&self, group: u64, window: Duration, now: Instant) -> f64 {
        let (mut own, mut all, mut others) = (0, 0, 0);
        for &g in self.delivered.keys() {
            let delivered = self.delivered_within(g, window, now);
            all += delivered;
            if g == group {
                own = delivered;
            } else if delivered > 0 {
                others += 1;
            }
        }
        let equal = 1.0 / (others + 1) as f64;
        if all == 0 {
            return equal;
        }
        (own as f64 / all as f64).max(equal)
    }
}

/// The jobs of one lease: the batch for `claimed` slots (`base`), at most the `room` left under
/// the group's cap, and never more than `max_lease`.
pub(crate) fn sized_lease(config: &SchedulerConfig, base: usize, room: usize) -> usize {
    base.min(room).min(config.max_lease)
}

impl Scheduler {
    /// Seconds from the lease to this result on the coordinator's clock, when `worker_id` still
    /// holds the job under `lease_id` (a copy, a spot check or a late result teaches nothing).
    pub(crate) fn measured_seconds(
        &self,
        job_id: JobId,
        lease_id: crate::LeaseId,
        worker_id: WorkerId,
        now: Instant,
    ) -> Option<f64> {
        match self.jobs.standing(job_id) {
            Standing::Leased { lease_id: l, worker_id: w, since, .. }
                if l == lease_id && w == worker_id =>
            {
                Some(now.saturating_duration_since(since).as_secs_f64())
            }
            _ => None,
        }
    }

    /// Learns from one counted or verified answer: the group delivered once more, and (when the
    /// coordinator timed it) how long a unit of cost estimate takes that group. Each sample moves
    /// the figure a little and by at most a factor of ten.
    pub(crate) fn learn_duration(
        &mut self,
        job_id: JobId,
        worker_id: WorkerId,
        measured: Option<f64>,
        now: Instant,
    ) {
        let group = self.group(worker_id);
        self.pace.delivered(group, now, self.config.lease_duration);
        let Some(seconds) = measured.filter(|s| s.is_finite() && *s > 0.0) else { return };
        let trusted = !self.on_probation(worker_id);
        self.pace.timed(group, seconds, self.jobs.entry(job_id).estimate, trusted);
    }

    /// Answers `worker_id`'s group had counted or verified within the last lease period.
    pub fn delivered_recently(&self, worker_id: WorkerId, now: Instant) -> usize {
        self.pace.delivered_within(self.group(worker_id), self.config.lease_duration, now)
    }

    /// Whether `worker_id` is trusted at all and its group delivered an answer that counted or
    /// was verified within the last [`ACTIVE_LEASES`] lease periods: "active" as the coordinator
    /// sees it. Registering and heartbeating do not make a worker active.
    pub fn delivering(&self, worker_id: WorkerId, now: Instant) -> bool {
        let patience = self.config.lease_duration * ACTIVE_LEASES;
        !self.is_untrusted(worker_id)
            && self.pace.delivered_lately(self.group(worker_id), patience, now)
    }

    /// Seconds per unit of cost estimate: the lower median over the trusted groups' measured
    /// figures. One group cannot move it past an honest one's: answering slowly on purpose (to
    /// hide a hoarder's overdue jobs) loses to the faster figure.
    pub(crate) fn seconds_per_estimate(&self) -> Option<f64> {
        let mut rates: Vec<f64> = self
            .pace
            .group_rates
            .iter()
            .filter(|(g, _)| {
                !self.trust.group_on_probation(**g) && !self.trust.group_untrusted(**g)
            })
            .map(|(_, r)| *r)
            .collect();
        rates.sort_by(f64::total_cmp);
        rates.get(rates.len().checked_sub(1)? / 2).copied()
    }

    /// How long a job of `estimate` should take, from the measured rates.
    fn expected_seconds(&self, estimate: u64) -> Option<f64> {
        Some(self.seconds_per_estimate()? * estimate as f64)
    }

    /// When a job leased at `since` must be answered by, whatever its holder heartbeats: twice
    /// its overdue time (see [`Scheduler::overdue_copies`]). None while nothing was measured.
    pub(crate) fn hard_deadline(&self, estimate: u64, since: Instant) -> Option<Instant> {
        let expected = self.expected_seconds(estimate)?;
        let grace = self.config.lease_duration.as_secs_f64();
        let limit = 2.0 * (self.config.overdue_factor * expected + grace);
        Some(since + Duration::from_secs_f64(limit.min(1e9)))
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
        if !self.pace.overdue_scan_due(now) {
            return;
        }
        let grace = self.config.lease_duration.as_secs_f64();
        let group = self.group(worker_id);
        for id in self.jobs.ids() {
            if out.len() >= room {
                break;
            }
            let job = self.jobs.entry(id);
            let Standing::Leased { worker_id: holder, since, .. } = job.standing() else {
                continue;
            };
            if self.group(holder) == group
                || job.copies >= self.config.max_copies
                || self.answered(worker_id, id)
            {
                continue;
            }
            let expected = rate * job.estimate as f64;
            let overdue = self.config.overdue_factor * expected + grace;
            let held = now.saturating_duration_since(since).as_secs_f64();
            // The last copy's holder gets the same time as the first holder before another.
            let copy_overdue = job
                .last_copy
                .is_none_or(|t| now.saturating_duration_since(t).as_secs_f64() > overdue);
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

    /// Batch size for `slots` free slots: jobs per slot such that one slot's share lasts about
    /// a quarter of a lease at the measured job time.
    pub(crate) fn batch_size(&self, slots: u32) -> usize {
        let per_slot = self.pace.jobs_per_slot(self.config.lease_duration);
        (slots.max(1) as usize).saturating_mul(per_slot)
    }

    /// Jobs held now by the workers of `worker_id`'s group, over all their leases.
    fn group_holds(&self, worker_id: WorkerId) -> usize {
        let group = self.group(worker_id);
        let members = self.trust.members(group, worker_id);
        members.iter().map(|w| self.jobs.leased_by(*w)).sum::<u64>() as usize
    }

    /// The most jobs `worker_id`'s group may hold at once: `probation_hold` on probation, over
    /// all its identities; once trusted, twice what it delivered in the last lease period (never
    /// less than `probation_hold`). Calls, identities and claimed threads do not raise it.
    pub fn group_cap(&self, worker_id: WorkerId, now: Instant) -> usize {
        let floor = self.config.probation_hold as usize;
        if self.on_probation(worker_id) {
            return floor;
        }
        floor.max(2 * self.delivered_recently(worker_id, now)).min(self.config.max_lease)
    }

    /// How many more jobs `worker_id` may be leased now: the room under its group's cap.
    pub(crate) fn room(&self, worker_id: WorkerId, now: Instant) -> usize {
        self.group_cap(worker_id, now).saturating_sub(self.group_holds(worker_id))
    }

    /// The most jobs one lease may give `worker_id` so that the run's end stays balanced
    /// (guided self-scheduling): half the pending jobs times its group's share of what every
    /// group delivered in the last lease period (at least an equal share among the groups
    /// delivering), never less than a job a slot. A lone worker may take half of what is left;
    /// near the end leases shrink, so that no worker sits on a queue while others run dry.
    /// Shares are measured answers, not claims.
    pub(crate) fn fair_share(&self, worker_id: WorkerId, slots: u32, now: Instant) -> usize {
        let pending = self.count(JobState::Pending) as f64;
        let share = self.pace.share(self.group(worker_id), self.config.lease_duration, now);
        ((pending * share / 2.0).ceil() as usize).max(slots.max(1) as usize)
    }

    /// How many jobs a lease gives `worker_id` asking for `slots` free slots: a batch that keeps
    /// the slots busy for about a quarter of a lease at the measured job time, within its fair
    /// share of the pending jobs (see [`Scheduler::fair_share`]) and the room its group's cap
    /// leaves (see [`Scheduler::group_cap`]).
    pub fn lease_size(&self, worker_id: WorkerId, slots: u32, now: Instant) -> usize {
        let batch = self.batch_size(slots).min(self.fair_share(worker_id, slots, now));
        sized_lease(&self.config, batch, self.room(worker_id, now))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::MAX_LEASE;

    #[test]
    fn a_lease_is_the_batch_within_the_room_left() {
        let c = SchedulerConfig::default();
        assert_eq!(sized_lease(&c, 2, 16), 2);
        assert_eq!(sized_lease(&c, 4096, 16), 16);
        assert_eq!(sized_lease(&c, 4096, 0), 0);
        assert_eq!(sized_lease(&c, 1 << 30, 1 << 30), MAX_LEASE);
    }
}
