//! The shared token, kept and compared as its SHA-256 digest.
//!
//! Tokens are compared by their digests, in constant time: neither the time taken nor an early
//! exit tells a caller how much of a guess was right, and the token's length is not leaked either.
//! The same comparison as the gRPC interceptor's (`grpc::service::TokenCheck`, both through
//! [`crate::secrets::same_digest`]), for the HTTP port.

use crate::secrets::{digest, same_digest};

/// A token's SHA-256 digest.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct TokenDigest([u8; 32]);

impl std::fmt::Debug for TokenDigest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TokenDigest(..)")
    }
}

impl TokenDigest {
    /// The digest of `token`.
    pub fn of(token: &str) -> TokenDigest {
        TokenDigest(digest(token))
    }

    /// Whether `given` is the token: its digest compared with this one without an early exit.
    pub fn matches(&self, given: &str) -> bool {
        same_digest(&self.0, &digest(given))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_same_token_matches() {
        let d = TokenDigest::of("s3cret");
        assert!(d.matches("s3cret"));
        for wrong in ["", "s3cre", "s3cret2", "S3cret", "Bearer s3cret"] {
            assert!(!d.matches(wrong), "{wrong:?}");
        }
        assert_eq!(format!("{d:?}"), "TokenDigest(..)");
    }
}
