//! The store's own tests: checkpoints, reloading, the writer's lock, requeue and refusals.

use super::schema::{APPLICATION_ID, SCHEMA_VERSION};
use super::*;
use nqueens_core::{job_list, JobCounts, SplitParams};
use nqueens_scheduler::state::JobState;
use nqueens_scheduler::Change;

/// The protocol major of the runs these tests make (any will do: it is part of the fingerprint).
const PROTOCOL: u32 = 1;

#[test]
fn checkpoint_resumes_and_refuses_other_runs() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cp.db");
    let list = job_list(8, &SplitParams::default()).unwrap();
    let half = list.jobs.len() / 2;
    {
        let cp = LocalCheckpoint::open(&path, &list, PROTOCOL).unwrap();
        for job in &list.jobs[..half] {
            cp.record(job.id, &job.solve().unwrap(), 0.0).unwrap();
        }
        cp.flush().unwrap();
    }
    let cp = LocalCheckpoint::open(&path, &list, PROTOCOL).unwrap();
    let done = cp.done_ids().unwrap();
    assert_eq!(done.len(), half);
    for job in &list.jobs[half..] {
        cp.record(job.id, &job.solve().unwrap(), 0.0).unwrap();
    }
    let (_, outcome) = cp.finish().unwrap();
    assert_eq!(
        outcome.exact().unwrap().total,
        u128::from(nqueens_core::reference::count_all(8).unwrap())
    );
    drop(cp);
    let other = job_list(9, &SplitParams::default()).unwrap();
    assert!(matches!(
        LocalCheckpoint::open(&path, &other, PROTOCOL),
        Err(StoreError::OtherRun { .. })
    ));
    untrust_and_uncount_survive_reopening(&path, &list);
    one_writer_at_a_time(&path, &list);
    held_and_failed_jobs_are_requeued(&path, &list);
    let junk = dir.path().join("junk.db");
    std::fs::write(&junk, b"this is not a database at all, not even close, really not").unwrap();
    assert!(
        matches!(LocalCheckpoint::open(&junk, &list, PROTOCOL), Err(StoreError::NotOurs { .. })),
        "{:?}",
        LocalCheckpoint::open(&junk, &list, PROTOCOL).err()
    );
}

/// An untrusted mark and the un-counting of its worker's row survive reopening.
fn untrust_and_uncount_survive_reopening(path: &Path, list: &JobList) {
    {
        let mut store =
            Store::open_or_create(path, list, PROTOCOL, RunPolicy::default(), RunKind::Local)
                .unwrap();
        let job = &list.jobs[0];
        store
            .apply(
                &[
                    Change::Uncount { job_id: job.id },
                    Change::JobState {
                        job_id: job.id,
                        state: JobState::Pending,
                        lease_id: None,
                        worker_id: None,
                        errors: 0,
                        conflicts: 0,
                    },
                    Change::Untrust {
                        worker_id: 7.into(),
                        job_id: job.id,
                        detail: "test".into(),
                        requeued: 1,
                    },
                ],
                &[],
            )
            .unwrap();
    }
    let mut store =
        Store::open_or_create(path, list, PROTOCOL, RunPolicy::default(), RunKind::Local).unwrap();
    assert_eq!(store.untrusted_workers().unwrap(), vec![7]);
    let loaded = store.load().unwrap();
    assert_eq!(loaded.untrusted, vec![WorkerId::new(7)]);
    assert_eq!(loaded.jobs[0].state, JobState::Pending);
    assert!(loaded.jobs[0].counted.is_none());
    assert_eq!(store.tally().unwrap().jobs, list.jobs.len() as u64 - 1);
    assert_eq!(Store::open_existing(path).unwrap().summary().unwrap().untrusted_workers, 1);
    drop(store);
}

/// One writer at a time; readers are welcome; the lock goes with its store.
fn one_writer_at_a_time(path: &Path, list: &JobList) {
    let writer = LocalCheckpoint::open(path, list, PROTOCOL).unwrap();
    assert!(matches!(LocalCheckpoint::open(path, list, PROTOCOL), Err(StoreError::InUse { .. })));
    assert!(matches!(
        Store::open_or_create(path, list, PROTOCOL, RunPolicy::default(), RunKind::Local),
        Err(StoreError::InUse { .. })
    ));
    assert!(Store::open_existing(path).is_ok());
    assert!(matches!(Store::open_existing_for_update(path), Err(StoreError::InUse { .. })));
    drop(writer);
    LocalCheckpoint::open(path, list, PROTOCOL).unwrap();
}

/// Held and failed jobs go back to the queue, offline, keeping their counters.
fn held_and_failed_jobs_are_requeued(path: &Path, list: &JobList) {
    {
        let mut store =
            Store::open_or_create(path, list, PROTOCOL, RunPolicy::default(), RunKind::Local)
                .unwrap();
        let state = |job_id, state, errors, conflicts| Change::JobState {
            job_id,
            state,
            lease_id: None,
            worker_id: None,
            errors,
            conflicts,
        };
        store
            .apply(
                &[
                    state(1.into(), JobState::Held, 0, 3),
                    state(2.into(), JobState::Failed, 3, 0),
                    state(3.into(), JobState::Held, 0, 3),
                ],
                &[],
            )
            .unwrap();
    }
    let mut store = Store::open_existing_for_update(path).unwrap();
    assert!(matches!(LocalCheckpoint::open(path, list, PROTOCOL), Err(StoreError::InUse { .. })));
    assert_eq!(store.requeue(Requeue::Held).unwrap(), Requeued { held: 2, failed: 0 });
    assert_eq!(store.requeue(Requeue::Both).unwrap(), Requeued { held: 0, failed: 1 });
    let loaded = store.load().unwrap();
    for id in 1..=3 {
        assert_eq!(loaded.jobs[id].state, JobState::Pending, "job {id}");
    }
    assert_eq!((loaded.jobs[1].conflicts, loaded.jobs[2].errors), (3, 3));
    drop(store);
}

/// Every file beside `path` (the state file itself excluded): `-wal`, `-shm`, `.lock`, ...
fn side_files(path: &std::path::Path) -> Vec<String> {
    let name = path.file_name().unwrap().to_string_lossy().to_string();
    let mut found: Vec<String> = std::fs::read_dir(path.parent().unwrap())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().to_string())
        .filter(|f| f.starts_with(&name) && *f != name)
        .collect();
    found.sort();
    found
}

#[test]
fn files_that_are_not_ours_are_refused_and_left_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let list = job_list(6, &SplitParams::default()).unwrap();
    // Another program's databases: rollback journal, WAL (checkpointed, no -wal left), and one
    // with another application id; and a text file.
    let foreign = dir.path().join("foreign.sqlite");
    let wal = dir.path().join("wal.sqlite");
    let other_id = dir.path().join("other-id.sqlite");
    for (path, setup) in [
        (&foreign, ""),
        (&wal, "PRAGMA journal_mode=WAL;"),
        (&other_id, "PRAGMA application_id=1234;"),
    ] {
        let c = rusqlite::Connection::open(path).unwrap();
        c.execute_batch(&format!(
            "{setup} CREATE TABLE notes (id INTEGER PRIMARY KEY, body TEXT); INSERT INTO notes(body) VALUES ('keep me');"
        ))
        .unwrap();
    }
    let text = dir.path().join("notes.txt");
    std::fs::write(&text, "not a database\n".repeat(20)).unwrap();
    for path in [&foreign, &wal, &other_id, &text] {
        let before = std::fs::read(path).unwrap();
        let refusals = [
            Store::open_or_create(path, &list, PROTOCOL, RunPolicy::default(), RunKind::Cluster)
                .err(),
            LocalCheckpoint::open(path, &list, PROTOCOL).err(),
            Store::open_existing(path).err(),
            Store::open_existing_for_update(path).err(),
        ];
        for e in refusals {
            let e = e.expect("refused");
            assert!(matches!(e, StoreError::NotOurs { .. }), "{}: {e}", path.display());
            assert!(e.to_string().contains("not an nqueens state file"), "{e}");
        }
        assert_eq!(std::fs::read(path).unwrap(), before, "{} changed", path.display());
        assert_eq!(side_files(path), Vec::<String>::new(), "{}", path.display());
    }

    // A missing or empty file becomes a run, marked as ours.
    let empty = dir.path().join("empty.db");
    std::fs::write(&empty, b"").unwrap();
    let missing = dir.path().join("missing.db");
    for path in [&empty, &missing] {
        drop(
            Store::open_or_create(path, &list, PROTOCOL, RunPolicy::default(), RunKind::Cluster)
                .unwrap(),
        );
        let c = rusqlite::Connection::open(path).unwrap();
        let id: i32 = c.query_row("PRAGMA application_id", [], |r| r.get(0)).unwrap();
        let version: u32 = c.query_row("PRAGMA user_version", [], |r| r.get(0)).unwrap();
        assert_eq!((id, version), (APPLICATION_ID, SCHEMA_VERSION));
    }
    assert!(matches!(
        Store::open_existing(&dir.path().join("nope.db")),
        Err(StoreError::Missing { .. })
    ));
}

/// Solves every job of `list` into a new local run at `path`.
fn finished_run(path: &std::path::Path, list: &nqueens_core::JobList) {
    let cp = LocalCheckpoint::open(path, list, PROTOCOL).unwrap();
    for job in &list.jobs {
        cp.record(job.id, &job.solve().unwrap(), 0.0).unwrap();
    }
    assert!(cp.finish().unwrap().1.exact().is_some());
}

#[test]
fn a_row_that_fails_its_checksum_is_never_counted_and_its_job_is_solved_again() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("run.db");
    let list = job_list(8, &SplitParams::default()).unwrap();
    finished_run(&path, &list);
    let total = u128::from(nqueens_core::reference::count_all(8).unwrap());
    let job = list.jobs.iter().find(|j| j.solve().unwrap().solutions > 0).unwrap().id.get();
    let c = rusqlite::Connection::open(&path).unwrap();
    c.execute(
        "UPDATE results SET solutions=solutions+1 WHERE job_id=?1 AND counted=1",
        [job as i64],
    )
    .unwrap();
    drop(c);

    let mut store = Store::open_existing(&path).unwrap();
    let summary = store.summary().unwrap();
    assert_eq!(summary.bad_rows, 1);
    assert_eq!(summary.jobs.get(JobState::Pending), 1);
    assert_eq!(store.tally().unwrap().jobs, list.jobs.len() as u64 - 1);
    assert_eq!(store.final_tally(&store.tally().unwrap()), FinalTally::Incomplete);
    let loaded = store.load().unwrap();
    assert_eq!(loaded.jobs[job as usize].state, JobState::Pending);
    assert!(loaded.jobs[job as usize].counted.is_none());
    drop(store);

    // `solve --state` solves it again, and the damaged row stays on record, uncounted.
    let cp = LocalCheckpoint::open(&path, &list, PROTOCOL).unwrap();
    let done = cp.done_ids().unwrap();
    assert_eq!(done.len(), list.jobs.len() - 1);
    assert!(!done.contains(&nqueens_core::JobId::new(job)));
    cp.record(nqueens_core::JobId::new(job), &list.jobs[job as usize].solve().unwrap(), 0.0)
        .unwrap();
    assert_eq!(cp.finish().unwrap().1.exact().unwrap().total, total);
    drop(cp);
    assert_eq!(Store::open_existing(&path).unwrap().summary().unwrap().bad_rows, 1);

    // Un-counting keeps checksums in step with the flag, and a bad row bad.
    let mut store = Store::open_existing_for_update(&path).unwrap();
    store.apply(&[Change::Uncount { job_id: job.into() }], &[]).unwrap();
    let rows = store.results().unwrap();
    let of_job: Vec<_> = rows.iter().filter(|r| r.job_id == job).collect();
    assert_eq!(of_job.len(), 2);
    assert!(of_job.iter().all(|r| !r.counted));
    assert_eq!(of_job.iter().filter(|r| r.intact).count(), 1);
    // A NULL or text checksum fails too.
    store.conn.execute("UPDATE results SET checksum=NULL WHERE id=1", []).unwrap();
    store.conn.execute("UPDATE results SET checksum='x' WHERE id=2", []).unwrap();
    assert_eq!(store.summary().unwrap().bad_rows, 3);
}

/// A complete tally that breaks the symmetry identities (one solution too many on a weight-4
/// job) is an outcome the engine acts on, not an error of the store; a store error stays one.
#[test]
fn a_tally_that_breaks_the_identities_is_an_outcome_not_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("run.db");
    let list = job_list(8, &SplitParams::default()).unwrap();
    let cp = LocalCheckpoint::open(&path, &list, PROTOCOL).unwrap();
    let liar = list.jobs.iter().find(|j| j.weight == 4).expect("a weight-4 job at N=8").id;
    for job in &list.jobs {
        let mut counts = job.solve().unwrap();
        if job.id == liar {
            counts.solutions += 1;
        }
        cp.record(job.id, &counts, 0.0).unwrap();
    }
    let (tally, outcome) = cp.finish().unwrap();
    assert_eq!(tally.jobs, list.jobs.len() as u64);
    match outcome {
        FinalTally::Inconsistent { reason } => {
            assert!(reason.contains("symmetry identities"), "{reason}")
        }
        other => panic!("a broken tally came out as {other:?}"),
    }
}

#[test]
fn schema_1_files_still_open_and_are_migrated_when_written() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("old.db");
    let list = job_list(8, &SplitParams::default()).unwrap();
    finished_run(&path, &list);
    let total = u128::from(nqueens_core::reference::count_all(8).unwrap());
    // Make it what the schema 1 code wrote: no mark, no key, no checksum column.
    let c = rusqlite::Connection::open(&path).unwrap();
    c.execute_batch(
        "PRAGMA application_id=0; PRAGMA user_version=0;
         ALTER TABLE results DROP COLUMN checksum;
         DELETE FROM meta WHERE key='checksum_key'; UPDATE meta SET value='1' WHERE key='schema';",
    )
    .unwrap();
    drop(c);

    let read = Store::open_existing(&path).unwrap();
    assert!(!read.has_checksums());
    assert_eq!(read.final_tally(&read.tally().unwrap()).exact().unwrap().total, total);
    drop(read);

    let cp = LocalCheckpoint::open(&path, &list, PROTOCOL).unwrap();
    assert_eq!(cp.finish().unwrap().1.exact().unwrap().total, total);
    drop(cp);
    let store = Store::open_existing(&path).unwrap();
    assert!(store.has_checksums());
    assert_eq!(store.stored_schema().unwrap(), SCHEMA_VERSION);
    assert!(store.results().unwrap().iter().all(|r| r.intact));
    assert_eq!(store.summary().unwrap().bad_rows, 0);
    let id: i32 = store.conn.query_row("PRAGMA application_id", [], |r| r.get(0)).unwrap();
    assert_eq!(id, APPLICATION_ID);
}

/// How long checking every row costs at the scale of N=27 (~750k rows):
/// `cargo test --release -p nqueens-store --lib -- --ignored --nocapture tally_cost`.
#[test]
#[ignore]
fn tally_cost_at_n27_scale() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("big.db");
    let list = job_list(10, &SplitParams::default()).unwrap();
    let mut store =
        Store::open_or_create(&path, &list, PROTOCOL, RunPolicy::default(), RunKind::Local)
            .unwrap();
    let rows = 750_000u64;
    let counts = nqueens_core::JobCounts { solutions: 1, sym180: 0, sym90: 0, nodes: 10 };
    let started = std::time::Instant::now();
    for chunk in (0..rows).collect::<Vec<_>>().chunks(50_000) {
        let changes: Vec<Change> = chunk
            .iter()
            .map(|&i| Change::Result {
                job_id: (i % list.jobs.len() as u64).into(),
                worker_id: 1.into(),
                credential: nqueens_scheduler::SHARED_CREDENTIAL,
                lease_id: 1.into(),
                counts,
                seconds: 0.0,
                counted: true,
                kind: nqueens_scheduler::state::ResultKind::First,
            })
            .collect();
        store.apply(&changes, &[]).unwrap();
    }
    eprintln!("wrote {rows} rows in {:?}", started.elapsed());
    let started = std::time::Instant::now();
    let tally = store.tally().unwrap();
    eprintln!("tally of {} rows, each checked, in {:?}", tally.jobs, started.elapsed());
    let started = std::time::Instant::now();
    store.load().unwrap();
    eprintln!("load in {:?}", started.elapsed());
}

#[test]
fn the_cross_checked_jobs_are_drawn_anew_for_every_run() {
    let (a, b) = (verification_draw(0.5), verification_draw(0.5));
    let picks =
        |draw: &dyn Fn(u64) -> bool| (0..4000u64).filter(|&id| draw(id)).collect::<Vec<_>>();
    let (pa, pb) = (picks(&a), picks(&b));
    assert!((1600..2400).contains(&pa.len()), "{} of 4000 at 0.5", pa.len());
    assert_ne!(pa, pb, "two runs must not pick the same jobs: no worker can know the choice");
    assert!(picks(&verification_draw(0.0)).is_empty());
}

/// Synthetic counted rows, each a valid per-job count with a valid checksum, whose weighted sum
/// passes 2^64: the real summing path (rows read and checked, summed in 128 bits) gets it exact,
/// where SQL's 64-bit `SUM` overflows.
#[test]
fn sums_past_u64_are_exact_through_the_store() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("wide.db");
    let list = job_list(9, &SplitParams::default()).unwrap();
    let mut store =
        Store::open_or_create(&path, &list, PROTOCOL, RunPolicy::default(), RunKind::Local)
            .unwrap();
    let base = 1u64 << 61;
    // Per weight, counts that keep the symmetry identities of the weighted sums.
    let counts_of = |weight: u8, id: u64| match weight {
        8 => JobCounts { solutions: base + id, sym180: 0, sym90: 0, nodes: 1 },
        4 => JobCounts { solutions: base + 2 * id, sym180: 2, sym90: 0, nodes: 1 },
        _ => JobCounts { solutions: base + 4 * id + 8, sym180: 4, sym90: 2, nodes: 1 },
    };
    let (mut total, mut sym180, mut sym90) = (0u128, 0u128, 0u128);
    let mut changes = Vec::new();
    for job in &list.jobs {
        let counts = counts_of(job.weight, job.id.get());
        let w = u128::from(job.weight);
        total += w * u128::from(counts.solutions);
        sym180 += w * u128::from(counts.sym180);
        sym90 += w * u128::from(counts.sym90);
        changes.extend(Change::finished_on_one_answer(job.id, 1.into(), counts));
    }
    store.apply(&changes, &[]).unwrap();
    assert!(total > u128::from(u64::MAX) * 2, "the rows must add up past 2^64: {total}");

    let tally = store.tally().unwrap();
    assert_eq!((tally.total, tally.sym180, tally.sym90), (total, sym180, sym90));
    let totals = store.final_tally(&tally).exact().expect("every job has a counted row");
    let classes = totals.classes.unwrap();
    assert_eq!(totals.total, total);
    assert_eq!(classes.total(), Some(total));
    assert_eq!(classes.unique(), Some(totals.unique));
    assert_eq!((classes.count2 * 2, classes.count4 * 4 + classes.count2 * 2), (sym90, sym180));
    // SQLite's SUM is 64-bit and fails on these rows: it must never be the summing path.
    let sql_sum =
        store.conn.query_row("SELECT SUM(solutions) FROM results", [], |r| r.get::<_, i64>(0));
    assert!(sql_sum.is_err(), "SQL SUM gave {sql_sum:?}");
    // `status --state --json` writing every digit of such sums is the coordinator's test
    // (status.rs).
}

/// A stored count that is negative or not an integer is refused (the row is bad, never counted),
/// and a count that does not fit the signed column is refused before anything is written.
#[test]
fn stored_counts_out_of_range_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("range.db");
    let list = job_list(8, &SplitParams::default()).unwrap();
    finished_run(&path, &list);
    let rows = list.jobs.len() as u64;
    let c = rusqlite::Connection::open(&path).unwrap();
    c.execute("UPDATE results SET sym90=-1 WHERE id=1", []).unwrap();
    c.execute("UPDATE results SET nodes=2.5 WHERE id=2", []).unwrap();
    drop(c);
    let mut store = Store::open_existing_for_update(&path).unwrap();
    let summary = store.summary().unwrap();
    assert_eq!(summary.bad_rows, 2);
    assert_eq!(summary.tally.jobs, rows - 2);
    let results = store.results().unwrap();
    assert!(!results[0].intact && !results[1].intact && results[2].intact);

    let huge = JobCounts { solutions: 1 << 63, sym180: 0, sym90: 0, nodes: 0 };
    let result = store.apply(
        &[Change::Result {
            job_id: 3.into(),
            worker_id: 1.into(),
            credential: nqueens_scheduler::SHARED_CREDENTIAL,
            lease_id: 1.into(),
            counts: huge,
            seconds: 0.0,
            counted: true,
            kind: nqueens_scheduler::state::ResultKind::First,
        }],
        &[],
    );
    assert!(
        matches!(result, Err(StoreError::CountOutOfRange { job_id: 3, field: "solutions", .. })),
        "{result:?}"
    );
    assert_eq!(store.results().unwrap().len() as u64, rows, "nothing written");
}

#[test]
fn workers_are_read_one_way_their_rows_with_what_they_did() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("workers.db");
    let list = job_list(8, &SplitParams::default()).unwrap();
    let mut store =
        Store::open_or_create(&path, &list, PROTOCOL, RunPolicy::default(), RunKind::Cluster)
            .unwrap();
    let row = |id: u64| WorkerRow {
        id,
        name: format!("w{id}"),
        host: "lab-1".into(),
        slots: 4,
        version: "1.0".into(),
        credential: "lab".into(),
        secret_digest: vec![id as u8; 32],
        device: "cpu (2 threads)".into(),
    };
    let state = |job_id: u64, state, leased: bool| Change::JobState {
        job_id: job_id.into(),
        state,
        lease_id: leased.then_some(1.into()),
        worker_id: leased.then_some(1.into()),
        errors: 0,
        conflicts: 0,
    };
    let changes = [
        Change::Lease {
            lease_id: 1.into(),
            worker_id: 1.into(),
            job_ids: vec![0.into(), 1.into()],
        },
        state(0, JobState::Done, false),
        state(1, JobState::Leased, true),
        Change::Result {
            job_id: 0.into(),
            worker_id: 1.into(),
            credential: nqueens_scheduler::SHARED_CREDENTIAL,
            lease_id: 1.into(),
            counts: list.jobs[0].solve().unwrap(),
            seconds: 0.1,
            counted: true,
            kind: nqueens_scheduler::state::ResultKind::First,
        },
        Change::Conflict {
            job_id: 2.into(),
            worker_a: 1.into(),
            worker_b: 2.into(),
            detail: "test".into(),
        },
        Change::Untrust {
            worker_id: 2.into(),
            job_id: 2.into(),
            detail: "test".into(),
            requeued: 0,
        },
    ];
    store.apply(&changes, &[row(1), row(2)]).unwrap();
    for workers in
        [store.workers().unwrap(), Store::open_existing(&path).unwrap().workers().unwrap()]
    {
        // The rows as they registered, secret digests included (the engine's view) ...
        assert_eq!(workers.iter().map(|w| w.row.clone()).collect::<Vec<_>>(), [row(1), row(2)]);
        // ... and what each did (the status view).
        let did = |w: &WorkerRecord| (w.results, w.jobs_leased, w.conflicts, w.untrusted);
        assert_eq!(did(&workers[0]), (1, 1, 1, false));
        assert_eq!(did(&workers[1]), (0, 0, 1, true));
        assert!(workers.iter().all(|w| (0.0..60.0).contains(&w.last_seen_seconds_ago)));
    }
    drop(store);
    // A schema 2 file, read as it is, has neither column: its workers have no credential or digest.
    let c = rusqlite::Connection::open(&path).unwrap();
    c.execute_batch(
        "ALTER TABLE workers DROP COLUMN credential; ALTER TABLE workers DROP COLUMN secret_digest;
         UPDATE meta SET value='2' WHERE key='schema'; PRAGMA user_version=2;",
    )
    .unwrap();
    drop(c);
    let old = Store::open_existing(&path).unwrap().workers().unwrap();
    let bare = |id| WorkerRow { credential: String::new(), secret_digest: Vec::new(), ..row(id) };
    assert_eq!(old.iter().map(|w| w.row.clone()).collect::<Vec<_>>(), [bare(1), bare(2)]);
    assert_eq!(old[0].results, 1);
}
