//! The solver lanes together: hands each leased task to the GPU lane (when there is a working
//! one) or the CPU lane, and stops them both. Every task ends in exactly one [`Report`] left in
//! the [`Inbox`] the lanes were given (through their [`ReportTx`]); nothing here touches the
//! worker's state.
//!
//! [`Report`]: crate::work::Report
//! [`Inbox`]: crate::work::Inbox

use crate::cpu::CpuLane;
use crate::gpu::GpuLane;
use crate::work::{JobId, LeaseId, ReportTx, Task};
use nqueens_core::Job;
use std::sync::Arc;

/// The CPU lane, the GPU lane if one is in use, and where their reports go.
pub(crate) struct Lanes {
    cpu: Arc<CpuLane>,
    gpu: Option<Arc<GpuLane>>,
    /// With a GPU: whether CPU threads also take whole jobs from its queue.
    cpu_beside_gpu: bool,
    reports: ReportTx,
}

impl Lanes {
    /// Lanes that report to `reports`.
    pub fn new(
        cpu: Arc<CpuLane>,
        gpu: Option<Arc<GpuLane>>,
        cpu_beside_gpu: bool,
        reports: ReportTx,
    ) -> Self {
        Lanes { cpu, gpu, cpu_beside_gpu, reports }
    }

    /// Hands a leased batch to the lanes, in order (FIFO, so the coordinator's longest-first
    /// order holds). A job given as an error (its spec did not fit a job) is reported with that
    /// error as its answer.
    pub fn start(
        &self,
        lease: LeaseId,
        jobs: impl IntoIterator<Item = (JobId, Result<Job, String>)>,
    ) {
        let gpu = self.gpu.as_ref().filter(|lane| lane.alive());
        for (id, job) in jobs {
            let task = match job {
                Ok(job) => Task { lease, job },
                Err(e) => {
                    self.reports.refused(lease, id, e);
                    continue;
                }
            };
            let Some(lane) = gpu else {
                self.cpu.take(task, &self.reports);
                continue;
            };
            match lane.push(task) {
                Err(task) => self.cpu.take(task, &self.reports),
                Ok(()) if self.cpu_beside_gpu => {
                    // A CPU thread beside the GPU takes one queued job, if the GPU has not.
                    let (cpu, lane, reports) =
                        (self.cpu.clone(), lane.clone(), self.reports.clone());
                    self.cpu.spawn(move || {
                        if let Some(task) = lane.steal() {
                            cpu.take_whole(&task, &reports);
                        }
                    });
                }
                Ok(()) => {}
            }
        }
    }

    /// No new task starts in either lane; tasks not started are reported abandoned.
    pub fn stop(&self) {
        self.cpu.stop();
        if let Some(lane) = &self.gpu {
            lane.stop();
        }
    }
}
