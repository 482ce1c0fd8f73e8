//! Who may call the gRPC service: the credentials in force ([`Credentials`]) and the check every
//! call passes first ([`TokenCheck`]).
//!
//! The rules fail closed:
//! - the credentials are read from the state file before the port serves its first call (the
//!   [`Credentials`] of a run cannot be made without them);
//! - a run that has, or ever had, a per-host token (`token add`) takes no call without a token,
//!   even once every per-host token is revoked;
//! - a revoked token is refused from the moment the revoke is committed, by every call and by
//!   every message of a stream opened before (see [`Credentials::in_force`]).

use crate::metrics::Metrics;
use crate::secrets::{digest, same_digest, Credential};
use nqueens_proto as pb;
use nqueens_proto::{status_with_reason, Reason};
use parking_lot::{Mutex, RwLock};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tonic::{Code, Request, Status};

/// The longest token taken off the wire (ours are 64 hex digits); a longer one is refused unread.
pub const MAX_TOKEN: usize = 256;

/// The credentials in force on a live run: the shared `--token` (fixed for the process) and the
/// per-host tokens of the state file, replaced whenever `token add|revoke` changes them.
pub struct Credentials {
    /// The digest of the shared `--token`, if the run has one.
    shared: Option<[u8; 32]>,
    /// The per-host tokens in force: name by digest.
    by_digest: RwLock<HashMap<[u8; 32], String>>,
    /// The run has or had per-host tokens: calls without a token are refused for good.
    closed: AtomicBool,
}

impl Credentials {
    /// The credentials of a run with the shared token `shared`, the per-host tokens `active` in
    /// force, and `had` per-host tokens at all (revoked ones included).
    pub fn new(shared: Option<&str>, active: Vec<(String, [u8; 32])>, had: bool) -> Self {
        let credentials = Credentials {
            shared: shared.map(digest),
            by_digest: RwLock::default(),
            closed: AtomicBool::new(false),
        };
        credentials.set(active, had);
        credentials
    }

    /// Replaces the per-host tokens in force with `active` (name and digest of each); `had`: the
    /// run has or had any. Once closed to calls without a token, the run stays closed.
    pub fn set(&self, active: Vec<(String, [u8; 32])>, had: bool) {
        if had || !active.is_empty() {
            self.closed.store(true, Ordering::SeqCst);
        }
        *self.by_digest.write() = active.into_iter().map(|(name, d)| (d, name)).collect();
    }

    /// Whether calls must carry a token: a shared one is set, or the run has or had per-host ones.
    pub fn token_required(&self) -> bool {
        self.shared.is_some() || self.closed.load(Ordering::SeqCst)
    }

    /// The credential a call with the token digest `given` is made under, or `None` to refuse it.
    fn identify(&self, given: Option<[u8; 32]>) -> Option<Credential> {
        if !self.token_required() {
            return Some(Credential::open());
        }
        let given = given?;
        // Fixed-length digests, compared without an early exit.
        if self.shared.is_some_and(|s| same_digest(&s, &given)) {
            return Some(Credential::shared());
        }
        self.by_digest.read().get(&given).map(|name| Credential::named(name))
    }

    /// Whether calls under `credential` are still taken: the shared token always (while the run
    /// has one), no token only while no token is required, a per-host token while it is not
    /// revoked. Checked again by every message of a stream.
    pub fn in_force(&self, credential: &Credential) -> bool {
        if credential == &Credential::shared() {
            self.shared.is_some()
        } else if credential == &Credential::open() {
            !self.token_required()
        } else {
            self.by_digest.read().values().any(|name| name == &credential.name)
        }
    }
}

/// The check every call of the coordinator service passes first: the shared `--token`, or one of
/// the per-host tokens in force. The credential found goes with the request (as a [`Credential`]
/// extension): workers are tied to it.
///
/// Tokens are compared by their SHA-256 digests; the shared one in constant time: neither the
/// time taken nor anything else reveals how much of a wrong token matched, or the right token's
/// length (per-host tokens are looked up by digest, which tells nothing of any token). Refused
/// calls are logged with the peer's address, at most once per [`REFUSAL_LOG_EVERY`] (with how
/// many were refused meanwhile), so a client hammering the port cannot flood the log.
#[derive(Clone)]
pub struct TokenCheck {
    credentials: Arc<Credentials>,
    metrics: Arc<Metrics>,
    refusals: Arc<Mutex<RefusalLog>>,
}

/// How often refused calls are logged at most.
pub const REFUSAL_LOG_EVERY: Duration = Duration::from_secs(10);

#[derive(Default)]
struct RefusalLog {
    last: Option<Instant>,
    unlogged: u64,
}

impl TokenCheck {
    /// Admits the calls `credentials` allow.
    pub fn new(credentials: Arc<Credentials>, metrics: Arc<Metrics>) -> Self {
        TokenCheck { credentials, metrics, refusals: Default::default() }
    }

    fn refuse(&self, peer: Option<std::net::SocketAddr>) -> Status {
        self.metrics.auth_failures.fetch_add(1, Ordering::Relaxed);
        let mut log = self.refusals.lock();
        log.unlogged += 1;
        if log.last.is_none_or(|t| t.elapsed() >= REFUSAL_LOG_EVERY) {
            let peer = peer.map_or("unknown".into(), |p| p.to_string());
            tracing::warn!(%peer, refused = log.unlogged, "call refused: missing or wrong token");
            log.last = Some(Instant::now());
            log.unlogged = 0;
        }
        status_with_reason(
            Code::Unauthenticated,
            Reason::BadToken,
            "missing, wrong or revoked token (set --token / NQ_TOKEN to one the coordinator takes)",
        )
    }
}

impl tonic::service::Interceptor for TokenCheck {
    fn call(&mut self, mut req: Request<()>) -> Result<Request<()>, Status> {
        let given = req.metadata().get(pb::AUTH_HEADER).and_then(|v| v.to_str().ok());
        // A token past the bound is refused unread (not even digested).
        let given = given
            .and_then(|g| g.strip_prefix("Bearer "))
            .filter(|g| g.len() <= MAX_TOKEN)
            .map(digest);
        match self.credentials.identify(given) {
            Some(credential) => {
                req.extensions_mut().insert(credential);
                Ok(req)
            }
            None => Err(self.refuse(super::admission::peer_addr(&req))),
        }
    }
}

/// A refusal of a message on a stream whose credential was revoked after the stream opened.
pub fn revoked() -> Status {
    status_with_reason(
        Code::Unauthenticated,
        Reason::BadToken,
        "the token this stream was opened with has been revoked",
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use tonic::service::Interceptor;

    fn call(check: &mut TokenCheck, header: Option<&str>) -> Result<String, Code> {
        let mut req = Request::new(());
        if let Some(h) = header {
            req.metadata_mut().insert(pb::AUTH_HEADER, h.parse().unwrap());
        }
        check
            .call(req)
            .map(|r| r.extensions().get::<Credential>().unwrap().name.clone())
            .map_err(|s| s.code())
    }

    #[test]
    fn only_the_right_token_passes_and_refusals_are_counted() {
        let metrics = Arc::new(Metrics::default());
        let shared = Arc::new(Credentials::new(Some("s3cret"), Vec::new(), false));
        let mut check = TokenCheck::new(shared, metrics.clone());
        assert_eq!(call(&mut check, Some("Bearer s3cret")), Ok("shared".into()));
        for wrong in [None, Some("Bearer s3cre"), Some("Bearer s3cret2"), Some("s3cret"), Some("")]
        {
            assert_eq!(call(&mut check, wrong), Err(Code::Unauthenticated), "{wrong:?}");
        }
        assert_eq!(metrics.auth_failures.load(Ordering::Relaxed), 5);
        let long = format!("Bearer {}", "x".repeat(MAX_TOKEN + 1));
        assert_eq!(call(&mut check, Some(&long)), Err(Code::Unauthenticated));
        let mut open =
            TokenCheck::new(Arc::new(Credentials::new(None, Vec::new(), false)), metrics);
        assert_eq!(call(&mut open, None), Ok("open".into()));
    }

    /// A run that had per-host tokens never takes calls without one again, and a revoked
    /// token is out of force at once, for calls and for the streams opened under it.
    #[test]
    fn per_host_tokens_fail_closed() {
        let metrics = Arc::new(Metrics::default());
        let credentials = Arc::new(Credentials::new(None, Vec::new(), false));
        let mut check = TokenCheck::new(credentials.clone(), metrics);
        assert!(credentials.in_force(&Credential::open()));
        credentials.set(vec![("host-a".into(), digest("ta"))], true);
        assert_eq!(call(&mut check, Some("Bearer ta")), Ok("host-a".into()));
        assert_eq!(call(&mut check, None), Err(Code::Unauthenticated));
        assert!(!credentials.in_force(&Credential::open()));
        assert!(credentials.in_force(&Credential::named("host-a")));
        credentials.set(Vec::new(), true);
        assert!(!credentials.in_force(&Credential::named("host-a")));
        for header in [None, Some("Bearer ta"), Some("Bearer anything")] {
            assert_eq!(call(&mut check, header), Err(Code::Unauthenticated), "{header:?}");
        }
        // Even a set that forgets the history keeps the run closed.
        credentials.set(Vec::new(), false);
        assert_eq!(call(&mut check, None), Err(Code::Unauthenticated));
        assert!(!credentials.in_force(&Credential::shared()), "no shared token here");
        // A run started with no per-host tokens but that had some is closed from the start.
        let had = Credentials::new(None, Vec::new(), true);
        assert!(had.token_required() && had.identify(None).is_none());
    }
}
