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
//! directory that is a link, not its own or writable by others; it then holds the directory open
//! and works only through that descriptor ([`AdminDir`]), checking before each look that it is
//! still a directory of its own, private, and still the one at its path: one changed or swapped
//! since (its mode, its owner, a link put in its place) is no longer read.

use crate::engine::{Command, EngineHandle, TokensNow};
use crate::grpc::auth::Credentials;
use nqueens_store::{check_credential_name, StoreError};
use rustix::fs::{self, Mode, OFlags};
use serde::{Deserialize, Serialize};
use std::io::{Read, Write};
use std::os::fd::OwnedFd;
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
    let file = match std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)
    {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io(path)(e)),
    };
    read_open(file, path).map(Some)
}

/// The whole open `file` (found at `path`), which must be a regular file of at most
/// [`MAX_REQUEST`] bytes.
fn read_open(mut file: std::fs::File, path: &Path) -> Result<Vec<u8>, AdminError> {
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
    Ok(body)
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

/// The admin directory as the coordinator holds it: open, every file call relative to the
/// descriptor, and what it is checked again before each look (see [`AdminDir::check`]).
pub(crate) struct AdminDir {
    fd: OwnedFd,
    path: PathBuf,
    /// The directory's device and inode when it was opened.
    id: (u64, u64),
}

impl AdminDir {
    /// Opens the directory at `path` (not through a link) and checks it.
    fn open(path: &Path) -> Result<AdminDir, AdminError> {
        let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let fd = fs::openat(fs::CWD, path, flags, Mode::empty()).map_err(|e| match e {
            rustix::io::Errno::LOOP | rustix::io::Errno::NOTDIR => AdminError::Unsafe {
                dir: path.into(),
                reason: "a link or a file, not a directory".into(),
            },
            e => io(path)(e.into()),
        })?;
        let st = fs::fstat(&fd).map_err(|e| io(path)(e.into()))?;
        let dir = AdminDir { fd, path: path.into(), id: file_id(&st) };
        dir.check()?;
        Ok(dir)
    }

    /// Whether the directory is still one to trust: a directory of this process's user that
    /// others may not write, and still the one at its path.
    fn check(&self) -> Result<(), AdminError> {
        let unsafe_dir = |reason: String| AdminError::Unsafe { dir: self.path.clone(), reason };
        let st = fs::fstat(&self.fd).map_err(|e| io(&self.path)(e.into()))?;
        // SAFETY: geteuid has no preconditions and cannot fail.
        let me = unsafe { libc::geteuid() };
        if st.st_uid != me {
            return Err(unsafe_dir(format!("owned by uid {}, not {me}", st.st_uid)));
        }
        if st.st_mode & 0o022 != 0 {
            return Err(unsafe_dir(format!("mode {:o}: others may write it", st.st_mode & 0o777)));
        }
        let at_path = fs::statat(fs::CWD, &self.path, fs::AtFlags::SYMLINK_NOFOLLOW);
        if at_path.map(|s| file_id(&s)).ok() != Some(self.id) {
            return Err(unsafe_dir("no longer the directory the coordinator opened".into()));
        }
        Ok(())
    }

    /// The names of the files in the directory.
    fn names(&self) -> Vec<String> {
        let Ok(dir) = fs::Dir::read_from(&self.fd) else { return Vec::new() };
        dir.flatten()
            .filter_map(|entry| entry.file_name().to_str().ok().map(str::to_owned))
            .filter(|name| name != "." && name != "..")
            .collect()
    }

    /// The whole file `name` (not through a link, at most [`MAX_REQUEST`] bytes), if there.
    fn read(&self, name: &str) -> Result<Option<Vec<u8>>, AdminError> {
        let path = self.path.join(name);
        let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC;
        let fd = match fs::openat(&self.fd, name, flags, Mode::empty()) {
            Ok(fd) => fd,
            Err(rustix::io::Errno::NOENT) => return Ok(None),
            Err(e) => return Err(io(&path)(e.into())),
        };
        read_open(std::fs::File::from(fd), &path).map(Some)
    }

    /// Writes `body` to `name` through `<name>.tmp` (mode 0600, created new), synced, then
    /// renamed, all within the directory.
    fn write(&self, name: &str, body: &[u8]) -> Result<(), AdminError> {
        let tmp = format!("{name}.tmp");
        let path = self.path.join(&tmp);
        let flags = OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW;
        let fd = fs::openat(&self.fd, &tmp, flags | OFlags::CLOEXEC, Mode::from_raw_mode(0o600))
            .map_err(|e| io(&path)(e.into()))?;
        let mut file = std::fs::File::from(fd);
        file.write_all(body).and_then(|()| file.sync_all()).map_err(io(&path))?;
        fs::renameat(&self.fd, &tmp, &self.fd, name).map_err(|e| io(&path)(e.into()))
    }

    /// Removes the file `name`, if there.
    fn remove(&self, name: &str) {
        let _ = fs::unlinkat(&self.fd, name, fs::AtFlags::empty());
    }
}

/// The device and inode of a file: which file it is.
#[allow(clippy::unnecessary_cast)] // the fields' types differ between platforms
fn file_id(st: &fs::Stat) -> (u64, u64) {
    (st.st_dev as u64, st.st_ino as u64)
}

/// Makes (or checks) the admin directory of `state`, opens it, and clears what a previous
/// coordinator left in it: what [`spawn`] answers from.
pub(crate) fn prepare_dir(state: &Path) -> Result<AdminDir, AdminError> {
    let path = admin_dir(state);
    match std::fs::DirBuilder::new().mode(0o700).create(&path) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(io(&path)(e)),
    }
    let dir = AdminDir::open(&path)?;
    for name in dir.names() {
        dir.remove(&name);
    }
    Ok(dir)
}

/// Starts answering the token requests left in `dir` (see [`prepare_dir`]): the run's engine
/// writes each change, then `credentials` take it. The thread ends once `stop` is set or the
/// engine is gone. An error if the thread cannot be started.
pub(crate) fn spawn(
    dir: AdminDir,
    engine: EngineHandle,
    credentials: Arc<Credentials>,
    stop: Arc<AtomicBool>,
) -> std::io::Result<std::thread::JoinHandle<()>> {
    std::thread::Builder::new()
        .name("nq-admin".into())
        .spawn(move || {
            let mut refused = false;
            while !stop.load(Ordering::SeqCst) {
                match dir.check() {
                    Ok(()) => {
                        if !answer_waiting(&dir, &engine, &credentials) {
                            return;
                        }
                    }
                    Err(e) if !refused => {
                        refused = true;
                        tracing::error!(error = %e, "the admin directory changed since the coordinator made it: token requests are no longer read (restart the coordinator to make it again)");
                    }
                    Err(_) => {}
                }
                std::thread::sleep(POLL);
            }
        })
}

/// Answers every request in `dir`; false once the engine is gone.
fn answer_waiting(dir: &AdminDir, engine: &EngineHandle, credentials: &Credentials) -> bool {
    for name in dir.names() {
        let Some(id) = name.strip_suffix(".request") else { continue };
        let read = dir.read(&name);
        dir.remove(&name);
        let op = read.map(|body| body.and_then(|b| serde_json::from_slice::<AdminOp>(&b).ok()));
        let reply = match op {
            Ok(Some(op)) => match apply(op, engine, credentials) {
                Some(reply) => reply,
                None => return false,
            },
            _ => refusal("the request is not one this coordinator reads"),
        };
        let body = serde_json::to_vec(&reply).expect("a reply serializes");
        if let Err(e) = dir.write(&format!("{id}.reply"), &body) {
            tracing::warn!(error = %e, "cannot write the reply to a token request");
        }
    }
    true
}

fn refusal(message: impl Into<String>) -> AdminReply {
    AdminReply { ok: false, changed: false, message: message.into() }
}

/// Has the engine make `op` and puts the credentials it leaves in force; `None` once the engine
/// is gone.
fn apply(op: AdminOp, engine: &EngineHandle, credentials: &Credentials) -> Option<AdminReply> {
    let (tx, rx) = std::sync::mpsc::channel::<Result<TokensNow, StoreError>>();
    let command = match &op {
        AdminOp::Add { name, digest } => {
            if let Err(e) = check_credential_name(name) {
                return Some(refusal(e.to_string()));
            }
            let Some(digest) = parse_digest(digest) else {
                return Some(refusal("the token digest is not 64 hex digits"));
            };
            Command::AddToken { name: name.clone(), digest, reply: tx }
        }
        AdminOp::Revoke { name } => Command::RevokeToken { name: name.clone(), reply: tx },
    };
    if !engine.send(command) {
        return None;
    }
    let Ok(applied) = rx.recv_timeout(Duration::from_secs(60)) else {
        return Some(refusal("the engine did not take the change (stopping?)"));
    };
    Some(match applied {
        Ok(TokensNow { changed, active, had_credentials }) => {
            let tokens = active.len();
            credentials.set(active, had_credentials);
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
        let dir = prepare_dir(&state).unwrap().path;
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

    /// The directory is checked again before each look: made writable by others, or swapped
    /// for another (a link in its place), it is no longer read.
    #[test]
    fn an_admin_directory_changed_after_start_is_refused() {
        use std::os::unix::fs::PermissionsExt;
        let tmp = tempfile::tempdir().unwrap();
        let state = tmp.path().join("run.db");
        let dir = prepare_dir(&state).unwrap();
        dir.check().unwrap();
        dir.write("x.reply", b"{}").unwrap();
        assert_eq!(dir.read("x.reply").unwrap().as_deref(), Some(&b"{}"[..]));
        assert_eq!(dir.names(), ["x.reply"]);
        std::fs::set_permissions(&dir.path, std::fs::Permissions::from_mode(0o777)).unwrap();
        assert!(matches!(dir.check(), Err(AdminError::Unsafe { .. })));
        std::fs::set_permissions(&dir.path, std::fs::Permissions::from_mode(0o700)).unwrap();
        dir.check().unwrap();
        // Swapped: the path now names another directory, through a link.
        let moved = tmp.path().join("moved");
        std::fs::rename(&dir.path, &moved).unwrap();
        std::os::unix::fs::symlink(&moved, &dir.path).unwrap();
        assert!(matches!(dir.check(), Err(AdminError::Unsafe { .. })));
        std::fs::remove_file(&dir.path).unwrap();
        std::fs::create_dir(&dir.path).unwrap();
        assert!(matches!(dir.check(), Err(AdminError::Unsafe { .. })));
        // A link in the directory is not followed.
        let held = AdminDir::open(&dir.path).unwrap();
        std::os::unix::fs::symlink(tmp.path().join("run.db"), dir.path.join("y.request")).unwrap();
        assert!(held.read("y.request").is_err());
    }
}
