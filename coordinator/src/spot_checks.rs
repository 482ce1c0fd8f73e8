//! Known answers the coordinator computes itself, so that workers never grade themselves.
//!
//! At start, a background thread solves a few cheap jobs of the run, drawn at random (nothing a
//! worker can predict), and hands their answers to the engine. They become spot checks: leased to
//! workers like any job, and a worker that answers one wrongly is untrusted and everything it
//! counted is solved again. Later in the run, jobs that two trusted workers agreed on join the
//! same pool (see `Scheduler::known_answer`).

use crate::engine::{Command, EngineHandle};
use nqueens_core::Job;
use nqueens_scheduler::JobId;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// At most this many jobs are solved for reference answers.
pub const REFERENCE_JOBS: usize = 8;
/// They are drawn as the cheapest of this many random jobs.
const DRAWN: usize = 64;
/// No new reference job is started after this long (one already started finishes).
const BUDGET: Duration = Duration::from_secs(2);
/// Above this board size even the cheapest jobs take too long for the coordinator to solve at
/// start; spot checks then come from jobs that two trusted workers agreed on. One above
/// `referee::REFEREE_MAX_N`, which must solve any job in dispute, not the cheapest.
pub const REFERENCE_MAX_N: u8 = 23;

/// Solves reference jobs on a background thread (one core, for about `BUDGET`; no lower
/// priority than any other thread) and sends each answer to the engine as it is found. `None`
/// where there are none to solve; an error if the thread cannot be started.
pub fn spawn(
    jobs: Arc<Vec<Job>>,
    engine: EngineHandle,
) -> std::io::Result<Option<std::thread::JoinHandle<()>>> {
    let Some(n) = jobs.first().map(|job| job.n) else { return Ok(None) };
    if n > REFERENCE_MAX_N {
        tracing::info!(n, "no reference jobs above N={REFERENCE_MAX_N}; spot checks use jobs two workers agreed on");
        return Ok(None);
    }
    let spawned = std::thread::Builder::new().name("nq-reference".into()).spawn(move || {
        let started = Instant::now();
        let mut solved = 0;
        for id in draw(&jobs) {
            if started.elapsed() > BUDGET {
                break;
            }
            match jobs[id].solve() {
                Ok(counts) => {
                    if !engine.send(Command::Reference { job_id: JobId::new(id as u64), counts }) {
                        return;
                    }
                    solved += 1;
                }
                Err(e) => tracing::error!(job = id, error = %e, "cannot solve a reference job"),
            }
        }
        tracing::info!(
            jobs = solved,
            seconds = started.elapsed().as_secs_f64(),
            "reference answers computed for spot checks"
        );
    });
    spawned.map(Some)
}

/// The cheapest [`REFERENCE_JOBS`] of [`DRAWN`] jobs drawn at random, cheapest first.
fn draw(jobs: &[Job]) -> Vec<usize> {
    let mut seed = [0u8; 8 * DRAWN];
    if getrandom::getrandom(&mut seed).is_err() {
        tracing::warn!("no OS randomness: no reference jobs");
        return Vec::new();
    }
    let mut ids: Vec<usize> = seed
        .chunks_exact(8)
        .map(|c| (u64::from_le_bytes(c.try_into().expect("8 bytes")) % jobs.len() as u64) as usize)
        .collect();
    ids.sort_unstable();
    ids.dedup();
    ids.sort_by_key(|&id| jobs[id].estimate);
    ids.truncate(REFERENCE_JOBS);
    ids
}

#[cfg(test)]
mod tests {
    use super::*;
    use nqueens_core::{job_list, SplitParams};

    #[test]
    fn draws_distinct_cheap_jobs() {
        let list = job_list(12, &SplitParams::default()).unwrap();
        let ids = draw(&list.jobs);
        assert!(!ids.is_empty() && ids.len() <= REFERENCE_JOBS);
        assert!(ids.windows(2).all(|w| list.jobs[w[0]].estimate <= list.jobs[w[1]].estimate));
        let mut unique = ids.clone();
        unique.sort_unstable();
        unique.dedup();
        assert_eq!(unique.len(), ids.len());
    }
}
