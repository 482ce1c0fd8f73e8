//! The worker: leases jobs from a coordinator, solves them on a rayon pool, streams each result back
//! the moment it is done, and keeps it until the coordinator acknowledges that it is committed.
//!
//! Two worlds that must not block each other: the rayon pool does the CPU work, and a tokio runtime
//! (its own threads) does all networking, so heartbeats keep leases alive however busy the cores
//! are. Results outlive connections: a result computed while the coordinator is away waits in
//! `unacked` and is re-sent after the reconnect.
//!
//! Here: the collector and the graceful stop; in `cpu`: the CPU lane (a long job split into items
//! that every thread solves); in `gpu`: the GPU lane; in `session`: the connection to the
//! coordinator (leasing one batch ahead); in `config`: the settings and their checks; in `error`:
//! the errors.

#![warn(missing_docs)]

use nqueens_core::{reference, Job, SplitParams, Tally};
use nqueens_proto as pb;
use parking_lot::Mutex;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, Notify};
use tracing::Instrument;

mod config;
pub mod cpu;
mod error;
#[cfg(feature = "fault-injection")]
mod fault;
mod gpu;
mod session;

pub use config::{ConfigError, GpuMode, WorkerConfig};
use error::SessionError;
pub use error::WorkerError;

/// How a worker ended without error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WorkerExit {
    /// The coordinator reported the run complete.
    RunComplete,
    /// Stopped on request (SIGTERM): finished or released its leases.
    Stopped,
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
        // An N=10 total always fits; a bigger one is as wrong as an error.
        Ok(u64::try_from(tally.totals()?.total).unwrap_or(u64::MAX))
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

/// State shared by the solver pool, the collector and the connection sessions.
#[derive(Default)]
struct Shared {
    /// The run this worker registered for, once it has.
    run: Option<pb::RunId>,
    /// The id the coordinator gave this worker; 0 until the first registration.
    worker_id: u64,
    /// The secret that proves `worker_id` is this worker's: every call naming the id carries it.
    secret: String,
    /// Jobs leased and not yet solved, by lease.
    held: HashMap<u64, HashSet<u64>>,
    /// Results sent (or waiting to be sent) and not yet acknowledged, by (job, lease).
    unacked: BTreeMap<(u64, u64), pb::JobResult>,
    /// Where new results go while connected.
    stream: Option<mpsc::Sender<pb::JobResult>>,
}

/// One worker: its settings, the state its tasks share, and its solver pool.
struct Worker {
    config: WorkerConfig,
    /// What solves, as registered ("cpu (8 threads)", or the GPU's name).
    device: String,
    shared: Mutex<Shared>,
    /// The CPU threads, which solve each job split into items.
    cpu: Arc<cpu::CpuLane>,
    /// Jobs handed to the pool and not finished.
    in_flight: AtomicUsize,
    /// Jobs currently being solved whole (on the GPU, or taken from its queue by a CPU thread).
    running: AtomicUsize,
    /// Set by a stop request: no new job starts and no more are leased.
    stopping: AtomicBool,
    /// Set when the coordinator reports the run complete.
    complete: AtomicBool,
    /// Woken whenever a job leaves `in_flight`.
    job_done: Notify,
    /// A refusal found while reading acknowledgements, for the reconnect loop to return.
    fatal: Mutex<Option<WorkerError>>,
    /// The GPU's queue, when a GPU is in use (set once, right after start).
    gpu: std::sync::OnceLock<Arc<gpu::GpuLane>>,
}

/// One leased job on its way to a solver, with what its result needs.
struct Task {
    lease_id: u64,
    job_id: u64,
    /// The job, or why its spec does not describe one (reported as this job's error).
    job: Result<Job, String>,
    run: pb::RunId,
    worker_id: u64,
    tx: FinishedTx,
}

/// Runs a worker until the run is complete, `shutdown` resolves, or the coordinator refuses it.
/// Every log line it writes carries the coordinator's URL, and once registered the worker id.
pub async fn run(
    config: WorkerConfig,
    shutdown: impl Future<Output = ()>,
) -> Result<WorkerExit, WorkerError> {
    config.validate()?;
    let span = tracing::info_span!("worker", coordinator = %config.connect);
    run_in_span(config, shutdown).instrument(span).await
}

/// The body of [`run`]: self-test, solver pool, result collector, then the reconnect loop until
/// the run ends or a stop is requested.
async fn run_in_span(
    config: WorkerConfig,
    shutdown: impl Future<Output = ()>,
) -> Result<WorkerExit, WorkerError> {
    #[cfg(feature = "fault-injection")]
    fault::announce();
    let test = tokio::task::spawn_blocking(self_test).await.unwrap_or_default();
    if !test.passed {
        return Err(WorkerError::SelfTest {
            n: test.n,
            found: test.found_total,
            expected: test.expected_total,
        });
    }
    tracing::info!(seconds = test.seconds, "solver self-test passed");
    let gpu_config = config.clone();
    let span = tracing::Span::current();
    let solver = tokio::task::spawn_blocking(move || span.in_scope(|| gpu::open(&gpu_config)))
        .await
        .unwrap_or(Ok(None))?;
    let cpu_threads = config.threads;
    let mut config = config;
    let mut device = format!("cpu ({cpu_threads} threads)");
    if let Some(solver) = &solver {
        // The coordinator sizes leases by the slots a worker declares: the GPU's, plus the CPU
        // threads that solve beside it.
        let beside = if config.cpu_beside_gpu { cpu_threads } else { 0 };
        config.threads = beside + config.gpu_slots;
        device = format!("{} (+{beside} cpu threads)", solver.device());
        tracing::info!(
            device = %solver.device(),
            cpu_threads = beside,
            slots = config.threads,
            "solving on the GPU"
        );
    }
    let cpu = cpu::CpuLane::new(cpu_threads).map_err(WorkerError::Pool)?;
    let worker = Arc::new(Worker {
        config,
        device,
        shared: Mutex::new(Shared::default()),
        cpu,
        in_flight: AtomicUsize::new(0),
        running: AtomicUsize::new(0),
        stopping: AtomicBool::new(false),
        complete: AtomicBool::new(false),
        job_done: Notify::new(),
        fatal: Mutex::new(None),
        gpu: std::sync::OnceLock::new(),
    });
    if let Some(solver) = solver {
        let _ = worker.gpu.set(gpu::start(&worker, solver));
    }
    let (finished, finished_rx) = mpsc::unbounded_channel();
    let collector = tokio::spawn(collect(worker.clone(), finished_rx).in_current_span());

    let outcome = tokio::select! {
        r = session::connect_loop(worker.clone(), finished.clone(), test) => r,
        _ = shutdown => {
            tracing::info!("stop requested: finishing running jobs, releasing the rest");
            worker.graceful_stop().await;
            Ok(WorkerExit::Stopped)
        }
    };
    collector.abort();
    outcome
}

/// Where the solver pool sends each finished job's result, with its lease id.
type FinishedTx = mpsc::UnboundedSender<(u64, pb::JobResult)>;

/// Receives finished jobs from the pool: keeps them as unacknowledged and sends them if connected.
/// The pool's threads never wait on the network; this task does.
async fn collect(worker: Arc<Worker>, mut rx: mpsc::UnboundedReceiver<(u64, pb::JobResult)>) {
    while let Some((lease_id, mut result)) = rx.recv().await {
        let sender = {
            let mut shared = worker.shared.lock();
            result.worker_secret = shared.secret.clone();
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

impl Worker {
    /// Hands a leased batch to the pool (FIFO, so the coordinator's longest-first order holds).
    fn start_batch(
        self: &Arc<Self>,
        lease_id: u64,
        specs: &[pb::JobSpec],
        run: &pb::RunId,
        worker_id: u64,
        finished: &FinishedTx,
    ) {
        self.shared.lock().held.insert(lease_id, specs.iter().map(|s| s.job_id).collect());
        let gpu = self.gpu.get().filter(|lane| lane.alive());
        for spec in specs {
            // A spec that does not fit a job is reported as this job's error, like a solver error.
            let job = Job::try_from(spec).map_err(|e| format!("malformed job spec: {e}"));
            let task = Task {
                lease_id,
                job_id: spec.job_id,
                job,
                run: run.clone(),
                worker_id,
                tx: finished.clone(),
            };
            self.in_flight.fetch_add(1, Ordering::SeqCst);
            let Some(lane) = gpu else {
                self.solve_on_cpu(task);
                continue;
            };
            match lane.push(task) {
                Err(task) => self.solve_on_cpu(task),
                Ok(()) if self.config.cpu_beside_gpu => {
                    // A CPU thread beside the GPU takes one queued job, if the GPU has not.
                    let (me, lane) = (self.clone(), lane.clone());
                    self.cpu.spawn(move || {
                        if let Some(task) = lane.steal() {
                            me.solve_here(task);
                        }
                    });
                }
                Ok(()) => {}
            }
        }
    }

    /// Queues `task`'s items on the CPU lane (FIFO, so the coordinator's longest-first order
    /// holds: every thread works on the first job before most of them start the next).
    fn solve_on_cpu(self: &Arc<Self>, task: Task) {
        let job = match &task.job {
            Ok(job) => job.clone(),
            Err(e) => {
                let e = e.clone();
                return self.finish(task, Err(e), 0.0);
            }
        };
        let me = self.clone();
        self.cpu.solve(job, move |solved| match solved {
            cpu::Solved::Counts { counts, seconds } => me.finish(task, Ok(counts), seconds),
            cpu::Solved::Failed(e) => me.finish(task, Err(e), 0.0),
            cpu::Solved::Abandoned => me.abandon(),
        });
    }

    /// Solves `task` whole on this thread, unless a stop came first (a CPU thread beside the GPU
    /// takes whole jobs from the GPU's queue).
    fn solve_here(self: &Arc<Self>, task: Task) {
        if self.stopping.load(Ordering::SeqCst) {
            // Not started before the stop: it stays held and is released.
            self.abandon();
            return;
        }
        self.running.fetch_add(1, Ordering::SeqCst);
        let started = Instant::now();
        let solved = task.job.clone().and_then(|job| job.solve().map_err(|e| e.to_string()));
        let seconds = started.elapsed().as_secs_f64();
        self.running.fetch_sub(1, Ordering::SeqCst);
        self.finish(task, solved, seconds);
    }

    /// A job that will not be solved here (a stop came first): it stays held and is released.
    fn abandon(&self) {
        self.in_flight.fetch_sub(1, Ordering::SeqCst);
        self.job_done.notify_waiters();
    }

    /// Sends a solved job's result (or its error) to the collector.
    fn finish(&self, task: Task, solved: Result<nqueens_core::JobCounts, String>, seconds: f64) {
        #[cfg(feature = "fault-injection")]
        let solved = solved.map(|counts| fault::corrupt(task.job_id, counts));
        let mut result = pb::JobResult {
            run: Some(task.run),
            worker_id: task.worker_id,
            lease_id: task.lease_id,
            job_id: task.job_id,
            counts: None,
            seconds,
            error: String::new(),
            // Filled in by the collector, which knows the current identity.
            worker_secret: String::new(),
        };
        match solved {
            Ok(counts) => result.counts = Some(counts.into()),
            Err(e) => result.error = e,
        }
        let _ = task.tx.send((task.lease_id, result));
    }

    /// SIGTERM: no new jobs start; running ones get a short while to finish and be acknowledged;
    /// every job still held is then released so others can take it at once.
    async fn graceful_stop(&self) {
        self.stopping.store(true, Ordering::SeqCst);
        self.cpu.stop();
        if let Some(lane) = self.gpu.get() {
            lane.wake();
        }
        // Lets a lease call that the stop interrupted reach the coordinator before the release.
        tokio::time::sleep(Duration::from_millis(300)).await;
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            let unacked = self.shared.lock().unacked.len();
            let running = self.running.load(Ordering::SeqCst) + self.cpu.running();
            if running == 0 && unacked == 0 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let (run, worker_id, worker_secret) = {
            let s = self.shared.lock();
            (s.run.clone(), s.worker_id, s.secret.clone())
        };
        if run.is_none() || worker_id == 0 {
            return;
        }
        // Lease id 0 releases every lease of this worker, including one granted by a lease call
        // that the stop interrupted before its answer arrived.
        let release = async {
            let mut client = session::connect(&self.config).await?;
            let request =
                pb::ReleaseRequest { run, worker_id, lease_id: 0, job_ids: vec![], worker_secret };
            let reply = client
                .release(session::with_deadline(request))
                .await
                .map_err(|source| SessionError::Call { call: "release", source })?;
            Ok::<_, SessionError>(reply.into_inner().released)
        };
        // The whole release gets at most 10 s, so that the stop ends within a supervisor's usual
        // grace period (30 s in Kubernetes and Docker) even with the coordinator gone.
        match tokio::time::timeout(Duration::from_secs(10), release).await {
            Ok(Ok(n)) => tracing::info!(worker_id, jobs = n, "released unfinished jobs"),
            Ok(Err(e)) => {
                tracing::warn!(worker_id, why = e.why(), error = %e.chain(), "could not release leases; they will expire on the coordinator")
            }
            Err(_) => {
                tracing::warn!(worker_id, "no answer to the release within 10 s; the leases will expire on the coordinator")
            }
        }
    }
}
