//! The engine: the one thread that owns the job life cycle and the store's write connection.
//!
//! Every request that changes state becomes a [`Command`] on one channel. The engine takes all
//! commands waiting (up to a cap), decides each against the [`Lifecycle`], commits every resulting
//! change in ONE transaction, and only then answers. Group commit is what makes thousands of durable
//! results per second possible with synchronous=FULL; a single writer makes decisions race-free.

use crate::lifecycle::{Change, Finding, Lifecycle, ResultOutcome};
use crate::metrics::Metrics;
use crate::report::ResultRecord;
use crate::state::JobState;
use crate::status::{self, percent, StatusView, WorkerView};
use crate::store::{Store, StoreError, WorkerRow};
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::{oneshot, watch};

/// How many of a new worker's answers must agree with another worker's before one of its results
/// is believed alone (while another worker is around to compare with).
pub const PROBATION_RESULTS: u32 = 10;

/// The most jobs one lease gives a worker on probation (one per thread, at most this many).
pub const PROBATION_LEASE: u32 = 64;

/// Most commands decided and committed in one transaction.
const MAX_BATCH: usize = 8192;

/// An answer to a command, sent only once the changes it reports are committed.
type Reply = Box<dyn FnOnce(&Engine)>;

/// What [`Engine::start`] gives back: the command handle, the final result once the run is
/// complete, a signal that fires when the engine thread has ended (for whatever reason), and the
/// thread itself.
type Started = (
    EngineHandle,
    watch::Receiver<Option<ResultRecord>>,
    oneshot::Receiver<()>,
    std::thread::JoinHandle<Result<(), StoreError>>,
);

/// A request to the engine, with the channel its answer goes back on.
pub enum Command {
    Register {
        worker: Registration,
        reply: oneshot::Sender<RegisterReply>,
    },
    Lease {
        worker_id: u64,
        free_slots: u32,
        reply: oneshot::Sender<LeaseReply>,
    },
    Heartbeat {
        worker_id: u64,
        lease_ids: Vec<u64>,
        reply: oneshot::Sender<HeartbeatReply>,
    },
    Result {
        result: ReportedResult,
        reply: oneshot::Sender<ResultReply>,
    },
    Release {
        worker_id: u64,
        lease_id: u64,
        job_ids: Vec<u64>,
        reply: oneshot::Sender<u32>,
    },
    Status {
        reply: oneshot::Sender<StatusView>,
    },
    /// The coordinator's own answer for a job, to check workers against (see `reference.rs`).
    Reference {
        job_id: u64,
        counts: nqueens_core::JobCounts,
    },
    Shutdown,
}

/// A worker introducing itself, already checked by the service (version, self-test).
#[derive(Debug, Clone)]
pub struct Registration {
    /// The id this coordinator gave the worker before a reconnect.
    pub previous_worker_id: Option<u64>,
    pub name: String,
    pub host: String,
    pub cores: u32,
    pub version: String,
}

/// One job's result as a worker reported it.
#[derive(Debug, Clone)]
pub struct ReportedResult {
    pub worker_id: u64,
    pub lease_id: u64,
    pub job_id: u64,
    pub finding: Finding,
}

pub enum RegisterReply {
    Registered {
        worker_id: u64,
        run_complete: bool,
    },
    /// The previous worker id was never given out by this run.
    UnknownWorker,
}

pub enum LeaseReply {
    /// Jobs (ids into the run's job list) under a new lease; none when nothing can be given now.
    Granted { lease_id: u64, job_ids: Vec<u64>, run_complete: bool },
    /// The worker is not registered with this coordinator.
    UnknownWorker,
    /// The worker lost a verification and gets no more work.
    UntrustedWorker,
}

pub struct HeartbeatReply {
    /// Leases that no longer cover any job of the worker.
    pub lost_lease_ids: Vec<u64>,
    pub run_complete: bool,
}

pub struct ResultReply {
    pub outcome: ResultOutcome,
    pub run_complete: bool,
}

/// Handle for sending commands to the engine thread.
#[derive(Clone)]
pub struct EngineHandle {
    tx: mpsc::Sender<Command>,
}

impl EngineHandle {
    pub fn send(&self, cmd: Command) -> bool {
        self.tx.send(cmd).is_ok()
    }
}

/// A registered worker, as the engine tracks it.
struct WorkerState {
    row: WorkerRow,
    last_seen: Instant,
    results: u64,
    conflicts: u64,
}

pub struct EngineConfig {
    pub result_file: PathBuf,
    pub heartbeat: Duration,
    /// Mix known-answer jobs into leases.
    pub spot_checks: bool,
}

pub struct Engine {
    store: Store,
    life: Lifecycle,
    workers: HashMap<u64, WorkerState>,
    next_worker_id: u64,
    metrics: Arc<Metrics>,
    config: EngineConfig,
    started: Instant,
    done_at_start: u64,
    /// When the last result was counted (accepted or confirmed) by this process.
    last_counted: Option<Instant>,
    mean_job_seconds: Option<f64>,
    complete_tx: watch::Sender<Option<ResultRecord>>,
    result_written: bool,
}

impl Engine {
    /// Reloads the run from `store` and starts the engine thread.
    pub fn start(
        store: Store,
        lease_duration: Duration,
        metrics: Arc<Metrics>,
        config: EngineConfig,
    ) -> Result<Started, StoreError> {
        let loaded = store.load()?;
        let mut life = Lifecycle::new(loaded.jobs, loaded.leases, lease_duration, Instant::now());
        life.set_probation(PROBATION_RESULTS);
        life.restore_untrusted(loaded.untrusted);
        let (complete_tx, complete_rx) = watch::channel(None);
        let done_at_start = life.count(JobState::Done);
        let engine = Engine {
            store,
            life,
            workers: HashMap::new(),
            next_worker_id: loaded.next_worker_id,
            metrics,
            config,
            started: Instant::now(),
            done_at_start,
            last_counted: None,
            mean_job_seconds: None,
            complete_tx,
            result_written: false,
        };
        tracing::info!(
            jobs = engine.life.total_jobs(),
            done = done_at_start,
            leased = engine.life.count(JobState::Leased),
            "run loaded; leases found in the store get a fresh grace period"
        );
        engine.publish_gauges();
        let (tx, rx) = mpsc::channel();
        let (ended_tx, ended_rx) = oneshot::channel();
        let thread = std::thread::Builder::new()
            .name("nq-engine".into())
            .spawn(move || {
                let ended = engine.run(rx);
                let _ = ended_tx.send(());
                ended
            })
            .expect("spawn engine thread");
        Ok((EngineHandle { tx }, complete_rx, ended_rx, thread))
    }

    fn run(mut self, rx: mpsc::Receiver<Command>) -> Result<(), StoreError> {
        self.check_complete()?;
        let tick = Duration::from_millis(250);
        let mut last_expiry = Instant::now();
        loop {
            let first = match rx.recv_timeout(tick) {
                Ok(cmd) => Some(cmd),
                Err(mpsc::RecvTimeoutError::Timeout) => None,
                Err(mpsc::RecvTimeoutError::Disconnected) => return Ok(()),
            };
            let mut batch: Vec<Command> = first.into_iter().collect();
            while batch.len() < MAX_BATCH {
                match rx.try_recv() {
                    Ok(cmd) => batch.push(cmd),
                    Err(_) => break,
                }
            }
            let shutdown = batch.iter().any(|c| matches!(c, Command::Shutdown));
            let mut changes = Vec::new();
            let mut worker_rows = Vec::new();
            let mut replies: Vec<Reply> = Vec::new();
            for cmd in batch {
                self.decide(cmd, &mut changes, &mut worker_rows, &mut replies);
            }
            if last_expiry.elapsed() >= tick {
                last_expiry = Instant::now();
                let expired = self.life.expire(Instant::now(), &mut changes);
                if expired > 0 {
                    tracing::warn!(
                        leases = expired,
                        "leases expired; their jobs are pending again"
                    );
                    self.metrics.lease_expiries.fetch_add(expired, Ordering::Relaxed);
                }
            }
            if !changes.is_empty() || !worker_rows.is_empty() {
                let _span = tracing::debug_span!("commit", changes = changes.len()).entered();
                if let Err(e) = self.store.apply(&changes, &worker_rows) {
                    // Nothing of this batch is acknowledged; the coordinator stops rather than
                    // answer from a state the disk does not have.
                    tracing::error!(error = %e, "commit failed; stopping the engine");
                    return Err(e);
                }
                self.metrics.commits.fetch_add(1, Ordering::Relaxed);
            }
            for reply in replies {
                reply(&self);
            }
            self.publish_gauges();
            self.check_complete()?;
            if shutdown {
                tracing::info!("engine stopped after committing everything received");
                return Ok(());
            }
        }
    }

    fn decide(
        &mut self,
        cmd: Command,
        changes: &mut Vec<Change>,
        worker_rows: &mut Vec<WorkerRow>,
        replies: &mut Vec<Reply>,
    ) {
        let now = Instant::now();
        match cmd {
            Command::Shutdown => {}
            Command::Register { worker, reply } => {
                let worker_id = match worker.previous_worker_id {
                    Some(id) if id < self.next_worker_id => id,
                    Some(_) => {
                        let _ = reply.send(RegisterReply::UnknownWorker);
                        return;
                    }
                    None => {
                        self.next_worker_id += 1;
                        self.next_worker_id - 1
                    }
                };
                let row = WorkerRow {
                    id: worker_id,
                    name: worker.name,
                    host: worker.host,
                    cores: worker.cores,
                    version: worker.version,
                };
                tracing::info!(worker_id, name = %row.name, host = %row.host, cores = row.cores, reconnect = worker.previous_worker_id.is_some(), "worker registered");
                worker_rows.push(row.clone());
                let entry = self.workers.entry(worker_id).or_insert(WorkerState {
                    row: row.clone(),
                    last_seen: now,
                    results: 0,
                    conflicts: 0,
                });
                entry.row = row;
                entry.last_seen = now;
                replies.push(Box::new(move |e: &Engine| {
                    let run_complete = e.life.is_complete();
                    let _ = reply.send(RegisterReply::Registered { worker_id, run_complete });
                }));
            }
            Command::Lease { worker_id, free_slots, reply } => {
                if !self.touch(worker_id, now) {
                    let _ = reply.send(LeaseReply::UnknownWorker);
                    return;
                }
                if self.life.is_untrusted(worker_id) {
                    let _ = reply.send(LeaseReply::UntrustedWorker);
                    return;
                }
                let others = self.other_live_workers(worker_id, now);
                // A worker gets no more slots than the threads it registered with, whatever it
                // asks for now: one client cannot take the whole run in one call.
                let cores = self.workers.get(&worker_id).map_or(1, |w| w.row.cores);
                let mut size = self.life.batch_size(free_slots.min(cores), self.mean_job_seconds);
                if self.life.on_probation(worker_id) {
                    // Trust grows with agreement: an unproven worker holds little at a time.
                    size = size.min(free_slots.min(cores).min(PROBATION_LEASE) as usize);
                }
                let granted = self.life.lease_checked(
                    worker_id,
                    size,
                    &others,
                    self.config.spot_checks,
                    now,
                    changes,
                );
                let (lease_id, job_ids) = granted.unwrap_or_default();
                if lease_id != 0 {
                    tracing::debug!(worker_id, lease_id, jobs = job_ids.len(), "lease granted");
                }
                replies.push(Box::new(move |e: &Engine| {
                    let run_complete = e.life.is_complete();
                    let _ = reply.send(LeaseReply::Granted { lease_id, job_ids, run_complete });
                }));
            }
            Command::Heartbeat { worker_id, lease_ids, reply } => {
                self.touch(worker_id, now);
                let lost = self.life.heartbeat(worker_id, &lease_ids, now, changes);
                replies.push(Box::new(move |e: &Engine| {
                    let run_complete = e.life.is_complete();
                    let _ = reply.send(HeartbeatReply { lost_lease_ids: lost, run_complete });
                }));
            }
            Command::Release { worker_id, lease_id, job_ids, reply } => {
                let released = self.life.release(worker_id, lease_id, &job_ids, changes);
                tracing::info!(worker_id, lease_id, released, "jobs released");
                replies.push(Box::new(move |_: &Engine| {
                    let _ = reply.send(released);
                }));
            }
            Command::Result { result, reply } => {
                self.touch(result.worker_id, now);
                if let Finding::SolverError(error) = &result.finding {
                    tracing::warn!(job = result.job_id, worker = result.worker_id, %error, "worker reported a solver error");
                }
                let before = changes.len();
                let ReportedResult { worker_id, lease_id, job_id, ref finding } = result;
                let others = self.other_live_workers(worker_id, now);
                let outcome = self.life.result(
                    worker_id,
                    lease_id,
                    job_id,
                    finding.clone(),
                    &others,
                    changes,
                );
                self.count_outcome(&result, outcome);
                self.log_untrusted(&changes[before..]);
                replies.push(Box::new(move |e: &Engine| {
                    let _ = reply.send(ResultReply { outcome, run_complete: e.life.is_complete() });
                }));
            }
            Command::Reference { job_id, counts } => {
                let before = changes.len();
                self.life.add_reference(job_id, counts, changes);
                tracing::debug!(job = job_id, "reference answer computed");
                self.log_untrusted(&changes[before..]);
            }
            Command::Status { reply } => {
                replies.push(Box::new(move |e: &Engine| {
                    let _ = reply.send(e.status());
                }));
            }
        }
    }

    /// Says loudly which workers the decisions in `changes` stopped trusting.
    fn log_untrusted(&self, changes: &[Change]) {
        for change in changes {
            if let Change::Untrust { worker_id, job_id, detail, requeued } = change {
                let name = self.workers.get(worker_id).map_or("", |w| w.row.name.as_str());
                tracing::warn!(worker = worker_id, name, job = job_id, requeued, %detail, "worker gave a wrong answer (a lost verification or spot check); it is untrusted and its counted jobs will be re-run");
            }
        }
    }

    fn count_outcome(&mut self, msg: &ReportedResult, outcome: ResultOutcome) {
        let m = &self.metrics;
        match outcome {
            ResultOutcome::Accepted | ResultOutcome::Confirmed => {
                self.last_counted = Some(Instant::now());
                m.results_accepted.fetch_add(1, Ordering::Relaxed);
                if let Finding::Solved { counts, seconds } = msg.finding {
                    m.nodes.fetch_add(counts.nodes, Ordering::Relaxed);
                    if seconds > 0.0 {
                        let mean = self.mean_job_seconds.get_or_insert(seconds);
                        *mean = *mean * 0.95 + seconds * 0.05;
                    }
                }
                if let Some(w) = self.workers.get_mut(&msg.worker_id) {
                    w.results += 1;
                }
            }
            ResultOutcome::Duplicate => {
                m.results_duplicate.fetch_add(1, Ordering::Relaxed);
            }
            ResultOutcome::Conflict => {
                m.conflicts.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(
                    job = msg.job_id,
                    worker = msg.worker_id,
                    "conflicting result recorded; the job will be re-run"
                );
                if let Some(w) = self.workers.get_mut(&msg.worker_id) {
                    w.conflicts += 1;
                }
            }
            ResultOutcome::ErrorRecorded => {
                m.job_errors.fetch_add(1, Ordering::Relaxed);
            }
            ResultOutcome::UnknownJob
            | ResultOutcome::UnknownLease
            | ResultOutcome::UntrustedWorker => {
                m.results_rejected.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(
                    job = msg.job_id,
                    lease = msg.lease_id,
                    worker = msg.worker_id,
                    ?outcome,
                    "result rejected"
                );
            }
        }
    }

    /// Marks a worker as seen; false if it never registered (since this coordinator started).
    fn touch(&mut self, worker_id: u64, now: Instant) -> bool {
        match self.workers.get_mut(&worker_id) {
            Some(w) => {
                w.last_seen = now;
                true
            }
            None => false,
        }
    }

    /// Whether a worker last seen at `last_seen` still counts as live.
    fn live(&self, last_seen: Instant, now: Instant) -> bool {
        now.duration_since(last_seen) <= self.config.heartbeat * 3 + Duration::from_secs(2)
    }

    fn active_workers(&self, now: Instant) -> usize {
        self.workers.values().filter(|w| self.live(w.last_seen, now)).count()
    }

    /// The live, trusted workers other than `worker_id`: who else could give a job an opinion.
    fn other_live_workers(&self, worker_id: u64, now: Instant) -> Vec<u64> {
        self.workers
            .iter()
            .filter(|(&id, w)| {
                id != worker_id && self.live(w.last_seen, now) && !self.life.is_untrusted(id)
            })
            .map(|(&id, _)| id)
            .collect()
    }

    fn publish_gauges(&self) {
        let m = &self.metrics;
        m.set_jobs(self.life.by_state());
        m.workers.store(self.active_workers(Instant::now()) as u64, Ordering::Relaxed);
        m.untrusted_workers.store(self.life.untrusted_count(), Ordering::Relaxed);
    }

    /// Once every job is done: totals from the committed rows, the result file, and the signal
    /// that lets `serve --exit-when-done` return.
    fn check_complete(&mut self) -> Result<(), StoreError> {
        if self.result_written || !self.life.is_complete() {
            return Ok(());
        }
        let tally = self.store.tally()?;
        let Some(totals) = self.store.final_totals(&tally)? else {
            tracing::error!("all jobs are done in memory but the committed rows are incomplete");
            return Ok(());
        };
        let record =
            ResultRecord::new(&totals, self.life.total_jobs(), self.store.age(), tally.nodes);
        let line = record.json_line();
        let tmp = self.config.result_file.with_extension("json.tmp");
        let written = std::fs::write(&tmp, format!("{line}\n"))
            .and_then(|_| std::fs::rename(&tmp, &self.config.result_file));
        match written {
            Ok(()) => {
                tracing::info!(file = %self.config.result_file.display(), "result file written")
            }
            Err(e) => {
                tracing::error!(error = %e, file = %self.config.result_file.display(), "cannot write the result file")
            }
        }
        tracing::info!(n = record.n, total = record.total, unique = record.unique, result = %line, "run complete");
        self.result_written = true;
        let _ = self.complete_tx.send(Some(record));
        Ok(())
    }

    /// The run's progress as the engine knows it. The partial totals and the result are left
    /// empty: they are summed from committed rows by the caller, on its own read connection, so
    /// that a status poll never holds up leases and results (see `CoordinatorService::status`).
    fn status(&self) -> StatusView {
        let now = Instant::now();
        let elapsed = self.started.elapsed().as_secs_f64().max(1e-3);
        let jobs = self.life.by_state();
        let done = jobs.get(JobState::Done);
        let rate = (done - self.done_at_start.min(done)) as f64 / elapsed;
        let remaining = self.life.total_jobs() - done;
        let quiet = self.last_counted.map_or(elapsed, |t| now.duration_since(t).as_secs_f64());
        let estimate = status::eta(
            remaining,
            jobs.get(JobState::Pending),
            jobs.get(JobState::Leased),
            Some(rate),
            quiet,
        );
        let complete = self.life.is_complete();
        let last_deadline = self.life.last_lease_deadline();
        let mut workers: Vec<WorkerView> = self
            .workers
            .values()
            .map(|w| WorkerView {
                worker_id: w.row.id,
                name: w.row.name.clone(),
                host: w.row.host.clone(),
                cores: w.row.cores,
                version: w.row.version.clone(),
                results: w.results,
                conflicts: w.conflicts,
                last_seen_seconds_ago: now.duration_since(w.last_seen).as_secs_f64(),
                jobs_leased: self.life.leased_by(w.row.id),
                untrusted: self.life.is_untrusted(w.row.id),
            })
            .collect();
        workers.sort_by_key(|w| w.worker_id);
        let meta = self.store.meta();
        StatusView {
            n: meta.n.into(),
            fingerprint: meta.fingerprint.clone(),
            source: String::new(),
            jobs_total: self.life.total_jobs(),
            jobs_pending: jobs.get(JobState::Pending),
            jobs_leased: jobs.get(JobState::Leased),
            jobs_done: done,
            jobs_held: jobs.get(JobState::Held),
            jobs_failed: jobs.get(JobState::Failed),
            percent_done: percent(done, self.life.total_jobs()),
            conflicts: self.life.conflicts_total,
            untrusted_workers: self.life.untrusted_count(),
            lease_expiries: Some(self.life.lease_expiries),
            results_per_second: Some(rate),
            eta_seconds: estimate.seconds(),
            waiting_on_leases: estimate.waiting_on(),
            leases_expire_in_seconds: last_deadline
                .map(|d| d.saturating_duration_since(now).as_secs_f64()),
            partial_total: 0,
            partial_sym180: 0,
            partial_sym90: 0,
            nodes: 0,
            complete,
            result: None,
            workers,
            uptime_seconds: Some(elapsed),
        }
    }
}
