//! `nqueens-coordinator backup`: a consistent copy of a state file, live or not.
//!
//! The copy is made by `VACUUM INTO` on a read-only connection of its own: one read transaction,
//! so the copy is the run as of one commit, whatever the coordinator writes meanwhile, and it
//! holds the write-ahead log's committed pages too (a plain `cp` of a live `.db` lacks them). A
//! reader beside the coordinator is safe: the coordinator keeps its locks (`descriptors.rs`), so
//! this reader's close neither checkpoints nor deletes the log under it. The copy is written
//! under a temporary name, synced, checked (it must open as a state file of the same run) and only
//! then renamed to its name: a copy that exists is whole.

use super::error::StoreError;
use super::{RunMeta, Store};
use std::path::{Path, PathBuf};

/// `to` with `.partial` appended: where the copy is made before it is renamed.
fn partial_path(to: &Path) -> PathBuf {
    let mut name = to.as_os_str().to_owned();
    name.push(".partial");
    PathBuf::from(name)
}

/// Copies the run in the state file `from` to a new file `to` (which must not exist) and returns
/// the run's metadata. Safe beside a running coordinator.
pub fn backup(from: &Path, to: &Path) -> Result<RunMeta, StoreError> {
    let refuse = |reason: &str| StoreError::BackupTarget { path: to.into(), reason: reason.into() };
    if to.symlink_metadata().is_ok() {
        return Err(refuse("it exists already (a backup never overwrites a file)"));
    }
    let source = Store::open_existing(from)?;
    let partial = partial_path(to);
    let io = |source| StoreError::Io { path: partial.clone(), source };
    match std::fs::remove_file(&partial) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(io(e)),
    }
    let target = partial.to_str().ok_or_else(|| refuse("its name is not valid UTF-8"))?;
    source.conn.execute("VACUUM INTO ?1", [target]).map_err(source.sql())?;
    let meta = source.meta().clone();
    drop(source);
    let result = finish(&partial, to, &meta);
    if result.is_err() {
        let _ = std::fs::remove_file(&partial);
    }
    result.map(|()| meta)
}

/// Syncs the copy at `partial`, checks that it holds the run `meta`, and renames it to `to`.
fn finish(partial: &Path, to: &Path, meta: &RunMeta) -> Result<(), StoreError> {
    let io = |source| StoreError::Io { path: partial.into(), source };
    std::fs::File::open(partial).and_then(|f| f.sync_all()).map_err(io)?;
    {
        // Immutable: the check leaves nothing beside the copy (no -wal, no -shm).
        let copy = Store::open_copy(partial)?;
        if copy.meta().fingerprint != meta.fingerprint {
            return Err(StoreError::Corrupt {
                path: partial.into(),
                reason: format!(
                    "the copy holds run {}, not {}",
                    copy.meta().fingerprint,
                    meta.fingerprint
                ),
            });
        }
    }
    if to.symlink_metadata().is_ok() {
        return Err(StoreError::BackupTarget {
            path: to.into(),
            reason: "it appeared while the copy was made".into(),
        });
    }
    std::fs::rename(partial, to).map_err(io)?;
    if let Some(dir) = to.parent().filter(|d| !d.as_os_str().is_empty()) {
        let _ = std::fs::File::open(dir).and_then(|d| d.sync_all());
    }
    Ok(())
}
