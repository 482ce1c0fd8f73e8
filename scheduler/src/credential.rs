//! The credential number space: how the scheduler numbers the credentials answers are given
//! under, and what a number says about whose word an answer is (its party) and whether two
//! answers are independent. Every other module reads credentials through these; this one knows
//! only the ids.

use crate::ids::{WorkerId, COORDINATOR};

/// Credential numbers at and above this are per-host credentials (the coordinator numbers them
/// so): all identities of one are one party. Below it, a worker is a party of its own.
pub const PER_HOST_CREDENTIALS: u64 = 1 << 62;
/// The credential number of the shared `--token`: each of its identities is a party of its own,
/// but they are one credential, so they never give each other independent evidence.
pub const SHARED_CREDENTIAL: u64 = PER_HOST_CREDENTIALS - 1;
/// The credential number of calls without any token (a loopback coordinator without one).
pub const OPEN_CREDENTIAL: u64 = PER_HOST_CREDENTIALS - 2;
/// The credential of an answer stored before answers carried one, whose worker row is gone: it
/// is nobody's independent evidence (it may be any party's).
pub const UNKNOWN_CREDENTIAL: u64 = PER_HOST_CREDENTIALS - 3;
/// The credential of the coordinator's own answers (worker [`COORDINATOR`]).
pub const COORDINATOR_CREDENTIAL: u64 = 0;

/// The party of an answer by `worker_id` under `credential`: its per-host credential, else its
/// identity (the shared token and no token cannot tell their holders apart).
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
