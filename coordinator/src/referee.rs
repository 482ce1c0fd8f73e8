//! The referee: the coordinator's own answers to jobs in dispute (two groups disagree) or in
//! doubt (a final tally broke the symmetry identities), solved on one background thread so
//! that no worker's word, nor two identities under one credential, settles them.
//!
//! A job whose expected time is too long for the coordinator's host is skipped here and
//! settled by workers of other credentials instead (see `Scheduler::result`).

use crate::engine::{Command, EngineHandle};
use nqueens_core::Job;
use nqueens_scheduler::JobId;
use std::sync::mpsc;
use std::sync::Arc;
use std::time::Instant;

/// Above this board size the referee solves no job: one would take too long on the
/// coordinator's host (disputes are then settled by other credentials).
pub const REFEREE_MAX_N: u8 = 22;

/// Starts the referee thread; jobs are sent by id on the returned channel, answers come back to
/// the engine as [`Command::Reference`]. The thread ends when the channel closes.
pub fn spawn(jobs: Arc<Vec<Job>>, engine: EngineHandle) -> mpsc::Sender<JobId> {
    let (tx, rx) = mpsc::channel::<JobId>();
    let spawned = std::thread::Builder::new().name("nq-referee".into()).spawn(move || {
        for job_id in rx {
            let Some(job) = jobs.get(job_id.get() as usize) else { continue };
            if job.n > REFEREE_MAX_N {
                tracing::info!(
                    job = %job_id,
                    n = job.n,
                    "too large for the referee: other credentials settle it"
                );
                continue;
            }
            let started = Instant::now();
            match job.solve() {
                Ok(counts) => {
                    tracing::info!(
                        job = %job_id,
                        solutions = counts.solutions,
                        seconds = started.elapsed().as_secs_f64(),
                        "referee: the coordinator's own answer"
                    );
                    if !engine.send(Command::Reference { job_id, counts }) {
                        return;
                    }
                }
                Err(e) => {
                    tracing::error!(job = %job_id, error = %e, "referee cannot solve the job");
                    if !engine.send(Command::RefereeFailed { job_id }) {
                        return;
                    }
                }
            }
        }
    });
    if let Err(e) = spawned {
        tracing::error!(error = %e, "cannot start the referee thread; disputes wait for workers");
    }
    tx
}
