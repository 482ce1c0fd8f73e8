//! The engine's side of the [`RunSnapshot`]: after every batch it commits (and, while the run is
//! idle, every [`REFRESH_EVERY`] so that its clocks stay current), the engine builds the run's
//! snapshot from what it alone knows (the scheduler's jobs by state, its workers, the pace) and
//! publishes it on the watch channel every reader takes its view from.

use super::Engine;
use crate::snapshot::{unix_now, Progress};
use crate::snapshot::{RunName, RunSnapshot, WorkerView};
use nqueens_scheduler::state::JobState;
use nqueens_scheduler::WorkerId;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How often an idle engine publishes a fresh snapshot anyway (quiet time, uptime and the rate's
/// window move on while nothing happens).
pub const REFRESH_EVERY: Duration = Duration::from_secs(1);

impl Engine {
    /// Publishes a snapshot when `changed` (a batch was decided), or when the last one is older
    /// than [`REFRESH_EVERY`].
    pub(super) fn publish_if(&mut self, changed: bool) {
        if changed || self.published.1.elapsed() >= REFRESH_EVERY {
            self.publish();
        }
    }

    /// Builds the run's snapshot now and publishes it.
    pub(super) fn publish(&mut self) {
        let now = Instant::now();
        let snapshot = self.snapshot(now);
        self.published = (snapshot.snapshot_seq, now);
        self.snapshots.send_replace(Arc::new(snapshot));
    }

    /// The run now, as the engine knows it.
    fn snapshot(&mut self, now: Instant) -> RunSnapshot {
        let jobs = self.scheduler.by_state();
        let counters = self.metrics.counters();
        let pace = self.pace.measure(now, jobs.get(JobState::Done), counters.nodes);
        let meta = self.store.meta();
        let run = RunName { n: meta.n.into(), fingerprint: &meta.fingerprint };
        let result = self.complete_tx.borrow().clone();
        let progress = Progress::new(
            run,
            &jobs,
            Some(pace.jobs_per_second),
            pace.quiet_seconds,
            self.scheduler.conflicts_total(),
            result,
        );
        let last_deadline = self.last_lease_deadline(now);
        RunSnapshot {
            snapshot_seq: self.published.0 + 1,
            taken_unix: unix_now(),
            progress,
            nodes_per_second: Some(pace.nodes_per_second),
            quiet_seconds: pace.quiet_seconds,
            untrusted_workers: self.scheduler.untrusted_count(),
            live_workers: Some(self.active_workers(now) as u64),
            lease_expiries: Some(self.scheduler.lease_expiries()),
            leases_expire_in_seconds: last_deadline
                .map(|d| d.saturating_duration_since(now).as_secs_f64()),
            uptime_seconds: Some(now.duration_since(self.started).as_secs_f64()),
            workers: self.worker_views(now),
            counters: Some(counters),
        }
    }

    /// When the last current lease runs out unless renewed. Walking the leases costs about as
    /// much as everything else in a snapshot together (every lease of the run is looked at), so
    /// it is walked at most every [`REFRESH_EVERY`]: a lease granted or renewed since shows up in
    /// the expiry within a second.
    fn last_lease_deadline(&mut self, now: Instant) -> Option<Instant> {
        let (walked, deadline) = &mut self.lease_deadline;
        if walked.is_none_or(|t| now.duration_since(t) >= REFRESH_EVERY) {
            (*walked, *deadline) = (Some(now), self.scheduler.last_lease_deadline());
        }
        *deadline
    }

    /// Every worker registered with this process, by id.
    fn worker_views(&self, now: Instant) -> Vec<WorkerView> {
        let mut workers: Vec<WorkerView> = self
            .workers
            .values()
            .map(|w| {
                let id = WorkerId::new(w.row.id);
                WorkerView {
                    worker_id: w.row.id,
                    name: w.row.name.clone(),
                    host: w.row.host.clone(),
                    cores: w.row.cores,
                    version: w.row.version.clone(),
                    results: w.results,
                    conflicts: w.conflicts,
                    last_seen_seconds_ago: now.duration_since(w.last_seen).as_secs_f64(),
                    jobs_leased: self.scheduler.leased_by(id),
                    untrusted: self.scheduler.is_untrusted(id),
                    credential: w.row.credential.clone(),
                    device: w.device.clone(),
                    counted_per_second: w.counted_per_second(now, self.lease_duration),
                    trust: self.scheduler.standing_of(id).into(),
                    lease_size: w.last_lease_size as u64,
                }
            })
            .collect();
        workers.sort_by_key(|w| w.worker_id);
        workers
    }
}
