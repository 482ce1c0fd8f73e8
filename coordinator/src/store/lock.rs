//! One writer per state file: an exclusive lock on `<state>.lock`, held for as long as the writer's
//! [`Store`](super::Store) lives and dropped by the kernel when the process dies.

use super::StoreError;
use std::path::{Path, PathBuf};

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
        Ok(WriterLock { _file: file, path, created })
    }

    /// Lets the lock go after a refused open, removing the lock file if this process made it, so
    /// that a refusal leaves nothing behind.
    pub(super) fn discard(self) {
        if self.created {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}
