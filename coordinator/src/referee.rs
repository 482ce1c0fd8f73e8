//! The referee: the coordinator's own answers to the jobs the scheduler hands it
//! (`Scheduler::wants_ruling`: answers that disagree, an answer under review or drawn for
//! verification, a worker's solver error, or doubt after a final tally broke the symmetry
//! identities), solved on one background thread so that no worker's word, nor two identities
//! under one credential, settles them. Each answer, or failed attempt, goes back to the engine
//! through the sink it is given (`Command::Reference`, `Command::RefereeFailed`).
//!
//! The engine starts it only for boards up to [`REFEREE_MAX_N`] (above, disputes wait for
//! workers of other credentials); a larger job sent anyway is skipped.

use nqueens_core::{Job, JobCounts};
use nqueens_scheduler::JobId;
use std::sync::mpsc;
use std::sync::Arc;
use std::time::Instant;

/// Above this board size the referee solves no job: one would take too long on the
/// coordinator's host (disputes are then settled by other credentials). One below
/// `spot_checks::REFERENCE_MAX_N`: the referee must solve whichever job is in dispute,
/// heavy ones included, while reference jobs are the cheapest of a random draw.
pub const REFEREE_MAX_N: u8 = 22;

/// The coordinator's own answer to one job: its counts, or `None` where its attempt failed.
#[derive(Debug)]
pub struct Ruling {
    /// The job.
    pub job_id: JobId,
    /// Its counts, or `None` where the attempt failed.
    pub counts: Option<JobCounts>,
}

/// Starts the referee thread; jobs are sent by id on the returned channel, each answer goes to
/// `rule` (the engine's command channel: the referee knows nothing of the engine), which says
/// whether anyone still listens. The thread ends when either side closes. An error if the
/// thread cannot be started.
pub fn spawn(
    jobs: Arc<Vec<Job>>,
    rule: impl Fn(Ruling) -> bool + Send + 'static,
) -> std::io::Result<mpsc::Sender<JobId>> {
    let (tx, rx) = mpsc::channel::<JobId>();
    std::thread::Builder::new().name("nq-referee".into()).spawn(move || {
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
                    if !rule(Ruling { job_id, counts: Some(counts) }) {
                        return;
                    }
                }
                Err(e) => {
                    tracing::error!(job = %job_id, error = %e, "referee cannot solve the job");
                    if !rule(Ruling { job_id, counts: None }) {
                        return;
                    }
                }
            }
        }
    })?;
    Ok(tx)
}
