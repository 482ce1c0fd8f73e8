//! The engine: the one thread that owns the job life cycle and the store's write connection.
//!
//! Every request that changes state becomes a [`Command`] on one channel. The engine takes all
//! commands waiting (up to a cap), decides each against the [`Scheduler`], commits every resulting
//! change in ONE transaction, publishes the run's snapshot, and only then answers: every reply
//! (an [`Outgoing`]) leaves after its batch commits. Group commit is what makes thousands of
//! durable results per second possible with synchronous=FULL; a single writer makes decisions
//! race-free.
//!
//! One write is not part of the batch's transaction: a token command (`token add|revoke` on a
//! live run, `admin.rs`) writes its credential row at once, in a statement of its own, because
//! its refusal (a name in use) must refuse that command alone, never the batch beside it. Its
//! reply still waits for the batch's commit like every other.
//!
//! After each batch the run's end is asked what it changed (`engine/ending.rs`: the final tally,
//! the result file, the repair of a broken tally).

#[cfg(test)]
mod adversary;
mod command;
mod ending;
mod publish;
mod registry;
#[cfg(test)]
mod tests;

pub use command::*;
use ending::{Ending, Step};
use publish::Publisher;
use registry::{Registry, RowChanges};

use crate::metrics::Metrics;
use crate::snapshot::RunSnapshot;
use nqueens_scheduler::state::JobState;
use nqueens_scheduler::{
    Change, Finding, JobId, LeaseId, Scheduler, SchedulerConfig, Verdict, WorkerId,
};
use nqueens_store::{Store, StoreError, WorkerRow};
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::{oneshot, watch};

/// Most commands (a result counted as one) decided and committed in one transaction.
const MAX_BATCH: usize = 8192;

/// How long a batch of nothing but results waits for more before it commits: results arrive one
/// by one from every worker and each commit is an fsync, while a result's acknowledgement is on
/// no one's critical path (the worker keeps solving). A few milliseconds of patience turn a
/// trickle of small commits into a few larger ones, and free the cores they share.
const RESULTS_WINDOW: Duration = Duration::from_millis(50);

/// Why the engine thread ended early.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// A commit to the state file failed: nothing of that batch was acknowledged.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The run is complete in the state file, but its result file could not be written by the
    /// time the coordinator stopped.
    #[error("the run is complete but its result file {path} cannot be written")]
    ResultFile {
        /// The result file.
        path: PathBuf,
        /// The last try's error.
        #[source]
        source: std::io::Error,
    },
}

/// The batch that starts with `first`: every command already waiting, and while it holds
/// nothing but results, those that arrive within `patience`, up to [`MAX_BATCH`]. Any other
/// command (a lease, a registration: someone waits on its answer) ends the wait.
fn gather(
    first: Option<Command>,
    rx: &mpsc::Receiver<Command>,
    patience: Duration,
) -> Vec<Command> {
    let is_result = |c: &Command| matches!(c, Command::Results { .. });
    let weight = |c: &Command| match c {
        Command::Results { answers } => answers.len(),
        _ => 1,
    };
    let mut batch: Vec<Command> = first.into_iter().collect();
    let mut only_results = !batch.is_empty() && batch.iter().all(is_result);
    let mut size: usize = batch.iter().map(weight).sum();
    let deadline = Instant::now() + patience;
    while size < MAX_BATCH {
        let next = match rx.try_recv() {
            Ok(cmd) => cmd,
            Err(_) => {
                let left = deadline.saturating_duration_since(Instant::now());
                if !only_results || left.is_zero() {
                    break;
                }
                match rx.recv_timeout(left) {
                    Ok(cmd) => cmd,
                    Err(_) => break,
                }
            }
        };
        only_results &= is_result(&next);
        size += weight(&next);
        batch.push(next);
    }
    batch
}

/// A reply decided in a batch, held until the batch is committed.
struct Deferred<T> {
    tx: ReplyTx<T>,
    outcome: Result<T, Refusal>,
}

/// Every reply a batch holds back until its commit, whatever command it answers.
enum Outgoing {
    Register(Deferred<Registered>),
    Lease(Deferred<Granted>),
    Heartbeat(Deferred<Vec<LeaseId>>),
    Release(Deferred<u32>),
    Result(Deferred<Verdict>),
    /// A token command's: its row is written already (see the module's comment).
    Tokens(TokensTx, Result<TokensNow, StoreError>),
}

impl Outgoing {
    /// Sends the reply (a caller that went away is no matter).
    fn send(self, run_complete: bool) {
        fn send<T>(d: Deferred<T>, run_complete: bool) {
            let _ = d.tx.send(Reply { outcome: d.outcome, run_complete });
        }
        match self {
            Outgoing::Register(d) => send(d, run_complete),
            Outgoing::Lease(d) => send(d, run_complete),
            Outgoing::Heartbeat(d) => send(d, run_complete),
            Outgoing::Release(d) => send(d, run_complete),
            Outgoing::Result(d) => send(d, run_complete),
            Outgoing::Tokens(tx, now) => {
                let _ = tx.send(now);
            }
        }
    }
}

/// The seed of the scheduler's random choices (which lease carries a spot check, which known job
/// it is): from the operating system, so that no worker can predict them. Without OS randomness
/// the clock still makes them unpredictable enough.
fn seed_from_os() -> u64 {
    let mut seed = [0u8; 8];
    if getrandom::getrandom(&mut seed).is_err() {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        seed = nanos.to_le_bytes();
    }
    u64::from_le_bytes(seed)
}

/// Why [`Engine::start`] could not start the engine.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// Reading the run from the state file failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// A thread the engine needs (its own, the referee's) could not be started: the process's
    /// or the system's thread limit. Like every thread the coordinator starts, an error, never
    /// a run that goes on without it.
    #[error("cannot start the coordinator's {name} thread")]
    Thread {
        /// The thread's name.
        name: &'static str,
        /// What the system said.
        #[source]
        source: std::io::Error,
    },
}

/// What [`Engine::start`] gives back.
pub struct Started {
    /// The command handle.
    pub handle: EngineHandle,
    /// The run as the engine last published it; its `progress.result` is the one signal of the
    /// run's end (set once the result file is written).
    pub snapshots: watch::Receiver<Arc<RunSnapshot>>,
    /// Fires when the engine thread has ended (for whatever reason).
    pub ended: oneshot::Receiver<()>,
    /// The engine thread itself.
    pub thread: std::thread::JoinHandle<Result<(), EngineError>>,
}

/// An engine built by `Engine::wire`, not yet running, and the ends of its channels.
struct Wired {
    engine: Engine,
    rx: mpsc::Receiver<Command>,
    handle: EngineHandle,
    snapshots: watch::Receiver<Arc<RunSnapshot>>,
}

/// How the engine runs a run (set by `serve`).
pub struct EngineConfig {
    pub result_file: PathBuf,
    /// How long a lease lasts without a heartbeat: the one source of it (the scheduler's policy
    /// and every view take it from here).
    pub lease_duration: Duration,
    pub heartbeat: Duration,
    /// Mix known-answer jobs into leases.
    pub spot_checks: bool,
    /// The run's jobs: for the referee (the coordinator's own answers to jobs in dispute or
    /// doubt) and for the export digest of the result file (none: neither).
    pub jobs: Option<Arc<Vec<nqueens_core::Job>>>,
    /// The coordinator solves jobs itself where its referee can (N up to `REFEREE_MAX_N`);
    /// without it disputes wait for workers.
    pub coordinator_checks: bool,
    /// The fraction of counted jobs secretly given to a worker of another credential again.
    pub recheck_fraction: f64,
    /// Identities one credential may hold that have not delivered an answer yet (see
    /// `engine/registry.rs`).
    pub max_unproven: usize,
}

/// The engine thread's state: each part owns its fields.
pub struct Engine {
    store: Store,
    scheduler: Scheduler,
    /// The workers: registration, secrets, liveness (`engine/registry.rs`).
    registry: Registry,
    /// Jobs for the referee thread, if there is one.
    referee: Option<mpsc::Sender<JobId>>,
    metrics: Arc<Metrics>,
    config: EngineConfig,
    /// What the engine publishes for every reader (`engine/publish.rs`).
    publisher: Publisher,
    /// The run's end: the result file, or the repair of a broken tally (`engine/ending.rs`).
    ending: Ending,
}

impl Engine {
    /// Reloads the run from `store` and starts the engine thread (and the referee's).
    pub fn start(
        store: Store,
        metrics: Arc<Metrics>,
        config: EngineConfig,
    ) -> Result<Started, StartError> {
        let Wired { mut engine, rx, handle, snapshots } = Engine::wire(store, metrics, config)?;
        tracing::info!(
            jobs = engine.scheduler.total_jobs(),
            done = engine.scheduler.count(JobState::Done),
            leased = engine.scheduler.count(JobState::Leased),
            "run loaded; leases found in the store get a fresh grace period"
        );
        engine.publish();
        let (ended_tx, ended_rx) = oneshot::channel();
        let thread = std::thread::Builder::new()
            .name("nq-engine".into())
            .spawn(move || {
                let ended = engine.run(rx);
                let _ = ended_tx.send(());
                ended
            })
            .map_err(|source| StartError::Thread { name: "nq-engine", source })?;
        Ok(Started { handle, snapshots, ended: ended_rx, thread })
    }

    /// The engine over the run in `store` (its scheduler restored, its referee started), not
    /// yet running.
    fn wire(
        mut store: Store,
        metrics: Arc<Metrics>,
        config: EngineConfig,
    ) -> Result<Wired, StartError> {
        let loaded = store.load()?;
        let known_workers: HashMap<u64, WorkerRow> =
            store.workers()?.into_iter().map(|w| (w.row.id, w.row)).collect();
        let registry = Registry::new(
            known_workers,
            loaded.next_worker_id,
            config.heartbeat,
            config.max_unproven,
        );
        // The coordinator checks answers itself (newcomers' answers, re-checks, jobs trusted
        // workers failed) where its referee can solve the run's jobs.
        let coordinator_checks = config.coordinator_checks
            && config
                .jobs
                .as_ref()
                .and_then(|jobs| jobs.first())
                .is_some_and(|job| job.n <= crate::referee::REFEREE_MAX_N);
        let policy = SchedulerConfig {
            lease_duration: config.lease_duration,
            seed: seed_from_os(),
            recheck_fraction: config.recheck_fraction.clamp(0.0, 1.0),
            coordinator_checks,
            replication: store.meta().replication,
            ..SchedulerConfig::default()
        };
        let scheduler = Scheduler::restore(
            policy,
            loaded.jobs,
            loaded.leases,
            registry.credential_numbers(store.credential_numbers()),
            loaded.untrusted,
            Instant::now(),
        );
        let (snapshots, snapshot_rx) = watch::channel(Arc::default());
        let done_at_start = scheduler.count(JobState::Done);
        let (tx, rx) = mpsc::channel();
        let referee = config.jobs.clone().filter(|_| coordinator_checks).map(|jobs| {
            let engine = EngineHandle { tx: tx.clone() };
            crate::referee::spawn(jobs, move |ruling| {
                engine.send(match ruling.counts {
                    Some(counts) => Command::Reference { job_id: ruling.job_id, counts },
                    None => Command::RefereeFailed { job_id: ruling.job_id },
                })
            })
        });
        let referee = referee
            .transpose()
            .map_err(|source| StartError::Thread { name: "nq-referee", source })?;
        let ending = Ending::new(config.result_file.clone(), config.jobs.clone());
        let engine = Engine {
            store,
            scheduler,
            registry,
            referee,
            metrics,
            config,
            publisher: Publisher::new(snapshots, done_at_start),
            ending,
        };
        Ok(Wired { engine, rx, handle: EngineHandle { tx }, snapshots: snapshot_rx })
    }

    fn run(mut self, rx: mpsc::Receiver<Command>) -> Result<(), EngineError> {
        self.end_if_complete()?;
        let tick = Duration::from_millis(250);
        let mut last_expiry = Instant::now();
        loop {
            let first = match rx.recv_timeout(tick) {
                Ok(cmd) => Some(cmd),
                Err(mpsc::RecvTimeoutError::Timeout) => None,
                Err(mpsc::RecvTimeoutError::Disconnected) => return Ok(()),
            };
            // Once no job is pending, each result may be one of the run's last: no waiting.
            let patience = if self.scheduler.count(JobState::Pending) > 0 {
                RESULTS_WINDOW
            } else {
                Duration::ZERO
            };
            let batch = gather(first, &rx, patience);
            let busy = !batch.is_empty();
            let shutdown = batch.iter().any(|c| matches!(c, Command::Shutdown));
            let mut rows = RowChanges::default();
            let mut replies: Vec<Outgoing> = Vec::new();
            for cmd in batch {
                self.decide(cmd, &mut rows, &mut replies);
            }
            if last_expiry.elapsed() >= tick {
                last_expiry = Instant::now();
                let expired = self.scheduler.expire(Instant::now());
                if expired > 0 {
                    tracing::warn!(
                        leases = expired,
                        "leases expired; their jobs are pending again"
                    );
                }
            }
            let changes = self.scheduler.take_changes();
            self.log_untrusted(&changes);
            if !changes.is_empty() || !rows.is_empty() {
                let _span = tracing::debug_span!("commit", changes = changes.len()).entered();
                let committed =
                    self.store.apply_with_forgotten(&changes, &rows.written, &rows.forgotten);
                if let Err(e) = committed {
                    // Nothing of this batch is acknowledged; the coordinator stops rather than
                    // answer from a state the disk does not have.
                    tracing::error!(error = %e, "commit failed; stopping the engine");
                    return Err(e.into());
                }
                self.metrics.commits.fetch_add(1, Ordering::Relaxed);
            }
            // Published before the answers go out: whoever hears back sees the batch in status.
            self.publish_if(busy || !changes.is_empty() || !rows.is_empty());
            // Asked before the run is called complete: a check still to be handed to the referee
            // keeps it open.
            self.hand_to_referee();
            let run_complete = self.scheduler.is_complete();
            for reply in replies {
                reply.send(run_complete);
            }
            self.end_if_complete()?;
            if shutdown {
                self.ending.before_exit()?;
                // The `.db` alone is then the whole state: a copy of it needs no `-wal` beside.
                self.store.checkpoint()?;
                tracing::info!("engine stopped after committing everything received");
                return Ok(());
            }
        }
    }

    /// Decides one command. A worker's call is authenticated first (all but `Register`, which
    /// has no secret yet and goes to [`Registry::register`]), then handled: a lease, a release
    /// and each result by its `on_*` handler, a heartbeat by the scheduler. A token command
    /// writes its credential row at once. The coordinator's own answers (`Reference`,
    /// `RefereeFailed`) go to the scheduler and have no reply. Every reply, outcome or refusal,
    /// is queued in `replies`, sent after the batch commits.
    fn decide(&mut self, cmd: Command, rows: &mut RowChanges, replies: &mut Vec<Outgoing>) {
        let now = Instant::now();
        match cmd {
            Command::Shutdown => {}
            Command::AddToken { name, digest, reply } => {
                let changed = self.store.insert_credential(&name, &digest).map(|()| true);
                replies.push(Outgoing::Tokens(reply, self.tokens_now(changed)));
            }
            Command::RevokeToken { name, reply } => {
                let changed = self.store.revoke(&name);
                replies.push(Outgoing::Tokens(reply, self.tokens_now(changed)));
            }
            Command::Register { worker, reply } => {
                let outcome = self
                    .registry
                    .register(
                        worker,
                        &mut self.scheduler,
                        self.store.credential_numbers(),
                        now,
                        rows,
                    )
                    .map(|(worker_id, secret)| Registered { worker_id, secret });
                replies.push(Outgoing::Register(Deferred { tx: reply, outcome }));
            }
            Command::Lease { caller, free_slots, reply } => {
                let outcome = self
                    .authenticate(&caller, now)
                    .and_then(|()| self.on_lease(caller.worker_id, free_slots, now));
                replies.push(Outgoing::Lease(Deferred { tx: reply, outcome }));
            }
            Command::Heartbeat { caller, lease_ids, reply } => {
                let outcome = self
                    .authenticate(&caller, now)
                    .map(|()| self.scheduler.heartbeat(caller.worker_id, &lease_ids, now));
                replies.push(Outgoing::Heartbeat(Deferred { tx: reply, outcome }));
            }
            Command::Release { caller, lease_id, job_ids, reply } => {
                let outcome = self
                    .authenticate(&caller, now)
                    .map(|()| self.on_release(caller.worker_id, lease_id, &job_ids));
                replies.push(Outgoing::Release(Deferred { tx: reply, outcome }));
            }
            Command::Results { answers } => {
                for (answer, reply) in answers {
                    let outcome = self
                        .authenticate(&answer.caller, now)
                        .map(|()| self.on_result(&answer, now));
                    if let Err(refusal) = outcome {
                        self.metrics.results_rejected.fetch_add(1, Ordering::Relaxed);
                        tracing::warn!(job = %answer.delivery.job_id, worker = %answer.caller.worker_id, ?refusal, "result refused: the caller is not that worker");
                    }
                    replies.push(Outgoing::Result(Deferred { tx: reply, outcome }));
                }
            }
            Command::Reference { job_id, counts } => {
                self.scheduler.add_reference(job_id, counts, now);
                tracing::debug!(job = %job_id, "reference answer computed");
            }
            Command::RefereeFailed { job_id } => {
                tracing::error!(job = %job_id, "the coordinator's own attempt at a job workers reported errors for failed too: the job is failed (`requeue` puts it back)");
                self.scheduler.coordinator_failed(job_id);
            }
        }
    }

    /// After a token command: whether it changed anything, and the credentials then in force.
    fn tokens_now(&self, changed: Result<bool, StoreError>) -> Result<TokensNow, StoreError> {
        Ok(TokensNow {
            changed: changed?,
            active: self.store.active_credentials()?,
            had_credentials: self.store.had_credentials()?,
        })
    }

    /// Checks that `caller` is the worker it names (see [`Registry::authenticate`]), counting
    /// a wrong secret in the metrics.
    fn authenticate(&mut self, caller: &Caller, now: Instant) -> Result<(), Refusal> {
        let checked = self.registry.authenticate(caller, now);
        if checked == Err(Refusal::BadSecret) {
            self.metrics.auth_failures.fetch_add(1, Ordering::Relaxed);
        }
        checked
    }

    /// `Lease`: jobs for a trusted-enough worker, sized by [`Self::lease_size`].
    fn on_lease(
        &mut self,
        worker_id: WorkerId,
        free_slots: u32,
        now: Instant,
    ) -> Result<Granted, Refusal> {
        if self.scheduler.is_untrusted(worker_id) {
            return Err(Refusal::Untrusted);
        }
        let size = self.lease_size(worker_id, free_slots, now);
        if let Some(w) = self.registry.get_mut(worker_id) {
            w.last_lease_size = size;
        }
        let spot_checks = self.config.spot_checks;
        let granted = self.scheduler.lease_checked(worker_id, size, spot_checks, now);
        let Some((lease_id, job_ids)) = granted else { return Ok(Granted::default()) };
        tracing::debug!(%worker_id, %lease_id, jobs = job_ids.len(), "lease granted");
        Ok(Granted { lease_id, job_ids })
    }

    /// `Release`: the worker gives jobs back (all of a lease, or all its leases for lease 0).
    fn on_release(&mut self, worker_id: WorkerId, lease_id: LeaseId, job_ids: &[JobId]) -> u32 {
        let released = self.scheduler.release(worker_id, lease_id, job_ids);
        tracing::info!(%worker_id, %lease_id, released, "jobs released");
        released
    }

    /// `Result`: one job's answer, decided by the scheduler and counted in the metrics.
    fn on_result(&mut self, answer: &JobAnswer, now: Instant) -> Verdict {
        if self.ending.is_final() {
            // The result is summed: nothing may change the rows it was summed from.
            tracing::debug!(job = %answer.delivery.job_id, worker = %answer.caller.worker_id, "result after the run was complete: not decided");
            return Verdict::Duplicate;
        }
        let verdict = self.decide_result(answer, now);
        self.count_outcome(answer, verdict, now);
        verdict
    }

    /// How many jobs a lease gives `worker_id` (see [`Scheduler::lease_size`]): the slots it
    /// asks for, never more than it registered with, within what its credential may hold.
    fn lease_size(&mut self, worker_id: WorkerId, free_slots: u32, now: Instant) -> usize {
        let Some(w) = self.registry.get(worker_id) else { return 0 };
        let slots = free_slots.min(w.row.slots).max(1);
        self.scheduler.lease_size(worker_id, slots, now)
    }

    /// One authenticated answer, decided by the scheduler.
    fn decide_result(&mut self, result: &JobAnswer, now: Instant) -> Verdict {
        let worker_id = result.caller.worker_id;
        let delivery = &result.delivery;
        if let Finding::SolverError(error) = &delivery.finding {
            tracing::warn!(job = %delivery.job_id, worker = %worker_id, error = %error.escape_debug(), "worker reported a solver error");
        }
        self.scheduler.result(worker_id, delivery, now)
    }

    /// Sends the jobs the scheduler wants the coordinator's own answer for to the referee.
    fn hand_to_referee(&mut self) {
        let jobs = self.scheduler.take_referee_jobs();
        let Some(referee) = &self.referee else { return };
        for job_id in jobs {
            tracing::info!(
                job = %job_id,
                "job in dispute or doubt: the coordinator solves it itself"
            );
            let _ = referee.send(job_id);
        }
    }

    /// Says loudly which workers the decisions in `changes` stopped trusting, and which jobs
    /// they held (two answers with equally strong independent evidence: no rule settles them).
    fn log_untrusted(&self, changes: &[Change]) {
        for change in changes {
            if let Change::JobState { job_id, state: JobState::Held, conflicts, .. } = change {
                tracing::error!(job = %job_id, conflicts, "job held: two answers each given by equally many credentials (a solver or hardware fault on honest hosts); nothing settles it but the coordinator's own answer (N <= 22) or more credentials after `requeue`");
            }
            if let Change::Untrust { worker_id, job_id, detail, requeued } = change {
                // Registered with this process, else a row of an earlier one (after a restart),
                // else an identity forgotten since it answered.
                let name = self.registry.name_of(*worker_id).unwrap_or("(forgotten identity)");
                tracing::warn!(worker = %worker_id, name, job = %job_id, requeued, %detail, "worker gave a wrong answer (a lost verification or spot check); it is untrusted and its counted jobs will be re-run");
            }
        }
    }

    fn count_outcome(&mut self, msg: &JobAnswer, outcome: Verdict, now: Instant) {
        let m = &self.metrics;
        let worker_id = msg.caller.worker_id;
        match outcome {
            Verdict::Accepted | Verdict::Confirmed => {
                self.publisher.counted(now);
                m.results_accepted.fetch_add(1, Ordering::Relaxed);
                if let Finding::Solved { counts, .. } = msg.delivery.finding {
                    m.nodes.fetch_add(counts.nodes, Ordering::Relaxed);
                }
                self.registry.proven(worker_id);
                if let Some(w) = self.registry.get_mut(worker_id) {
                    w.results += 1;
                    w.delivered(now, self.config.lease_duration);
                }
            }
            Verdict::Duplicate => {
                m.results_duplicate.fetch_add(1, Ordering::Relaxed);
            }
            Verdict::Conflict => {
                m.conflicts.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(
                    job = %msg.delivery.job_id,
                    worker = %worker_id,
                    "conflicting result recorded; the job will be re-run"
                );
                if let Some(w) = self.registry.get_mut(worker_id) {
                    w.conflicts += 1;
                }
            }
            Verdict::ErrorRecorded => {
                m.job_errors.fetch_add(1, Ordering::Relaxed);
            }
            Verdict::UnknownJob
            | Verdict::UnknownLease
            | Verdict::UntrustedWorker
            | Verdict::Implausible => {
                m.results_rejected.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(
                    job = %msg.delivery.job_id,
                    lease = %msg.delivery.lease_id,
                    worker = %worker_id,
                    ?outcome,
                    "result rejected"
                );
            }
        }
    }

    /// Asks the run's end what the last commit changed (see `engine/ending.rs`), and does what
    /// it answers.
    fn end_if_complete(&mut self) -> Result<(), StoreError> {
        match self.ending.after_batch(&mut self.store, &mut self.scheduler)? {
            Step::Nothing => {}
            Step::Written => self.publish(),
            Step::Repairing => {
                self.hand_to_referee();
                self.publish();
            }
        }
        Ok(())
    }
}
