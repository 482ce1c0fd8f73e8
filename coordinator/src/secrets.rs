//! Who may call, and as whom: credentials (the shared `--token` or per-host tokens made by
//! `token add`), each worker's own secret, and the cap on registrations per credential.
//!
//! Only SHA-256 digests of tokens and secrets are kept, in memory and in the state file. Both
//! are random (at least 128 bits), so a plain digest is as good as a slow hash here.

use std::collections::HashMap;

// The digests, secrets and credential names the state file shares: one copy, in the store.
pub use nqueens_store::credentials::{digest, new_secret, same_digest, OPEN, SHARED};
use std::net::IpAddr;
use std::time::Instant;

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

    /// The scheduling group of this credential's workers: one per named credential (numbered in
    /// `groups`, above any worker id), none for the shared token (each worker its own group).
    pub fn group(&self, groups: &mut HashMap<String, u64>) -> Option<u64> {
        if !self.is_per_host() {
            return None;
        }
        let next = (1u64 << 62) + groups.len() as u64;
        Some(*groups.entry(self.name.clone()).or_insert(next))
    }
}

/// Registrations allowed per credential and source address in any minute.
pub const REGISTRATIONS_PER_MINUTE: u32 = 60;

/// Caps registrations per credential *and source address*: a token bucket of
/// [`REGISTRATIONS_PER_MINUTE`] for each pair, refilled continuously. Honest workers register once
/// per connection; a flood of identities from one host empties only its own bucket, so other
/// hosts of the same credential still get in. (The buckets are bounded: the oldest idle ones are
/// dropped past [`MAX_BUCKETS`].)
#[derive(Debug, Default)]
pub struct RegistrationLimiter {
    buckets: HashMap<(String, Option<IpAddr>), (f64, Instant)>,
}

/// Buckets kept at most; full (idle) ones are dropped first, being the same as a new one.
pub const MAX_BUCKETS: usize = 65_536;

impl RegistrationLimiter {
    /// Takes one registration of `credential` from `peer` at `now`, if its bucket has one left.
    pub fn allow(&mut self, credential: &str, peer: Option<IpAddr>, now: Instant) -> bool {
        let per_second = REGISTRATIONS_PER_MINUTE as f64 / 60.0;
        let full = REGISTRATIONS_PER_MINUTE as f64;
        if self.buckets.len() >= MAX_BUCKETS {
            self.buckets.retain(|_, (tokens, last)| {
                *tokens + now.saturating_duration_since(*last).as_secs_f64() * per_second < full
            });
        }
        let key = (credential.to_owned(), peer);
        let (tokens, last) = self.buckets.entry(key).or_insert((full, now));
        let refill = now.saturating_duration_since(*last).as_secs_f64() * per_second;
        *tokens = (*tokens + refill).min(full);
        *last = now;
        if *tokens >= 1.0 {
            *tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn named_credentials_are_one_group_and_shared_ones_none() {
        let mut groups = HashMap::new();
        let a = Credential::named("host-a").group(&mut groups);
        assert_eq!(a, Credential::named("host-a").group(&mut groups));
        assert_ne!(a, Credential::named("host-b").group(&mut groups));
        assert_eq!(Credential::shared().group(&mut groups), None);
        assert_eq!(Credential::open().group(&mut groups), None);
        assert!(a.unwrap() > u32::MAX as u64);
    }

    #[test]
    fn registrations_are_capped_per_credential_and_refill() {
        let mut limit = RegistrationLimiter::default();
        let t0 = Instant::now();
        let flood: Option<IpAddr> = Some([10, 0, 0, 1].into());
        let honest: Option<IpAddr> = Some([10, 0, 0, 2].into());
        let allowed = (0..1000).filter(|_| limit.allow("evil", flood, t0)).count();
        assert_eq!(allowed, REGISTRATIONS_PER_MINUTE as usize);
        assert!(limit.allow("good", flood, t0), "another credential has its own bucket");
        assert!(limit.allow("evil", honest, t0), "another host of the credential gets in");
        assert!(!limit.allow("evil", flood, t0 + Duration::from_millis(100)));
        assert!(limit.allow("evil", flood, t0 + Duration::from_secs(2)));
    }
}
