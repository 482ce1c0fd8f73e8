//! The engine's side of the [`RunSnapshot`]: after every batch it commits (and, while the run is
//! idle, every [`REFRESH_EVERY`] so that its clocks stay current), the engine builds the run's
//! snapshot from what it alone knows (the scheduler's jobs by state, its workers, the rate) and
//! publishes it on the watch channel every reader takes its view from.
//!
//! What a snapshot costs must not grow with the workers per batch: the jobs by state, the rate
//! and the counters are kept as counts. The worker table (one view per worker, and the live
//! count) is rebuilt with every changed snapshot while the fleet has at most
//! [`EXACT_TABLE_UP_TO`] workers, so a reader sees the workers exactly as the counts beside them;
//! a larger fleet's table is rebuilt at most every [`WORKERS_EVERY`] (and every
//! [`REFRESH_EVERY`] anyway) and shared between snapshots until then, so that 10,000 workers
//! delivering tens of thousands of results a second do not cost 10,000 views a batch.

use super::Engine;
use crate::snapshot::{LiveFigures, Progress, RateNow, RunRate};
use crate::snapshot::{RunName, RunSnapshot, WorkerView};
use nqueens_scheduler::state::JobState;
use nqueens_scheduler::WorkerId;
use nqueens_store::unix_now;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::watch;

/// How often an idle engine publishes a fresh snapshot anyway (quiet time, uptime and the rate's
/// window move on while nothing happens); also the oldest the worker table gets.
pub const REFRESH_EVERY: Duration = Duration::from_secs(1);

/// The soonest a large fleet's worker table is rebuilt after a change.
pub const WORKERS_EVERY: Duration = Duration::from_millis(100);

/// Up to this many workers, the worker table is rebuilt with every changed snapshot.
pub const EXACT_TABLE_UP_TO: usize = 1_000;

/// The worker table as last built, shared by the snapshots until the next build.
struct WorkerTable {
    built: Option<Instant>,
    views: Arc<[WorkerView]>,
    live: u64,
}

/// What the engine publishes, and what it keeps to build it.
pub(super) struct Publisher {
    snapshots: watch::Sender<Arc<RunSnapshot>>,
    /// How many snapshots were published, and when the last one was.
    published: (u64, Instant),
    started: Instant,
    /// The run's rate: the one rule for its jobs per second and quiet time (see
    /// `snapshot/rate.rs`).
    rate: RunRate,
    /// When the leases' last deadline was last looked up, and what it was (see
    /// [`Publisher::lease_deadline`]).
    lease_deadline: (Option<Instant>, Option<Instant>),
    workers: WorkerTable,
}

impl Publisher {
    /// A publisher on `snapshots` for a run with `done_at_start` jobs done.
    pub(super) fn new(snapshots: watch::Sender<Arc<RunSnapshot>>, done_at_start: u64) -> Self {
        let now = Instant::now();
        Publisher {
            snapshots,
            published: (0, now),
            started: now,
            rate: RunRate::new(now, done_at_start),
            lease_deadline: (None, None),
            workers: WorkerTable { built: None, views: Arc::from([]), live: 0 },
        }
    }

    /// A job was counted at `now` (for the run's rate).
    pub(super) fn counted(&mut self, now: Instant) {
        self.rate.counted(now);
    }

    /// After a decided batch: the worker table is built again with the next snapshot where the
    /// fleet is small (`small_fleet`) or the table is older than [`WORKERS_EVERY`].
    fn batch_decided(&mut self, small_fleet: bool) {
        let due = self.workers.built.is_none_or(|t| t.elapsed() >= WORKERS_EVERY);
        if small_fleet || due {
            self.workers.built = None;
        }
    }

    /// Whether the last snapshot is older than [`REFRESH_EVERY`].
    fn stale(&self) -> bool {
        self.published.1.elapsed() >= REFRESH_EVERY
    }

    /// Publishes `snapshot`, built at `now`.
    fn send(&mut self, snapshot: RunSnapshot, now: Instant) {
        self.published = (snapshot.live.snapshot_seq, now);
        self.snapshots.send_replace(Arc::new(snapshot));
    }

    /// The number the next snapshot carries.
    fn next_seq(&self) -> u64 {
        self.published.0 + 1
    }

    /// Seconds since the engine started.
    fn uptime(&self, now: Instant) -> f64 {
        now.duration_since(self.started).as_secs_f64()
    }

    /// The run's rate at `now`, with `done` jobs done and `nodes` searched (see `snapshot/rate.rs`).
    fn rate(&mut self, now: Instant, done: u64, nodes: u64) -> RateNow {
        self.rate.measure(now, done, nodes)
    }

    /// When the last current lease runs out unless renewed: what `walk` found when it last ran,
    /// walked again when that is older than [`REFRESH_EVERY`]. Walking the leases costs about as
    /// much as everything else in a snapshot together (every lease of the run is looked at): a
    /// lease granted or renewed since shows up in the expiry within a second.
    fn lease_deadline(
        &mut self,
        now: Instant,
        walk: impl FnOnce() -> Option<Instant>,
    ) -> Option<Instant> {
        let (walked, deadline) = &mut self.lease_deadline;
        if walked.is_none_or(|t| now.duration_since(t) >= REFRESH_EVERY) {
            (*walked, *deadline) = (Some(now), walk());
        }
        *deadline
    }

    /// The worker table and the live count as last built, while that is younger than
    /// [`REFRESH_EVERY`] and no batch made it due.
    fn current_table(&self, now: Instant) -> Option<(Arc<[WorkerView]>, u64)> {
        let table = &self.workers;
        let fresh = table.built.is_some_and(|t| now.duration_since(t) < REFRESH_EVERY);
        fresh.then(|| (table.views.clone(), table.live))
    }

    /// Keeps the worker table built at `now`, shared by the snapshots until the next build.
    fn new_table(&mut self, now: Instant, views: Vec<WorkerView>, live: u64) -> Arc<[WorkerView]> {
        let views: Arc<[WorkerView]> = views.into();
        self.workers = WorkerTable { built: Some(now), views: views.clone(), live };
        views
    }
}

impl Engine {
    /// Publishes a snapshot when `changed` (a batch was decided), or when the last one is older
    /// than [`REFRESH_EVERY`]; the worker table is rebuilt with it when it is due (see the
    /// module's comment).
    pub(super) fn publish_if(&mut self, changed: bool) {
        if changed {
            self.publisher.batch_decided(self.registry.len() <= EXACT_TABLE_UP_TO);
        }
        if changed || self.publisher.stale() {
            self.publish();
        }
    }

    /// Builds the run's snapshot now and publishes it.
    pub(super) fn publish(&mut self) {
        let now = Instant::now();
        let snapshot = self.snapshot(now);
        self.publisher.send(snapshot, now);
    }

    /// The run now, as the engine knows it.
    fn snapshot(&mut self, now: Instant) -> RunSnapshot {
        let jobs = self.scheduler.by_state();
        let counters = self.metrics.counters();
        let rate = self.publisher.rate(now, jobs.get(JobState::Done), counters.nodes);
        let meta = self.store.meta();
        let run = RunName { n: meta.n.into(), fingerprint: &meta.fingerprint };
        let progress = Progress::new(
            run,
            &jobs,
            Some(rate.jobs_per_second),
            rate.quiet_seconds,
            self.scheduler.conflicts_total(),
            self.ending.published(),
        );
        let last_deadline =
            self.publisher.lease_deadline(now, || self.scheduler.last_lease_deadline());
        let (workers, live) = self.worker_table(now);
        let live = LiveFigures {
            snapshot_seq: self.publisher.next_seq(),
            nodes_per_second: Some(rate.nodes_per_second),
            live_workers: Some(live),
            disputed_jobs: Some(self.scheduler.disputed_jobs()),
            lease_expiries: Some(self.scheduler.lease_expiries()),
            leases_expire_in_seconds: last_deadline
                .map(|d| d.saturating_duration_since(now).as_secs_f64()),
            uptime_seconds: Some(self.publisher.uptime(now)),
            counters: Some(counters),
        };
        let untrusted = self.scheduler.untrusted_count();
        RunSnapshot::new(unix_now(), progress, rate.quiet_seconds, untrusted, workers, live)
    }

    /// The worker table and the live count: the last one built, or a new one when it is due.
    fn worker_table(&mut self, now: Instant) -> (Arc<[WorkerView]>, u64) {
        if let Some(table) = self.publisher.current_table(now) {
            return table;
        }
        let views = self.worker_views(now);
        let live = self.registry.iter().filter(|w| self.registry.live(w.last_seen, now)).count();
        (self.publisher.new_table(now, views, live as u64), live as u64)
    }

    /// Every worker registered with this process, by id.
    fn worker_views(&self, now: Instant) -> Vec<WorkerView> {
        let lease_duration = self.config.lease_duration;
        let mut workers: Vec<WorkerView> = self
            .registry
            .iter()
            .map(|w| {
                let id = WorkerId::new(w.row.id);
                WorkerView {
                    worker_id: w.row.id,
                    name: w.row.name.clone(),
                    host: w.row.host.clone(),
                    slots: w.row.slots,
                    version: w.row.version.clone(),
                    results: w.results,
                    conflicts: w.conflicts,
                    last_seen_seconds_ago: now.duration_since(w.last_seen).as_secs_f64(),
                    jobs_leased: self.scheduler.leased_by(id),
                    untrusted: self.scheduler.is_untrusted(id),
                    credential: w.row.credential.clone(),
                    device: w.device.clone(),
                    results_per_second: w.results_per_second(now, lease_duration),
                    trust: self.scheduler.standing_of(id).into(),
                    lease_size: w.last_lease_size as u64,
                }
            })
            .collect();
        workers.sort_by_key(|w| w.worker_id);
        workers
    }
}
