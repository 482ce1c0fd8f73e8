//! One writer per state file: an exclusive lock on `<state>.lock`, and one on the state file
//! itself (so that a symlink or a hard link, whose `.lock` names differ, cannot open a second
//! writer), held for as long as the writer's [`Store`](super::Store) lives and dropped by the
//! kernel when the process dies.
//!
//! The lock on the state file is a `flock` on a descriptor this module keeps open for the rest of
//! the process: closing any descriptor of a SQLite file would drop the POSIX locks SQLite holds on
//! it (a documented hazard), so a released lock is unlocked, never closed.

use super::error::StoreError;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Descriptors of state files this process locked, by (device, inode), and whether a writer of
/// this process holds the lock now.
type HeldFiles = HashMap<(u64, u64), (Arc<std::fs::File>, bool)>;
static FILE_LOCKS: Mutex<Option<HeldFiles>> = Mutex::new(None);

/// The writer's lock on the state file itself (by inode), released on drop.
struct FileLock {
    key: (u64, u64),
    file: Arc<std::fs::File>,
}

impl FileLock {
    /// Locks the file at `state` (following links) for this writer, without waiting.
    fn acquire(state: &Path, lock: &Path) -> Result<Option<FileLock>, StoreError> {
        let io = |source| StoreError::Lock { path: state.into(), lock: lock.into(), source };
        let file = match std::fs::File::open(state) {
            Ok(f) => f,
            // Nothing to lock yet: the `.lock` file guards the creation.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(io(e)),
        };
        let meta = file.metadata().map_err(io)?;
        let key = (meta.dev(), meta.ino());
        let mut held = FILE_LOCKS.lock();
        let held = held.get_or_insert_with(HashMap::new);
        let entry = held.entry(key).or_insert_with(|| (Arc::new(file), false));
        if entry.1 {
            return Err(StoreError::InUse { path: state.into(), lock: state.into() });
        }
        match entry.0.try_lock() {
            Ok(()) => {}
            Err(std::fs::TryLockError::WouldBlock) => {
                return Err(StoreError::InUse { path: state.into(), lock: state.into() });
            }
            Err(std::fs::TryLockError::Error(e)) => {
                tracing::warn!(state = %state.display(), error = %e, "cannot lock the state file itself here; make sure no other process writes it");
                return Ok(None);
            }
        }
        entry.1 = true;
        Ok(Some(FileLock { key, file: entry.0.clone() }))
    }
}

impl Drop for FileLock {
    fn drop(&mut self) {
        let _ = self.file.unlock();
        if let Some(held) = FILE_LOCKS.lock().as_mut() {
            if let Some(entry) = held.get_mut(&self.key) {
                entry.1 = false;
            }
        }
    }
}

/// The lock file beside a state file.
fn lock_path(path: &Path) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(".lock");
    PathBuf::from(name)
}

/// The writer's lock of one state file. Dropping it lets the lock go; the lock file stays, empty.
pub(super) struct WriterLock {
    /// `None` where the filesystem cannot lock (see [`WriterLock::acquire`]).
    _file: Option<std::fs::File>,
    /// The lock on the state file itself, once it exists.
    inode: Option<FileLock>,
    path: PathBuf,
    /// This process made the lock file, so a refused open may take it away again.
    created: bool,
}

impl WriterLock {
    /// Takes the exclusive writer's lock of the state file at `state`, without waiting. A
    /// filesystem that cannot lock at all (some cluster filesystems mounted without lock support)
    /// gets a warning, not a refusal: the run must still be able to start there.
    pub(super) fn acquire(state: &Path) -> Result<WriterLock, StoreError> {
        let path = lock_path(state);
        let created = !path.exists();
        // A lock file made by another user (say `requeue` run as root) may be read-only to this
        // one; the lock works through a read-only handle all the same.
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .or_else(|_| std::fs::File::open(&path))
            .map_err(|source| StoreError::Lock {
                path: state.into(),
                lock: path.clone(),
                source,
            })?;
        let file = match file.try_lock() {
            Ok(()) => Some(file),
            Err(std::fs::TryLockError::WouldBlock) => {
                return Err(StoreError::InUse { path: state.into(), lock: path });
            }
            Err(std::fs::TryLockError::Error(e)) => {
                tracing::warn!(lock = %path.display(), error = %e, "cannot lock the state file here; make sure no other process writes it");
                None
            }
        };
        let mut lock = WriterLock { _file: file, inode: None, path, created };
        if let Err(e) = lock.hold_file(state) {
            lock.discard();
            return Err(e);
        }
        Ok(lock)
    }

    /// Takes the lock on the state file itself, if it is not held yet and the file exists (a
    /// new run's file is locked right after its creation).
    pub(super) fn hold_file(&mut self, state: &Path) -> Result<(), StoreError> {
        if self.inode.is_none() {
            self.inode = FileLock::acquire(state, &self.path)?;
        }
        Ok(())
    }

    /// Lets the lock go after a refused open, removing the lock file if this process made it, so
    /// that a refusal leaves nothing behind.
    pub(super) fn discard(self) {
        if self.created {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}
