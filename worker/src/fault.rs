//! A deliberately faulty solver, for the end-to-end tests only: compiled in with the
//! `fault-injection` feature (which the tests enable), absent from a normal build.
//!
//! `NQ_FAULT_WRONG_ONE_IN=K` makes the worker report one solution too many (a consistent,
//! plausible-looking answer) on about one job in K, chosen by a hash of the job id: like a real
//! solver bug, it hits the same inputs every time.

use nqueens_core::JobCounts;
use std::sync::OnceLock;

/// The fault rate from the environment, read once; `None` when unset or 0.
fn one_in() -> Option<u64> {
    static ONE_IN: OnceLock<Option<u64>> = OnceLock::new();
    *ONE_IN.get_or_init(|| {
        let k =
            std::env::var("NQ_FAULT_WRONG_ONE_IN").ok()?.parse::<u64>().ok().filter(|&k| k > 0)?;
        tracing::warn!(one_in = k, "FAULT INJECTION: this worker reports wrong counts on purpose");
        Some(k)
    })
}

/// Whether the injected fault hits this job.
pub fn hits(job_id: u64) -> bool {
    one_in().is_some_and(|k| {
        job_id.wrapping_mul(0x9E37_79B9_7F4A_7C15).rotate_left(17).is_multiple_of(k)
    })
}

/// The counts as the faulty solver reports them.
pub fn corrupt(job_id: u64, counts: JobCounts) -> JobCounts {
    if hits(job_id) {
        JobCounts { solutions: counts.solutions + 1, ..counts }
    } else {
        counts
    }
}

/// Logs the warning at start-up if the fault is switched on.
pub fn announce() {
    let _ = one_in();
}

/// The GPU solver with the fault named by `NQ_GPU_FAULT` (`build` or `midbatch`) switched on after
/// its self-test passed: the first batch of leased jobs then fails on the device.
pub fn gpu(mut solver: nqueens_gpu::GpuSolver) -> nqueens_gpu::GpuSolver {
    if let Some(fault) = nqueens_gpu::Fault::from_env() {
        tracing::warn!(?fault, "FAULT INJECTION: this worker's GPU fails on purpose");
        solver.set_fault(Some(fault));
    }
    solver
}
