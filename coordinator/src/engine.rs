//! The engine: the one thread that owns the job life cycle and the store's write connection.
//!
//! Every request that changes state becomes a [`Command`] on one channel. The engine takes all
//! commands waiting (up to a cap), decides each against the [`Lifecycle`], commits every resulting
//! change in ONE transaction, and only then answers. Group commit is what makes thousands of durable
//! results per second possible with synchronous=FULL; a single writer makes decisions race-free.

use crate::metrics::Metrics;
use crate::report::ResultRecord;
use crate::secrets::{digest, new_secret, same_digest, Credential, RegistrationLimiter};
use crate::status::{self, percent, StatusView, WorkerView};
use crate::store::{Store, StoreError, WorkerRow};
use nqueens_scheduler::state::JobState;
use nqueens_scheduler::{Change, Finding, JobId, LeaseId, Lifecycle, ResultOutcome, WorkerId};
use std::collections::{HashMap, VecDeque};
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

/// The most jobs one lease gives any worker, however fast it has shown itself to be.
pub const MAX_LEASE: usize = 65_536;

/// A worker that has not delivered a result for this many lease durations (and registered longer
/// ago than that) is not waited for: its opinion is not awaited, and it does not keep a newcomer
/// on probation. An identity that only heartbeats cannot stall a run.
const INACTIVE_AFTER_LEASES: u32 = 3;

/// The jobs of one lease: `base` (the batch for `claimed` threads at the observed job time) for a
/// worker on probation, at most one per thread and [`PROBATION_LEASE`]; afterwards it grows with
/// `earned` (results counted in the last lease period), a quarter of it at a time, but never
/// past `earned` (or one job per thread), nor [`MAX_LEASE`].
pub fn sized_lease(claimed: u32, base: usize, on_probation: bool, earned: usize) -> usize {
    if on_probation {
        return base.min(claimed.min(PROBATION_LEASE) as usize);
    }
    base.max(earned / 4).min((claimed as usize).max(earned)).min(MAX_LEASE)
}

/// Refused calls naming a worker without its secret are logged at most this often.
const REFUSAL_LOG_EVERY: Duration = Duration::from_secs(10);

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
        caller: Caller,
        free_slots: u32,
        reply: oneshot::Sender<LeaseReply>,
    },
    Heartbeat {
        caller: Caller,
        lease_ids: Vec<LeaseId>,
        reply: oneshot::Sender<Result<HeartbeatReply, Refusal>>,
    },
    Result {
        result: ReportedResult,
        reply: oneshot::Sender<ResultReply>,
    },
    Release {
        caller: Caller,
        lease_id: LeaseId,
        job_ids: Vec<JobId>,
        reply: oneshot::Sender<Result<u32, Refusal>>,
    },
    Status {
        reply: oneshot::Sender<StatusView>,
    },
    /// The coordinator's own answer for a job, to check workers against (see `reference.rs`).
    Reference {
        job_id: JobId,
        counts: nqueens_core::JobCounts,
    },
    Shutdown,
}

/// Who makes a call: the worker id it names, the secret that must come with it, and the
/// credential (token) the call was made under.
#[derive(Debug, Clone)]
pub struct Caller {
    pub worker_id: WorkerId,
    pub secret: String,
    pub credential: Credential,
}

/// Why a call naming a worker was refused before anything was decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// No worker of that id registered with this coordinator process (register again).
    UnknownWorker,
    /// The id is another worker's: wrong secret, or another credential.
    BadSecret,
}

/// A worker introducing itself, already checked by the service (version, self-test, bounds).
#[derive(Debug, Clone)]
pub struct Registration {
    /// The id this coordinator gave the worker before a reconnect, and the secret given with it.
    pub previous_worker_id: Option<WorkerId>,
    pub previous_secret: String,
    /// The credential the registration came under.
    pub credential: Credential,
    pub name: String,
    pub host: String,
    pub cores: u32,
    pub version: String,
    /// What it solves on, as it says (shown by status; not trusted for anything).
    pub device: String,
}

/// One job's result as a worker reported it.
#[derive(Debug, Clone)]
pub struct ReportedResult {
    pub worker_id: WorkerId,
    /// The secret and credential it came with (see [`Caller`]).
    pub secret: String,
    pub credential: Credential,
    pub lease_id: LeaseId,
    pub job_id: JobId,
    pub finding: Finding,
}

pub enum RegisterReply {
    Registered {
        worker_id: WorkerId,
        /// The worker's secret: every later call naming `worker_id` must carry it.
        secret: String,
        run_complete: bool,
    },
    /// The previous worker id was never given out by this run.
    UnknownWorker,
    /// Too many registrations under this credential lately.
    TooMany,
}

pub enum LeaseReply {
    /// Jobs (ids into the run's job list) under a new lease; none when nothing can be given now.
    Granted { lease_id: LeaseId, job_ids: Vec<JobId>, run_complete: bool },
    /// The worker is not registered with this coordinator.
    UnknownWorker,
    /// The worker lost a verification and gets no more work.
    UntrustedWorker,
    /// The call named a worker id without its secret.
    BadSecret,
}

pub struct HeartbeatReply {
    /// Leases that no longer cover any job of the worker.
    pub lost_lease_ids: Vec<LeaseId>,
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
    /// What it solves on, as it registered.
    device: String,
    last_seen: Instant,
    /// When it registered with this process, and when it last delivered a counted result.
    registered: Instant,
    last_delivery: Option<Instant>,
    /// Results counted in the last lease period, per second (oldest first): its throughput.
    recent: VecDeque<(Instant, u32)>,
    results: u64,
    conflicts: u64,
}

impl WorkerState {
    /// Results it delivered within `window` before `now`.
    fn delivered_within(&mut self, now: Instant, window: Duration) -> usize {
        while self.recent.front().is_some_and(|(t, _)| now.duration_since(*t) > window) {
            self.recent.pop_front();
        }
        self.recent.iter().map(|(_, k)| *k as usize).sum()
    }

    fn delivered(&mut self, now: Instant) {
        self.last_delivery = Some(now);
        match self.recent.back_mut() {
            Some((t, k)) if now.duration_since(*t) < Duration::from_secs(1) => *k += 1,
            _ => self.recent.push_back((now, 1)),
        }
    }
}

pub struct EngineConfig {
    pub result_file: PathBuf,
    pub heartbeat: Duration,
    /// Mix known-answer jobs into leases.
    pub spot_checks: bool,
    /// The run's jobs, for the referee: the coordinator's own answers to jobs in dispute or doubt
    /// (none: disputes wait for workers).
    pub jobs: Option<Arc<Vec<nqueens_core::Job>>>,
    /// The fraction of counted jobs secretly given to a worker of another credential again.
    pub recheck_fraction: f64,
}

pub struct Engine {
    store: Store,
    life: Lifecycle,
    workers: HashMap<WorkerId, WorkerState>,
    /// Every worker row of the run (for taking an id up again after a reconnect or restart).
    known_workers: HashMap<u64, WorkerRow>,
    /// Groups of the named credentials: their workers never confirm each other.
    credential_groups: HashMap<String, u64>,
    registrations: RegistrationLimiter,
    lease_duration: Duration,
    /// Jobs for the referee thread, if there is one.
    referee: Option<mpsc::Sender<JobId>>,
    /// The final tally broke the symmetry identities and no repair was left: the job ids in
    /// doubt, reported once; the coordinator keeps serving status.
    refused: Option<Vec<JobId>>,
    /// Jobs un-counted and solved again (by the referee or workers) after a broken final tally.
    repairs: u32,
    last_refusal_log: Option<Instant>,
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
        let known_workers: HashMap<u64, WorkerRow> =
            store.workers()?.into_iter().map(|w| (w.id, w)).collect();
        let mut credential_groups = HashMap::new();
        let groups: HashMap<WorkerId, u64> = known_workers
            .values()
            .filter_map(|w| {
                let credential = Credential::from_stored(&w.credential);
                credential.group(&mut credential_groups).map(|g| (WorkerId::new(w.id), g))
            })
            .collect();
        let mut life = Lifecycle::restore(
            loaded.jobs,
            loaded.leases,
            groups,
            loaded.untrusted,
            lease_duration,
            Instant::now(),
        );
        life.set_probation(PROBATION_RESULTS);
        life.set_recheck_fraction(config.recheck_fraction);
        let (complete_tx, complete_rx) = watch::channel(None);
        let done_at_start = life.count(JobState::Done);
        let (tx, rx) = mpsc::channel();
        let referee = config
            .jobs
            .clone()
            .map(|jobs| crate::referee::spawn(jobs, EngineHandle { tx: tx.clone() }));
        let engine = Engine {
            store,
            life,
            workers: HashMap::new(),
            known_workers,
            credential_groups,
            registrations: RegistrationLimiter::default(),
            lease_duration,
            referee,
            refused: None,
            repairs: 0,
            last_refusal_log: None,
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
            self.hand_to_referee();
            self.publish_gauges();
            self.check_complete()?;
            if shutdown {
                // The `.db` alone is then the whole state: a copy of it needs no `-wal` beside.
                self.store.checkpoint()?;
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
                let answer = self.register(worker, now, worker_rows);
                replies.push(Box::new(move |e: &Engine| {
                    let answer = match answer {
                        Some((worker_id, secret)) => RegisterReply::Registered {
                            worker_id,
                            secret,
                            run_complete: e.life.is_complete(),
                        },
                        None => RegisterReply::TooMany,
                    };
                    let _ = reply.send(answer);
                }));
            }
            Command::Lease { caller, free_slots, reply } => {
                if let Err(refusal) = self.authenticate(&caller, now) {
                    let _ = reply.send(match refusal {
                        Refusal::UnknownWorker => LeaseReply::UnknownWorker,
                        Refusal::BadSecret => LeaseReply::BadSecret,
                    });
                    return;
                }
                let worker_id = caller.worker_id;
                if self.life.is_untrusted(worker_id) {
                    let _ = reply.send(LeaseReply::UntrustedWorker);
                    return;
                }
                let others = self.other_active_workers(worker_id, now);
                let size = self.lease_size(worker_id, free_slots, now);
                let granted = self.life.lease_checked(
                    worker_id,
                    size,
                    &others,
                    self.config.spot_checks,
                    now,
                    changes,
                );
                let (lease_id, job_ids) = granted.unwrap_or_default();
                if lease_id != LeaseId::new(0) {
                    tracing::debug!(%worker_id, %lease_id, jobs = job_ids.len(), "lease granted");
                }
                replies.push(Box::new(move |e: &Engine| {
                    let run_complete = e.life.is_complete();
                    let _ = reply.send(LeaseReply::Granted { lease_id, job_ids, run_complete });
                }));
            }
            Command::Heartbeat { caller, lease_ids, reply } => {
                if let Err(refusal) = self.authenticate(&caller, now) {
                    let _ = reply.send(Err(refusal));
                    return;
                }
                let lost = self.life.heartbeat(caller.worker_id, &lease_ids, now, changes);
                replies.push(Box::new(move |e: &Engine| {
                    let run_complete = e.life.is_complete();
                    let _ = reply.send(Ok(HeartbeatReply { lost_lease_ids: lost, run_complete }));
                }));
            }
            Command::Release { caller, lease_id, job_ids, reply } => {
                if let Err(refusal) = self.authenticate(&caller, now) {
                    let _ = reply.send(Err(refusal));
                    return;
                }
                let worker_id = caller.worker_id;
                let released = self.life.release(worker_id, lease_id, &job_ids, changes);
                tracing::info!(%worker_id, %lease_id, released, "jobs released");
                replies.push(Box::new(move |_: &Engine| {
                    let _ = reply.send(Ok(released));
                }));
            }
            Command::Result { result, reply } => {
                let caller = Caller {
                    worker_id: result.worker_id,
                    secret: result.secret.clone(),
                    credential: result.credential.clone(),
                };
                let outcome = match self.authenticate(&caller, now) {
                    Err(Refusal::UnknownWorker) => ResultOutcome::UnknownWorker,
                    Err(Refusal::BadSecret) => ResultOutcome::BadSecret,
                    Ok(()) => self.decide_result(&result, now, changes),
                };
                self.count_outcome(&result, outcome, now);
                replies.push(Box::new(move |e: &Engine| {
                    let _ = reply.send(ResultReply { outcome, run_complete: e.life.is_complete() });
                }));
            }
            Command::Reference { job_id, counts } => {
                let before = changes.len();
                self.life.add_reference(job_id, counts, changes);
                tracing::debug!(job = %job_id, "reference answer computed");
                self.log_untrusted(&changes[before..]);
            }
            Command::Status { reply } => {
                replies.push(Box::new(move |e: &Engine| {
                    let _ = reply.send(e.status());
                }));
            }
        }
    }

    /// A registration: the previous id where the caller proves it is that worker (its secret,
    /// under the same credential), else a new id. None when the credential has registered too
    /// often lately.
    fn register(
        &mut self,
        worker: Registration,
        now: Instant,
        worker_rows: &mut Vec<WorkerRow>,
    ) -> Option<(WorkerId, String)> {
        if !self.registrations.allow(&worker.credential.name, now) {
            tracing::warn!(credential = %worker.credential.name, name = %worker.name, "registration refused: too many under this credential in the last minute");
            return None;
        }
        let proven = worker.previous_worker_id.and_then(|id| {
            let row = self.known_workers.get(&id.get())?;
            let ok = row.credential == worker.credential.name
                && same_digest(&row.secret_digest, &digest(&worker.previous_secret));
            if !ok {
                tracing::warn!(claimed = %id, credential = %worker.credential.name, name = %worker.name, "re-registration as another worker without its secret: registered as a new worker");
            }
            ok.then_some(id)
        });
        let (worker_id, secret) = match proven {
            Some(id) => (id, worker.previous_secret),
            None => {
                self.next_worker_id += 1;
                (WorkerId::new(self.next_worker_id - 1), new_secret())
            }
        };
        let row = WorkerRow {
            id: worker_id.get(),
            name: worker.name,
            host: worker.host,
            cores: worker.cores,
            version: worker.version,
            credential: worker.credential.name.clone(),
            secret_digest: digest(&secret).to_vec(),
        };
        if let Some(group) = worker.credential.group(&mut self.credential_groups) {
            self.life.set_group(worker_id, group);
        }
        tracing::info!(%worker_id, name = %row.name, host = %row.host, cores = row.cores, credential = %row.credential, reconnect = proven.is_some(), "worker registered");
        worker_rows.push(row.clone());
        self.known_workers.insert(worker_id.get(), row.clone());
        let device = worker.device.clone();
        let entry = self.workers.entry(worker_id).or_insert(WorkerState {
            row: row.clone(),
            device: device.clone(),
            last_seen: now,
            registered: now,
            last_delivery: None,
            recent: VecDeque::new(),
            results: 0,
            conflicts: 0,
        });
        entry.row = row;
        entry.device = device;
        entry.last_seen = now;
        Some((worker_id, secret))
    }

    /// Checks that `caller` is the worker it names: registered with this process, under the
    /// same credential, with its secret. Marks it seen if so; refusals are logged (at most
    /// every [`REFUSAL_LOG_EVERY`]).
    fn authenticate(&mut self, caller: &Caller, now: Instant) -> Result<(), Refusal> {
        let Some(w) = self.workers.get_mut(&caller.worker_id) else {
            return Err(Refusal::UnknownWorker);
        };
        if w.row.credential == caller.credential.name
            && same_digest(&w.row.secret_digest, &digest(&caller.secret))
        {
            w.last_seen = now;
            return Ok(());
        }
        self.metrics.auth_failures.fetch_add(1, Ordering::Relaxed);
        if self.last_refusal_log.is_none_or(|t| now.duration_since(t) >= REFUSAL_LOG_EVERY) {
            self.last_refusal_log = Some(now);
            tracing::warn!(worker_id = %caller.worker_id, credential = %caller.credential.name, "call refused: it names another worker (wrong secret or credential)");
        }
        Err(Refusal::BadSecret)
    }

    /// How many jobs a lease gives `worker_id`. A newcomer on probation: one per thread, at
    /// most [`PROBATION_LEASE`]. Afterwards the batch grows with what it has shown it can do,
    /// never past what it finished in the last lease period (or one job per thread): a slow
    /// or lying worker cannot hoard, and a fast one (a GPU) does not starve.
    fn lease_size(&mut self, worker_id: WorkerId, free_slots: u32, now: Instant) -> usize {
        let lease_duration = self.lease_duration;
        let on_probation = self.life.on_probation(worker_id);
        let Some(w) = self.workers.get_mut(&worker_id) else { return 0 };
        // A worker gets no more slots than the threads it registered with, whatever it asks
        // for now: one client cannot take the whole run in one call.
        let claimed = free_slots.min(w.row.cores).max(1);
        let base = self.life.batch_size(claimed, self.mean_job_seconds);
        let earned = w.delivered_within(now, lease_duration);
        sized_lease(claimed, base, on_probation, earned)
    }

    /// One authenticated result, decided by the life cycle.
    fn decide_result(
        &mut self,
        result: &ReportedResult,
        now: Instant,
        changes: &mut Vec<Change>,
    ) -> ResultOutcome {
        if let Finding::SolverError(error) = &result.finding {
            tracing::warn!(job = %result.job_id, worker = %result.worker_id, error = %error.escape_debug(), "worker reported a solver error");
        }
        let before = changes.len();
        let others = self.other_active_workers(result.worker_id, now);
        let outcome = self.life.result(
            result.worker_id,
            result.lease_id,
            result.job_id,
            result.finding.clone(),
            &others,
            changes,
        );
        self.log_untrusted(&changes[before..]);
        outcome
    }

    /// Sends the jobs the life cycle wants the coordinator's own answer for to the referee.
    fn hand_to_referee(&mut self) {
        let jobs = self.life.take_referee_jobs();
        let Some(referee) = &self.referee else { return };
        for job_id in jobs {
            tracing::info!(
                job = %job_id,
                "job in dispute or doubt: the coordinator solves it itself"
            );
            let _ = referee.send(job_id);
        }
    }

    /// Says loudly which workers the decisions in `changes` stopped trusting.
    fn log_untrusted(&self, changes: &[Change]) {
        for change in changes {
            if let Change::Untrust { worker_id, job_id, detail, requeued } = change {
                let name = self.workers.get(worker_id).map_or("", |w| w.row.name.as_str());
                tracing::warn!(worker = %worker_id, name, job = %job_id, requeued, %detail, "worker gave a wrong answer (a lost verification or spot check); it is untrusted and its counted jobs will be re-run");
            }
        }
    }

    fn count_outcome(&mut self, msg: &ReportedResult, outcome: ResultOutcome, now: Instant) {
        let m = &self.metrics;
        match outcome {
            ResultOutcome::Accepted | ResultOutcome::Confirmed => {
                self.last_counted = Some(now);
                m.results_accepted.fetch_add(1, Ordering::Relaxed);
                let trusted = !self.life.on_probation(msg.worker_id);
                if let Finding::Solved { counts, seconds } = msg.finding {
                    m.nodes.fetch_add(counts.nodes, Ordering::Relaxed);
                    // Only workers past probation teach the batch sizing, with clamped times.
                    if seconds > 0.0 && trusted {
                        let seconds = seconds.min(nqueens_scheduler::MAX_REPORTED_SECONDS);
                        let mean = self.mean_job_seconds.get_or_insert(seconds);
                        *mean = *mean * 0.95 + seconds * 0.05;
                    }
                }
                if let Some(w) = self.workers.get_mut(&msg.worker_id) {
                    w.results += 1;
                    w.delivered(now);
                }
            }
            ResultOutcome::Duplicate => {
                m.results_duplicate.fetch_add(1, Ordering::Relaxed);
            }
            ResultOutcome::Conflict => {
                m.conflicts.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(
                    job = %msg.job_id,
                    worker = %msg.worker_id,
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
            | ResultOutcome::UntrustedWorker
            | ResultOutcome::UnknownWorker
            | ResultOutcome::BadSecret
            | ResultOutcome::Implausible => {
                m.results_rejected.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(
                    job = %msg.job_id,
                    lease = %msg.lease_id,
                    worker = %msg.worker_id,
                    ?outcome,
                    "result rejected"
                );
            }
        }
    }

    /// Whether a worker last seen at `last_seen` still counts as live.
    fn live(&self, last_seen: Instant, now: Instant) -> bool {
        now.duration_since(last_seen) <= self.config.heartbeat * 3 + Duration::from_secs(2)
    }

    fn active_workers(&self, now: Instant) -> usize {
        self.workers.values().filter(|w| self.live(w.last_seen, now)).count()
    }

    /// The live, trusted workers other than `worker_id` that deliver (or only just came): who
    /// else could give a job an opinion. One that heartbeats but has not delivered a result for
    /// [`INACTIVE_AFTER_LEASES`] lease durations is not waited for.
    fn other_active_workers(&self, worker_id: WorkerId, now: Instant) -> Vec<WorkerId> {
        let patience = self.lease_duration * INACTIVE_AFTER_LEASES;
        self.workers
            .iter()
            .filter(|(&id, w)| {
                let delivering =
                    now.duration_since(w.last_delivery.unwrap_or(w.registered)) <= patience;
                id != worker_id
                    && self.live(w.last_seen, now)
                    && delivering
                    && !self.life.is_untrusted(id)
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
        if self.result_written || self.refused.is_some() || !self.life.is_complete() {
            return Ok(());
        }
        let tally = self.store.tally()?;
        let totals = match self.store.final_totals(&tally) {
            Ok(Some(totals)) => totals,
            Ok(None) => {
                tracing::error!(
                    "all jobs are done in memory but the committed rows are incomplete"
                );
                return Ok(());
            }
            Err(StoreError::Core(nqueens_core::CoreError::Inconsistent { reason })) => {
                return self.repair_broken_tally(&reason);
            }
            Err(e) => return Err(e),
        };
        // The `.db` alone is then the whole state (a copy of it needs no `-wal` beside it).
        self.store.checkpoint()?;
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

    /// The final tally breaks the symmetry identities: some counted answer is wrong. The jobs
    /// that can explain it (weight 2 and 4, first those counted on one credential's word, then
    /// all of them) are un-counted and solved again, by the coordinator itself where it can; whoever
    /// answered them wrongly is untrusted and everything it counted is solved again. Only when no
    /// such job is left to doubt does the run refuse, once, naming the jobs, and it keeps serving
    /// status: a restart does the same and never loops.
    fn repair_broken_tally(&mut self, reason: &str) -> Result<(), StoreError> {
        self.repairs += 1;
        let doubted = match self.repairs {
            1 => self.life.doubt_unconfirmed_symmetric(),
            2 => self.life.doubt_all_symmetric(),
            _ => Vec::new(),
        };
        if doubted.is_empty() {
            let jobs = self.life.symmetric_jobs();
            tracing::error!(%reason, jobs = ?jobs, "the final tally breaks the symmetry identities and every job that could explain it was solved again: refusing to write a result. The coordinator keeps serving status; inspect the jobs with `verify --state`");
            self.refused = Some(jobs);
            return Ok(());
        }
        let mut changes = Vec::new();
        for &job_id in &doubted {
            self.life.doubt(job_id, &mut changes);
        }
        tracing::warn!(%reason, jobs = doubted.len(), round = self.repairs, ids = ?&doubted[..doubted.len().min(20)], "the final tally breaks the symmetry identities: the jobs that can explain it are solved again");
        self.store.apply(&changes, &[])?;
        self.hand_to_referee();
        self.publish_gauges();
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
                jobs_leased: self.life.leased_by(WorkerId::new(w.row.id)),
                untrusted: self.life.is_untrusted(WorkerId::new(w.row.id)),
                credential: w.row.credential.clone(),
                device: w.device.clone(),
                counted_per_second: w
                    .recent
                    .iter()
                    .filter(|(t, _)| now.duration_since(*t) <= self.lease_duration)
                    .map(|(_, k)| *k as f64)
                    .sum::<f64>()
                    / self.lease_duration.as_secs_f64(),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leases_grow_with_throughput_after_probation_and_never_past_it() {
        // A GPU worker claims one thread; on probation it gets one job per lease.
        assert_eq!(sized_lease(1, 2, true, 50_000), 1);
        // After probation its leases follow what it finished in the last lease period.
        assert_eq!(sized_lease(1, 2, false, 0), 1);
        assert_eq!(sized_lease(1, 2, false, 40), 10);
        assert_eq!(sized_lease(1, 2, false, 60_000), 15_000);
        assert_eq!(sized_lease(1, 2, false, 1 << 30), MAX_LEASE);
        for earned in [0, 1, 3, 100, 10_000, 1 << 20] {
            for claimed in [1, 8, 64, 1024] {
                let size = sized_lease(claimed, 4 * claimed as usize, false, earned);
                assert!(size <= (claimed as usize).max(earned), "{claimed} {earned} -> {size}");
                assert!(size <= MAX_LEASE);
                assert!(sized_lease(claimed, 4 * claimed as usize, true, earned) <= 64);
            }
        }
    }
}
