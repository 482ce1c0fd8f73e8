//! One answer to a job as it was given: who gave it, the credential it was given under (fixed when
//! it arrived, never read again from the live registry), whether it came under a lease that held
//! the job for that identity, and the counts. Every rule on independence, evidence and disputes
//! reads the credential from here: forgetting an identity, untrusting, revoking or restarting
//! never changes whose word an answer is.

use crate::ids::{WorkerId, COORDINATOR};
use crate::trust::PER_HOST_CREDENTIALS;
use nqueens_core::JobCounts;

/// The credential of the coordinator's own answers (worker [`COORDINATOR`]).
pub const COORDINATOR_CREDENTIAL: u64 = 0;
/// The credential of an answer stored before answers carried one, whose worker row is gone: it
/// is nobody's independent evidence (it may be any party's).
pub const UNKNOWN_CREDENTIAL: u64 = PER_HOST_CREDENTIALS - 3;

/// One answer to a job, as given.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Answer {
    /// The identity that gave it ([`COORDINATOR`] for the coordinator's own).
    pub worker_id: WorkerId,
    /// The credential it was given under, as the scheduler numbers credentials
    /// ([`crate::SHARED_CREDENTIAL`], [`crate::OPEN_CREDENTIAL`], per-host ones from
    /// [`PER_HOST_CREDENTIALS`], [`COORDINATOR_CREDENTIAL`], [`UNKNOWN_CREDENTIAL`]).
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

/// The party of an answer by `worker_id` under `credential` (see [`Answer::party`]).
pub(crate) fn party_of(worker_id: WorkerId, credential: u64) -> u64 {
    if credential >= PER_HOST_CREDENTIALS {
        credential
    } else {
        worker_id.get()
    }
}

/// Whether answers of (`a`, credential `ca`) and (`b`, credential `cb`) are independent: one is
/// the coordinator's, or they are two different credentials, neither of them unknown.
pub(crate) fn independent(a: WorkerId, ca: u64, b: WorkerId, cb: u64) -> bool {
    if a == COORDINATOR || b == COORDINATOR {
        return a != b;
    }
    ca != cb && ca != UNKNOWN_CREDENTIAL && cb != UNKNOWN_CREDENTIAL
}
