//! One writer per state file: an exclusive lock on `<state>.lock`, and one on the state file
//! itself (so that a symlink or a hard link, whose `.lock` names differ, cannot open a second
//! writer), held for as long as the writer's [`Store`](super::Store) lives and dropped by the
//! kernel when the process dies.
//!
//! The lock on the state file itself is a `flock` on the process's one descriptor of that file
//! (`descriptors.rs`), which is never closed: closing any descriptor of a SQLite file would drop
//! the POSIX locks SQLite holds on it, so a released lock is unlocked, never closed.

use super::descriptors::{self, FileKey};
use super::error::StoreError;
use parking_lot::Mutex;
use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// State files (by device and inode) that a writer of this process holds now.
static LOCKED: Mutex<Option<HashSet<FileKey>>> = Mutex::new(None);

/// The writer's lock on the state file itself (by inode), released on drop.
struct FileLock {
    key: FileKey,
    file: Arc<std::fs::File>,
}

impl FileLock {
    /// Locks the file at `state` (following links) for this writer, without waiting.
    fn acquire(state: &Path, lock: &Path) -> Result<Option<FileLock>, StoreError> {
        let io = |source| StoreError::Lock { path: state.into(), lock: lock.into(), source };
        // Nothing to lock yet: the `.lock` file guards the creation.
        let Some((key, file)) = descriptors::held(state).map_err(io)? else { return Ok(None) };
        let mut locked = LOCKED.lock();
        let locked = locked.get_or_insert_with(HashSet::new);
        if locked.contains(&key) {
            return Err(StoreError::InUse { path: state.into(), lock: state.into() });
        }
        match file.try_lock() {
            Ok(()) => {}
            Err(std::fs::TryLockError::WouldBlock) => {
                return Err(StoreError::InUse { path: state.into(), lock: state.into() });
            }
            Err(std::fs::TryLockError::Error(e)) => {
                tracing::warn!(state = %state.display(), error = %e, "cannot lock the state file itself here; make sure no other process writes it");
                return Ok(None);
            }
        }
        locked.insert(key);
        Ok(Some(FileLock { key, file }))
    }
}

impl Drop for FileLock {
    fn drop(&mut self) {
        let _ = self.file.unlock();
        if let Some(locked) = LOCKED.lock().as_mut() {
            locked.remove(&self.key);
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

/// The writer's lock while the open that took it may still be refused: dropped, it is discarded
/// (see [`WriterLock::discard`]), so a refusal leaves nothing behind; [`OpeningLock::keep`] makes
/// it the opened store's.
pub(super) struct OpeningLock(Option<WriterLock>);

impl OpeningLock {
    /// Takes the writer's lock of `state` (see [`WriterLock::acquire`]).
    pub(super) fn acquire(state: &Path) -> Result<OpeningLock, StoreError> {
        WriterLock::acquire(state).map(|lock| OpeningLock(Some(lock)))
    }

    /// Takes the lock on the state file itself once it exists (see [`WriterLock::hold_file`]).
    pub(super) fn hold_file(&mut self, state: &Path) -> Result<(), StoreError> {
        match &mut self.0 {
            Some(lock) => lock.hold_file(state),
            None => Ok(()),
        }
    }

    /// The open succeeded: the lock is the store's from now on.
    pub(super) fn keep(mut self) -> Option<WriterLock> {
        self.0.take()
    }
}

impl Drop for OpeningLock {
    fn drop(&mut self) {
        if let Some(lock) = self.0.take() {
            lock.discard();
        }
    }
}
