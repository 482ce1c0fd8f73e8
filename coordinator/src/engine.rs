//! The engine: the one thread that owns the job life cycle and the store's write connection.
//!
//! Every request that changes state becomes a [`Command`] on one channel. The engine takes all
//! commands waiting (up to a cap), decides each against the [`Scheduler`], commits every resulting
//! change in ONE transaction, and only then answers. Group commit is what makes thousands of
//! durable results per second possible with synchronous=FULL; a single writer makes decisions
//! race-free.

#[cfg(test)]
mod adversary;
mod command;
mod publish;
mod registry;
#[cfg(test)]
mod tests;

pub use command::*;
use publish::Publisher;
use registry::{Registry, RowChanges};

use crate::metrics::Metrics;
use crate::snapshot::RunSnapshot;
use nqueens_result::RunResult;
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
/// How soon a result file that could not be written is first tried again; each failure doubles
/// the wait, up to [`RESULT_FILE_RETRY_MAX`] (a flood's lack of descriptors passes in seconds, a
/// full disk or a read-only directory is logged once a minute until someone acts).
const RESULT_FILE_RETRY: Duration = Duration::from_secs(1);
const RESULT_FILE_RETRY_MAX: Duration = Duration::from_secs(60);

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

/// How the run ends: its result once written, or the refusal to write one.
#[derive(Default)]
struct Ending {
    /// The result, once computed from the committed rows: nothing changes the rows after.
    result: Option<RunResult>,
    /// Whether the result file holds `result`. Only a written result is published (it is the
    /// run's end for `--exit-when-done` and every reader), so that no run ends without its
    /// output on disk; a failed write (a full disk, no descriptor left) is tried again.
    written: bool,
    /// When the result file is next tried, after a failed write, and the wait after that one.
    next_write: Option<(Instant, Duration)>,
    /// The final tally broke the symmetry identities and no repair was left: the job ids in
    /// doubt, reported once; the coordinator keeps serving status.
    refused: Option<Vec<JobId>>,
    /// Jobs un-counted and solved again (by the referee or workers) after a broken final tally.
    repairs: u32,
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
    ending: Ending,
}

impl Engine {
    /// Reloads the run from `store` and starts the engine thread.
    pub fn start(
        mut store: Store,
        metrics: Arc<Metrics>,
        config: EngineConfig,
    ) -> Result<Started, StoreError> {
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
        let mut engine = Engine {
            store,
            scheduler,
            registry,
            referee,
            metrics,
            config,
            publisher: Publisher::new(snapshots, done_at_start),
            ending: Ending::default(),
        };
        tracing::info!(
            jobs = engine.scheduler.total_jobs(),
            done = done_at_start,
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
            .expect("spawn engine thread");
        Ok(Started { handle: EngineHandle { tx }, snapshots: snapshot_rx, ended: ended_rx, thread })
    }

    fn run(mut self, rx: mpsc::Receiver<Command>) -> Result<(), EngineError> {
        self.check_complete()?;
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
            let was_written = self.ending.written;
            self.check_complete()?;
            if self.ending.written != was_written {
                self.publish();
            }
            if shutdown {
                if let (Some(_), false) = (&self.ending.result, self.ending.written) {
                    // A run complete in the rows but not on disk must not look finished: the
                    // last try's error ends the coordinator non-zero (a restart writes it).
                    self.write_result_file().map_err(|source| EngineError::ResultFile {
                        path: self.config.result_file.clone(),
                        source,
                    })?;
                }
                // The `.db` alone is then the whole state: a copy of it needs no `-wal` beside.
                self.store.checkpoint()?;
                tracing::info!("engine stopped after committing everything received");
                return Ok(());
            }
        }
    }

    /// Decides one command: a worker's is authenticated first, then handled by its `on_*`
    /// handler, whose outcome (or the refusal) is answered after the commit.
    fn decide(&mut self, cmd: Command, rows: &mut RowChanges, replies: &mut Vec<Outgoing>) {
        let now = Instant::now();
        match cmd {
            Command::Shutdown => {}
            Command::AddToken { name, digest, reply } => {
                let changed = self.store.insert_credential(&name, &digest).map(|()| true);
                let _ = reply.send(self.tokens_now(changed));
            }
            Command::RevokeToken { name, reply } => {
                let changed = self.store.revoke(&name);
                let _ = reply.send(self.tokens_now(changed));
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
                        tracing::warn!(job = %answer.job_id, worker = %answer.caller.worker_id, ?refusal, "result refused: the caller is not that worker");
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
        if self.ending.result.is_some() {
            // The result file is written: nothing may change the rows it was summed from.
            tracing::debug!(job = %answer.job_id, worker = %answer.caller.worker_id, "result after the run was complete: not decided");
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
        if let Finding::SolverError(error) = &result.finding {
            tracing::warn!(job = %result.job_id, worker = %worker_id, error = %error.escape_debug(), "worker reported a solver error");
        }
        self.scheduler.result(
            worker_id,
            result.lease_id,
            result.job_id,
            result.finding.clone(),
            now,
        )
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

    /// Says loudly which workers the decisions in `changes` stopped trusting.
    fn log_untrusted(&self, changes: &[Change]) {
        for change in changes {
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
                self.publisher.rate.counted(now);
                m.results_accepted.fetch_add(1, Ordering::Relaxed);
                if let Finding::Solved { counts, .. } = msg.finding {
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
                    job = %msg.job_id,
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
                    job = %msg.job_id,
                    lease = %msg.lease_id,
                    worker = %worker_id,
                    ?outcome,
                    "result rejected"
                );
            }
        }
    }

    /// Once every job is done: totals from the committed rows, the result file, and the signal
    /// that lets `serve --exit-when-done` return.
    fn check_complete(&mut self) -> Result<(), StoreError> {
        if self.ending.result.is_some() && !self.ending.written {
            if self.ending.next_write.is_none_or(|(at, _)| Instant::now() >= at) {
                self.try_write_result_file();
            }
            return Ok(());
        }
        if self.ending.result.is_some()
            || self.ending.refused.is_some()
            || !self.scheduler.is_complete()
        {
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
        let evidence = self.store.evidence()?;
        tracing::info!(evidence = %evidence.summary(), "what the total rests on");
        let mut record = RunResult::new(
            &totals,
            self.scheduler.total_jobs(),
            self.store.time_to_last_result()?,
            tally.nodes,
        )
        .with_evidence(evidence);
        if let Some(jobs) = &self.config.jobs {
            match nqueens_result::export_digest(&self.store, jobs) {
                Ok(digest) => record = record.with_export_digest(digest),
                Err(nqueens_result::ExportError::Store(e)) => return Err(e),
                // The tally above read the same rows: only a broken list gets here.
                Err(e) => tracing::error!(error = %e, "the export digest cannot be computed"),
            }
        }
        tracing::info!(n = record.n, total = record.total, unique = record.unique, result = %record.json_line(), "run complete");
        self.ending.result = Some(record);
        self.try_write_result_file();
        Ok(())
    }

    /// Writes the result file, or logs why not and sets when to try again (waits that double).
    fn try_write_result_file(&mut self) {
        match self.write_result_file() {
            Ok(()) => {}
            Err(e) => {
                let wait = self.ending.next_write.map_or(RESULT_FILE_RETRY, |(_, w)| w);
                self.ending.next_write =
                    Some((Instant::now() + wait, (wait * 2).min(RESULT_FILE_RETRY_MAX)));
                tracing::error!(error = %e, file = %self.config.result_file.display(), retry_in = ?wait, "cannot write the result file; trying again (the run is not over until it is written)");
            }
        }
    }

    /// Writes the result (a temporary file renamed over the result file, so that a reader never
    /// sees half a line) and marks it written.
    fn write_result_file(&mut self) -> std::io::Result<()> {
        let Some(record) = &self.ending.result else { return Ok(()) };
        if self.ending.written {
            return Ok(());
        }
        let file = &self.config.result_file;
        let tmp = file.with_extension("json.tmp");
        std::fs::write(&tmp, format!("{}\n", record.json_line()))
            .and_then(|_| std::fs::rename(&tmp, file))?;
        self.ending.written = true;
        tracing::info!(file = %file.display(), "result file written");
        Ok(())
    }

    /// The final tally breaks the symmetry identities: some counted answer is wrong. The jobs
    /// that can explain it (weight 2 and 4, first those counted on one credential's word, then
    /// all of them) are un-counted and solved again, by the coordinator itself where it can;
    /// whoever answered them wrongly is untrusted and everything it counted is solved again. Only
    /// when no such job is left to doubt does the run refuse, once, naming the jobs, and it keeps
    /// serving status: a restart does the same and never loops.
    fn repair_broken_tally(&mut self, reason: &str) -> Result<(), StoreError> {
        self.ending.repairs += 1;
        let doubted = match self.ending.repairs {
            1 => self.scheduler.doubt_unconfirmed_symmetric(),
            2 => self.scheduler.doubt_all_symmetric(),
            _ => Vec::new(),
        };
        if doubted.is_empty() {
            let jobs = self.scheduler.symmetric_jobs();
            tracing::error!(%reason, jobs = ?jobs, "the final tally breaks the symmetry identities and every job that could explain it was solved again: refusing to write a result. The coordinator keeps serving status; inspect the jobs with `verify --state`");
            self.ending.refused = Some(jobs);
            return Ok(());
        }
        for &job_id in &doubted {
            self.scheduler.doubt(job_id);
        }
        let changes = self.scheduler.take_changes();
        tracing::warn!(%reason, jobs = doubted.len(), round = self.ending.repairs, ids = ?&doubted[..doubted.len().min(20)], "the final tally breaks the symmetry identities: the jobs that can explain it are solved again");
        self.store.apply(&changes, &[])?;
        self.hand_to_referee();
        self.publish();
        Ok(())
    }
}
