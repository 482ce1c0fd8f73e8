//! The engine: the one thread that owns the job life cycle and the store's write connection.
//!
//! Every request that changes state becomes a [`Command`] on one channel. The engine takes all
//! commands waiting (up to a cap), decides each against the [`Scheduler`], commits every resulting
//! change in ONE transaction, and only then answers. Group commit is what makes thousands of durable
//! results per second possible with synchronous=FULL; a single writer makes decisions race-free.

mod command;
mod publish;
#[cfg(test)]
mod tests;
mod workers;

pub use command::*;
use workers::WorkerState;

use crate::metrics::Metrics;
use crate::run_result::RunResult;
use crate::secrets::{Credential, RegistrationLimiter};
use crate::snapshot::{Pace, RunSnapshot};
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
    /// The final result, once the run is complete.
    pub complete: watch::Receiver<Option<RunResult>>,
    /// The run as the engine last published it (after every batch it commits).
    pub snapshots: watch::Receiver<Arc<RunSnapshot>>,
    /// Fires when the engine thread has ended (for whatever reason).
    pub ended: oneshot::Receiver<()>,
    /// The engine thread itself.
    pub thread: std::thread::JoinHandle<Result<(), StoreError>>,
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
    scheduler: Scheduler,
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
    /// The run's pace: the one rule for its rate and quiet time (see `snapshot/pace.rs`).
    pace: Pace,
    /// Where the engine publishes the run's [`RunSnapshot`] (see `engine/publish.rs`).
    snapshots: watch::Sender<Arc<RunSnapshot>>,
    /// How many snapshots were published, and when the last one was.
    published: (u64, Instant),
    /// When the leases' last deadline was last looked up, and what it was (see
    /// `Engine::last_lease_deadline` in `engine/publish.rs`).
    lease_deadline: (Option<Instant>, Option<Instant>),
    complete_tx: watch::Sender<Option<RunResult>>,
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
            store.workers()?.into_iter().map(|w| (w.row.id, w.row)).collect();
        let mut credential_groups = HashMap::new();
        let groups: HashMap<WorkerId, u64> = known_workers
            .values()
            .filter_map(|w| {
                let credential = Credential::from_stored(&w.credential);
                credential.group(&mut credential_groups).map(|g| (WorkerId::new(w.id), g))
            })
            .collect();
        // The coordinator checks answers itself (newcomers' answers, re-checks, jobs trusted
        // workers failed) where its referee can solve the run's jobs.
        let coordinator_checks = config
            .jobs
            .as_ref()
            .and_then(|jobs| jobs.first())
            .is_some_and(|job| job.n <= crate::referee::REFEREE_MAX_N);
        let policy = SchedulerConfig {
            lease_duration,
            seed: seed_from_os(),
            recheck_fraction: config.recheck_fraction.clamp(0.0, 1.0),
            coordinator_checks,
            ..SchedulerConfig::default()
        };
        let scheduler = Scheduler::restore(
            policy,
            loaded.jobs,
            loaded.leases,
            groups,
            loaded.untrusted,
            Instant::now(),
        );
        let (complete_tx, complete_rx) = watch::channel(None);
        let (snapshots, snapshot_rx) = watch::channel(Arc::default());
        let done_at_start = scheduler.count(JobState::Done);
        let (tx, rx) = mpsc::channel();
        let referee = config.jobs.clone().map(|jobs| {
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
            pace: Pace::new(Instant::now(), done_at_start),
            snapshots,
            published: (0, Instant::now()),
            lease_deadline: (None, None),
            complete_tx,
            result_written: false,
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
        Ok(Started {
            handle: EngineHandle { tx },
            complete: complete_rx,
            snapshots: snapshot_rx,
            ended: ended_rx,
            thread,
        })
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
            // Once no job is pending, each result may be one of the run's last: no waiting.
            let patience = if self.scheduler.count(JobState::Pending) > 0 {
                RESULTS_WINDOW
            } else {
                Duration::ZERO
            };
            let batch = gather(first, &rx, patience);
            let busy = !batch.is_empty();
            let shutdown = batch.iter().any(|c| matches!(c, Command::Shutdown));
            let mut changes = Vec::new();
            let mut worker_rows = Vec::new();
            let mut replies: Vec<Outgoing> = Vec::new();
            for cmd in batch {
                self.decide(cmd, &mut changes, &mut worker_rows, &mut replies);
            }
            if last_expiry.elapsed() >= tick {
                last_expiry = Instant::now();
                let expired = self.scheduler.expire(Instant::now(), &mut changes);
                if expired > 0 {
                    tracing::warn!(
                        leases = expired,
                        "leases expired; their jobs are pending again"
                    );
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
            // Published before the answers go out: whoever hears back sees the batch in status.
            self.publish_if(busy || !changes.is_empty());
            let run_complete = self.scheduler.is_complete();
            for reply in replies {
                reply.send(run_complete);
            }
            self.hand_to_referee();
            let was_complete = self.result_written;
            self.check_complete()?;
            if self.result_written != was_complete {
                self.publish();
            }
            if shutdown {
                // The `.db` alone is then the whole state: a copy of it needs no `-wal` beside.
                self.store.checkpoint()?;
                tracing::info!("engine stopped after committing everything received");
                return Ok(());
            }
        }
    }

    /// Decides one command: a worker's is authenticated first, then handled by its `on_*`
    /// handler, whose outcome (or the refusal) is answered after the commit.
    fn decide(
        &mut self,
        cmd: Command,
        changes: &mut Vec<Change>,
        worker_rows: &mut Vec<WorkerRow>,
        replies: &mut Vec<Outgoing>,
    ) {
        let now = Instant::now();
        match cmd {
            Command::Shutdown => {}
            Command::WithStore(work) => work(&self.store),
            Command::Register { worker, reply } => {
                let outcome = self.on_register(worker, now, worker_rows);
                replies.push(Outgoing::Register(Deferred { tx: reply, outcome }));
            }
            Command::Lease { caller, free_slots, reply } => {
                let outcome = self
                    .authenticate(&caller, now)
                    .and_then(|()| self.on_lease(caller.worker_id, free_slots, now, changes));
                replies.push(Outgoing::Lease(Deferred { tx: reply, outcome }));
            }
            Command::Heartbeat { caller, lease_ids, reply } => {
                let outcome = self
                    .authenticate(&caller, now)
                    .map(|()| self.scheduler.heartbeat(caller.worker_id, &lease_ids, now, changes));
                replies.push(Outgoing::Heartbeat(Deferred { tx: reply, outcome }));
            }
            Command::Release { caller, lease_id, job_ids, reply } => {
                let outcome = self
                    .authenticate(&caller, now)
                    .map(|()| self.on_release(caller.worker_id, lease_id, &job_ids, changes));
                replies.push(Outgoing::Release(Deferred { tx: reply, outcome }));
            }
            Command::Results { answers } => {
                for (answer, reply) in answers {
                    let outcome = self
                        .authenticate(&answer.caller, now)
                        .map(|()| self.on_result(&answer, now, changes));
                    if let Err(refusal) = outcome {
                        self.metrics.results_rejected.fetch_add(1, Ordering::Relaxed);
                        tracing::warn!(job = %answer.job_id, worker = %answer.caller.worker_id, ?refusal, "result refused: the caller is not that worker");
                    }
                    replies.push(Outgoing::Result(Deferred { tx: reply, outcome }));
                }
            }
            Command::Reference { job_id, counts } => {
                let before = changes.len();
                self.scheduler.add_reference(job_id, counts, changes);
                tracing::debug!(job = %job_id, "reference answer computed");
                self.log_untrusted(&changes[before..]);
            }
            Command::RefereeFailed { job_id } => {
                tracing::error!(job = %job_id, "the coordinator's own attempt at a job workers reported errors for failed too: the job is failed (`requeue` puts it back)");
                self.scheduler.coordinator_failed(job_id, changes);
            }
        }
    }

    /// `Register`: a new identity (or the caller's own again), unless its bucket is empty.
    fn on_register(
        &mut self,
        worker: Registration,
        now: Instant,
        worker_rows: &mut Vec<WorkerRow>,
    ) -> Result<Registered, Refusal> {
        self.register(worker, now, worker_rows)
            .map(|(worker_id, secret)| Registered { worker_id, secret })
            .ok_or(Refusal::TooManyRegistrations)
    }

    /// `Lease`: jobs for a trusted-enough worker, sized by [`Self::lease_size`].
    fn on_lease(
        &mut self,
        worker_id: WorkerId,
        free_slots: u32,
        now: Instant,
        changes: &mut Vec<Change>,
    ) -> Result<Granted, Refusal> {
        if self.scheduler.is_untrusted(worker_id) {
            return Err(Refusal::Untrusted);
        }
        let others = self.other_active_workers(worker_id, now);
        let size = self.lease_size(worker_id, free_slots, now);
        if let Some(w) = self.workers.get_mut(&worker_id) {
            w.last_lease_size = size;
        }
        let spot_checks = self.config.spot_checks;
        let granted =
            self.scheduler.lease_checked(worker_id, size, &others, spot_checks, now, changes);
        let Some((lease_id, job_ids)) = granted else { return Ok(Granted::default()) };
        tracing::debug!(%worker_id, %lease_id, jobs = job_ids.len(), "lease granted");
        Ok(Granted { lease_id, job_ids })
    }

    /// `Release`: the worker gives jobs back (all of a lease, or all its leases for lease 0).
    fn on_release(
        &mut self,
        worker_id: WorkerId,
        lease_id: LeaseId,
        job_ids: &[JobId],
        changes: &mut Vec<Change>,
    ) -> u32 {
        let released = self.scheduler.release(worker_id, lease_id, job_ids, changes);
        tracing::info!(%worker_id, %lease_id, released, "jobs released");
        released
    }

    /// `Result`: one job's answer, decided by the scheduler and counted in the metrics.
    fn on_result(
        &mut self,
        answer: &JobAnswer,
        now: Instant,
        changes: &mut Vec<Change>,
    ) -> Verdict {
        let verdict = self.decide_result(answer, now, changes);
        self.count_outcome(answer, verdict, now);
        verdict
    }

    /// How many jobs a lease gives `worker_id` (see [`Scheduler::lease_size`]): the slots it
    /// asks for, never more than it registered with, within what its credential may hold.
    fn lease_size(&mut self, worker_id: WorkerId, free_slots: u32, now: Instant) -> usize {
        let Some(w) = self.workers.get(&worker_id) else { return 0 };
        let slots = free_slots.min(w.row.cores).max(1);
        self.scheduler.lease_size(worker_id, slots, now)
    }

    /// One authenticated answer, decided by the scheduler.
    fn decide_result(
        &mut self,
        result: &JobAnswer,
        now: Instant,
        changes: &mut Vec<Change>,
    ) -> Verdict {
        let worker_id = result.caller.worker_id;
        if let Finding::SolverError(error) = &result.finding {
            tracing::warn!(job = %result.job_id, worker = %worker_id, error = %error.escape_debug(), "worker reported a solver error");
        }
        let before = changes.len();
        let outcome = self.scheduler.result(
            worker_id,
            result.lease_id,
            result.job_id,
            result.finding.clone(),
            now,
            changes,
        );
        self.log_untrusted(&changes[before..]);
        outcome
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
                let name = self.workers.get(worker_id).map_or("", |w| w.row.name.as_str());
                tracing::warn!(worker = %worker_id, name, job = %job_id, requeued, %detail, "worker gave a wrong answer (a lost verification or spot check); it is untrusted and its counted jobs will be re-run");
            }
        }
    }

    fn count_outcome(&mut self, msg: &JobAnswer, outcome: Verdict, now: Instant) {
        let m = &self.metrics;
        let worker_id = msg.caller.worker_id;
        match outcome {
            Verdict::Accepted | Verdict::Confirmed => {
                self.pace.counted(now);
                m.results_accepted.fetch_add(1, Ordering::Relaxed);
                if let Finding::Solved { counts, .. } = msg.finding {
                    m.nodes.fetch_add(counts.nodes, Ordering::Relaxed);
                }
                if let Some(w) = self.workers.get_mut(&worker_id) {
                    w.results += 1;
                    w.delivered(now, self.lease_duration);
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
                if let Some(w) = self.workers.get_mut(&worker_id) {
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
        if self.result_written || self.refused.is_some() || !self.scheduler.is_complete() {
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
            RunResult::new(&totals, self.scheduler.total_jobs(), self.store.age(), tally.nodes);
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
            1 => self.scheduler.doubt_unconfirmed_symmetric(),
            2 => self.scheduler.doubt_all_symmetric(),
            _ => Vec::new(),
        };
        if doubted.is_empty() {
            let jobs = self.scheduler.symmetric_jobs();
            tracing::error!(%reason, jobs = ?jobs, "the final tally breaks the symmetry identities and every job that could explain it was solved again: refusing to write a result. The coordinator keeps serving status; inspect the jobs with `verify --state`");
            self.refused = Some(jobs);
            return Ok(());
        }
        let mut changes = Vec::new();
        for &job_id in &doubted {
            self.scheduler.doubt(job_id, &mut changes);
        }
        tracing::warn!(%reason, jobs = doubted.len(), round = self.repairs, ids = ?&doubted[..doubted.len().min(20)], "the final tally breaks the symmetry identities: the jobs that can explain it are solved again");
        self.store.apply(&changes, &[])?;
        self.hand_to_referee();
        self.publish();
        Ok(())
    }
}
