//! The GPU lane: one thread that owns the device (OpenCL or CUDA) and counts leased jobs in
//! batches, beside (or instead of) the CPU pool.
//!
//! Leased jobs wait in the lane's queue; the lane takes all that wait at once (a batch fills the
//! card best), and CPU threads beside it, when asked for, take single jobs from the other end. A
//! GPU fault is logged, the lane shuts for the rest of the run, and every job it held or queued is
//! handed to the CPU pool: a fault never reports a count.

use crate::config::{GpuMode, WorkerConfig};
use crate::cpu::CpuLane;
use crate::error::WorkerError;
use crate::work::{ReportTx, Task};
use nqueens_core::{job_list, reference, Job, SplitParams, Tally};
use nqueens_gpu::{DeviceSelector, GpuError, GpuOptions, GpuSolver};
use parking_lot::{Condvar, Mutex};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Most jobs handed to the device in one call.
const MAX_BATCH_JOBS: usize = 1 << 16;

/// How often the lane logs its rate.
const RATE_EVERY: Duration = Duration::from_secs(60);

/// The queue between the lease loop and the GPU thread.
pub(crate) struct GpuLane {
    queue: Mutex<VecDeque<Task>>,
    wake: Condvar,
    /// False once the device failed: new jobs go to the CPU pool.
    alive: AtomicBool,
    /// Set by [`stop`](Self::stop): queued jobs are not started.
    stopping: AtomicBool,
    /// Name of the device, for logs.
    pub device: String,
}

impl GpuLane {
    /// Whether jobs may still be queued here.
    pub fn alive(&self) -> bool {
        self.alive.load(Ordering::SeqCst)
    }

    /// Queues a job for the device; gives it back if the lane has shut (after a fault).
    pub fn push(&self, task: Task) -> Result<(), Task> {
        let mut queue = self.queue.lock();
        // Checked under the queue's lock, which the fault path holds while it shuts the lane
        // and empties the queue: no job can be left behind in a dead queue.
        if !self.alive() {
            return Err(task);
        }
        queue.push_back(task);
        drop(queue);
        self.wake.notify_one();
        Ok(())
    }

    /// One queued job for a CPU thread beside the device (the shortest: the queue is longest
    /// first), if any is left.
    pub fn steal(&self) -> Option<Task> {
        self.queue.lock().pop_back()
    }

    /// No queued job starts after this: they are reported abandoned.
    pub fn stop(&self) {
        self.stopping.store(true, Ordering::SeqCst);
        self.wake.notify_all();
    }
}

/// Opens the device of `config.gpu` and checks it with the known-answer test, in a blocking
/// context. `Ok(None)`: no GPU wanted, or `auto` found none (or a failing one: logged, CPU only).
/// An error: a GPU asked for by index cannot be used.
pub(crate) fn open(config: &WorkerConfig) -> Result<Option<GpuSolver>, WorkerError> {
    let selector = match config.gpu {
        GpuMode::Off => return Ok(None),
        // Never pocl's CPU device: it is slower than the CPU solver on the same cores.
        GpuMode::Auto => DeviceSelector::GpuOnly,
        GpuMode::Index(i) => DeviceSelector::Index(i),
        GpuMode::Cuda(ordinal) => DeviceSelector::Cuda(ordinal),
    };
    let opened = GpuSolver::with_options(selector, GpuOptions::from_env())
        .map_err(WorkerError::Gpu)
        .and_then(|mut solver| {
            self_test(&mut solver)?;
            Ok(solver)
        });
    match (opened, config.gpu) {
        (Ok(solver), _) => {
            #[cfg(feature = "fault-injection")]
            let solver = crate::fault::gpu(solver);
            Ok(Some(solver))
        }
        (
            Err(WorkerError::Gpu(e @ (GpuError::NoPlatform { .. } | GpuError::NoDevice { .. }))),
            GpuMode::Auto,
        ) => {
            tracing::info!(reason = %e, "--gpu auto: no GPU found, solving on the CPU only");
            Ok(None)
        }
        (Err(e), GpuMode::Auto) => {
            // The device's own error, not only "the GPU cannot be used".
            let error = match &e {
                WorkerError::Gpu(inner) => inner.to_string(),
                other => other.to_string(),
            };
            tracing::error!(%error, "--gpu auto: the GPU failed its start-up checks; solving on the CPU only");
            Ok(None)
        }
        (Err(e), _) => Err(e),
    }
}

/// Known-answer test on the device: the whole N=10 and N=12 job lists must give the plain search's
/// totals. Logs the device, the time and the rate.
fn self_test(solver: &mut GpuSolver) -> Result<(), WorkerError> {
    for n in [10, 12] {
        let started = Instant::now();
        let expected = reference::count_all(n).map_err(|e| WorkerError::Gpu(e.into()))?;
        let list = job_list(n, &SplitParams::default()).map_err(|e| WorkerError::Gpu(e.into()))?;
        let counts = solver.solve_jobs(&list.jobs)?;
        let total = (|| -> Result<u128, nqueens_core::CoreError> {
            let mut tally = Tally::new(n)?;
            for (job, c) in list.jobs.iter().zip(&counts) {
                tally.add(job.weight, c)?;
            }
            Ok(tally.totals()?.total)
        })();
        // A count that does not even add up is as wrong as a wrong total.
        let found = total.map_or(u64::MAX, |t| u64::try_from(t).unwrap_or(u64::MAX));
        if found != expected {
            return Err(WorkerError::GpuSelfTest { n, found, expected });
        }
        tracing::info!(
            device = %solver.device(),
            n,
            seconds = started.elapsed().as_secs_f64(),
            "GPU self-test passed"
        );
    }
    Ok(())
}

/// Starts the GPU thread for `solver`; its jobs come through the returned lane, its reports go to
/// `reports`, and after a fault its jobs go to `cpu`. The thread ends once no one reads `reports`.
pub(crate) fn start(solver: GpuSolver, cpu: Arc<CpuLane>, reports: ReportTx) -> Arc<GpuLane> {
    let lane = Arc::new(GpuLane {
        queue: Mutex::new(VecDeque::new()),
        wake: Condvar::new(),
        alive: AtomicBool::new(true),
        stopping: AtomicBool::new(false),
        device: solver.device().to_string(),
    });
    let me = lane.clone();
    let span = tracing::Span::current();
    std::thread::Builder::new()
        .name("nq-gpu".into())
        .spawn(move || span.in_scope(|| run(&me, solver, &cpu, &reports)))
        .expect("starting the GPU thread");
    lane
}

/// The GPU thread: takes every queued job, counts them on the device, reports the answers.
fn run(lane: &GpuLane, mut solver: GpuSolver, cpu: &Arc<CpuLane>, reports: &ReportTx) {
    let mut rate = Rate::default();
    loop {
        let tasks: Vec<Task> = {
            let mut queue = lane.queue.lock();
            while queue.is_empty() {
                lane.wake.wait_for(&mut queue, Duration::from_secs(1));
                if reports.is_closed() {
                    return;
                }
            }
            let take = queue.len().min(MAX_BATCH_JOBS);
            queue.drain(..take).collect()
        };
        if lane.stopping.load(Ordering::SeqCst) {
            // Not started before the stop: they stay held and are released.
            tasks.iter().for_each(|_| reports.abandoned());
            continue;
        }
        let jobs: Vec<Job> = tasks.iter().map(|t| t.job.clone()).collect();
        let started = Instant::now();
        let solved = solver.solve_jobs(&jobs);
        let seconds = started.elapsed().as_secs_f64();
        match solved {
            Ok(counts) => {
                let share = seconds / tasks.len().max(1) as f64;
                for (task, counts) in tasks.iter().zip(counts) {
                    reports.finished(task, Ok((counts, share)));
                }
                rate.add(&lane.device, jobs.len(), seconds, solver.last_stats().items);
            }
            Err(e) => return shut(lane, &e, tasks, cpu, reports),
        }
    }
}

/// A GPU fault: the lane shuts for the rest of the run, and the batch that failed and every
/// queued job go to the CPU lane. No count is taken from the device.
fn shut(lane: &GpuLane, e: &GpuError, failed: Vec<Task>, cpu: &Arc<CpuLane>, reports: &ReportTx) {
    let queued: Vec<Task> = {
        let mut queue = lane.queue.lock();
        lane.alive.store(false, Ordering::SeqCst);
        queue.drain(..).collect()
    };
    tracing::error!(
        device = %lane.device,
        error = %e,
        jobs = failed.len() + queued.len(),
        "GPU fault: no result taken from the device; its jobs are solved on the CPU, \
         and the GPU is not used again in this run"
    );
    for task in failed.into_iter().chain(queued) {
        cpu.take(task, reports);
    }
}

/// Throughput of the lane, logged once a minute.
#[derive(Default)]
struct Rate {
    since: Option<Instant>,
    jobs: usize,
    items: u64,
    busy: f64,
}

impl Rate {
    fn add(&mut self, device: &str, jobs: usize, seconds: f64, items: u64) {
        let since = *self.since.get_or_insert_with(Instant::now);
        self.jobs += jobs;
        self.items += items;
        self.busy += seconds;
        if since.elapsed() >= RATE_EVERY {
            tracing::info!(
                device,
                jobs = self.jobs,
                jobs_per_second = self.jobs as f64 / self.busy.max(1e-9),
                items_per_second = self.items as f64 / self.busy.max(1e-9),
                busy = self.busy / since.elapsed().as_secs_f64(),
                "GPU rate"
            );
            *self = Rate::default();
        }
    }
}
