//! One descriptor per state file for the whole process, never closed.
//!
//! SQLite locks its files with POSIX (`fcntl`) locks, which belong to a process and an inode, not
//! to a descriptor: closing ANY descriptor of a database file drops every lock the process holds
//! on it, SQLite's included (a hazard SQLite's documentation names: "a process must not close a
//! file descriptor of a database file it has open through SQLite"). A writer that lost its locks
//! looks absent to other processes: the last of their connections to close then checkpoints the
//! write-ahead log and deletes the `-wal` and `-shm` files under the writer, whose commits go to a
//! deleted file from then on (acknowledged results lost at the next crash).
//!
//! So no code of this crate opens a state file with `std::fs::File` and closes it again: the
//! header look ([`read_header`]) and the writer's `flock` (`lock.rs`) share one descriptor per
//! (device, inode), opened once and kept until the process ends. (SQLite's own connections share
//! its per-inode bookkeeping, which keeps their descriptors open while any lock is held.)

use parking_lot::Mutex;
use std::collections::HashMap;
use std::io;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::Path;
use std::sync::Arc;

/// (device, inode) of a file.
pub(super) type FileKey = (u64, u64);

/// The process's descriptors of state files, by (device, inode).
static HELD: Mutex<Option<HashMap<FileKey, Arc<std::fs::File>>>> = Mutex::new(None);

/// The process's descriptor of the file at `path` (following links) and its key, opened on first
/// use and never closed; `None` if there is no file there.
pub(super) fn held(path: &Path) -> io::Result<Option<(FileKey, Arc<std::fs::File>)>> {
    let mut guard = HELD.lock();
    let files = guard.get_or_insert_with(HashMap::new);
    // A stat takes no descriptor: a file already held is not opened again.
    match std::fs::metadata(path) {
        Ok(meta) => {
            if let Some(file) = files.get(&(meta.dev(), meta.ino())) {
                return Ok(Some(((meta.dev(), meta.ino()), file.clone())));
            }
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    }
    let file = match std::fs::File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    let meta = file.metadata()?;
    let key = (meta.dev(), meta.ino());
    if let Some(existing) = files.get(&key) {
        // The file was replaced between the stat and the open by one this process already holds:
        // the new descriptor is kept open too (closing it would drop the locks), never used.
        std::mem::forget(file);
        return Ok(Some((key, existing.clone())));
    }
    let file = Arc::new(file);
    files.insert(key, file.clone());
    Ok(Some((key, file)))
}

/// The first bytes of the file at `path` (at most `buf.len()`, fewer if it is shorter) and its
/// length, read through the process's held descriptor; `None` if there is no file.
pub(super) fn read_header(path: &Path, buf: &mut [u8]) -> io::Result<Option<(usize, u64)>> {
    let Some((_, file)) = held(path)? else { return Ok(None) };
    let len = file.metadata()?.len();
    let mut got = 0;
    while got < buf.len() {
        match file.read_at(&mut buf[got..], got as u64) {
            Ok(0) => break,
            Ok(k) => got += k,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(Some((got, len)))
}
