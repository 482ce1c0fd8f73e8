//! Checkpointing for the one-machine `solve --state`.

use super::error::StoreError;
use super::{FinalTally, RunKind, RunPolicy, Store};
use nqueens_core::{JobCounts, JobList, Tally};
use nqueens_scheduler::state::{JobState, ResultKind};
use nqueens_scheduler::{Change, JobId, LeaseId, COORDINATOR};
use parking_lot::Mutex;
use std::path::Path;
use std::time::{Duration, Instant};

/// Checkpointing for the one-machine `solve --state`: the same store, with no leases.
///
/// `solve` calls [`LocalCheckpoint::open`], skips [`done_ids`](LocalCheckpoint::done_ids), calls
/// [`record`](LocalCheckpoint::record) from any thread as jobs finish (committed in batches, at
/// least every second), and [`finish`](LocalCheckpoint::finish) for totals summed from committed
/// rows.
pub struct LocalCheckpoint {
    inner: Mutex<LocalInner>,
}

struct LocalInner {
    store: Store,
    buffer: Vec<Change>,
    last_commit: Instant,
}

impl LocalCheckpoint {
    /// Opens or creates the checkpoint of `list` in `path` (`protocol_major` as for
    /// [`Store::open_or_create`]).
    pub fn open(
        path: &Path,
        list: &JobList,
        protocol_major: u32,
    ) -> Result<LocalCheckpoint, StoreError> {
        let store = Store::open_or_create(
            path,
            list,
            protocol_major,
            RunPolicy::default(),
            RunKind::Local,
        )?;
        Ok(LocalCheckpoint {
            inner: Mutex::new(LocalInner {
                store,
                buffer: Vec::new(),
                last_commit: Instant::now(),
            }),
        })
    }

    /// Ids of the jobs already solved in an earlier (interrupted) run: those with a counted row
    /// whose checksum holds. A job whose row fails is solved again.
    pub fn done_ids(&self) -> Result<Vec<JobId>, StoreError> {
        let inner = self.inner.lock();
        let rows = inner.store.results()?;
        let bad: Vec<u64> = rows.iter().filter(|r| !r.intact).map(|r| r.job_id).collect();
        if !bad.is_empty() {
            tracing::warn!(
                state = %inner.store.path().display(),
                bad_rows = bad.len(),
                jobs = ?&bad[..bad.len().min(20)],
                "result rows fail their checksum (damaged or edited): not counted, their jobs are solved again"
            );
        }
        let mut ids: Vec<JobId> =
            rows.iter().filter(|r| r.intact && r.counted).map(|r| JobId::new(r.job_id)).collect();
        ids.sort_unstable();
        ids.dedup();
        Ok(ids)
    }

    /// Records one solved job; commits when 512 are buffered or a second has passed.
    pub fn record(
        &self,
        job_id: JobId,
        counts: &JobCounts,
        seconds: f64,
    ) -> Result<(), StoreError> {
        let mut inner = self.inner.lock();
        inner.buffer.push(Change::Result {
            job_id,
            worker_id: COORDINATOR,
            credential: nqueens_scheduler::COORDINATOR_CREDENTIAL,
            lease_id: LeaseId::new(0),
            counts: *counts,
            seconds,
            counted: true,
            kind: ResultKind::Local,
        });
        inner.buffer.push(Change::JobState {
            job_id,
            state: JobState::Done,
            lease_id: None,
            worker_id: None,
            errors: 0,
            conflicts: 0,
        });
        if inner.buffer.len() >= 1024 || inner.last_commit.elapsed() >= Duration::from_secs(1) {
            inner.commit()?;
        }
        Ok(())
    }

    /// Commits everything recorded so far.
    pub fn flush(&self) -> Result<(), StoreError> {
        self.inner.lock().commit()
    }

    /// Flushes, then sums the committed rows: the tally and what it comes to (exact once every
    /// job is recorded, see [`Store::final_tally`]).
    pub fn finish(&self) -> Result<(Tally, FinalTally), StoreError> {
        let mut inner = self.inner.lock();
        inner.commit()?;
        let tally = inner.store.tally()?;
        let outcome = inner.store.final_tally(&tally);
        Ok((tally, outcome))
    }
}

impl LocalInner {
    fn commit(&mut self) -> Result<(), StoreError> {
        let changes = std::mem::take(&mut self.buffer);
        self.store.apply(&changes, &[])?;
        self.last_commit = Instant::now();
        Ok(())
    }
}
