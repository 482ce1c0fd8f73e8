//! `token add|revoke` on a live run, without a second writer.
//!
//! A running coordinator holds its state file's writer lock, and its engine is the only writer.
//! So `token add|revoke`, finding the lock held, do not open the file for writing: they leave a
//! request in the run's admin directory, `<state>.admin/` (made by the coordinator, mode 0700),
//! and wait for the coordinator's reply beside it. The coordinator polls the directory every
//! [`POLL`], has its engine write the change through the writer's own connection, puts the new
//! credentials in force at once (a revoke also ends the revoked token's open streams, see
//! `grpc/auth.rs`), and only then writes the reply: once the command returns, the change is
//! committed and in force.
//!
//! Requests and replies are small JSON files, mode 0600, written under a temporary name and
//! renamed into place (so neither side ever reads half a file), opened without following links,
//! at most [`MAX_REQUEST`] bytes. They carry a name and a token's SHA-256 digest, never a token.
//! Who may write the directory may change the run's tokens: its owner (the coordinator's user)
//! and root, as for the state file itself. A coordinator refuses to start beside an admin
//! directory that is a link, not its own or writable by others.

use crate::engine::{Command, EngineHandle};
use crate::grpc::auth::Credentials;
use nqueens_store::{check_credential_name, StoreError};
use serde::{Deserialize, Serialize};
use std::io::{Read, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use thiserror::Error;

/// How often the coordinator looks for requests.
pub const POLL: Duration = Duration::from_millis(200);

/// How long `token add|revoke` wait for the coordinator's reply.
pub const REPLY_TIMEOUT: Duration = Duration::from_secs(20);

/// The largest request or reply read, in bytes.
pub const MAX_REQUEST: u64 = 4096;

/// What a request asks of the coordinator.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum AdminOp {
    /// Add the per-host credential `name` whose token has the SHA-256 `digest` (64 hex digits).
    Add {
        /// The credential's name.
        name: String,
        /// The token's digest, hex.
        digest: String,
    },
    /// Revoke the per-host credential `name`.
    Revoke {
        /// The credential's name.
        name: String,
    },
}

/// The coordinator's answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AdminReply {
    /// The change was made, or there was nothing to change (a revoke of a name not in force).
    pub ok: bool,
    /// Something changed (a revoke: the name was in force).
    pub changed: bool,
    /// Why not, when `ok` is false.
    pub message: String,
}

/// Why a request could not be made or answered.
#[derive(Debug, Error)]
pub enum AdminError {
    /// The admin directory is missing: the lock holder is not a coordinator taking requests.
    #[error("{state} is in use by a process that takes no token requests (no {dir}): a `solve --state`, a `requeue`, or a coordinator older than this command; stop it and run the command again")]
    NoCoordinator {
        /// The state file.
        state: PathBuf,
        /// The admin directory looked for.
        dir: PathBuf,
    },
    /// The admin directory is not one to trust (a link, another owner's, writable by others).
    #[error("{dir} is not a private directory of the coordinator's user: {reason}")]
    Unsafe {
        /// The admin directory.
        dir: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// A file of the exchange cannot be written or read.
    #[error("{path}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// No reply came in time.
    #[error("the coordinator running on {state} did not answer within {}s (see its log)", waited.as_secs())]
    NoAnswer {
        /// The state file.
        state: PathBuf,
        /// How long the command waited.
        waited: Duration,
    },
}

/// The admin directory of the run in `state`: `<state>.admin`.
pub fn admin_dir(state: &Path) -> PathBuf {
    let mut name = state.as_os_str().to_owned();
    name.push(".admin");
    PathBuf::from(name)
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> AdminError + '_ {
    move |source| AdminError::Io { path: path.into(), source }
}

/// Writes `body` to `path` through `<path>.tmp` (mode 0600, created new), synced, then renamed.
fn write_atomically(path: &Path, body: &[u8], owner: Option<(u32, u32)>) -> Result<(), AdminError> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = PathBuf::from(tmp);
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(&tmp)
        .map_err(io(&tmp))?;
    file.write_all(body).and_then(|()| file.sync_all()).map_err(io(&tmp))?;
    if let Some((uid, gid)) = owner {
        // Root asking a coordinator of another user: the file is made that user's, so that the
        // coordinator can read it (a plain user cannot give files away; then it is theirs).
        if file.metadata().is_ok_and(|m| m.uid() != uid) {
            let _ = std::os::unix::fs::fchown(&file, Some(uid), Some(gid));
        }
    }
    std::fs::rename(&tmp, path).map_err(io(path))
}

/// Reads the whole file at `path` (not through a link, at most [`MAX_REQUEST`] bytes), if it is
/// there.
fn read_small(path: &Path) -> Result<Option<Vec<u8>>, AdminError> {
    let mut file = match std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)
    {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io(path)(e)),
    };
    let meta = file.metadata().map_err(io(path))?;
    if !meta.is_file() || meta.len() > MAX_REQUEST {
        return Err(AdminError::Io {
            path: path.into(),
            source: std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("not a regular file of at most {MAX_REQUEST} bytes"),
            ),
        });
    }
    let mut body = Vec::new();
    Read::by_ref(&mut file).take(MAX_REQUEST).read_to_end(&mut body).map_err(io(path))?;
    Ok(Some(body))
}

/// Sends `op` to the coordinator running on `state` and waits up to `timeout` for its reply.
pub fn ask(state: &Path, op: &AdminOp, timeout: Duration) -> Result<AdminReply, AdminError> {
    let dir = admin_dir(state);
    let meta = match dir.symlink_metadata() {
        Ok(m) => m,
        Err(_) => return Err(AdminError::NoCoordinator { state: state.into(), dir }),
    };
    if !meta.is_dir() {
        return Err(AdminError::Unsafe { dir, reason: "not a directory".into() });
    }
    let id = &nqueens_store::credentials::new_secret()[..32];
    let request = dir.join(format!("{id}.request"));
    let reply = dir.join(format!("{id}.reply"));
    let body = serde_json::to_vec(op).expect("a request serializes");
    write_atomically(&request, &body, Some((meta.uid(), meta.gid())))?;
    let started = Instant::now();
    while started.elapsed() < timeout {
        if let Some(body) = read_small(&reply)? {
            let _ = std::fs::remove_file(&reply);
            return serde_json::from_slice(&body).map_err(|e| AdminError::Io {
                path: reply.clone(),
                source: std::io::Error::new(std::io::ErrorKind::InvalidData, e),
            });
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = std::fs::remove_file(&request);
    Err(AdminError::NoAnswer { state: state.into(), waited: timeout })
}

/// Makes (or checks) the admin directory of `state` and clears what a previous coordinator left
/// in it.
fn prepare_dir(state: &Path) -> Result<PathBuf, AdminError> {
    let dir = admin_dir(state);
    match std::fs::DirBuilder::new().mode(0o700).create(&dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(io(&dir)(e)),
    }
    let meta = dir.symlink_metadata().map_err(io(&dir))?;
    // SAFETY: geteuid has no preconditions and cannot fail.
    let me = unsafe { libc::geteuid() };
    let unsafe_dir = |reason: String| AdminError::Unsafe { dir: dir.clone(), reason };
    if !meta.is_dir() {
        return Err(unsafe_dir("a link or a file, not a directory".into()));
    }
    if meta.uid() != me {
        return Err(unsafe_dir(format!("owned by uid {}, not {me}", meta.uid())));
    }
    if meta.mode() & 0o022 != 0 {
        return Err(unsafe_dir(format!("mode {:o}: others may write it", meta.mode() & 0o777)));
    }
    for entry in std::fs::read_dir(&dir).map_err(io(&dir))?.flatten() {
        let _ = std::fs::remove_file(entry.path());
    }
    Ok(dir)
}

/// Starts answering token requests for the run in `state`: its engine writes each change, then
/// `credentials` take it. The thread ends once `stop` is set or the engine is gone.
pub(crate) fn spawn(
    state: &Path,
    engine: EngineHandle,
    credentials: Arc<Credentials>,
    stop: Arc<AtomicBool>,
) -> Result<std::thread::JoinHandle<()>, AdminError> {
    let dir = prepare_dir(state)?;
    let thread = std::thread::Builder::new()
        .name("nq-admin".into())
        .spawn(move || {
            while !stop.load(Ordering::SeqCst) {
                if !answer_waiting(&dir, &engine, &credentials) {
                    return;
                }
                std::thread::sleep(POLL);
            }
        })
        .map_err(io(state))?;
    Ok(thread)
}

/// Answers every request in `dir`; false once the engine is gone.
fn answer_waiting(dir: &Path, engine: &EngineHandle, credentials: &Credentials) -> bool {
    let Ok(entries) = std::fs::read_dir(dir) else { return true };
    for entry in entries.flatten() {
        let path = entry.path();
        let Some(id) = path.file_name().and_then(|n| n.to_str()?.strip_suffix(".request")) else {
            continue;
        };
        let reply_path = dir.join(format!("{id}.reply"));
        let read = read_small(&path);
        let _ = std::fs::remove_file(&path);
        let op = read.map(|body| body.and_then(|b| serde_json::from_slice::<AdminOp>(&b).ok()));
        let reply = match op {
            Ok(Some(op)) => match apply(op, engine, credentials) {
                Some(reply) => reply,
                None => return false,
            },
            _ => refusal("the request is not one this coordinator reads"),
        };
        let body = serde_json::to_vec(&reply).expect("a reply serializes");
        if let Err(e) = write_atomically(&reply_path, &body, None) {
            tracing::warn!(error = %e, "cannot write the reply to a token request");
        }
    }
    true
}

fn refusal(message: impl Into<String>) -> AdminReply {
    AdminReply { ok: false, changed: false, message: message.into() }
}

/// What the engine did with one change: whether it changed anything, and the credentials then.
type Applied = Result<(bool, Vec<(String, [u8; 32])>, bool), StoreError>;

/// Has the engine make `op` and puts the credentials it leaves in force; `None` once the engine
/// is gone.
fn apply(op: AdminOp, engine: &EngineHandle, credentials: &Credentials) -> Option<AdminReply> {
    let digest = match &op {
        AdminOp::Add { name, digest } => {
            if let Err(e) = check_credential_name(name) {
                return Some(refusal(e.to_string()));
            }
            match parse_digest(digest) {
                Some(d) => Some(d),
                None => return Some(refusal("the token digest is not 64 hex digits")),
            }
        }
        AdminOp::Revoke { .. } => None,
    };
    let (tx, rx) = std::sync::mpsc::channel::<Applied>();
    let work = op.clone();
    let sent = engine.send(Command::WithStore(Box::new(move |store| {
        let changed = match (&work, digest) {
            (AdminOp::Add { name, .. }, Some(d)) => {
                store.insert_credential(name, &d).map(|()| true)
            }
            (AdminOp::Revoke { name }, _) => store.revoke(name),
            _ => Ok(false),
        };
        let now = changed.and_then(|changed| {
            Ok((changed, store.active_credentials()?, store.had_credentials()?))
        });
        let _ = tx.send(now);
    })));
    if !sent {
        return None;
    }
    let Ok(applied) = rx.recv_timeout(Duration::from_secs(60)) else {
        return Some(refusal("the engine did not take the change (stopping?)"));
    };
    Some(match applied {
        Ok((changed, active, had)) => {
            let tokens = active.len();
            credentials.set(active, had);
            match &op {
                AdminOp::Add { name, .. } => {
                    tracing::info!(credential = %name, tokens, "per-host token added")
                }
                AdminOp::Revoke { name } if changed => {
                    tracing::info!(credential = %name.escape_debug(), tokens, "per-host token revoked: its calls and open streams are refused from now on")
                }
                AdminOp::Revoke { .. } => {}
            }
            AdminReply { ok: true, changed, message: String::new() }
        }
        Err(e) => refusal(e.to_string()),
    })
}

/// 32 bytes from 64 hex digits.
fn parse_digest(hex: &str) -> Option<[u8; 32]> {
    if hex.len() != 64 || !hex.is_ascii() {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, byte) in out.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).ok()?;
    }
    Some(out)
}

/// 64 hex digits of a digest.
pub fn hex_digest(digest: &[u8; 32]) -> String {
    digest.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digests_cross_as_hex_and_requests_as_tagged_json() {
        let d = nqueens_store::credentials::digest("t");
        assert_eq!(parse_digest(&hex_digest(&d)), Some(d));
        for bad in ["", "zz", &"0".repeat(63), &"g".repeat(64), &"é".repeat(32)] {
            assert_eq!(parse_digest(bad), None, "{bad:?}");
        }
        let op = AdminOp::Revoke { name: "a".into() };
        let text = serde_json::to_string(&op).unwrap();
        assert_eq!(text, r#"{"op":"revoke","name":"a"}"#);
        assert_eq!(serde_json::from_str::<AdminOp>(&text).unwrap(), op);
    }

    /// The directory is made private; one that others may write, or a link, is refused.
    #[test]
    fn the_admin_directory_is_private_or_refused() {
        use std::os::unix::fs::PermissionsExt;
        let tmp = tempfile::tempdir().unwrap();
        let state = tmp.path().join("run.db");
        let dir = prepare_dir(&state).unwrap();
        assert_eq!(dir.metadata().unwrap().mode() & 0o777, 0o700);
        std::fs::write(dir.join("old.request"), b"{}").unwrap();
        prepare_dir(&state).unwrap();
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0, "leftovers are cleared");
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
        assert!(matches!(prepare_dir(&state), Err(AdminError::Unsafe { .. })));
        let linked = tmp.path().join("linked.db");
        std::os::unix::fs::symlink(tmp.path(), admin_dir(&linked)).unwrap();
        assert!(matches!(prepare_dir(&linked), Err(AdminError::Unsafe { .. })));
        let none = tmp.path().join("none.db");
        let op = AdminOp::Revoke { name: "x".into() };
        assert!(matches!(
            ask(&none, &op, Duration::from_millis(10)),
            Err(AdminError::NoCoordinator { .. })
        ));
        assert!(matches!(
            ask(&linked, &op, Duration::from_millis(10)),
            Err(AdminError::Unsafe { .. })
        ));
        let quiet = tmp.path().join("quiet.db");
        prepare_dir(&quiet).unwrap();
        assert!(matches!(
            ask(&quiet, &op, Duration::from_millis(10)),
            Err(AdminError::NoAnswer { .. })
        ));
        assert_eq!(std::fs::read_dir(admin_dir(&quiet)).unwrap().count(), 0, "request taken back");
    }
}
