//! The store's own tests: checkpoints, reloading, the writer's lock, requeue and refusals.

use super::*;
use crate::lifecycle::{Change, Standing};
use crate::state::JobState;
use nqueens_core::{job_list, SplitParams};

#[test]
fn checkpoint_resumes_and_refuses_other_runs() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cp.db");
    let list = job_list(8, &SplitParams::default()).unwrap();
    let half = list.jobs.len() / 2;
    {
        let cp = LocalCheckpoint::open(&path, &list).unwrap();
        for job in &list.jobs[..half] {
            cp.record(job.id, &job.solve().unwrap(), 0.0).unwrap();
        }
        cp.flush().unwrap();
    }
    let cp = LocalCheckpoint::open(&path, &list).unwrap();
    let done = cp.done_ids().unwrap();
    assert_eq!(done.len(), half);
    for job in &list.jobs[half..] {
        cp.record(job.id, &job.solve().unwrap(), 0.0).unwrap();
    }
    let (_, totals) = cp.finish().unwrap();
    assert_eq!(totals.unwrap().total, nqueens_core::reference::count_all(8).unwrap());
    drop(cp);
    let other = job_list(9, &SplitParams::default()).unwrap();
    assert!(matches!(LocalCheckpoint::open(&path, &other), Err(StoreError::OtherRun { .. })));
    // An untrusted mark and the un-counting of its worker's row survive reopening.
    {
        let mut store = Store::open_or_create(&path, &list, 0.0, "local").unwrap();
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
                        worker_id: 7,
                        job_id: job.id,
                        detail: "test".into(),
                        requeued: 1,
                    },
                ],
                &[],
            )
            .unwrap();
    }
    let store = Store::open_or_create(&path, &list, 0.0, "local").unwrap();
    assert_eq!(store.untrusted_workers().unwrap(), vec![7]);
    let loaded = store.load().unwrap();
    assert_eq!(loaded.untrusted, vec![7]);
    assert_eq!(loaded.jobs[0].standing, Standing::Pending);
    assert!(loaded.jobs[0].counted.is_none());
    assert_eq!(store.tally().unwrap().jobs, list.jobs.len() as u64 - 1);
    assert_eq!(Store::open_existing(&path).unwrap().summary().unwrap().untrusted_workers, 1);
    drop(store);
    // One writer at a time; readers are welcome; the lock goes with its store.
    let writer = LocalCheckpoint::open(&path, &list).unwrap();
    assert!(matches!(LocalCheckpoint::open(&path, &list), Err(StoreError::InUse { .. })));
    assert!(matches!(
        Store::open_or_create(&path, &list, 0.0, "local"),
        Err(StoreError::InUse { .. })
    ));
    assert!(Store::open_existing(&path).is_ok());
    assert!(matches!(Store::open_existing_for_update(&path), Err(StoreError::InUse { .. })));
    drop(writer);
    LocalCheckpoint::open(&path, &list).unwrap();

    // Held and failed jobs go back to the queue, offline, keeping their counters.
    {
        let mut store = Store::open_or_create(&path, &list, 0.0, "local").unwrap();
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
                    state(1, JobState::Held, 0, 3),
                    state(2, JobState::Failed, 3, 0),
                    state(3, JobState::Held, 0, 3),
                ],
                &[],
            )
            .unwrap();
    }
    let mut store = Store::open_existing_for_update(&path).unwrap();
    assert!(matches!(LocalCheckpoint::open(&path, &list), Err(StoreError::InUse { .. })));
    assert_eq!(store.requeue(true, false).unwrap(), (2, 0));
    assert_eq!(store.requeue(true, true).unwrap(), (0, 1));
    let loaded = store.load().unwrap();
    for id in 1..=3 {
        assert_eq!(loaded.jobs[id].standing, Standing::Pending, "job {id}");
    }
    assert_eq!((loaded.jobs[1].conflicts, loaded.jobs[2].errors), (3, 3));
    drop(store);
    let junk = dir.path().join("junk.db");
    std::fs::write(&junk, b"this is not a database at all, not even close, really not").unwrap();
    assert!(
        matches!(LocalCheckpoint::open(&junk, &list), Err(StoreError::Corrupt { .. })),
        "{:?}",
        LocalCheckpoint::open(&junk, &list).err()
    );
}
