//! The worker: leases jobs from a coordinator, solves them on a rayon pool, streams the results
//! back (in bursts of up to 20 ms while the lanes are busy, see `state`), and keeps each until the
//! coordinator acknowledges that it is committed.
//!
//! Two worlds that must not block each other: the rayon pool does the CPU work, and a tokio runtime
//! (its own threads) does all networking, so heartbeats keep leases alive however busy the cores
//! are. Results outlive connections: a result computed while the coordinator is away waits among
//! the state's unacknowledged answers and is re-sent after the reconnect.
//!
//! Here: start-up and the graceful stop; in `state`: the one owner of the worker's state (identity,
//! held leases, jobs with the lanes, unacknowledged answers) and the task that records the lanes'
//! reports; in `work`: the domain types the lanes see (jobs with typed ids) and their reports; in
//! `lanes`: handing tasks to the lanes; in `cpu`: the CPU lane (a long job split into items that
//! every thread solves); in `gpu`: the GPU lane; in `session`: the connection to the coordinator
//! (leasing one batch ahead), where the wire ends; in `config`: the settings and their checks; in
//! `error`: the errors.
//!
//! Imports point one way: `lib` -> `session` -> `lanes` -> `gpu` -> `cpu` -> `work`, and `state`
//! -> `work`; `config` and `error` are leaves.

#![warn(missing_docs)]

use lanes::Lanes;
use nqueens_core::{reference, SplitParams, Tally};
use nqueens_proto as pb;
use session::Worker;
use state::State;
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tracing::Instrument;

mod config;
pub mod cpu;
mod error;
#[cfg(feature = "fault-injection")]
mod fault;
mod gpu;
mod lanes;
mod session;
mod state;
mod work;

pub use config::{
    CheckedWorkerConfig, GpuMode, WorkerConfig, WorkerConfigError, DEFAULT_GPU_SLOTS,
    DEFAULT_MAX_BACKOFF,
};
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

/// Runs a worker until the run is complete, `shutdown` resolves, or the coordinator refuses it.
/// Every log line it writes carries the coordinator's URL, and once registered the worker id.
pub async fn run(
    config: CheckedWorkerConfig,
    shutdown: impl Future<Output = ()>,
) -> Result<WorkerExit, WorkerError> {
    let config = config.0;
    let span = tracing::info_span!("worker", coordinator = %config.connect);
    run_in_span(config, shutdown).instrument(span).await
}

/// The body of [`run`]: self-test, lanes, the state's owner, then the reconnect loop until the
/// run ends or a stop is requested.
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
    let state = Arc::new(State::default());
    let worker = start_lanes(config, state).await?;
    let collector = tokio::spawn(state::collect(worker.state.clone()).in_current_span());
    let outcome = tokio::select! {
        r = session::connect_loop(&worker, test) => r.map(|()| WorkerExit::RunComplete),
        _ = shutdown => {
            tracing::info!("stop requested: finishing running jobs, releasing the rest");
            graceful_stop(&worker).await;
            Ok(WorkerExit::Stopped)
        }
    };
    collector.abort();
    outcome
}

/// Opens the GPU (if one is wanted) and starts the CPU and GPU lanes, reporting to `state`.
async fn start_lanes(config: WorkerConfig, state: Arc<State>) -> Result<Worker, WorkerError> {
    let reports = state.reports();
    let gpu_config = config.clone();
    let span = tracing::Span::current();
    let solver = tokio::task::spawn_blocking(move || span.in_scope(|| gpu::open(&gpu_config)))
        .await
        .unwrap_or(Ok(None))?;
    let threads = config.threads;
    let cpu = cpu::CpuLane::new(threads).map_err(WorkerError::Pool)?;
    let build = nqueens_core::solver_build().name;
    let (mut slots, mut device, mut gpu) =
        (threads, format!("cpu {build} ({threads} threads)"), None);
    if let Some(solver) = solver {
        // The coordinator sizes leases by the slots a worker declares: the GPU's, plus the CPU
        // threads that solve beside it.
        let beside = if config.cpu_beside_gpu { threads } else { 0 };
        slots = beside + config.gpu_slots;
        device = format!("{} (+{beside} cpu threads)", solver.device());
        tracing::info!(device = %solver.device(), cpu_threads = beside, slots, "solving on the GPU");
        gpu = Some(gpu::start(solver, cpu.clone(), reports.clone()));
    }
    let lanes = Lanes::new(cpu, gpu, config.cpu_beside_gpu, reports);
    Ok(Worker { config, device, slots, state, lanes })
}

/// SIGTERM: no new jobs start; running ones get a short while to finish and be acknowledged;
/// every job still held is then released so others can take it at once.
async fn graceful_stop(worker: &Worker) {
    worker.state.stop();
    worker.lanes.stop();
    // Lets a lease call that the stop interrupted reach the coordinator before the release.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        // Jobs not started are reported abandoned at once; what stays is what is running.
        if worker.state.in_flight() == 0 && worker.state.unacked() == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let Some(me) = worker.state.identity() else { return };
    let worker_id = me.worker_id;
    // The whole release gets at most 10 s, so that the stop ends within a supervisor's usual
    // grace period (30 s in Kubernetes and Docker) even with the coordinator gone.
    match tokio::time::timeout(Duration::from_secs(10), session::release_all(&worker.config, &me))
        .await
    {
        Ok(Ok(n)) => tracing::info!(worker_id, jobs = n, "released unfinished jobs"),
        Ok(Err(e)) => {
            tracing::warn!(worker_id, why = e.why(), error = %e.chain(), "could not release leases; they will expire on the coordinator")
        }
        Err(_) => {
            tracing::warn!(
                worker_id,
                "no answer to the release within 10 s; the leases will expire on the coordinator"
            )
        }
    }
}
