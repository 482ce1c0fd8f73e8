//! The typed ids every crate shares: a `u64` underneath (as stored and sent on the wire), but a
//! type each, so that a call with two ids swapped does not compile. The scheduler, the store's
//! callers and the worker all use these; the coordinator converts at its edges (the wire messages
//! and the store's rows) with [`new`](JobId::new) and [`get`](JobId::get).

/// Defines a typed id: the struct (with the derives every id needs, serialized as its number),
/// `new`, `get`, `From<u64>` and `Display` (the number).
macro_rules! id_type {
    ($(#[$doc:meta])* pub struct $name:ident(u64);) => {
        $(#[$doc])*
        #[derive(
            Debug,
            Clone,
            Copy,
            PartialEq,
            Eq,
            PartialOrd,
            Ord,
            Hash,
            Default,
            serde::Serialize,
            serde::Deserialize,
        )]
        #[serde(transparent)]
        pub struct $name(u64);

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

        impl From<u64> for $name {
            fn from(id: u64) -> Self {
                $name(id)
            }
        }

        impl ::std::fmt::Display for $name {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                self.0.fmt(f)
            }
        }
    };
}

id_type! {
    /// A job: its index in the run's job list ([`crate::Job::id`]).
    pub struct JobId(u64);
}
id_type! {
    /// A worker registered with the coordinator (workers start at 1; 0 stands for the
    /// coordinator itself).
    pub struct WorkerId(u64);
}
id_type! {
    /// A lease handed to a worker (leases start at 1; 0 stands for "none" or "all of them").
    pub struct LeaseId(u64);
}

impl JobId {
    /// The job's index in a job list or table.
    pub const fn index(self) -> usize {
        self.0 as usize
    }
}
