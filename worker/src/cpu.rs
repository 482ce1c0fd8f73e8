//! The CPU lane: a long leased job is split into items ([`Job::split`]) that all threads of the
//! pool solve, longest first, so one long job keeps every core busy and a run's tail is its longest job
//! spread over the host instead of one thread's work.
//!
//! Splitting costs a little per item (each is set up and its cost estimated), which a job of a
//! millisecond would feel: the lane measures its seconds per unit of [`Job::estimate`] and splits
//! only jobs expected to take longer than [`SPLIT_ABOVE`] (and every job until it has measured).
//!
//! Items are queued on the pool in the order jobs arrive (the coordinator hands them out longest
//! first), so the threads finish one job together before most of them start the next: a host holds
//! few jobs, and a preempted host loses little. The thread that finishes a job's last item merges
//! its counts and reports the job.

use crate::work::{Answer, ReportTx, Task};
use nqueens_core::{Job, JobCounts};
use parking_lot::Mutex;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

/// A job split into fewer items than this many per thread gets split one row deeper (up to
/// [`MAX_EXTRA_ROWS`]): enough items that threads finishing early find more to take.
const ITEMS_PER_THREAD: usize = 8;

/// Jobs expected to take longer than this on one thread are split: at this size the split's own
/// cost is under a percent of the job's.
pub const SPLIT_ABOVE: std::time::Duration = std::time::Duration::from_millis(20);

/// The deepest split: three more rows give thousands of items from any job of a large board.
const MAX_EXTRA_ROWS: usize = 3;

/// What became of one job handed to [`CpuLane::solve`].
#[derive(Debug)]
pub enum Solved {
    /// Every item was solved.
    Counts {
        /// The job's counts, merged from its items'.
        counts: JobCounts,
        /// Wall seconds from the first item's start to the last item's end.
        seconds: f64,
    },
    /// The job (or one of its items) could not be solved: why.
    Failed(String),
    /// A stop came before some item started: the job has no answer and stays held.
    Abandoned,
}

/// A rayon pool that solves jobs split into items. See the module docs.
pub struct CpuLane {
    pool: rayon::ThreadPool,
    threads: usize,
    /// Set by [`stop`](Self::stop): items not yet started are skipped.
    stopping: AtomicBool,
    /// Items being solved right now.
    running: AtomicUsize,
    /// Measured seconds per unit of [`Job::estimate`] (a moving average), once anything was solved.
    seconds_per_estimate: Mutex<Option<f64>>,
}

/// One job on its way through the pool: what its items found so far.
struct InProgress<D> {
    remaining: AtomicUsize,
    found: Mutex<Found>,
    /// Called once, by the thread that ends the job's last item.
    done: Mutex<Option<D>>,
}

impl<D> InProgress<D> {
    /// The start of one more item, noted as the job's start if it is the first; None once an
    /// item failed (the job's answer is then its error, and its other items are skipped).
    fn start(&self) -> Option<Instant> {
        let mut found = self.found.lock();
        if found.error.is_some() {
            return None;
        }
        let now = Instant::now();
        found.started.get_or_insert(now);
        Some(now)
    }
}

#[derive(Default)]
struct Found {
    counts: JobCounts,
    error: Option<String>,
    abandoned: bool,
    started: Option<Instant>,
}

impl CpuLane {
    /// A lane of `threads` solver threads (named `nq-solve-<i>`).
    pub fn new(threads: usize) -> Result<Arc<Self>, rayon::ThreadPoolBuildError> {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .thread_name(|i| format!("nq-solve-{i}"))
            .build()?;
        Ok(Arc::new(CpuLane {
            pool,
            threads,
            stopping: AtomicBool::new(false),
            running: AtomicUsize::new(0),
            seconds_per_estimate: Mutex::new(None),
        }))
    }

    /// Threads of the pool.
    pub fn threads(&self) -> usize {
        self.threads
    }

    /// Items being solved right now.
    pub fn running(&self) -> usize {
        self.running.load(Ordering::SeqCst)
    }

    /// No item starts after this; jobs with an item not yet started end [`Solved::Abandoned`].
    pub fn stop(&self) {
        self.stopping.store(true, Ordering::SeqCst);
    }

    /// Runs `f` on a pool thread, after the items queued before it have started.
    pub fn spawn(&self, f: impl FnOnce() + Send + 'static) {
        self.pool.spawn(f);
    }

    /// Splits `job` into items and queues them, longest first; `done` gets the job's outcome on
    /// the pool thread that ends its last item.
    pub fn solve<D>(self: &Arc<Self>, job: Job, done: D)
    where
        D: FnOnce(Solved) + Send + 'static,
    {
        let items = match self.items(&job) {
            Ok(items) => items,
            Err(e) => return done(Solved::Failed(e.to_string())),
        };
        let job = Arc::new(InProgress {
            remaining: AtomicUsize::new(items.len()),
            found: Mutex::new(Found::default()),
            done: Mutex::new(Some(done)),
        });
        for item in items {
            let (me, job) = (self.clone(), job.clone());
            self.pool.spawn(move || me.solve_item(&item, &job));
        }
    }

    /// Solves a leased task split into items (see [`solve`](Self::solve)) and reports its end.
    pub(crate) fn take(self: &Arc<Self>, task: Task, reports: &ReportTx) {
        let reports = reports.clone();
        let job = task.job.clone();
        self.solve(job, move |solved| match solved {
            Solved::Counts { counts, seconds } => reports.finished(&task, Ok((counts, seconds))),
            Solved::Failed(e) => reports.finished(&task, Err(e)),
            Solved::Abandoned => reports.abandoned(),
        });
    }

    /// Solves a leased task whole on this thread (a CPU thread beside the GPU takes whole jobs
    /// from its queue) and reports its end: abandoned if a stop came first.
    pub(crate) fn take_whole(&self, task: &Task, reports: &ReportTx) {
        match self.solve_whole(&task.job) {
            Some(answer) => reports.finished(task, answer),
            None => reports.abandoned(),
        }
    }

    /// Solves `job` whole on this thread, counted as running; None if a stop came first.
    fn solve_whole(&self, job: &Job) -> Option<Answer> {
        if self.stopping.load(Ordering::SeqCst) {
            return None;
        }
        self.running.fetch_add(1, Ordering::SeqCst);
        let started = Instant::now();
        let solved = job.solve().map_err(|e| e.to_string());
        let seconds = started.elapsed().as_secs_f64();
        self.running.fetch_sub(1, Ordering::SeqCst);
        Some(solved.map(|counts| (counts, seconds)))
    }

    /// Whether `job` is worth splitting: more than one thread, and the job expected to take
    /// longer than [`SPLIT_ABOVE`] on one (or nothing measured yet).
    fn worth_splitting(&self, job: &Job) -> bool {
        self.threads > 1
            && self
                .seconds_per_estimate
                .lock()
                .is_none_or(|rate| rate * job.estimate.max(1) as f64 > SPLIT_ABOVE.as_secs_f64())
    }

    /// Learns from one solved item (or whole job) of `estimate` that took `seconds`.
    fn learn(&self, estimate: u64, seconds: f64) {
        let sample = seconds / estimate.max(1) as f64;
        let mut rate = self.seconds_per_estimate.lock();
        let rate = rate.get_or_insert(sample);
        *rate = *rate * 0.9 + sample * 0.1;
    }

    /// The items of `job`: the job itself when it is not worth splitting, else the fewest extra
    /// rows that give [`ITEMS_PER_THREAD`] items a thread, longest first.
    fn items(&self, job: &Job) -> Result<Vec<Job>, nqueens_core::CoreError> {
        if !self.worth_splitting(job) {
            return Ok(vec![job.clone()]);
        }
        let mut items = Vec::new();
        for rows in 1..=MAX_EXTRA_ROWS {
            items = job.split(rows)?;
            if items.len() >= ITEMS_PER_THREAD * self.threads {
                break;
            }
        }
        if items.is_empty() {
            // A job whose split finds no state still has an answer (zero): solve it whole.
            items.push(job.clone());
        }
        items.sort_by_key(|item| std::cmp::Reverse(item.estimate));
        Ok(items)
    }

    fn solve_item<D: FnOnce(Solved)>(&self, item: &Job, job: &InProgress<D>) {
        if self.stopping.load(Ordering::SeqCst) {
            job.found.lock().abandoned = true;
        } else if let Some(started) = job.start() {
            self.running.fetch_add(1, Ordering::SeqCst);
            let solved = item.solve();
            self.learn(item.estimate, started.elapsed().as_secs_f64());
            self.running.fetch_sub(1, Ordering::SeqCst);
            let mut found = job.found.lock();
            if let Err(e) = solved
                .map_err(|e| e.to_string())
                .and_then(|counts| found.counts.merge(&counts).map_err(|e| e.to_string()))
            {
                found.error.get_or_insert(e);
            }
        }
        if job.remaining.fetch_sub(1, Ordering::SeqCst) != 1 {
            return;
        }
        let found = std::mem::take(&mut *job.found.lock());
        let outcome = match found {
            Found { error: Some(e), .. } => Solved::Failed(e),
            Found { abandoned: true, .. } => Solved::Abandoned,
            Found { counts, started, .. } => Solved::Counts {
                counts,
                seconds: started.map_or(0.0, |s| s.elapsed().as_secs_f64()),
            },
        };
        if let Some(done) = job.done.lock().take() {
            done(outcome);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nqueens_core::{job_list, SplitParams};

    fn solve_with(lane: &Arc<CpuLane>, job: Job) -> Solved {
        let (tx, rx) = std::sync::mpsc::channel();
        lane.solve(job, move |solved| tx.send(solved).unwrap());
        rx.recv().unwrap()
    }

    /// Split or whole, every job of N=10 gives the counts of the plain solve.
    #[test]
    fn items_merge_to_the_jobs_counts() {
        let jobs = job_list(10, &SplitParams::default()).unwrap().jobs;
        for threads in [1, 3] {
            let lane = CpuLane::new(threads).unwrap();
            for job in &jobs {
                match solve_with(&lane, job.clone()) {
                    Solved::Counts { counts, .. } => {
                        assert_eq!(counts.solutions, job.solve().unwrap().solutions)
                    }
                    other => panic!("{other:?}"),
                }
            }
        }
    }

    /// On more than one thread a job becomes many items; after a stop nothing more is solved.
    #[test]
    fn a_job_is_split_and_a_stop_abandons_it() {
        let jobs = job_list(12, &SplitParams::with_target(1)).unwrap().jobs;
        let job = jobs.into_iter().max_by_key(|j| j.estimate);
        let lane = CpuLane::new(2).unwrap();
        assert!(lane.items(job.as_ref().unwrap()).unwrap().len() >= 2 * ITEMS_PER_THREAD);
        lane.stop();
        assert!(matches!(solve_with(&lane, job.unwrap()), Solved::Abandoned));
    }
}
