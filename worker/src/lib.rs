//! The worker: leases jobs from a coordinator, solves them on a rayon pool, streams each result back
//! the moment it is done, and keeps it until the coordinator acknowledges that it is committed.
//!
//! Two worlds that must not block each other: the rayon pool does the CPU work, and a tokio runtime
//! (its own threads) does all networking, so heartbeats keep leases alive however busy the cores
//! are. Results outlive connections: a result computed while the coordinator is away waits in
//! `unacked` and is re-sent after the reconnect.

use nqueens_core::{reference, Job, SplitParams, Tally};
use nqueens_proto as pb;
use nqueens_proto::Reason;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};
use thiserror::Error;
use tokio::sync::{mpsc, Notify};
use tokio_stream::wrappers::ReceiverStream;
use tokio_stream::StreamExt;

mod config;

pub use config::{ConfigError, WorkerConfig};

/// How a worker ended without error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WorkerExit {
    /// The coordinator reported the run complete.
    RunComplete,
    /// Stopped on request (SIGTERM): finished or released its leases.
    Stopped,
}

/// Why a worker stopped with an error.
#[derive(Debug, Error)]
pub enum WorkerError {
    /// The settings cannot work (see [`WorkerConfig::validate`]).
    #[error("invalid settings")]
    Config(#[from] ConfigError),
    #[error("solver self-test failed: N={n} gave {found}, expected {expected}")]
    SelfTest { n: u32, found: u64, expected: u64 },
    #[error("the coordinator refused this worker ({reason:?}): {message}")]
    Refused { reason: Reason, message: String },
    #[error("cannot start the solver pool: {0}")]
    Pool(String),
}

/// Known-answer test: the whole N=10 job list through the constellation solver must give the plain
/// search's count.
pub fn self_test() -> pb::SelfTest {
    let started = Instant::now();
    let n = 10;
    let expected = reference::count_all(n).unwrap_or(0);
    let found = (|| -> Result<u64, nqueens_core::CoreError> {
        let list = nqueens_core::job_list(n, &SplitParams::default())?;
        let mut tally = Tally::new(n)?;
        for job in &list.jobs {
            tally.add(job.weight, &job.solve()?)?;
        }
        Ok(tally.totals()?.total)
    })()
    .unwrap_or(u64::MAX);
    pb::SelfTest {
        passed: found == expected && expected > 0,
        n,
        expected_total: expected,
        found_total: found,
        seconds: started.elapsed().as_secs_f64(),
    }
}

/// Locks `mutex` even if a thread panicked while holding it. Every critical section here is a
/// single insert, remove or clone, so the data behind a poisoned lock is still consistent, and a
/// worker that stopped sending results because of one panic would hold its leases to no end.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// State shared by the solver pool, the collector and the connection sessions.
#[derive(Default)]
struct Shared {
    run: Option<pb::RunId>,
    worker_id: u64,
    /// Jobs leased and not yet solved, by lease.
    held: HashMap<u64, HashSet<u64>>,
    /// Results sent (or waiting to be sent) and not yet acknowledged, by (job, lease).
    unacked: BTreeMap<(u64, u64), pb::JobResult>,
    /// Where new results go while connected.
    stream: Option<mpsc::Sender<pb::JobResult>>,
}

struct Worker {
    config: WorkerConfig,
    shared: Mutex<Shared>,
    pool: rayon::ThreadPool,
    /// Jobs handed to the pool and not finished.
    in_flight: AtomicUsize,
    /// Jobs currently being solved.
    running: AtomicUsize,
    stopping: AtomicBool,
    complete: AtomicBool,
    job_done: Notify,
    fatal: Mutex<Option<WorkerError>>,
}

/// Runs a worker until the run is complete, `shutdown` resolves, or the coordinator refuses it.
pub async fn run(
    config: WorkerConfig,
    shutdown: impl Future<Output = ()>,
) -> Result<WorkerExit, WorkerError> {
    config.validate()?;
    let test = tokio::task::spawn_blocking(self_test).await.unwrap_or_default();
    if !test.passed {
        return Err(WorkerError::SelfTest {
            n: test.n,
            found: test.found_total,
            expected: test.expected_total,
        });
    }
    tracing::info!(seconds = test.seconds, "solver self-test passed");
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(config.threads)
        .thread_name(|i| format!("nq-solve-{i}"))
        .build()
        .map_err(|e| WorkerError::Pool(e.to_string()))?;
    let worker = Arc::new(Worker {
        config,
        shared: Mutex::new(Shared::default()),
        pool,
        in_flight: AtomicUsize::new(0),
        running: AtomicUsize::new(0),
        stopping: AtomicBool::new(false),
        complete: AtomicBool::new(false),
        job_done: Notify::new(),
        fatal: Mutex::new(None),
    });
    let (result_tx, result_rx) = mpsc::unbounded_channel();
    let collector = tokio::spawn(collect(worker.clone(), result_rx));

    let outcome = tokio::select! {
        r = connect_loop(worker.clone(), result_tx.clone(), test) => r,
        _ = shutdown => {
            tracing::info!("stop requested: finishing running jobs, releasing the rest");
            worker.graceful_stop().await;
            Ok(WorkerExit::Stopped)
        }
    };
    collector.abort();
    outcome
}

/// Receives finished jobs from the pool: keeps them as unacknowledged and sends them if connected.
async fn collect(worker: Arc<Worker>, mut rx: mpsc::UnboundedReceiver<(u64, pb::JobResult)>) {
    while let Some((lease_id, result)) = rx.recv().await {
        let sender = {
            let mut shared = lock(&worker.shared);
            if let Some(jobs) = shared.held.get_mut(&lease_id) {
                jobs.remove(&result.job_id);
                if jobs.is_empty() {
                    shared.held.remove(&lease_id);
                }
            }
            shared.unacked.insert((result.job_id, lease_id), result.clone());
            shared.stream.clone()
        };
        if let Some(tx) = sender {
            let _ = tx.send(result).await;
        }
        worker.in_flight.fetch_sub(1, Ordering::SeqCst);
        worker.job_done.notify_waiters();
    }
}

fn reason_of(status: &tonic::Status) -> Option<Reason> {
    pb::status_reason(status).and_then(|d| Reason::try_from(d.reason).ok())
}

/// Refusals that reconnecting cannot fix.
fn is_fatal(reason: Option<Reason>) -> bool {
    matches!(
        reason,
        Some(
            Reason::BadToken
                | Reason::WrongRun
                | Reason::VersionMismatch
                | Reason::SelfTestFailed
                | Reason::UntrustedWorker
        )
    )
}

async fn connect_loop(
    worker: Arc<Worker>,
    result_tx: mpsc::UnboundedSender<(u64, pb::JobResult)>,
    test: pb::SelfTest,
) -> Result<WorkerExit, WorkerError> {
    let mut backoff = Duration::from_millis(200);
    loop {
        let started = Instant::now();
        let ended = session(&worker, &result_tx, &test).await;
        if let Some(e) = lock(&worker.fatal).take() {
            return Err(e);
        }
        if worker.complete.load(Ordering::SeqCst) {
            tracing::info!("the coordinator reports the run complete; exiting");
            return Ok(WorkerExit::RunComplete);
        }
        match ended {
            Err(status) if is_fatal(reason_of(&status)) => {
                return Err(WorkerError::Refused {
                    reason: reason_of(&status).unwrap_or(Reason::Unspecified),
                    message: status.message().to_owned(),
                })
            }
            Err(status) => {
                tracing::warn!(code = ?status.code(), error = %status.message(), retry_in = ?backoff, "connection to the coordinator lost")
            }
            Ok(()) => tracing::warn!(retry_in = ?backoff, "session ended"),
        }
        lock(&worker.shared).stream = None;
        if started.elapsed() > Duration::from_secs(30) {
            backoff = Duration::from_millis(200);
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(worker.config.max_backoff);
    }
}

/// One connection: register, open the result stream, re-send what is unacknowledged, then lease,
/// heartbeat and read acks until something fails or the run is complete.
async fn session(
    worker: &Arc<Worker>,
    result_tx: &mpsc::UnboundedSender<(u64, pb::JobResult)>,
    test: &pb::SelfTest,
) -> Result<(), tonic::Status> {
    let cfg = &worker.config;
    let channel = pb::connect_channel(&cfg.connect, cfg.tls_ca.as_deref())
        .await
        .map_err(|e| tonic::Status::unavailable(format!("connect {}: {e}", cfg.connect)))?;
    let mut client = pb::client(channel, cfg.token.as_deref())?;
    let (known_run, previous) = {
        let s = lock(&worker.shared);
        (s.run.clone(), s.worker_id)
    };
    let mut request = pb::RegisterRequest {
        run: known_run,
        name: cfg.name.clone(),
        host: config::host_name(),
        cores: cfg.threads as u32,
        version: env!("CARGO_PKG_VERSION").to_owned(),
        self_test: Some(*test),
        previous_worker_id: previous,
    };
    let registered = match client.register(request.clone()).await {
        Err(s) if reason_of(&s) == Some(Reason::UnknownWorker) => {
            request.previous_worker_id = 0;
            client.register(request).await?
        }
        other => other?,
    }
    .into_inner();
    let run = registered.run.clone().unwrap_or_default();
    let worker_id = registered.worker_id;
    let span = tracing::info_span!("session", worker_id, n = run.n);
    let _guard = span.enter();
    tracing::info!(fingerprint = %run.fingerprint, "registered with the coordinator");
    {
        let mut s = lock(&worker.shared);
        if s.worker_id != worker_id && s.worker_id != 0 {
            // A new identity: unacknowledged results name the old one and its leases.
            for r in s.unacked.values_mut() {
                r.worker_id = worker_id;
            }
        }
        s.run = Some(run.clone());
        s.worker_id = worker_id;
    }
    drop(_guard);
    if registered.run_complete {
        worker.complete.store(true, Ordering::SeqCst);
        return Ok(());
    }

    // Result stream, then everything not yet acknowledged again.
    let (stream_tx, stream_rx) = mpsc::channel::<pb::JobResult>(4096);
    let mut acks = client.results(ReceiverStream::new(stream_rx)).await?.into_inner();
    let pending: Vec<pb::JobResult> = {
        let mut s = lock(&worker.shared);
        s.stream = Some(stream_tx.clone());
        s.unacked.values().cloned().collect()
    };
    if !pending.is_empty() {
        tracing::info!(results = pending.len(), "re-sending unacknowledged results");
    }
    for r in pending {
        if stream_tx.send(r).await.is_err() {
            return Err(tonic::Status::unavailable("result stream closed"));
        }
    }

    let read_acks = async {
        while let Some(ack) = acks.next().await {
            let ack = ack?;
            let outcome = pb::Outcome::try_from(ack.outcome).unwrap_or(pb::Outcome::Unspecified);
            if outcome == pb::Outcome::Rejected {
                let reason = Reason::try_from(ack.reason).unwrap_or(Reason::Unspecified);
                tracing::error!(job = ack.job_id, lease = ack.lease_id, ?reason, message = %ack.message, "result rejected by the coordinator");
                if is_fatal(Some(reason)) {
                    *lock(&worker.fatal) =
                        Some(WorkerError::Refused { reason, message: ack.message.clone() });
                    return Ok(());
                }
            } else if outcome == pb::Outcome::Conflict {
                tracing::warn!(job = ack.job_id, "coordinator recorded a conflict for this result");
            }
            lock(&worker.shared).unacked.remove(&(ack.job_id, ack.lease_id));
            if ack.run_complete {
                worker.complete.store(true, Ordering::SeqCst);
                return Ok(());
            }
        }
        Err(tonic::Status::unavailable("the coordinator closed the result stream"))
    };

    let heartbeat_every = Duration::from_secs(registered.heartbeat_seconds.max(1) as u64);
    let mut hb_client = client.clone();
    let heartbeats = async {
        loop {
            tokio::time::sleep(heartbeat_every).await;
            let lease_ids: Vec<u64> = lock(&worker.shared).held.keys().copied().collect();
            let reply = hb_client
                .heartbeat(pb::HeartbeatRequest { run: Some(run.clone()), worker_id, lease_ids })
                .await?
                .into_inner();
            if !reply.lost_lease_ids.is_empty() {
                tracing::warn!(leases = ?reply.lost_lease_ids, "leases lost (expired); results for them are still sent");
            }
            if reply.run_complete {
                worker.complete.store(true, Ordering::SeqCst);
                return Ok::<(), tonic::Status>(());
            }
        }
    };

    let threads = cfg.threads;
    let leasing = async {
        loop {
            if worker.stopping.load(Ordering::SeqCst) {
                std::future::pending::<()>().await;
            }
            // Keep the pool busy: ask for more while no more than one job per thread is queued.
            let in_flight = worker.in_flight.load(Ordering::SeqCst);
            if in_flight > threads {
                let wait = worker.job_done.notified();
                if worker.in_flight.load(Ordering::SeqCst) > threads {
                    let _ = tokio::time::timeout(Duration::from_secs(1), wait).await;
                }
                continue;
            }
            let reply = client
                .lease(pb::LeaseRequest {
                    run: Some(run.clone()),
                    worker_id,
                    free_slots: threads as u32,
                })
                .await?
                .into_inner();
            if reply.run_complete {
                worker.complete.store(true, Ordering::SeqCst);
                return Ok::<(), tonic::Status>(());
            }
            if reply.jobs.is_empty() {
                tokio::time::sleep(Duration::from_millis(
                    reply.retry_after_ms.clamp(50, 5000) as u64
                ))
                .await;
                continue;
            }
            tracing::debug!(lease = reply.lease_id, jobs = reply.jobs.len(), "lease received");
            worker.start_batch(reply.lease_id, &reply.jobs, &run, worker_id, result_tx);
        }
    };

    tokio::select! {
        r = read_acks => r,
        r = heartbeats => r,
        r = leasing => r,
    }
}

impl Worker {
    /// Hands a leased batch to the pool (FIFO, so the coordinator's longest-first order holds).
    fn start_batch(
        self: &Arc<Self>,
        lease_id: u64,
        specs: &[pb::JobSpec],
        run: &pb::RunId,
        worker_id: u64,
        result_tx: &mpsc::UnboundedSender<(u64, pb::JobResult)>,
    ) {
        lock(&self.shared).held.insert(lease_id, specs.iter().map(|s| s.job_id).collect());
        for spec in specs {
            // A spec that does not fit a job is reported as this job's error, like a solver error.
            let job = Job::try_from(spec).map_err(|e| format!("malformed job spec: {e}"));
            let job_id = spec.job_id;
            let me = self.clone();
            let tx = result_tx.clone();
            let run = run.clone();
            self.in_flight.fetch_add(1, Ordering::SeqCst);
            self.pool.spawn(move || {
                if me.stopping.load(Ordering::SeqCst) {
                    // Not started before the stop: it stays held and is released.
                    me.in_flight.fetch_sub(1, Ordering::SeqCst);
                    me.job_done.notify_waiters();
                    return;
                }
                me.running.fetch_add(1, Ordering::SeqCst);
                let started = Instant::now();
                let solved = job.and_then(|job| job.solve().map_err(|e| e.to_string()));
                let seconds = started.elapsed().as_secs_f64();
                let mut result = pb::JobResult {
                    run: Some(run),
                    worker_id,
                    lease_id,
                    job_id,
                    counts: None,
                    seconds,
                    error: String::new(),
                };
                match solved {
                    Ok(counts) => result.counts = Some(counts.into()),
                    Err(e) => result.error = e,
                }
                me.running.fetch_sub(1, Ordering::SeqCst);
                let _ = tx.send((lease_id, result));
            });
        }
    }

    /// SIGTERM: no new jobs start; running ones get a short while to finish and be acknowledged;
    /// every job still held is then released so others can take it at once.
    async fn graceful_stop(&self) {
        self.stopping.store(true, Ordering::SeqCst);
        // Lets a lease call that the stop interrupted reach the coordinator before the release.
        tokio::time::sleep(Duration::from_millis(300)).await;
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            let unacked = lock(&self.shared).unacked.len();
            if self.running.load(Ordering::SeqCst) == 0 && unacked == 0 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let (run, worker_id) = {
            let s = lock(&self.shared);
            (s.run.clone(), s.worker_id)
        };
        if run.is_none() || worker_id == 0 {
            return;
        }
        // Lease id 0 releases every lease of this worker, including one granted by a lease call
        // that the stop interrupted before its answer arrived.
        let release = async {
            let channel = pb::connect_channel(&self.config.connect, self.config.tls_ca.as_deref())
                .await
                .ok()?;
            let mut client = pb::client(channel, self.config.token.as_deref()).ok()?;
            let r = client
                .release(pb::ReleaseRequest {
                    run: run.clone(),
                    worker_id,
                    lease_id: 0,
                    job_ids: vec![],
                })
                .await
                .ok()?;
            Some(r.into_inner().released)
        };
        match tokio::time::timeout(Duration::from_secs(10), release).await {
            Ok(Some(n)) => tracing::info!(jobs = n, "released unfinished jobs"),
            _ => tracing::warn!("could not release leases; they will expire on the coordinator"),
        }
    }
}
