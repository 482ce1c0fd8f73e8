//! [`Store::open_for_serve`]: one open of the state file, new or resumed, and its refusals, each
//! leaving the file as it was and nothing beside it.

use super::*;
use nqueens_core::{job_list, SplitParams};

const PROTOCOL: u32 = 1;

fn list(n: u32) -> JobList {
    job_list(n, &SplitParams { target_jobs: Some(2_000) }).unwrap()
}

/// The files in `dir`, by name.
fn listing(dir: &Path) -> Vec<String> {
    let mut names: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

/// `open_for_serve` then `finish` on the result, and how many connections both opened.
fn counted<T>(path: &Path, finish: impl FnOnce(ServeOpen) -> T) -> (T, u64) {
    let before = connections_opened_here();
    let done = Store::open_for_serve(path).map(finish).expect("opened");
    (done, connections_opened_here() - before)
}

fn create(open: ServeOpen, list: &JobList) -> Result<Store, StoreError> {
    match open {
        ServeOpen::New(new) => new.create(list, PROTOCOL, RunPolicy::default()),
        ServeOpen::Resumed(_) => panic!("a new file opened as a stored run"),
    }
}

fn resume(open: ServeOpen, list: &JobList) -> Result<Store, StoreError> {
    match open {
        ServeOpen::Resumed(run) => run.resume(list, PROTOCOL),
        ServeOpen::New(_) => panic!("a stored run opened as a new one"),
    }
}

/// A new run, then the same run resumed: one connection each, the stored metadata handed to the
/// caller before anything is written.
#[test]
fn a_run_is_created_and_resumed_with_one_open_each() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("run.db");
    let list = list(10);
    let (store, opens) = counted(&path, |open| create(open, &list).unwrap());
    assert_eq!(opens, 1, "a new run");
    let fingerprint = store.meta().fingerprint.clone();
    drop(store);
    let (meta, opens) = counted(&path, |open| match open {
        ServeOpen::Resumed(run) => {
            let meta = run.meta().clone();
            assert!(run.active_credentials().unwrap().is_empty());
            assert_eq!(run.resume(&list, PROTOCOL).unwrap().meta(), &meta);
            meta
        }
        ServeOpen::New(_) => panic!("the stored run opened as a new one"),
    });
    assert_eq!(opens, 1, "a resumed run");
    assert_eq!((meta.n, meta.fingerprint, meta.kind.as_str()), (10, fingerprint, "cluster"));
}

/// A stored run is refused when it is not the caller's (another N or job list, another kind),
/// and a file that is damaged, half made or another program's is refused by the open itself;
/// each refusal leaves the file as it was and no lock file beside it.
#[test]
fn a_run_that_is_not_the_callers_is_refused_and_left_as_it_was() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("run.db");
    let ten = list(10);
    drop(create(Store::open_for_serve(&path).unwrap(), &ten).unwrap());
    std::fs::remove_file(dir.path().join("run.db.lock")).unwrap();
    let (before, files) = (std::fs::read(&path).unwrap(), listing(dir.path()));
    let untouched = |what: &str| {
        assert_eq!(std::fs::read(&path).unwrap(), before, "{what}: the file changed");
        assert_eq!(listing(dir.path()), files, "{what}: files left behind");
    };
    let other_n = resume(Store::open_for_serve(&path).unwrap(), &list(11)).err().unwrap();
    assert!(other_n.to_string().contains("it is a run of N=10, not N=11"), "{other_n}");
    untouched("another N");
    let split = job_list(10, &SplitParams { target_jobs: Some(100) }).unwrap();
    let other_split = resume(Store::open_for_serve(&path).unwrap(), &split).err().unwrap();
    assert!(other_split.to_string().contains("its run fingerprint is"), "{other_split}");
    untouched("another split");
    let other_version = match Store::open_for_serve(&path).unwrap() {
        ServeOpen::Resumed(run) => run.resume(&ten, PROTOCOL + 1).err().unwrap(),
        ServeOpen::New(_) => unreachable!(),
    };
    assert!(matches!(other_version, StoreError::OtherRun { .. }), "{other_version}");
    untouched("another protocol version");
    // Dropped unused, as a caller does that refuses the stored settings.
    drop(Store::open_for_serve(&path).unwrap());
    untouched("dropped");

    // A local run (`solve --state`) is not a cluster run.
    let local = dir.path().join("local.db");
    Store::open_or_create(&local, &ten, PROTOCOL, RunPolicy::default(), RunKind::Local).unwrap();
    let kind = resume(Store::open_for_serve(&local).unwrap(), &ten).err().unwrap();
    assert!(kind.to_string().contains("it is a local run, not a cluster run"), "{kind}");
}

/// A damaged file fails its whole-file check, a marked file without metadata (a creation that
/// was interrupted) is refused by `serve` but made anew by `solve --state`, and another
/// program's database is not ours: none of them is changed.
#[test]
fn damaged_half_made_and_foreign_files_are_refused_by_the_open() {
    let dir = tempfile::tempdir().unwrap();
    let damaged = dir.path().join("damaged.db");
    drop(create(Store::open_for_serve(&damaged).unwrap(), &list(12)).unwrap());
    let mut bytes = std::fs::read(&damaged).unwrap();
    let page = 4096;
    assert!(bytes.len() > 8 * page, "{} bytes", bytes.len());
    bytes[4 * page..6 * page].fill(0xA5);
    std::fs::write(&damaged, &bytes).unwrap();
    let e = Store::open_for_serve(&damaged).err().expect("a damaged file is refused");
    assert!(matches!(e, StoreError::Corrupt { .. }), "{e}");
    assert_eq!(std::fs::read(&damaged).unwrap(), bytes, "the damaged file changed");

    let half_made = dir.path().join("half.db");
    let c = rusqlite::Connection::open(&half_made).unwrap();
    c.execute_batch(&format!(
        "PRAGMA application_id={}; PRAGMA user_version={};",
        schema::APPLICATION_ID,
        schema::SCHEMA_VERSION
    ))
    .unwrap();
    drop(c);
    let e = Store::open_for_serve(&half_made).err().expect("refused");
    assert!(e.to_string().contains("no run metadata"), "{e}");
    let made =
        Store::open_or_create(&half_made, &list(8), PROTOCOL, RunPolicy::default(), RunKind::Local);
    assert_eq!(made.unwrap().meta().n, 8, "solve --state makes it anew");

    let foreign = dir.path().join("foreign.sqlite");
    let c = rusqlite::Connection::open(&foreign).unwrap();
    c.execute_batch("CREATE TABLE notes (body TEXT); INSERT INTO notes VALUES ('keep me');")
        .unwrap();
    drop(c);
    let before = std::fs::read(&foreign).unwrap();
    let e = Store::open_for_serve(&foreign).err().expect("refused");
    assert!(matches!(e, StoreError::NotOurs { .. }), "{e}");
    assert_eq!(std::fs::read(&foreign).unwrap(), before);
    assert!(!dir.path().join("foreign.sqlite.lock").exists(), "a lock file left behind");
}

/// While a writer holds the file, a second open for `serve` is refused before it reads a byte.
#[test]
fn a_second_writer_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("run.db");
    let writer = create(Store::open_for_serve(&path).unwrap(), &list(9)).unwrap();
    let (e, opens) = {
        let before = connections_opened_here();
        let e = Store::open_for_serve(&path).err().expect("refused");
        (e, connections_opened_here() - before)
    };
    assert!(matches!(e, StoreError::InUse { .. }), "{e}");
    assert_eq!(opens, 0, "the refused open read the file");
    drop(writer);
}
