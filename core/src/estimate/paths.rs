//! A sampled job's time and solutions: solved whole on one thread, timed in that thread's CPU
//! time, or, when it is too big for that (record sizes), estimated down random paths of its
//! parts (Knuth's estimator of a search tree's size, with importance sampling by the parts'
//! costs).

use super::{costs_at, Timed, PATHS};
use crate::{CoreError, Job};
use std::time::{Duration, Instant};

/// Rows below a part whose partial placements weigh its draw on a path: the nearer a weight is to
/// the part's true time, the smaller the spread of the estimate.
const PATH_COST_DEPTH: usize = 4;

/// CPU time of the calling thread, where the platform has a thread clock.
fn thread_cpu_time() -> Option<Duration> {
    #[cfg(unix)]
    {
        let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
        // SAFETY: `ts` is a valid, writable timespec; the call only writes into it.
        let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
        if rc == 0 {
            return Some(Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32));
        }
    }
    None
}

/// Runs `work` on the calling thread: what it gave, the seconds it took (thread CPU time if
/// available, else wall time) and whether that was CPU time.
pub(super) fn timed_here<T>(work: impl FnOnce() -> T) -> (T, f64, bool) {
    let cpu = thread_cpu_time();
    let wall = Instant::now();
    let out = work();
    let (seconds, on_cpu) = match (cpu, thread_cpu_time()) {
        (Some(a), Some(b)) => ((b.saturating_sub(a)).as_secs_f64(), true),
        _ => (wall.elapsed().as_secs_f64(), false),
    };
    (out, seconds, on_cpu)
}

/// Solves `job` on the calling thread, returning the counts and the seconds it took (see
/// [`timed_here`]) and whether that was CPU time.
pub(super) fn timed_solve(job: &Job) -> Result<(Timed, bool), CoreError> {
    let (counts, seconds, on_cpu) = timed_here(|| job.solve());
    let weighted_solutions = counts?.solutions as f64 * f64::from(job.weight);
    Ok((Timed { seconds, weighted_solutions }, on_cpu))
}

/// Solves `job`, or when it has more than `whole_rows` searched rows left, [`PATHS`] random paths
/// down it: from the job, one row deeper at a time ([`Job::split`]), a part drawn with probability
/// proportional to its partial placements [`PATH_COST_DEPTH`] rows deeper (plus one), until
/// `whole_rows` rows are left; that part is solved and its time and solutions scaled by one over
/// the path's probability. Averaged over the paths this is an unbiased estimate of the whole job's
/// time and solutions (Knuth's estimator of a search tree's size, with importance sampling by the
/// estimate), for a few milliseconds of work.
///
/// The parts are timed as a whole job runs them: warm. A part at record sizes takes about 0.1 ms,
/// and timed alone, after the path's splitting, it paid for cold caches (the closed form's tables,
/// the batch arrays) that a job fills once for all its parts: the paths put N = 23-24 at 1.2-1.5x
/// the cost per solution of the same jobs solved whole. So every path is drawn first, one part is
/// solved untimed to warm the caches, then the parts are timed back to back. The warm-up part is
/// another path's (the last one drawn), never the part timed next: a part solved twice in a row
/// would replay its own branches into a predictor that remembers them, and time too fast.
pub(super) fn timed_sampled(
    job: &Job,
    whole_rows: usize,
    seed: u64,
) -> Result<(Timed, bool), CoreError> {
    let rows = job.prepare()?.0.rows();
    if rows.saturating_sub(job.prefix.len()) <= whole_rows {
        return timed_solve(job);
    }
    let drawn = draw_paths(job, whole_rows, PATHS, seed)?;
    if let Some((warm_up, _)) = drawn.last() {
        if drawn.len() > 1 {
            warm_up.solve()?;
        }
    }
    let (mut seconds, mut solutions, mut on_cpu) = (0.0, 0.0, true);
    for (part, scale) in &drawn {
        let (t, cpu) = timed_solve(part)?;
        seconds += t.seconds * scale;
        solutions += t.weighted_solutions * scale;
        on_cpu &= cpu;
    }
    // Dead-end paths found nothing and took no time: they count as zeros in the average.
    let paths = PATHS as f64;
    Ok((Timed { seconds: seconds / paths, weighted_solutions: solutions / paths }, on_cpu))
}

/// `paths` random paths down `job` to parts with `whole_rows` searched rows left (see
/// [`timed_sampled`]), drawn with a generator seeded by `seed` and the job's id: each path's part
/// and one over the path's probability. Paths that end in a dead end are left out (they count as
/// zeros in an average over `paths`). A job with at most `whole_rows` rows left is its own part.
pub fn draw_paths(
    job: &Job,
    whole_rows: usize,
    paths: usize,
    seed: u64,
) -> Result<Vec<(Job, f64)>, CoreError> {
    let rows = job.prepare()?.0.rows();
    if rows.saturating_sub(job.prefix.len()) <= whole_rows {
        return Ok(vec![(job.clone(), 1.0)]);
    }
    let mut rng = crate::SplitMix64::new(seed ^ job.id.get().wrapping_mul(0x9e37_79b9_7f4a_7c15));
    let mut drawn = Vec::with_capacity(paths);
    for _ in 0..paths {
        if let Some(path) = draw_path(job, rows, whole_rows, &mut rng)? {
            drawn.push(path);
        }
    }
    Ok(drawn)
}

/// One random path down `job` (of `rows` searched rows) to a part with `whole_rows` rows left
/// (see [`timed_sampled`]): the part and one over the path's probability, or `None` for a path
/// that ends in a dead end.
fn draw_path(
    job: &Job,
    rows: usize,
    whole_rows: usize,
    rng: &mut crate::SplitMix64,
) -> Result<Option<(Job, f64)>, CoreError> {
    let left = |j: &Job| rows.saturating_sub(j.prefix.len());
    let mut item = job.clone();
    let mut scale = 1.0f64;
    while left(&item) > whole_rows {
        let parts = item.split(1)?;
        if parts.is_empty() {
            return Ok(None);
        }
        let weights = costs_at(&parts, PATH_COST_DEPTH)?;
        let total: u64 = weights.iter().map(|w| w + 1).sum();
        let mut pick = rng.below(total);
        let (chosen, weight) = parts
            .into_iter()
            .zip(weights)
            .find(|(_, w)| {
                let take = pick <= *w;
                pick = pick.saturating_sub(w + 1);
                take
            })
            .expect("the draw falls within the parts");
        if chosen.prefix.len() <= item.prefix.len() {
            break;
        }
        scale *= total as f64 / (weight + 1) as f64;
        item = chosen;
    }
    Ok(Some((item, scale)))
}
