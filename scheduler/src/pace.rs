//! Pace: how long jobs take, as the coordinator measured it, and what follows from it. Every
//! figure here comes from the coordinator's own clock: the time from a lease to each of its
//! results, and the answers each party delivered within the last lease period. What a worker
//! reports about its speed (its job seconds, its thread count) is never believed: a claimed
//! thread count only ever makes a lease smaller.
//!
//! From them: a job's expected time (the lower median of the trusted parties' seconds per unit of
//! cost estimate), the overdue copies of jobs held far past it and the hard end of a lease that
//! heartbeats cannot push back, and how many jobs a party may hold at once.

use crate::config::SchedulerConfig;
use crate::ids::{JobId, WorkerId};
use crate::jobs::Standing;
use crate::per_second::PerSecond;
use crate::state::JobState;
use crate::Scheduler;
use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

/// A party counts as active while it delivered verified work within this many lease periods.
pub const ACTIVE_LEASES: u32 = 3;

/// The most jobs one slot is given in one lease, however short its jobs: leases are sized by the
/// measured job time; this only bounds what a mis-measured one could ask.
pub const MAX_JOBS_PER_SLOT: usize = 4096;

/// What the scheduler measured of the parties' speed.
#[derive(Debug, Default)]
pub(crate) struct Pace {
    /// Per credential: seconds per unit of cost estimate, lease to result on the coordinator's
    /// clock, from its trusted identities' counted and verified answers. One figure per
    /// credential: identities of the shared token are one vote, however many register.
    credential_rates: HashMap<u64, f64>,
    /// The lower median of `credential_rates` over credentials not wholly untrusted, and when
    /// it was taken (it is taken again at most once a second: a lease's renewal reads it).
    median_rate: Option<(Instant, Option<f64>)>,
    /// Per party that delivered within the last lease period: its answers counted or verified,
    /// per second of arrival (oldest first), and their sum.
    delivered: HashMap<u64, PerSecond>,
    /// Every party's buckets of `delivered` in the order they were opened: the oldest go first
    /// when they age out, whichever party they belong to.
    bucket_order: VecDeque<(Instant, u64)>,
    /// The sum of every party's [`PerSecond::total`]: a lease's share reads it and the number of
    /// parties in `delivered`, not every party (10,000 shared-token identities are 10,000 parties).
    delivered_total: usize,
    /// Per party: when it last delivered an answer that counted or was verified.
    last_verified: HashMap<u64, Instant>,
    /// A moving average of lease-to-result seconds of trusted parties' jobs: sizes batches.
    mean_job_seconds: Option<f64>,
    /// No scan for overdue jobs before this (they are looked for at most once a second).
    next_overdue_scan: Option<Instant>,
}

impl Pace {
    /// `party` delivered one more answer that counted or was verified: kept per second of
    /// arrival for `window` (a lease period).
    fn delivered(&mut self, party: u64, now: Instant, window: Duration) {
        self.age_out(now, window);
        self.last_verified.insert(party, now);
        if self.delivered.entry(party).or_default().add(now) {
            self.bucket_order.push_back((now, party));
        }
        self.delivered_total += 1;
    }

    /// Drops the buckets older than `window` before `now`, and the parties left without one.
    pub(crate) fn age_out(&mut self, now: Instant, window: Duration) {
        while let Some(&(t, party)) = self.bucket_order.front() {
            if now.saturating_duration_since(t) <= window {
                break;
            }
            self.bucket_order.pop_front();
            let Some(d) = self.delivered.get_mut(&party) else { continue };
            if let Some(k) = d.pop_oldest() {
                self.delivered_total -= k as usize;
            }
            if d.is_empty() {
                self.delivered.remove(&party);
            }
        }
    }

    /// Learns that a job of cost `estimate` took a trusted identity of `credential` `seconds` on
    /// the coordinator's clock: each sample moves the credential's figure a little and by at
    /// most a factor of ten, and sizes batches.
    fn timed(&mut self, credential: u64, seconds: f64, estimate: u64) {
        let mean = self.mean_job_seconds.get_or_insert(seconds);
        *mean = *mean * 0.95 + seconds * 0.05;
        if estimate == 0 {
            return;
        }
        let sample = seconds / estimate as f64;
        let rate = self.credential_rates.entry(credential).or_insert(sample);
        *rate = *rate * 0.98 + sample.clamp(*rate / 10.0, *rate * 10.0) * 0.02;
    }

    /// Answers `party` delivered within `window` before `now`.
    fn delivered_within(&self, party: u64, window: Duration, now: Instant) -> usize {
        self.delivered.get(&party).map_or(0, |d| d.within(now, window))
    }

    /// Whether `party` delivered anything within `window` before `now`.
    fn delivered_lately(&self, party: u64, window: Duration, now: Instant) -> bool {
        self.last_verified.get(&party).is_some_and(|t| now.saturating_duration_since(*t) <= window)
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

    /// `party`'s share of the answers every party delivered within `window` before `now`, and
    /// never less than an equal share among the parties that delivered and `party` (a newcomer's
    /// small leases must not keep its share small).
    ///
    /// Read from the running sums: only the buckets that aged out since the last
    /// [`Pace::age_out`] are looked at (none while answers arrive), never every party.
    fn share(&self, party: u64, window: Duration, now: Instant) -> f64 {
        // What aged out but is still in the sums, per party: its oldest buckets, in order.
        let mut stale: HashMap<u64, (usize, usize)> = HashMap::new();
        for &(t, g) in &self.bucket_order {
            if now.saturating_duration_since(t) <= window {
                break;
            }
            let Some(d) = self.delivered.get(&g) else { continue };
            let (buckets, sum) = stale.entry(g).or_default();
            *sum += d.nth(*buckets) as usize;
            *buckets += 1;
        }
        let left = |g: u64| {
            let total = self.delivered.get(&g).map_or(0, PerSecond::total);
            total - stale.get(&g).map_or(0, |(_, sum)| *sum)
        };
        let all = self.delivered_total - stale.values().map(|(_, sum)| sum).sum::<usize>();
        let emptied = stale.keys().filter(|g| left(**g) == 0).count();
        let own = left(party);
        let others = self.delivered.len() - emptied - usize::from(own > 0);
        let equal = 1.0 / (others + 1) as f64;
        if all == 0 {
            return equal;
        }
        (own as f64 / all as f64).max(equal)
    }
}

/// The jobs of one lease: the batch for `claimed` slots (`base`), at most the `room` left under
/// the party's cap, and never more than `max_lease`.
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

    /// Learns from one counted or verified answer: the party delivered once more, and (when the
    /// coordinator timed it) how long a unit of cost estimate takes that party. Each sample moves
    /// the figure a little and by at most a factor of ten.
    pub(crate) fn learn_duration(
        &mut self,
        job_id: JobId,
        worker_id: WorkerId,
        measured: Option<f64>,
        now: Instant,
    ) {
        let party = self.party(worker_id);
        self.pace.delivered(party, now, self.config.lease_duration);
        let Some(seconds) = measured.filter(|s| s.is_finite() && *s > 0.0) else { return };
        if !self.on_probation(worker_id) {
            let credential = self.credential(worker_id);
            self.pace.timed(credential, seconds, self.jobs.entry(job_id).estimate);
        }
    }

    /// Answers `worker_id`'s party had counted or verified within the last lease period.
    pub fn delivered_recently(&self, worker_id: WorkerId, now: Instant) -> usize {
        self.pace.delivered_within(self.party(worker_id), self.config.lease_duration, now)
    }

    /// Whether `worker_id` is trusted at all and its party delivered an answer that counted or
    /// was verified within the last [`ACTIVE_LEASES`] lease periods: "active" as the coordinator
    /// sees it. Registering and heartbeating do not make a worker active.
    pub fn delivering(&self, worker_id: WorkerId, now: Instant) -> bool {
        let patience = self.config.lease_duration * ACTIVE_LEASES;
        !self.is_untrusted(worker_id)
            && self.pace.delivered_lately(self.party(worker_id), patience, now)
    }

    /// Seconds per unit of cost estimate at `now`: the lower median over the credentials'
    /// measured figures (one vote each, from their trusted identities; a per-host credential
    /// whose identities are all untrusted has none). One party cannot move it past an honest
    /// one's: answering slowly on purpose (to hide a hoarder's overdue jobs) loses to the faster
    /// figure, and identities of the shared token are one vote however many there are. Taken
    /// again at most once a second.
    pub fn seconds_per_estimate(&mut self, now: Instant) -> Option<f64> {
        if let Some((at, median)) = self.pace.median_rate {
            if now.saturating_duration_since(at) < Duration::from_secs(1) {
                return median;
            }
        }
        let all_untrusted = self.trust.untrusted_parties();
        let mut rates: Vec<f64> = self
            .pace
            .credential_rates
            .iter()
            .filter(|(c, _)| !all_untrusted.contains(*c))
            .map(|(_, r)| *r)
            .collect();
        rates.sort_by(f64::total_cmp);
        let median = rates.len().checked_sub(1).map(|last| rates[last / 2]);
        self.pace.median_rate = Some((now, median));
        median
    }

    /// When a job of `estimate` leased at `since` must be answered by, whatever its holder
    /// heartbeats, at `rate` seconds per unit of estimate (see
    /// [`Scheduler::seconds_per_estimate`]): twice its overdue time (see
    /// [`Scheduler::overdue_copies`]). None while nothing was measured.
    pub(crate) fn hard_deadline(
        &self,
        rate: Option<f64>,
        estimate: u64,
        since: Instant,
    ) -> Option<Instant> {
        let expected = rate? * estimate as f64;
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
        let Some(rate) = self.seconds_per_estimate(now) else { return };
        if !self.pace.overdue_scan_due(now) {
            return;
        }
        let grace = self.config.lease_duration.as_secs_f64();
        let party = self.party(worker_id);
        for id in self.jobs.ids() {
            if out.len() >= room {
                break;
            }
            let job = self.jobs.entry(id);
            let Standing::Leased { worker_id: holder, since, .. } = job.standing() else {
                continue;
            };
            if self.party(holder) == party
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
    pub fn batch_size(&self, slots: u32) -> usize {
        let per_slot = self.pace.jobs_per_slot(self.config.lease_duration);
        (slots.max(1) as usize).saturating_mul(per_slot)
    }

    /// Jobs held now by the workers of `worker_id`'s party, over all their leases.
    fn party_holds(&self, worker_id: WorkerId) -> usize {
        self.party_holds_now(self.party(worker_id)) as usize
    }

    /// The most jobs `worker_id`'s party may hold at once: `probation_hold` on probation, over
    /// all its identities; once trusted, twice what it delivered in the last lease period (never
    /// less than `probation_hold`). Calls, identities and claimed threads do not raise it.
    pub fn party_cap(&self, worker_id: WorkerId, now: Instant) -> usize {
        let floor = self.config.probation_hold as usize;
        if self.on_probation(worker_id) {
            return floor;
        }
        floor.max(2 * self.delivered_recently(worker_id, now)).min(self.config.max_lease)
    }

    /// How many more jobs `worker_id` may be leased now: the room under its party's cap.
    pub(crate) fn room(&self, worker_id: WorkerId, now: Instant) -> usize {
        self.party_cap(worker_id, now).saturating_sub(self.party_holds(worker_id))
    }

    /// The most jobs one lease may give `worker_id` so that the run's end stays balanced
    /// (guided self-scheduling): half the pending jobs times its party's share of what every
    /// party delivered in the last lease period (at least an equal share among the parties
    /// delivering), never less than a job a slot. A lone worker may take half of what is left;
    /// near the end leases shrink, so that no worker sits on a queue while others run dry.
    /// Shares are measured answers, not claims.
    pub fn fair_share(&self, worker_id: WorkerId, slots: u32, now: Instant) -> usize {
        let pending = self.count(JobState::Pending) as f64;
        let share = self.pace.share(self.party(worker_id), self.config.lease_duration, now);
        ((pending * share / 2.0).ceil() as usize).max(slots.max(1) as usize)
    }

    /// How many jobs a lease gives `worker_id` asking for `slots` free slots: a batch that keeps
    /// the slots busy for about a quarter of a lease at the measured job time, within its fair
    /// share of the pending jobs (see [`Scheduler::fair_share`]) and the room its party's cap
    /// leaves (see [`Scheduler::party_cap`]).
    pub fn lease_size(&self, worker_id: WorkerId, slots: u32, now: Instant) -> usize {
        let batch = self.batch_size(slots).min(self.fair_share(worker_id, slots, now));
        sized_lease(&self.config, batch, self.room(worker_id, now))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::MAX_LEASE;

    /// The running sums give every party the share a walk over every party's buckets gives,
    /// whether or not the aged-out buckets were dropped yet.
    #[test]
    fn shares_from_the_running_sums_match_a_walk_over_every_party() {
        let window = Duration::from_secs(10);
        let start = Instant::now();
        let mut pace = Pace::default();
        let mut log: Vec<(Instant, u64)> = Vec::new();
        let mut x = 12345u64;
        for step in 0..3000u64 {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            let now = start + Duration::from_millis(step * 17 + (x >> 60));
            let party = (x >> 33) % 40;
            if !x.is_multiple_of(7) {
                pace.delivered(party, now, window);
                log.push((now, party));
            }
            if x.is_multiple_of(97) {
                pace.age_out(now, window);
            }
            let later = now + Duration::from_millis((x >> 20) % 15_000);
            for g in [party, 41] {
                // The walk: answers within the window, per party, as buckets hold them.
                let within = |h: u64| pace.delivered_within(h, window, later);
                let all: usize = (0..42).map(within).sum();
                let others = (0..42).filter(|h| *h != g && within(*h) > 0).count();
                let equal = 1.0 / (others + 1) as f64;
                let walked =
                    if all == 0 { equal } else { (within(g) as f64 / all as f64).max(equal) };
                assert_eq!(pace.share(g, window, later), walked, "step {step}, party {g}");
            }
        }
        assert!(log.len() > 2000);
    }

    #[test]
    fn a_lease_is_the_batch_within_the_room_left() {
        let c = SchedulerConfig::default();
        assert_eq!(sized_lease(&c, 2, 16), 2);
        assert_eq!(sized_lease(&c, 4096, 16), 16);
        assert_eq!(sized_lease(&c, 4096, 0), 0);
        assert_eq!(sized_lease(&c, 1 << 30, 1 << 30), MAX_LEASE);
    }
}
