//! Who may call, and as whom: credentials (the shared `--token` or per-host tokens made by
//! `token add`), and each worker's own secret.
//!
//! Only SHA-256 digests of tokens and secrets are kept, in memory and in the state file. Both
//! are random (at least 128 bits), so a plain digest is as good as a slow hash here.

// The digests, secrets and credential names the state file shares: one copy, in the store.
#[cfg(doc)]
use nqueens_scheduler::{OPEN_CREDENTIAL, PER_HOST_CREDENTIALS, SHARED_CREDENTIAL};
pub use nqueens_store::credentials::{digest, new_secret, same_digest, OPEN, SHARED};
use nqueens_store::CredentialNumbers;

/// The credential a call was made under, as the token check found it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Credential {
    /// `shared`, `open`, or the name given to `token add`.
    pub name: String,
}

impl Credential {
    /// The credential of the shared `--token`.
    pub fn shared() -> Self {
        Credential { name: SHARED.into() }
    }

    /// The credential of calls to a coordinator without any token.
    pub fn open() -> Self {
        Credential { name: OPEN.into() }
    }

    /// A named (per-host) credential.
    pub fn named(name: &str) -> Self {
        Credential { name: name.into() }
    }

    /// The credential stored in a worker row (empty in rows from before credentials: shared).
    pub fn from_stored(name: &str) -> Self {
        if name.is_empty() {
            Credential::shared()
        } else {
            Credential { name: name.into() }
        }
    }

    /// Whether every holder of this credential is one party. The shared token and no token at
    /// all cannot tell holders apart, so each of their workers counts as a party of its own: any
    /// holder can then lie through two identities (see `docs/threat-model.md`).
    pub fn is_per_host(&self) -> bool {
        self.name != SHARED && self.name != OPEN
    }

    /// The scheduler's number for this credential: the shared token and no token have numbers
    /// of their own ([`SHARED_CREDENTIAL`], [`OPEN_CREDENTIAL`]: each of their identities is a
    /// party of its own, but they are one credential); named ones are numbered in `numbers`
    /// from [`PER_HOST_CREDENTIALS`] up (all identities of one are one party).
    pub fn number(&self, numbers: &mut CredentialNumbers) -> u64 {
        numbers.number(&self.name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nqueens_scheduler::{OPEN_CREDENTIAL, PER_HOST_CREDENTIALS, SHARED_CREDENTIAL};

    #[test]
    fn named_credentials_are_numbered_as_one_party_each_and_shared_ones_apart() {
        let mut numbers = CredentialNumbers::default();
        let a = Credential::named("host-a").number(&mut numbers);
        assert_eq!(a, Credential::named("host-a").number(&mut numbers));
        assert_ne!(a, Credential::named("host-b").number(&mut numbers));
        assert!(a >= PER_HOST_CREDENTIALS);
        assert_eq!(Credential::shared().number(&mut numbers), SHARED_CREDENTIAL);
        assert_eq!(Credential::open().number(&mut numbers), OPEN_CREDENTIAL);
        const {
            assert!(
                SHARED_CREDENTIAL < PER_HOST_CREDENTIALS && OPEN_CREDENTIAL < PER_HOST_CREDENTIALS
            )
        };
    }
}
