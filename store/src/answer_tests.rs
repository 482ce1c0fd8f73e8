//! Whose word an answer is, as the state file keeps it: the credential stored with each result
//! row (schema 6) outlives its worker row, is covered by the row's checksum, and rows from
//! before the column keep their worker row's credential while it exists.

use super::*;
use nqueens_core::{job_list, JobCounts, SplitParams};
use nqueens_scheduler::state::{JobState, ResultKind};
use nqueens_scheduler::{Change, JobId, LeaseId, WorkerId, SHARED_CREDENTIAL, UNKNOWN_CREDENTIAL};

const PROTOCOL: u32 = 1;

fn worker(id: u64, credential: &str) -> WorkerRow {
    WorkerRow {
        id,
        name: format!("w{id}"),
        host: "lab".into(),
        slots: 1,
        version: "1.0.0".into(),
        credential: credential.into(),
        secret_digest: vec![id as u8; 32],
        device: String::new(),
    }
}

/// A result row of `worker` under `credential` for job 0, counted or an opinion.
fn answer(worker: u64, credential: u64, counts: JobCounts, counted: bool) -> Change {
    Change::Result {
        job_id: JobId::new(0),
        worker_id: WorkerId::new(worker),
        credential,
        lease_id: LeaseId::new(1),
        counts,
        seconds: 0.1,
        counted,
        kind: if counted { ResultKind::Verified } else { ResultKind::Opinion },
    }
}

/// A new N = 8 cluster run at `path` under `policy`, and job 0's true counts.
fn n8_run(path: &std::path::Path, policy: RunPolicy) -> (Store, JobCounts) {
    let list = job_list(8, &SplitParams::default()).unwrap();
    let store = Store::open_or_create(path, &list, PROTOCOL, policy, RunKind::Cluster).unwrap();
    (store, list.jobs[0].solve().unwrap())
}

fn done(job: u64) -> Change {
    Change::JobState {
        job_id: JobId::new(job),
        state: JobState::Done,
        lease_id: None,
        worker_id: None,
        errors: 0,
        conflicts: 0,
    }
}

#[test]
fn an_answers_credential_outlives_its_worker_row_and_is_covered_by_its_checksum() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("run.db");
    let (mut store, truth) = n8_run(&path, RunPolicy { replication: 2, ..RunPolicy::default() });
    let host_a = store.credential_numbers().number("host-a");
    // Two shared-token identities agree on job 0; a per-host one said the same before.
    store.apply(&[], &[worker(1, "shared"), worker(2, "shared"), worker(3, "host-a")]).unwrap();
    let changes = [
        answer(1, SHARED_CREDENTIAL, truth, false),
        answer(2, SHARED_CREDENTIAL, truth, true),
        done(0),
    ];
    store.apply(&changes, &[]).unwrap();
    assert_eq!(store.evidence().unwrap().jobs_one_party, 1, "two shared identities: one party");
    // Both identities are forgotten: their rows go, their answers stay the shared token's.
    store.apply_with_forgotten(&[], &[], &[1, 2]).unwrap();
    let evidence = store.evidence().unwrap();
    assert_eq!((evidence.jobs_one_party, evidence.jobs_independent), (1, 0), "{evidence:?}");
    drop(store);
    let mut store = Store::open_existing_for_update(&path).unwrap();
    let loaded = store.load().unwrap();
    let job = &loaded.jobs[0];
    assert_eq!(
        job.counted.map(|a| (a.worker_id.get(), a.credential)),
        Some((2, SHARED_CREDENTIAL))
    );
    assert_eq!(job.opinions.iter().map(|a| a.credential).collect::<Vec<_>>(), [SHARED_CREDENTIAL]);
    // Another credential's agreement is independent evidence, read from its own row.
    let host_a_now = store.credential_numbers().number("host-a");
    store.apply(&[answer(3, host_a_now, truth, false)], &[]).unwrap();
    assert_eq!(store.evidence().unwrap().jobs_independent, 1);
    assert_ne!(host_a, SHARED_CREDENTIAL);
    // An edited credential fails the row's checksum: the row is no one's evidence any more.
    drop(store);
    let c = rusqlite::Connection::open(&path).unwrap();
    c.execute("UPDATE results SET credential='host-b' WHERE worker_id=1", []).unwrap();
    c.execute("UPDATE results SET credential=NULL WHERE worker_id=3", []).unwrap();
    drop(c);
    let store = Store::open_existing(&path).unwrap();
    let intact: Vec<(u64, bool)> =
        store.results().unwrap().iter().map(|r| (r.worker_id, r.intact)).collect();
    assert_eq!(intact, [(1, false), (2, true), (3, false)]);
    assert_eq!(store.evidence().unwrap().jobs_one_party, 1);
}

#[test]
fn rows_from_before_schema_6_take_their_worker_rows_credential_and_are_nobodys_without_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("old.db");
    let (mut store, truth) = n8_run(&path, RunPolicy::default());
    let host_a = store.credential_numbers().number("host-a");
    let host_b = store.credential_numbers().number("host-b");
    store.apply(&[], &[worker(1, "host-a"), worker(2, "host-b"), worker(3, "host-c")]).unwrap();
    let changes = [answer(1, host_a, truth, true), answer(2, host_b, truth, false), done(0)];
    store.apply(&changes, &[]).unwrap();
    drop(store);
    // What schema 5 wrote: no credential column, checksums over the rows without one.
    let c = rusqlite::Connection::open(&path).unwrap();
    c.execute_batch(
        "ALTER TABLE results DROP COLUMN credential; UPDATE meta SET value='5' WHERE key='schema';
         PRAGMA user_version=5;",
    )
    .unwrap();
    drop(c);
    let store = Store::open_existing(&path).unwrap();
    let mac = store.mac.clone().unwrap();
    drop(store);
    let c = rusqlite::Connection::open(&path).unwrap();
    for (id, worker_id, counted, kind) in [(1, 1, true, "verified"), (2, 2, false, "opinion")] {
        let claim = checksum::RowClaim {
            job_id: 0,
            worker_id,
            counted,
            kind,
            counts: truth,
            credential: None,
        };
        c.execute(
            "UPDATE results SET checksum=?2 WHERE id=?1",
            rusqlite::params![id, mac.tag(&claim)],
        )
        .unwrap();
    }
    drop(c);
    // Read as it is: the rows hold, their credentials from the worker rows.
    let read = Store::open_existing(&path).unwrap();
    assert!(read.results().unwrap().iter().all(|r| r.intact));
    assert_eq!(read.evidence().unwrap().jobs_independent, 1);
    drop(read);
    // Opened for writing: migrated to schema 6, the old rows unchanged and still intact.
    let mut store = Store::open_existing_for_update(&path).unwrap();
    assert_eq!(store.stored_schema().unwrap(), schema::SCHEMA_VERSION);
    assert!(store.results().unwrap().iter().all(|r| r.intact));
    // The second worker's row is forgotten: its old answer is nobody's independent evidence.
    store.apply_with_forgotten(&[], &[], &[2]).unwrap();
    assert_eq!(store.evidence().unwrap().jobs_one_party, 1);
    let loaded = store.load().unwrap();
    let opinions: Vec<u64> = loaded.jobs[0].opinions.iter().map(|a| a.credential).collect();
    assert_eq!(opinions, [UNKNOWN_CREDENTIAL]);
}

/// A late answer stays late through the state file: its row's kind is `late` whether it agrees,
/// contradicts a count, or carries one (a late dissent once stored as `conflict` came back after a
/// restart as a live answer, and with another identity's made "two parties").
#[test]
fn a_late_answer_is_read_back_late_counted_or_not() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("run.db");
    let (mut store, truth) = n8_run(&path, RunPolicy::default());
    let lie = JobCounts { solutions: truth.solutions + 1, ..truth };
    store.apply(&[], &[worker(1, "shared"), worker(2, "shared"), worker(3, "host-a")]).unwrap();
    let host_a = store.credential_numbers().number("host-a");
    let row =
        |worker: u64, credential: u64, counts: JobCounts, counted: bool, kind| Change::Result {
            job_id: JobId::new(0),
            worker_id: WorkerId::new(worker),
            credential,
            lease_id: LeaseId::new(1),
            counts,
            seconds: 0.1,
            counted,
            kind,
        };
    let changes = [
        row(3, host_a, truth, false, ResultKind::Opinion),
        row(1, SHARED_CREDENTIAL, truth, true, ResultKind::Late),
        row(2, SHARED_CREDENTIAL, lie, false, ResultKind::Late),
        done(0),
    ];
    store.apply(&changes, &[]).unwrap();
    drop(store);
    let mut store = Store::open_existing_for_update(&path).unwrap();
    let loaded = store.load().unwrap();
    let job = &loaded.jobs[0];
    assert_eq!(job.counted.map(|a| (a.worker_id.get(), a.late)), Some((1, true)));
    let opinions: Vec<(u64, bool)> =
        job.opinions.iter().map(|a| (a.worker_id.get(), a.late)).collect();
    assert_eq!(opinions, [(3, false), (2, true)]);
    assert!(store.results().unwrap().iter().all(|r| r.intact));
}
