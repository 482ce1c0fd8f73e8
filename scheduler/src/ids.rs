//! Typed ids for jobs, workers and leases. Each is a `u64` underneath (as stored and sent on the
//! wire), but a distinct type here, so that a call with two ids swapped does not compile. The
//! coordinator converts at its edges: the wire messages and the store's rows.

use std::fmt;

macro_rules! id_type {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
        pub struct $name(pub(crate) u64);

        impl $name {
            /// The id whose number is `id`.
            pub const fn new(id: u64) -> Self {
                $name(id)
            }
            /// The id's number, as stored and sent.
            pub const fn get(self) -> u64 {
                self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                self.0.fmt(f)
            }
        }
    };
}

id_type!(
    /// A job: its index in the run's job list.
    JobId
);
id_type!(
    /// A worker registered with the coordinator (workers start at 1; 0 is [`COORDINATOR`]).
    WorkerId
);
id_type!(
    /// A lease handed to a worker (leases start at 1; 0 stands for "none" or "all of them").
    LeaseId
);

/// Worker id standing for the coordinator itself in result and conflict records.
pub const COORDINATOR: WorkerId = WorkerId::new(0);

impl JobId {
    /// The job's index in a job table.
    pub(crate) fn index(self) -> usize {
        self.0 as usize
    }
}

impl From<u64> for JobId {
    fn from(id: u64) -> Self {
        JobId(id)
    }
}
impl From<u64> for WorkerId {
    fn from(id: u64) -> Self {
        WorkerId(id)
    }
}
impl From<u64> for LeaseId {
    fn from(id: u64) -> Self {
        LeaseId(id)
    }
}
