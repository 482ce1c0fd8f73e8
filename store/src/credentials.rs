//! Per-host tokens (`nqueens-coordinator token add NAME --state FILE`): the state file keeps
//! only their SHA-256 digests. Only the writer writes them: offline, `token add|revoke` takes the
//! writer's lock and writes through its own [`Store`]; beside a running coordinator (which holds
//! the lock), they ask the coordinator, whose engine writes the row through its own connection
//! (the coordinator's `admin` module).
//!
//! The small pure helpers that the coordinator's token checks share with this table (digests,
//! new secrets, which names are allowed) live here too, so that there is one copy of each.

use super::error::StoreError;
use super::schema::CREDENTIALS_TABLE;
use super::{unix_now, Store};
use nqueens_scheduler::{OPEN_CREDENTIAL, PER_HOST_CREDENTIALS, SHARED_CREDENTIAL};
use rusqlite::{params, OptionalExtension};
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::path::Path;

/// The credential name of calls made with the shared `--token`.
pub const SHARED: &str = "shared";
/// The credential name of calls to a coordinator that requires no token at all.
pub const OPEN: &str = "open";

/// The scheduler's numbers of credential names in one process (see
/// `nqueens_scheduler::PER_HOST_CREDENTIALS`): the shared token and no token have numbers of their
/// own, named ones are numbered from `PER_HOST_CREDENTIALS` up as they are first seen. The
/// store owns one: registrations number their credential through it, result rows are written
/// with the name behind their number, and stored rows are read back into numbers through it.
#[derive(Debug, Default, Clone)]
pub struct CredentialNumbers {
    by_name: HashMap<String, u64>,
    by_number: HashMap<u64, String>,
}

impl CredentialNumbers {
    /// The number of the credential `name` (an empty name, from rows made before credentials,
    /// is the shared token).
    pub fn number(&mut self, name: &str) -> u64 {
        match name {
            SHARED | "" => SHARED_CREDENTIAL,
            OPEN => OPEN_CREDENTIAL,
            name => {
                if let Some(&n) = self.by_name.get(name) {
                    return n;
                }
                let n = PER_HOST_CREDENTIALS + self.by_name.len() as u64;
                self.by_name.insert(name.to_owned(), n);
                self.by_number.insert(n, name.to_owned());
                n
            }
        }
    }

    /// The name behind `number`, if it names a credential (the coordinator's own answers and
    /// answers of unknown credential have none).
    pub fn name(&self, number: u64) -> Option<&str> {
        match number {
            SHARED_CREDENTIAL => Some(SHARED),
            OPEN_CREDENTIAL => Some(OPEN),
            n => self.by_number.get(&n).map(String::as_str),
        }
    }
}

/// SHA-256 of a token or secret.
pub fn digest(secret: &str) -> [u8; 32] {
    Sha256::digest(secret.as_bytes()).into()
}

/// Whether a stored digest equals `expected`, compared without an early exit. An empty stored
/// digest (a row from before secrets) matches nothing.
pub fn same_digest(stored: &[u8], expected: &[u8; 32]) -> bool {
    stored.len() == 32 && stored.iter().zip(expected).fold(0u8, |acc, (a, b)| acc | (a ^ b)) == 0
}

/// A new random secret or token: 32 bytes from the operating system, as 64 hex digits.
pub fn new_secret() -> String {
    let mut bytes = [0u8; 32];
    // Without OS randomness no secret can be made safely: better to stop than to hand out
    // guessable identities.
    getrandom::getrandom(&mut bytes).expect("the operating system's random generator failed");
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Whether `name` can be given to `token add`: 1 to 64 letters, digits, `.`, `_` or `-`, and not
/// one of the reserved names.
pub fn valid_credential_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))
        && name != SHARED
        && name != OPEN
}

/// One per-host token as `token list` shows it.
#[derive(Debug, Clone, PartialEq)]
pub struct CredentialRow {
    /// The name given to `token add`.
    pub name: String,
    /// When it was added (Unix seconds).
    pub created_unix: f64,
    /// When it was revoked, if it was.
    pub revoked_unix: Option<f64>,
}

/// Checks that `name` may be given to `token add`.
pub fn check_credential_name(name: &str) -> Result<(), StoreError> {
    if valid_credential_name(name) {
        Ok(())
    } else {
        Err(StoreError::Credential(format!(
            "{name:?} is not a credential name: 1 to 64 letters, digits, '.', '_' or '-', and not 'shared' or 'open'"
        )))
    }
}

/// Adds the per-host credential `name` to the run in `path` and returns its new token (shown
/// once: only its digest is kept). Takes the writer's lock: [`StoreError::InUse`] while a
/// coordinator runs on the file (which then takes the change itself, see the coordinator's
/// `admin` module). Refuses a name in use or not plain.
pub fn add_credential(path: &Path, name: &str) -> Result<String, StoreError> {
    check_credential_name(name)?;
    let store = Store::open_existing_for_update(path)?;
    let token = new_secret();
    store.insert_credential(name, &digest(&token))?;
    Ok(token)
}

/// Revokes `name` in the run in `path`: its token is refused from then on. Takes the writer's
/// lock, like [`add_credential`]. Returns whether it was in force.
pub fn revoke_credential(path: &Path, name: &str) -> Result<bool, StoreError> {
    Store::open_existing_for_update(path)?.revoke(name)
}

impl Store {
    /// Adds the per-host credential `name` with the token digest `digest`, through this writer's
    /// connection. Refuses a name not plain or in use (revoked names stay taken) and a digest in
    /// use.
    pub fn insert_credential(&self, name: &str, digest: &[u8; 32]) -> Result<(), StoreError> {
        check_credential_name(name)?;
        let sql = self.sql();
        self.conn.execute_batch(CREDENTIALS_TABLE).map_err(&sql)?;
        let inserted = self
            .conn
            .execute(
                "INSERT OR IGNORE INTO credentials(name, digest, created) VALUES (?1, ?2, ?3)",
                params![name, digest.to_vec(), unix_now()],
            )
            .map_err(&sql)?;
        match inserted {
            1 => Ok(()),
            _ => Err(StoreError::Credential(format!(
                "a credential named {name:?} (or with that token) exists already (revoked ones keep their name)"
            ))),
        }
    }

    /// Revokes the per-host credential `name`, through this writer's connection. Returns whether
    /// it was in force (a name unknown or already revoked changes nothing).
    pub fn revoke(&self, name: &str) -> Result<bool, StoreError> {
        if !self.has_table("credentials")? {
            return Ok(false);
        }
        let changed = self
            .conn
            .execute(
                "UPDATE credentials SET revoked=?2 WHERE name=?1 AND revoked IS NULL",
                params![name, unix_now()],
            )
            .map_err(self.sql())?;
        Ok(changed == 1)
    }

    /// Whether the run has, or ever had, a per-host credential: such a run never takes calls
    /// without a token again, even once every one of them is revoked.
    pub fn had_credentials(&self) -> Result<bool, StoreError> {
        Ok(!self.credential_rows()?.is_empty())
    }

    /// Every per-host credential, in force or revoked, by name (none in a file without the table).
    pub fn credential_rows(&self) -> Result<Vec<CredentialRow>, StoreError> {
        if !self.has_table("credentials")? {
            return Ok(Vec::new());
        }
        let sql = self.sql();
        let mut q = self
            .conn
            .prepare("SELECT name, created, revoked FROM credentials ORDER BY name")
            .map_err(&sql)?;
        let rows = q
            .query_map([], |r| {
                Ok(CredentialRow {
                    name: r.get(0)?,
                    created_unix: r.get(1)?,
                    revoked_unix: r.get(2)?,
                })
            })
            .map_err(&sql)?;
        rows.collect::<Result<_, _>>().map_err(&sql)
    }

    /// The per-host credentials in force: name and token digest.
    pub fn active_credentials(&self) -> Result<Vec<(String, [u8; 32])>, StoreError> {
        if !self.has_table("credentials")? {
            return Ok(Vec::new());
        }
        let sql = self.sql();
        let mut q = self
            .conn
            .prepare("SELECT name, digest FROM credentials WHERE revoked IS NULL")
            .map_err(&sql)?;
        let rows = q
            .query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, Vec<u8>>(1)?)))
            .map_err(&sql)?;
        let mut active = Vec::new();
        for row in rows {
            let (name, bytes) = row.map_err(&sql)?;
            // A digest of another length is damage: that token stays refused.
            if let Ok(d) = <[u8; 32]>::try_from(bytes.as_slice()) {
                active.push((name, d));
            }
        }
        Ok(active)
    }

    /// Whether the file has a table `name`.
    pub(super) fn has_table(&self, name: &str) -> Result<bool, StoreError> {
        let found: Option<String> = self
            .conn
            .query_row(
                "SELECT name FROM sqlite_master WHERE type='table' AND name=?1",
                [name],
                |r| r.get(0),
            )
            .optional()
            .map_err(self.sql())?;
        Ok(found.is_some())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digests_match_only_their_secret_and_never_an_empty_row() {
        let s = new_secret();
        assert_eq!(s.len(), 64);
        assert!(same_digest(&digest(&s), &digest(&s)));
        assert!(!same_digest(&digest(&s), &digest("other")));
        assert!(!same_digest(&[], &digest("")));
        assert_ne!(new_secret(), s);
    }

    #[test]
    fn credential_names_are_plain_and_not_reserved() {
        assert!(valid_credential_name("rack-7.gpu_2"));
        for bad in ["", "shared", "open", "a b", "x\n", &"y".repeat(65)] {
            assert!(!valid_credential_name(bad), "{bad:?}");
        }
    }

    /// Offline, `token add|revoke` take the writer's lock; while a writer holds it they are
    /// refused (the coordinator writes them itself); a revoked run keeps its mark.
    #[test]
    fn credentials_are_written_by_the_writer_only_and_remembered_once_revoked() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("run.db");
        let list = nqueens_core::job_list(6, &nqueens_core::SplitParams::default()).unwrap();
        let store = Store::open_or_create(
            &path,
            &list,
            1,
            crate::RunPolicy::default(),
            crate::RunKind::Cluster,
        )
        .unwrap();
        assert!(!store.had_credentials().unwrap());
        assert!(matches!(add_credential(&path, "a"), Err(StoreError::InUse { .. })));
        assert!(matches!(revoke_credential(&path, "a"), Err(StoreError::InUse { .. })));
        store.insert_credential("a", &digest("t")).unwrap();
        assert!(store.insert_credential("a", &digest("u")).is_err(), "a name in use");
        assert!(store.insert_credential("b", &digest("t")).is_err(), "a token in use");
        assert!(store.insert_credential("shared", &digest("v")).is_err());
        assert_eq!(store.active_credentials().unwrap(), vec![("a".into(), digest("t"))]);
        drop(store);
        let token = add_credential(&path, "b").unwrap();
        assert!(revoke_credential(&path, "a").unwrap());
        assert!(!revoke_credential(&path, "a").unwrap(), "already revoked");
        assert!(!revoke_credential(&path, "nobody").unwrap());
        assert!(revoke_credential(&path, "b").unwrap());
        let store = Store::open_existing(&path).unwrap();
        assert!(store.active_credentials().unwrap().is_empty());
        assert!(store.had_credentials().unwrap(), "a run that had tokens stays closed");
        assert_eq!(token.len(), 64);
    }
}
