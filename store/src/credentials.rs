//! Per-host tokens (`nqueens-coordinator token add NAME --state FILE`): the state file keeps
//! only their SHA-256 digests. They are added and revoked beside a running coordinator (which
//! takes the change within seconds), so these calls write through a connection of their own,
//! without the writer's lock: SQLite serialises the writes, and no other table is touched.
//!
//! The small pure helpers that the coordinator's token checks share with this table (digests,
//! new secrets, which names are allowed) live here too, so that there is one copy of each.

use super::error::StoreError;
use super::schema::CREDENTIALS_TABLE;
use super::{now_unix, Store};
use rusqlite::{params, Connection, OptionalExtension};
use sha2::{Digest, Sha256};
use std::path::Path;
use std::time::Duration;

/// The credential name of calls made with the shared `--token`.
pub const SHARED: &str = "shared";
/// The credential name of calls to a coordinator that requires no token at all.
pub const OPEN: &str = "open";

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

/// A write connection for the credentials table of the state file at `path`, which must be one
/// of ours (checked read-only first).
fn admin_connection(path: &Path) -> Result<Connection, StoreError> {
    drop(Store::open_existing(path)?);
    let sql = |error| StoreError::Sqlite { path: path.into(), error };
    let conn = Connection::open(path).map_err(sql)?;
    conn.busy_timeout(Duration::from_secs(10)).map_err(sql)?;
    conn.execute_batch(CREDENTIALS_TABLE).map_err(sql)?;
    Ok(conn)
}

/// Adds the per-host credential `name` to the run in `path` and returns its new token (shown
/// once: only its digest is kept). Refuses a name in use or not plain.
pub fn add_credential(path: &Path, name: &str) -> Result<String, StoreError> {
    if !valid_credential_name(name) {
        return Err(StoreError::Credential(format!(
            "{name:?} is not a credential name: 1 to 64 letters, digits, '.', '_' or '-', and not 'shared' or 'open'"
        )));
    }
    let conn = admin_connection(path)?;
    let token = new_secret();
    let inserted = conn.execute(
        "INSERT OR IGNORE INTO credentials(name, digest, created) VALUES (?1, ?2, ?3)",
        params![name, digest(&token).to_vec(), now_unix()],
    );
    match inserted.map_err(|error| StoreError::Sqlite { path: path.into(), error })? {
        1 => Ok(token),
        _ => Err(StoreError::Credential(format!(
            "a credential named {name:?} exists already (revoked ones keep their name)"
        ))),
    }
}

/// Revokes `name`: its token is refused from then on (within seconds on a live run), and its
/// workers' calls with it. Returns whether it was in force.
pub fn revoke_credential(path: &Path, name: &str) -> Result<bool, StoreError> {
    let conn = admin_connection(path)?;
    let changed = conn
        .execute(
            "UPDATE credentials SET revoked=?2 WHERE name=?1 AND revoked IS NULL",
            params![name, now_unix()],
        )
        .map_err(|error| StoreError::Sqlite { path: path.into(), error })?;
    Ok(changed == 1)
}

impl Store {
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
}
