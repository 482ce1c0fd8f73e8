//! Solving many jobs on all cores.
//!
//! Jobs differ in cost by two orders of magnitude or more, so they are handed out most expensive
//! first (by [`Job::estimate`]) from a shared cursor: every thread takes the next job the moment it
//! is free, and the run ends on the cheapest jobs instead of waiting on one big straggler.

use crate::{CoreError, Job, JobCounts};
use parking_lot::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// The order in which to run `jobs`: indices sorted by decreasing estimate, then by id.
pub fn longest_first(jobs: &[Job]) -> Vec<usize> {
    let mut order: Vec<usize> = (0..jobs.len()).collect();
    order.sort_by_key(|&i| (std::cmp::Reverse(jobs[i].estimate), jobs[i].id));
    order
}

/// Solves every job on `pool`, longest first, calling `on_result(index, counts, time taken)` from
/// the solving thread as each job finishes. Stops handing out jobs after the first error.
pub fn solve_all<F>(pool: &rayon::ThreadPool, jobs: &[Job], on_result: F) -> Result<(), CoreError>
where
    F: Fn(usize, &JobCounts, Duration) + Sync,
{
    let order = longest_first(jobs);
    let cursor = AtomicUsize::new(0);
    let failure: Mutex<Option<CoreError>> = Mutex::new(None);
    pool.broadcast(|_| loop {
        let next = cursor.fetch_add(1, Ordering::Relaxed);
        let Some(&index) = order.get(next) else { break };
        let started = Instant::now();
        match jobs[index].solve() {
            Ok(counts) => on_result(index, &counts, started.elapsed()),
            Err(e) => {
                failure.lock().get_or_insert(e);
                cursor.store(order.len(), Ordering::Relaxed);
                break;
            }
        }
    });
    match failure.into_inner() {
        Some(e) => Err(e),
        None => Ok(()),
    }
}
