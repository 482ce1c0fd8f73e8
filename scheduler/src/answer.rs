//! One answer to a job as it was given: who gave it, the credential it was given under (fixed when
//! it arrived, never read again from the live registry), whether it came under a lease that held
//! the job for that identity, and the counts. Every rule on independence, evidence and disputes
//! reads the credential from here: forgetting an identity, untrusting, revoking or restarting
//! never changes whose word an answer is.

use crate::credential::{independent, party_of, COORDINATOR_CREDENTIAL};
use crate::ids::{WorkerId, COORDINATOR};
use nqueens_core::JobCounts;

/// One answer to a job, as given.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Answer {
    /// The identity that gave it ([`COORDINATOR`] for the coordinator's own).
    pub worker_id: WorkerId,
    /// The credential it was given under, as the scheduler numbers credentials
    /// ([`crate::SHARED_CREDENTIAL`], [`crate::OPEN_CREDENTIAL`], per-host ones from
    /// [`crate::PER_HOST_CREDENTIALS`], [`COORDINATOR_CREDENTIAL`], [`crate::UNKNOWN_CREDENTIAL`]).
    pub credential: u64,
    /// The counts.
    pub counts: JobCounts,
    /// Given under a lease that no longer held the job for that identity (released, expired,
    /// re-leased): an opinion of its credential only, that never counts by itself.
    pub late: bool,
}

impl Answer {
    /// The coordinator's own answer.
    pub fn coordinator(counts: JobCounts) -> Self {
        Answer { worker_id: COORDINATOR, credential: COORDINATOR_CREDENTIAL, counts, late: false }
    }
    /// Whether the coordinator gave it.
    pub fn by_coordinator(&self) -> bool {
        self.worker_id == COORDINATOR
    }
    /// The party whose word it is: its per-host credential, else its identity (the shared token
    /// and no token cannot tell their holders apart).
    pub fn party(&self) -> u64 {
        party_of(self.worker_id, self.credential)
    }
    /// Whether this answer and `other` are independent evidence: one of them the coordinator's,
    /// or two different known credentials.
    pub fn independent_of(&self, other: &Answer) -> bool {
        independent(self.worker_id, self.credential, other.worker_id, other.credential)
    }
    /// Whether it gives the same answer as `counts`.
    pub fn agrees(&self, counts: &JobCounts) -> bool {
        self.counts.same_answer(counts)
    }
}
