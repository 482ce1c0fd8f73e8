//! What the solver lanes see and say: leased work in domain types ([`Task`]: a `core::Job` with
//! typed ids) and what became of it ([`Report`]), sent on one channel ([`ReportTx`]) to the state's
//! owner. No wire type (`pb::`) reaches here; the session converts at its edge.
//!
//! The ids are the worker's own small newtypes rather than the scheduler's: the worker knows
//! nothing of the coordinator's crates beyond the contract (`proto`), and a swapped job and lease
//! id still does not compile.

use nqueens_core::{Job, JobCounts};
use tokio::sync::mpsc;

macro_rules! id_type {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
        pub(crate) struct $name(u64);

        impl $name {
            /// The id whose number is `id` (as sent on the wire).
            pub(crate) const fn new(id: u64) -> Self {
                $name(id)
            }
            /// The id's number, as sent on the wire.
            pub(crate) const fn get(self) -> u64 {
                self.0
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                self.0.fmt(f)
            }
        }
    };
}

id_type!(
    /// A job of the run: its index in the run's job list.
    JobId
);
id_type!(
    /// A lease the coordinator granted this worker.
    LeaseId
);

/// One leased job on its way to a solver lane.
#[derive(Debug, Clone)]
pub(crate) struct Task {
    pub lease: LeaseId,
    pub id: JobId,
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

/// Where the lanes send their reports; the state's owner reads them (see `state::collect`).
#[derive(Clone)]
pub(crate) struct ReportTx(mpsc::UnboundedSender<Report>);

impl ReportTx {
    /// A sender and the receiver its reports arrive at.
    pub fn channel() -> (Self, mpsc::UnboundedReceiver<Report>) {
        let (tx, rx) = mpsc::unbounded_channel();
        (ReportTx(tx), rx)
    }

    /// `task`'s answer.
    pub fn finished(&self, task: &Task, answer: Answer) {
        #[cfg(feature = "fault-injection")]
        let answer = answer.map(|(c, s)| (crate::fault::corrupt(task.id.get(), c), s));
        let _ = self.0.send(Report::Finished(Finished { lease: task.lease, id: task.id, answer }));
    }

    /// A leased job that cannot be solved (its spec does not describe a job): `why` is its answer.
    pub fn refused(&self, lease: LeaseId, id: JobId, why: String) {
        let _ = self.0.send(Report::Finished(Finished { lease, id, answer: Err(why) }));
    }

    /// A task not solved because a stop came first.
    pub fn abandoned(&self) {
        let _ = self.0.send(Report::Abandoned);
    }

    /// Whether no one reads the reports any more (the worker has ended).
    pub fn is_closed(&self) -> bool {
        self.0.is_closed()
    }
}
