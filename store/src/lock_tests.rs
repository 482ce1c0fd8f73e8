//! The writer's SQLite locks outlive everything else the process does with its state file.
//!
//! POSIX (`fcntl`) locks belong to a process and an inode: closing ANY descriptor of the state file
//! in the writer's process would drop every lock SQLite holds on it. Another process closing its
//! last connection would then find no other reader, checkpoint the write-ahead log and delete the
//! `-wal` and `-shm` files under the live writer, whose commits from then on go to a deleted file.
//! These tests make the outside process a real one: the test binary itself, run again as
//! [`outside_reader`].

use super::*;
use nqueens_core::{job_list, SplitParams};
use std::os::unix::fs::MetadataExt;
use std::path::Path;

/// The environment variable that makes [`outside_reader`] read the state file it names.
const OUTSIDE: &str = "NQ_STORE_TEST_OUTSIDE_READER";

/// Not a test of its own: run by [`outside_close`] as a separate process, it opens a read-only
/// connection to the file named by [`OUTSIDE`], reads it, and closes it (as `status --state`,
/// `token list` or `sqlite3 FILE .backup` do beside a live coordinator).
#[test]
#[ignore = "run by the other tests of this module as a separate process"]
fn outside_reader() {
    let Some(path) = std::env::var_os(OUTSIDE) else { return };
    let store = Store::open_existing(Path::new(&path)).unwrap();
    assert!(store.summary().unwrap().jobs.total() > 0);
    drop(store);
    // A plain SQLite connection too, closed last, as the sqlite3 shell's.
    let conn = rusqlite::Connection::open(&path).unwrap();
    let jobs: i64 = conn.query_row("SELECT COUNT(*) FROM jobs", [], |r| r.get(0)).unwrap();
    assert!(jobs > 0);
}

/// Runs [`outside_reader`] on `path` in a process of its own, to its end.
fn outside_close(path: &Path) {
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "lock_tests::outside_reader", "--ignored", "--nocapture", "--quiet"])
        .env(OUTSIDE, path)
        .output()
        .unwrap();
    assert!(out.status.success(), "outside reader: {}", String::from_utf8_lossy(&out.stderr));
}

/// `path` with `suffix` appended (`-wal`, `-shm`).
fn beside(path: &Path, suffix: &str) -> std::path::PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(suffix);
    name.into()
}

/// The inode of the file at `path`, if there is one.
fn inode(path: &Path) -> Option<u64> {
    std::fs::metadata(path).ok().map(|m| m.ino())
}

/// Whether this process has a descriptor open on a deleted file whose name ends with `suffix`.
fn holds_deleted(suffix: &str) -> bool {
    std::fs::read_dir("/proc/self/fd").unwrap().filter_map(Result::ok).any(|e| {
        std::fs::read_link(e.path())
            .is_ok_and(|t| t.to_string_lossy().ends_with(&format!("{suffix} (deleted)")))
    })
}

/// A writer store beside which the same process looks at the file the way the coordinator does
/// (probing its header, reopening it read-only for status and tokens, taking and letting go of
/// the writer's lock on a second path): an outside process that closes its connections
/// afterwards still finds the writer there, and leaves the `-wal` alone.
#[test]
fn the_writers_locks_survive_its_own_probes_and_reloads() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("live.db");
    let list = job_list(8, &SplitParams::default()).unwrap();
    let mut writer =
        Store::open_or_create(&path, &list, 1, RunPolicy::default(), RunKind::Cluster).unwrap();
    let wal = beside(&path, "-wal");
    let shm = beside(&path, "-shm");
    let (wal_inode, shm_inode) = (inode(&wal), inode(&shm));
    assert!(wal_inode.is_some() && shm_inode.is_some(), "a live writer has a -wal and a -shm");

    // What the coordinator's own process does beside its writer: status and credential reads
    // (each a probe of the header and a read-only connection), a second writer refused.
    for _ in 0..3 {
        drop(Store::open_existing(&path).unwrap());
        assert!(Store::open_existing(&path).unwrap().active_credentials().unwrap().is_empty());
        assert!(matches!(Store::ensure_no_writer(&path), Err(StoreError::InUse { .. })));
    }
    let link = dir.path().join("link.db");
    std::fs::hard_link(&path, &link).unwrap();
    assert!(matches!(Store::open_existing_for_update(&link), Err(StoreError::InUse { .. })));

    outside_close(&path);
    assert_eq!(inode(&wal), wal_inode, "the -wal was deleted or replaced under the writer");
    assert_eq!(inode(&shm), shm_inode, "the -shm was deleted or replaced under the writer");

    // The writer's next commit is in the file others read, not in a deleted log.
    let before = writer.untrusted_workers().unwrap();
    writer
        .apply(
            &[nqueens_scheduler::Change::Untrust {
                worker_id: 9.into(),
                job_id: list.jobs[0].id,
                detail: "after the outside close".into(),
                requeued: 0,
            }],
            &[],
        )
        .unwrap();
    assert!(!holds_deleted("-wal"), "the writer commits to a deleted -wal");
    assert_eq!(before, Vec::<u64>::new());
    assert_eq!(Store::open_existing(&path).unwrap().untrusted_workers().unwrap(), vec![9]);
    outside_close(&path);
    assert_eq!(inode(&wal), wal_inode);
}

/// `backup` beside a live writer: the copy is the run as committed (the log's pages included),
/// opens as a state file of the same run, and the writer's `-wal` stays where it was; a backup
/// never overwrites a file.
#[test]
fn a_backup_of_a_live_run_is_whole_and_leaves_the_writer_alone() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("live.db");
    let list = job_list(8, &SplitParams::default()).unwrap();
    let mut writer =
        Store::open_or_create(&path, &list, 1, RunPolicy::default(), RunKind::Cluster).unwrap();
    writer
        .apply(
            &[nqueens_scheduler::Change::Untrust {
                worker_id: 4.into(),
                job_id: list.jobs[1].id,
                detail: "in the log only".into(),
                requeued: 0,
            }],
            &[],
        )
        .unwrap();
    let wal_inode = inode(&beside(&path, "-wal"));
    let copy = dir.path().join("copy.db");
    let meta = backup(&path, &copy).unwrap();
    assert_eq!(&meta, writer.meta());
    assert_eq!(inode(&beside(&path, "-wal")), wal_inode);
    assert!(!beside(&copy, "-wal").exists() && !dir.path().join("copy.db.partial").exists());
    let read = Store::open_existing(&copy).unwrap();
    assert_eq!(read.meta(), writer.meta());
    assert_eq!(read.untrusted_workers().unwrap(), vec![4]);
    assert_eq!(read.summary().unwrap().jobs.total(), list.jobs.len() as u64);
    let e = backup(&path, &copy).unwrap_err();
    assert!(matches!(e, StoreError::BackupTarget { .. }), "{e}");
    assert!(matches!(
        backup(&dir.path().join("none.db"), &dir.path().join("x.db")),
        Err(StoreError::Missing { .. })
    ));
    drop(writer);
}
