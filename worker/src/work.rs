//! What the solver lanes see and say: leased work in domain types ([`Task`]: a `core::Job` with
//! typed ids) and what became of it ([`Report`]), left in one [`Inbox`] (through [`ReportTx`]) for
//! the state's owner. No wire type (`pb::`) reaches here; the session converts at its edge.
//!
//! The ids are `core`'s typed ids ([`JobId`], [`LeaseId`]), shared with the coordinator: a
//! swapped job and lease id does not compile.

use nqueens_core::{Job, JobCounts};
pub(crate) use nqueens_core::{JobId, LeaseId};
use parking_lot::Mutex;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use tokio::sync::Notify;

/// One leased job on its way to a solver lane (its id is `job.id`).
#[derive(Debug, Clone)]
pub(crate) struct Task {
    pub lease: LeaseId,
    pub job: Job,
}

/// A job's answer: its counts and the wall seconds spent, or why it could not be solved.
pub(crate) type Answer = Result<(JobCounts, f64), String>;

/// A job that has an answer, kept until the coordinator acknowledges it.
#[derive(Debug, Clone)]
pub(crate) struct Finished {
    pub lease: LeaseId,
    pub id: JobId,
    pub answer: Answer,
}

/// What a lane says about a task it was given: every task ends in exactly one report.
#[derive(Debug)]
pub(crate) enum Report {
    /// Solved, or failed with an error that is its answer.
    Finished(Finished),
    /// Not solved: a stop came before it started. It stays held and is released.
    Abandoned,
}

/// Where the lanes leave their reports for `state::collect` to read, and how many jobs are with
/// them. The lanes finish hundreds of jobs a second; a wake-up of the collector for each cost a
/// context switch per job on cores that are all solving (20,000 in a one-second N=17 run, and a
/// third more CPU than `solve`). So a report wakes someone only when it must act now: the
/// collector on the first report of a burst, when the inbox is full and when the lanes run dry;
/// the lease loop when the jobs left with the lanes fall to its low-water mark
/// ([`Inbox::wait_for_room`]).
#[derive(Default)]
pub(crate) struct Inbox {
    reports: Mutex<Vec<Report>>,
    /// Jobs handed to the lanes and not reported yet.
    with_lanes: AtomicUsize,
    /// The lease loop's low-water mark: a report leaving this many jobs or fewer with the lanes
    /// wakes it.
    room_at: AtomicUsize,
    /// Woken when a report leaves no more than `room_at` jobs with the lanes.
    room: Notify,
    /// Wakes the collector (a permit is kept if it is not waiting).
    pub ready: Notify,
    /// Set once the collector has ended: nobody reads reports any more.
    closed: AtomicBool,
}

/// Reports the collector holds back for one burst at most: beyond this it is woken at once.
pub(crate) const INBOX_FULL: usize = 1024;

impl Inbox {
    /// `jobs` more were handed to the lanes.
    pub fn handed(&self, jobs: usize) {
        self.with_lanes.fetch_add(jobs, Ordering::SeqCst);
    }

    /// Jobs with the lanes now.
    pub fn with_lanes(&self) -> usize {
        self.with_lanes.load(Ordering::SeqCst)
    }

    /// Reports left and not read yet.
    pub fn waiting(&self) -> usize {
        self.reports.lock().len()
    }

    /// Takes every report left so far.
    pub fn take(&self) -> Vec<Report> {
        std::mem::take(&mut *self.reports.lock())
    }

    /// Waits (at most `patience`) until no more than `queued` jobs are with the lanes: whether
    /// they are.
    pub async fn wait_for_room(&self, queued: usize, patience: std::time::Duration) -> bool {
        self.room_at.store(queued, Ordering::SeqCst);
        let deadline = tokio::time::Instant::now() + patience;
        loop {
            let wait = self.room.notified();
            if self.with_lanes() <= queued {
                return true;
            }
            if tokio::time::timeout_at(deadline, wait).await.is_err() {
                return false;
            }
        }
    }

    /// Marks the inbox closed when the returned guard drops (the collector's end, or its abort).
    pub fn close_on_drop(self: &Arc<Self>) -> impl Drop {
        struct Closer(Arc<Inbox>);
        impl Drop for Closer {
            fn drop(&mut self) {
                self.0.closed.store(true, Ordering::SeqCst);
            }
        }
        Closer(self.clone())
    }

    fn leave(&self, report: Report) {
        let waiting = {
            let mut reports = self.reports.lock();
            reports.push(report);
            reports.len()
        };
        let before = self
            .with_lanes
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| Some(n.saturating_sub(1)))
            .unwrap_or(0);
        let left = before.saturating_sub(1);
        if left <= self.room_at.load(Ordering::SeqCst) {
            self.room.notify_waiters();
        }
        if waiting == 1 || waiting >= INBOX_FULL || left == 0 {
            self.ready.notify_one();
        }
    }
}

/// The lanes' handle on the [`Inbox`].
#[derive(Clone)]
pub(crate) struct ReportTx(Arc<Inbox>);

impl ReportTx {
    /// A sender into `inbox`.
    pub fn new(inbox: Arc<Inbox>) -> Self {
        ReportTx(inbox)
    }

    /// `task`'s answer.
    pub fn finished(&self, task: &Task, answer: Answer) {
        #[cfg(feature = "fault-injection")]
        let answer = answer.map(|(c, s)| (crate::fault::corrupt(task.job.id.get(), c), s));
        self.0.leave(Report::Finished(Finished { lease: task.lease, id: task.job.id, answer }));
    }

    /// A leased job that cannot be solved (its spec does not describe a job): `why` is its answer.
    pub fn refused(&self, lease: LeaseId, id: JobId, why: String) {
        self.0.leave(Report::Finished(Finished { lease, id, answer: Err(why) }));
    }

    /// A task not solved because a stop came first.
    pub fn abandoned(&self) {
        self.0.leave(Report::Abandoned);
    }

    /// Whether no one reads the reports any more (the worker has ended).
    pub fn is_closed(&self) -> bool {
        self.0.closed.load(Ordering::SeqCst)
    }
}
