//! The engine: the one thread that owns the job life cycle and the store's write connection.
//!
//! Every request that changes state becomes a [`Command`] on one channel. The engine takes all
//! commands waiting (up to a cap), decides each against the [`Lifecycle`], commits every resulting
//! change in ONE transaction, and only then answers. Group commit is what makes thousands of durable
//! results per second possible with synchronous=FULL; a single writer makes decisions race-free.

use crate::lifecycle::{Change, Lifecycle, ResultOutcome};
use crate::metrics::Metrics;
use crate::report::ResultRecord;
use crate::store::{Store, StoreError, WorkerRow};
use nqueens_core::{Job, JobCounts};
use nqueens_proto as pb;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::{oneshot, watch};

/// Most commands decided and committed in one transaction.
const MAX_BATCH: usize = 8192;

/// An answer to a command, sent only once the changes it reports are committed.
type Reply = Box<dyn FnOnce(&Engine)>;

/// What [`Engine::start`] gives back: the command handle, the final result once the run is
/// complete, and the engine thread.
type Started = (
    EngineHandle,
    watch::Receiver<Option<ResultRecord>>,
    std::thread::JoinHandle<Result<(), StoreError>>,
);

pub enum Command {
    Register { req: pb::RegisterRequest, reply: oneshot::Sender<RegisterReply> },
    Lease { worker_id: u64, free_slots: u32, reply: oneshot::Sender<LeaseReply> },
    Heartbeat { worker_id: u64, lease_ids: Vec<u64>, reply: oneshot::Sender<(Vec<u64>, bool)> },
    Result { msg: pb::JobResult, reply: oneshot::Sender<pb::ResultAck> },
    Release { worker_id: u64, lease_id: u64, job_ids: Vec<u64>, reply: oneshot::Sender<u32> },
    Status { reply: oneshot::Sender<Result<pb::StatusResponse, String>> },
    Shutdown,
}

pub enum RegisterReply {
    Ok { worker_id: u64, complete: bool },
    UnknownWorker,
}

pub struct LeaseReply {
    pub lease_id: u64,
    pub jobs: Vec<pb::JobSpec>,
    pub complete: bool,
    pub unknown_worker: bool,
    /// The worker lost a verification and gets no more work.
    pub untrusted_worker: bool,
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
}

pub struct Engine {
    store: Store,
    life: Lifecycle,
    jobs: Arc<Vec<Job>>,
    workers: HashMap<u64, WorkerState>,
    next_worker_id: u64,
    metrics: Arc<Metrics>,
    config: EngineConfig,
    started: Instant,
    done_at_start: u64,
    mean_job_seconds: Option<f64>,
    complete_tx: watch::Sender<Option<ResultRecord>>,
    result_written: bool,
    run: pb::RunId,
}

impl Engine {
    /// Reloads the run from `store` and starts the engine thread.
    pub fn start(
        store: Store,
        jobs: Arc<Vec<Job>>,
        lease_duration: Duration,
        metrics: Arc<Metrics>,
        config: EngineConfig,
    ) -> Result<Started, StoreError> {
        let loaded = store.load()?;
        let mut life = Lifecycle::new(loaded.jobs, loaded.leases, lease_duration, Instant::now());
        life.restore_untrusted(loaded.untrusted);
        let (complete_tx, complete_rx) = watch::channel(None);
        let run =
            pb::RunId { n: store.meta().n as u32, fingerprint: store.meta().fingerprint.clone() };
        let done_at_start = life.count("done");
        let engine = Engine {
            store,
            life,
            jobs,
            workers: HashMap::new(),
            next_worker_id: loaded.next_worker_id,
            metrics,
            config,
            started: Instant::now(),
            done_at_start,
            mean_job_seconds: None,
            complete_tx,
            result_written: false,
            run,
        };
        tracing::info!(
            jobs = engine.life.total_jobs(),
            done = done_at_start,
            leased = engine.life.count("leased"),
            "run loaded; leases found in the store get a fresh grace period"
        );
        engine.publish_gauges();
        let (tx, rx) = mpsc::channel();
        let thread = std::thread::Builder::new()
            .name("nq-engine".into())
            .spawn(move || engine.run(rx))
            .expect("spawn engine thread");
        Ok((EngineHandle { tx }, complete_rx, thread))
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
            Command::Register { req, reply } => {
                let reused =
                    req.previous_worker_id != 0 && req.previous_worker_id < self.next_worker_id;
                if req.previous_worker_id != 0 && !reused {
                    let _ = reply.send(RegisterReply::UnknownWorker);
                    return;
                }
                let worker_id = if reused {
                    req.previous_worker_id
                } else {
                    self.next_worker_id += 1;
                    self.next_worker_id - 1
                };
                let row = WorkerRow {
                    id: worker_id,
                    name: req.name.clone(),
                    host: req.host.clone(),
                    cores: req.cores,
                    version: req.version.clone(),
                };
                worker_rows.push(row.clone());
                let entry = self.workers.entry(worker_id).or_insert(WorkerState {
                    row: row.clone(),
                    last_seen: now,
                    results: 0,
                    conflicts: 0,
                });
                entry.row = row;
                entry.last_seen = now;
                tracing::info!(worker_id, name = %req.name, host = %req.host, cores = req.cores, reconnect = reused, "worker registered");
                replies.push(Box::new(move |e: &Engine| {
                    let _ =
                        reply.send(RegisterReply::Ok { worker_id, complete: e.life.is_complete() });
                }));
            }
            Command::Lease { worker_id, free_slots, reply } => {
                if !self.touch(worker_id, now) {
                    let _ = reply.send(LeaseReply {
                        lease_id: 0,
                        jobs: vec![],
                        complete: false,
                        unknown_worker: true,
                        untrusted_worker: false,
                    });
                    return;
                }
                if self.life.is_untrusted(worker_id) {
                    let _ = reply.send(LeaseReply {
                        lease_id: 0,
                        jobs: vec![],
                        complete: false,
                        unknown_worker: false,
                        untrusted_worker: true,
                    });
                    return;
                }
                let others = self.other_live_workers(worker_id, now);
                let size = self.life.batch_size(free_slots, self.mean_job_seconds);
                let granted = self.life.lease(worker_id, size, &others, now, changes);
                let (lease_id, specs) = match granted {
                    Some((lease_id, ids)) => {
                        tracing::debug!(worker_id, lease_id, jobs = ids.len(), "lease granted");
                        (
                            lease_id,
                            ids.iter().map(|&id| pb::JobSpec::from(&self.jobs[id as usize])).collect(),
                        )
                    }
                    None => (0, vec![]),
                };
                replies.push(Box::new(move |e: &Engine| {
                    let _ = reply.send(LeaseReply {
                        lease_id,
                        jobs: specs,
                        complete: e.life.is_complete(),
                        unknown_worker: false,
                        untrusted_worker: false,
                    });
                }));
            }
            Command::Heartbeat { worker_id, lease_ids, reply } => {
                self.touch(worker_id, now);
                let lost = self.life.heartbeat(worker_id, &lease_ids, now, changes);
                replies.push(Box::new(move |e: &Engine| {
                    let _ = reply.send((lost, e.life.is_complete()));
                }));
            }
            Command::Release { worker_id, lease_id, job_ids, reply } => {
                let released = self.life.release(worker_id, lease_id, &job_ids, changes);
                tracing::info!(worker_id, lease_id, released, "jobs released");
                replies.push(Box::new(move |_: &Engine| {
                    let _ = reply.send(released);
                }));
            }
            Command::Result { msg, reply } => {
                self.touch(msg.worker_id, now);
                let outcome = if msg.error.is_empty() {
                    Ok((JobCounts::from(msg.counts.unwrap_or_default()), msg.seconds))
                } else {
                    tracing::warn!(job = msg.job_id, worker = msg.worker_id, error = %msg.error, "worker reported a solver error");
                    Err(msg.error.clone())
                };
                let before = changes.len();
                let outcome =
                    self.life.result(msg.worker_id, msg.lease_id, msg.job_id, outcome, changes);
                self.count_outcome(&msg, outcome);
                for change in &changes[before..] {
                    if let Change::Untrust { worker_id, job_id, detail, requeued } = change {
                        let name = self.workers.get(worker_id).map_or("", |w| w.row.name.as_str());
                        tracing::warn!(worker = worker_id, name, job = job_id, requeued, %detail, "worker lost a verification; it is untrusted and its counted jobs will be re-run");
                    }
                }
                let (job_id, lease_id, msg_worker) = (msg.job_id, msg.lease_id, msg.worker_id);
                replies.push(Box::new(move |e: &Engine| {
                    let (outcome, reason, message) = match outcome {
                        ResultOutcome::Accepted => (pb::Outcome::Accepted, pb::Reason::Unspecified, String::new()),
                        ResultOutcome::Duplicate => (pb::Outcome::Duplicate, pb::Reason::Unspecified, String::new()),
                        ResultOutcome::Confirmed => (pb::Outcome::Confirmed, pb::Reason::Unspecified, String::new()),
                        ResultOutcome::Conflict => (pb::Outcome::Conflict, pb::Reason::Unspecified, "result disagrees with another result for this job; it will be re-run".into()),
                        ResultOutcome::ErrorRecorded => (pb::Outcome::ErrorRecorded, pb::Reason::Unspecified, String::new()),
                        ResultOutcome::UnknownJob => (pb::Outcome::Rejected, pb::Reason::UnknownJob, format!("job {job_id} is not in this run's job list")),
                        ResultOutcome::UntrustedWorker => (
                            pb::Outcome::Rejected,
                            pb::Reason::UntrustedWorker,
                            format!("worker {} disagreed with a settled verification and may not contribute results", msg_worker),
                        ),
                        ResultOutcome::UnknownLease => {
                            (pb::Outcome::Rejected, pb::Reason::UnknownLease, format!("lease {lease_id} was not issued to this worker for job {job_id}"))
                        }
                    };
                    let _ = reply.send(pb::ResultAck { job_id, lease_id, outcome: outcome as i32, reason: reason as i32, message, run_complete: e.life.is_complete() });
                }));
            }
            Command::Status { reply } => {
                replies.push(Box::new(move |e: &Engine| {
                    let _ = reply.send(e.status().map_err(|err| err.to_string()));
                }));
            }
        }
    }

    fn count_outcome(&mut self, msg: &pb::JobResult, outcome: ResultOutcome) {
        let m = &self.metrics;
        match outcome {
            ResultOutcome::Accepted | ResultOutcome::Confirmed => {
                m.results_accepted.fetch_add(1, Ordering::Relaxed);
                let nodes = msg.counts.as_ref().map_or(0, |c| c.nodes);
                m.nodes.fetch_add(nodes, Ordering::Relaxed);
                if msg.seconds > 0.0 {
                    let mean = self.mean_job_seconds.get_or_insert(msg.seconds);
                    *mean = *mean * 0.95 + msg.seconds * 0.05;
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
        m.jobs_pending.store(self.life.count("pending"), Ordering::Relaxed);
        m.jobs_leased.store(self.life.count("leased"), Ordering::Relaxed);
        m.jobs_done.store(self.life.count("done"), Ordering::Relaxed);
        m.jobs_held.store(self.life.count("held"), Ordering::Relaxed);
        m.jobs_failed.store(self.life.count("failed"), Ordering::Relaxed);
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
        let Some(totals) = self.store.final_totals()? else {
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

    fn status(&self) -> Result<pb::StatusResponse, StoreError> {
        let tally = self.store.tally()?;
        let now = Instant::now();
        let elapsed = self.started.elapsed().as_secs_f64().max(1e-3);
        let done_now = self.life.count("done");
        let rate = (done_now - self.done_at_start.min(done_now)) as f64 / elapsed;
        let remaining = self.life.total_jobs() - done_now;
        let eta = if remaining == 0 {
            0.0
        } else if rate > 0.0 {
            remaining as f64 / rate
        } else {
            -1.0
        };
        let complete = self.life.is_complete();
        let result_json = if complete {
            self.store
                .final_totals()?
                .map(|t| {
                    ResultRecord::new(&t, self.life.total_jobs(), self.store.age(), tally.nodes)
                        .json_line()
                })
                .unwrap_or_default()
        } else {
            String::new()
        };
        let mut leased_by: HashMap<u64, u64> = HashMap::new();
        for job in &self.life.jobs {
            if let crate::lifecycle::JobState::Leased { worker_id, .. } = job.state {
                *leased_by.entry(worker_id).or_default() += 1;
            }
        }
        let mut workers: Vec<pb::WorkerInfo> = self
            .workers
            .values()
            .map(|w| pb::WorkerInfo {
                worker_id: w.row.id,
                name: w.row.name.clone(),
                host: w.row.host.clone(),
                cores: w.row.cores,
                version: w.row.version.clone(),
                results: w.results,
                conflicts: w.conflicts,
                last_seen_seconds_ago: now.duration_since(w.last_seen).as_secs_f64(),
                jobs_leased: leased_by.get(&w.row.id).copied().unwrap_or(0),
                untrusted: self.life.is_untrusted(w.row.id),
            })
            .collect();
        workers.sort_by_key(|w| w.worker_id);
        Ok(pb::StatusResponse {
            run: Some(self.run.clone()),
            jobs_total: self.life.total_jobs(),
            jobs_pending: self.life.count("pending"),
            jobs_leased: self.life.count("leased"),
            jobs_done: done_now,
            jobs_held: self.life.count("held"),
            jobs_failed: self.life.count("failed"),
            conflicts: self.life.conflicts_total,
            results_per_second: rate,
            eta_seconds: eta,
            partial_total: tally.total,
            partial_sym180: tally.sym180,
            partial_sym90: tally.sym90,
            nodes: tally.nodes,
            complete,
            result_json,
            workers,
            lease_expiries: self.life.lease_expiries,
            uptime_seconds: elapsed,
            untrusted_workers: self.life.untrusted_count(),
        })
    }
}
