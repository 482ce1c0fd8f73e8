//! Tamper evidence for result rows: every row of `results` carries a keyed checksum
//! (HMAC-SHA256) over what it claims, and a row whose checksum fails is never counted.
//!
//! The key is 32 random bytes made when the run is created and kept in the state file's `meta`
//! table (`checksum_key`); it is never sent anywhere. **Threat model, honestly:** because the key
//! lives in the same file, the checksums catch flipped bits, torn or misdirected writes, a restore
//! that mixes files, and careless hand edits (`UPDATE results SET solutions=...`). They do NOT stop
//! someone who can write the file on purpose: whoever can write it can read the key and compute a
//! valid checksum. Against a wrong answer from a worker, the defences are verification by a second
//! worker and `nqueens-coordinator verify`, which solves a sample again.

use hmac::{Hmac, Mac};
use nqueens_core::JobCounts;
use sha2::Sha256;

/// Length of a row's checksum and of the run's key, in bytes.
pub(super) const KEY_LEN: usize = 32;

/// What a result row claims, as covered by its checksum.
#[derive(Debug, Clone, Copy)]
pub(super) struct RowClaim<'a> {
    pub job_id: u64,
    pub worker_id: u64,
    pub counted: bool,
    pub kind: &'a str,
    pub counts: JobCounts,
    /// The credential the answer was given under (schema 6 on; `None` for the coordinator's own
    /// rows and rows written before: those checksums cover no credential, so they still hold).
    pub credential: Option<&'a str>,
}

/// The keyed checksum of one run: the key, and the run fingerprint every row is bound to.
#[derive(Clone)]
pub(super) struct RowMac {
    keyed: Hmac<Sha256>,
}

impl RowMac {
    pub(super) fn new(key: &[u8], fingerprint: &str) -> RowMac {
        let mut keyed = Hmac::<Sha256>::new_from_slice(key).expect("HMAC takes any key length");
        // Domain separation, then the run: a row copied from another run's file does not verify.
        keyed.update(b"nqueens-result-row-v1\0");
        keyed.update(&(fingerprint.len() as u64).to_le_bytes());
        keyed.update(fingerprint.as_bytes());
        RowMac { keyed }
    }

    fn mac(&self, row: &RowClaim) -> Hmac<Sha256> {
        let mut m = self.keyed.clone();
        m.update(&row.job_id.to_le_bytes());
        m.update(&row.worker_id.to_le_bytes());
        m.update(&[row.counted as u8]);
        m.update(&(row.kind.len() as u64).to_le_bytes());
        m.update(row.kind.as_bytes());
        for v in [row.counts.solutions, row.counts.sym180, row.counts.sym90, row.counts.nodes] {
            m.update(&v.to_le_bytes());
        }
        if let Some(credential) = row.credential {
            // After the fixed-length counts: a row with a credential never shares a checksum
            // with the same row without one (or with another credential).
            m.update(b"\0credential");
            m.update(&(credential.len() as u64).to_le_bytes());
            m.update(credential.as_bytes());
        }
        m
    }

    /// The checksum to store with `row`.
    pub(super) fn tag(&self, row: &RowClaim) -> Vec<u8> {
        self.mac(row).finalize().into_bytes().to_vec()
    }

    /// Whether `tag` (the stored checksum, if any) is `row`'s, compared in constant time.
    pub(super) fn verify(&self, row: &RowClaim, tag: Option<&[u8]>) -> bool {
        match tag {
            Some(tag) => self.mac(row).verify_slice(tag).is_ok(),
            None => false,
        }
    }
}

/// A fresh random key for a new run (or a run migrated from schema 1).
pub(super) fn new_key() -> Result<[u8; KEY_LEN], getrandom::Error> {
    let mut key = [0u8; KEY_LEN];
    getrandom::getrandom(&mut key)?;
    Ok(key)
}

pub(super) fn to_hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

pub(super) fn from_hex(text: &str) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) {
        return None;
    }
    (0..text.len())
        .step_by(2)
        .map(|i| text.get(i..i + 2).and_then(|b| u8::from_str_radix(b, 16).ok()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claim(solutions: u64) -> RowClaim<'static> {
        RowClaim {
            job_id: 3,
            worker_id: 1,
            counted: true,
            kind: "counted",
            counts: JobCounts { solutions, sym180: 2, sym90: 0, nodes: 99 },
            credential: None,
        }
    }

    #[test]
    fn a_changed_field_key_or_run_fails() {
        let key = new_key().unwrap();
        let mac = RowMac::new(&key, "n12-abc-p1");
        let tag = mac.tag(&claim(10));
        assert!(mac.verify(&claim(10), Some(&tag)));
        assert!(!mac.verify(&claim(11), Some(&tag)));
        assert!(!mac.verify(&RowClaim { counted: false, ..claim(10) }, Some(&tag)));
        assert!(!mac.verify(&RowClaim { worker_id: 2, ..claim(10) }, Some(&tag)));
        // The credential an answer was given under is covered: set, dropped or changed, it fails.
        assert!(!mac.verify(&RowClaim { credential: Some("shared"), ..claim(10) }, Some(&tag)));
        let named = mac.tag(&RowClaim { credential: Some("host-a"), ..claim(10) });
        assert!(mac.verify(&RowClaim { credential: Some("host-a"), ..claim(10) }, Some(&named)));
        assert!(!mac.verify(&RowClaim { credential: Some("host-b"), ..claim(10) }, Some(&named)));
        assert!(!mac.verify(&claim(10), Some(&named)));
        assert!(!mac.verify(&claim(10), None));
        assert!(!mac.verify(&claim(10), Some(&tag[..31])));
        assert!(!RowMac::new(&key, "n12-abd-p1").verify(&claim(10), Some(&tag)));
        assert!(!RowMac::new(&new_key().unwrap(), "n12-abc-p1").verify(&claim(10), Some(&tag)));
        assert_eq!(from_hex(&to_hex(&key)).unwrap(), key.to_vec());
        assert!(from_hex("0g").is_none() && from_hex("abc").is_none());
    }
}
