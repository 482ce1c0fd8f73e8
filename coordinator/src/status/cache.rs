//! The one status cache of a live coordinator, behind every status reader (gRPC `Status`,
//! `/status.json`, the page and `/metrics`): the engine's latest [`RunSnapshot`], what the
//! committed rows tell ([`Rows`]: the partial sums, what they rest on, the rows that fail their
//! checksum, the first held and failed job ids), the chart's samples and the worker table's index.
//!
//! One refresh rule, kept by one thread (`nq-status`) off every caller: every half second it
//! samples the snapshot for the chart when a sample is due ([`CHART_SAMPLE_EVERY`]), and reads
//! the rows again when they are due ([`next_read`]) and the file changed since the last read
//! (SQLite's `data_version`), on its one read-only connection, opened once
//! ([`Store::open_beside_writer`]). Summing checks every result row's checksum, which takes time
//! in proportion to the run's jobs (a third of a second for 180,000 on a 2-vCPU VM), so it is
//! done at most every [`ROWS_MAX_AGE`] (less often when it takes long: [`ROWS_SHARE`]) however
//! often status is asked, and not at all while the file does not change (a finished run). A
//! caller waits for a read in two cases only: before the first read ends (it waits for that one),
//! and when the run ended after the last read began (then the rows are read once more, so that a
//! finished run's partial totals are its result's, never a partial or empty sum).

use super::history::{History, RatePoint, Sample, CHART_SAMPLE_EVERY, HISTORY_SAMPLES};
use super::{Origin, RowFigures, StatusView};
use crate::snapshot::fleet::{Fleet, FleetIndex, WorkerQuery};
use crate::snapshot::{RunSnapshot, WorkerView};
use nqueens_core::Tally;
use nqueens_store::{BlockedJobs, Evidence, Store, StoreError};
use parking_lot::Mutex;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};
use tokio::sync::watch;

/// How old the rows a status shows may be before they are read again (see the module doc).
pub const ROWS_MAX_AGE: Duration = Duration::from_secs(5);

/// The most of one core that reading the rows for status may take: a read that took `t` is not
/// made again before `t / ROWS_SHARE` (a run of millions of jobs takes seconds to sum, and polling
/// status must not take a core from the engine).
pub const ROWS_SHARE: f64 = 0.1;

/// How many held and failed job ids are read (the page lists them; their counts are always
/// complete, in the snapshot).
pub const BLOCKED_LISTED: usize = 50;

/// At most this many points of the rate chart.
pub const CHART_POINTS: usize = 360;

/// How often the cache's thread looks whether something is due.
const TICK: Duration = Duration::from_millis(500);

/// When rows whose read began at `read_at` and took `took` may be read again.
fn next_read(read_at: Instant, took: Duration) -> Instant {
    read_at + ROWS_MAX_AGE.max(took.div_f64(ROWS_SHARE))
}

/// What the committed rows told at one read.
#[derive(Debug, Clone)]
pub struct Rows {
    /// The weighted sums of the counted rows.
    pub tally: Tally,
    /// Result rows whose checksum fails: damaged or edited, never counted.
    pub bad_rows: u64,
    /// What the counted answers rest on so far.
    pub evidence: Evidence,
    /// The first [`BLOCKED_LISTED`] held and failed job ids (none read while the snapshot
    /// counted none: without an index on the jobs' state, listing none scans every job).
    pub blocked: BlockedJobs,
    /// Whether the read began once the run had ended (its snapshot complete): the sums are then
    /// the result's.
    after_end: bool,
}

impl Rows {
    /// What these rows tell a status view. Their file was opened for writing by the engine,
    /// which gives every row its checksum.
    pub fn figures(&self) -> RowFigures {
        RowFigures {
            tally: self.tally,
            evidence: Some(self.evidence.clone()),
            bad_rows: self.bad_rows,
            checksums: true,
        }
    }
}

/// The rows as last read, when they may be read again, and why the last read failed.
#[derive(Default)]
struct Refresh {
    rows: Option<Arc<Rows>>,
    /// When the rows are due (see [`next_read`]); `None` before the first read.
    due: Option<Instant>,
    /// The file's `data_version` when they were read.
    version: Option<i64>,
    /// Why the last read failed, if it did (the rows kept are then those of the read before).
    error: Option<String>,
}

/// The one status cache: see the module doc.
pub struct StatusCache {
    /// The state file, absolute (the requeue commands the page shows name it).
    state_file: PathBuf,
    snapshots: watch::Receiver<Arc<RunSnapshot>>,
    /// The one read-only connection, opened by the first read, held while a read runs.
    store: Mutex<Option<Store>>,
    refresh: Mutex<Refresh>,
    /// The chart's samples of the snapshot.
    history: Mutex<History>,
    /// The index of the last worker table a reader asked about: sorted and counted once,
    /// however many readers ask for pages of it.
    fleet: Mutex<Option<Arc<FleetIndex>>>,
}

impl StatusCache {
    /// The cache of the run in `state_file` whose engine publishes on `snapshots`, and its thread
    /// (`nq-status`), which makes the first read now, off every caller (opening a file of a
    /// million jobs and summing its results take seconds), and ends with the cache's last holder.
    /// An error if that thread cannot be started: without it every status reader would see the
    /// first figures forever, a coordinator that looks healthy and reports nothing new.
    pub fn start(
        state_file: PathBuf,
        snapshots: watch::Receiver<Arc<RunSnapshot>>,
    ) -> std::io::Result<Arc<StatusCache>> {
        let cache = Arc::new(StatusCache {
            state_file: std::path::absolute(&state_file).unwrap_or(state_file),
            snapshots,
            store: Mutex::default(),
            refresh: Mutex::default(),
            history: Mutex::new(History::new(HISTORY_SAMPLES)),
            fleet: Mutex::default(),
        });
        let weak = Arc::downgrade(&cache);
        std::thread::Builder::new().name("nq-status".into()).spawn(move || keep_current(weak))?;
        Ok(cache)
    }

    /// The run as the engine last published it.
    pub fn latest(&self) -> Arc<RunSnapshot> {
        self.snapshots.borrow().clone()
    }

    /// The state file, absolute.
    pub fn state_file(&self) -> &Path {
        &self.state_file
    }

    /// Why the last read of the rows failed, if it did.
    pub fn last_error(&self) -> Option<String> {
        self.refresh.lock().error.clone()
    }

    /// The workers of `run` in aggregate, and the page of them `query` asks for.
    pub fn workers(&self, run: &RunSnapshot, query: &WorkerQuery) -> (Fleet, Vec<WorkerView>) {
        self.fleet_index(&run.all_workers).select(query)
    }

    /// The index of `workers`: the one kept while the table is the same, else built (once,
    /// however many readers ask at the same time).
    fn fleet_index(&self, workers: &Arc<[WorkerView]>) -> Arc<FleetIndex> {
        let mut kept = self.fleet.lock();
        match &*kept {
            Some(index) if Arc::ptr_eq(index.workers(), workers) => index.clone(),
            _ => kept.insert(Arc::new(FleetIndex::new(workers.clone()))).clone(),
        }
    }

    /// The chart: results/s and nodes/s over the samples kept and up to `run`, oldest first.
    pub fn rate_points(&self, run: &RunSnapshot) -> Vec<RatePoint> {
        self.history.lock().rate_points(&Sample::of(run), CHART_POINTS)
    }

    /// The live status of the run for gRPC `Status`: its latest snapshot, the page of workers
    /// `query` asks for, and the committed rows' sums (see [`StatusCache::rows`]).
    pub async fn view(self: &Arc<Self>, query: &WorkerQuery) -> Result<StatusView, StoreError> {
        let run = RunSnapshot::clone(&self.latest());
        let rows = self.rows(&run).await?;
        Ok(self.view_of(run, rows.figures(), query))
    }

    /// The live status for the page and `/status.json`, which show the run even when
    /// its rows cannot be read: the view (with [`RowFigures::live_unread`] then), the rows as
    /// read (the held and failed job ids are theirs), and why the last read failed, if it did.
    pub async fn view_and_rows(
        self: &Arc<Self>,
        query: &WorkerQuery,
    ) -> (StatusView, Option<Arc<Rows>>, Option<String>) {
        let run = RunSnapshot::clone(&self.latest());
        match self.rows(&run).await {
            Ok(rows) => (self.view_of(run, rows.figures(), query), Some(rows), self.last_error()),
            Err(e) => {
                let view = self.view_of(run, RowFigures::live_unread(), query);
                (view, None, Some(e.to_string()))
            }
        }
    }

    /// The live view now, without waiting for the committed rows (for `/metrics`, whose series
    /// are the snapshot's alone, so that a scrape never waits on a read of a large state file):
    /// the rows as last read, if any were.
    pub fn view_without_waiting(&self, query: &WorkerQuery) -> StatusView {
        let run = RunSnapshot::clone(&self.latest());
        let rows = self.kept_rows(false).map_or_else(RowFigures::live_unread, |r| r.figures());
        self.view_of(run, rows, query)
    }

    /// The live view of `run` with `rows`, listing the workers `query` asks for.
    fn view_of(&self, run: RunSnapshot, rows: RowFigures, query: &WorkerQuery) -> StatusView {
        let (fleet, page) = self.workers(&run, query);
        StatusView::new(run, rows, Some(fleet), page.into(), Origin::Coordinator(""))
    }

    /// What the committed rows tell beside `run` (a snapshot of this cache's): as last read,
    /// without blocking, unless none was read yet or `run` is complete and they were read before
    /// its end; then read now on the blocking pool (once, however many callers ask at once).
    /// (Not on the blocking pool otherwise: on a busy runtime the hop back from it waits behind
    /// every connection's tasks, hundreds of ms at 10,000 workers.)
    pub async fn rows(self: &Arc<Self>, run: &RunSnapshot) -> Result<Arc<Rows>, StoreError> {
        let complete = run.progress.complete;
        if let Some(rows) = self.kept_rows(complete) {
            return Ok(rows);
        }
        let cache = self.clone();
        let read = tokio::task::spawn_blocking(move || {
            let mut store = cache.store.lock();
            // A read that ended while this one waited for the connection may do.
            if let Some(rows) = cache.kept_rows(complete) {
                return Ok(rows);
            }
            let read = cache.connection(&mut store).and_then(|s| cache.read(s, s.data_version()?));
            read.inspect_err(|e| cache.failed(e))
        });
        match read.await {
            Ok(rows) => rows,
            Err(e) => std::panic::resume_unwind(e.into_panic()),
        }
    }

    /// The rows as last read, if they answer for a run that is `complete` or not.
    fn kept_rows(&self, complete: bool) -> Option<Arc<Rows>> {
        self.refresh.lock().rows.clone().filter(|rows| !complete || rows.after_end)
    }

    /// The connection in `store`, opened first if need be. Blocking.
    fn connection<'a>(&self, store: &'a mut Option<Store>) -> Result<&'a Store, StoreError> {
        match store {
            Some(store) => Ok(store),
            // The engine's writer checked the file when it opened it.
            empty => Ok(empty.insert(Store::open_beside_writer(&self.state_file)?)),
        }
    }

    /// Reads the rows again if they are due and the file changed since the last read (or none
    /// was made yet). Blocking.
    fn read_if_due(&self) {
        let due = self.refresh.lock().due;
        if due.is_some_and(|due| Instant::now() < due) {
            return;
        }
        let mut store = self.store.lock();
        let read = self.connection(&mut store).and_then(|store| {
            let version = store.data_version()?;
            let read_at = self.refresh.lock().version;
            match read_at {
                Some(read_at) if read_at == version => Ok(()),
                _ => self.read(store, version).map(drop),
            }
        });
        if let Err(e) = read {
            self.failed(&e);
        }
    }

    /// Reads the rows on `store` (the connection, held by the caller; its file at `data_version`
    /// `version`) and keeps them with their due time. Blocking.
    fn read(&self, store: &Store, version: i64) -> Result<Arc<Rows>, StoreError> {
        let started = Instant::now();
        let run = self.latest();
        let p = &run.progress;
        let (tally, bad_rows, evidence) = store.tally_and_evidence()?;
        let blocked = match p.jobs_held + p.jobs_failed {
            0 => BlockedJobs::default(),
            _ => store.blocked_jobs(BLOCKED_LISTED)?,
        };
        let rows = Arc::new(Rows { tally, bad_rows, evidence, blocked, after_end: p.complete });
        let mut refresh = self.refresh.lock();
        refresh.due = Some(next_read(started, started.elapsed()));
        refresh.version = Some(version);
        refresh.rows = Some(rows.clone());
        refresh.error = None;
        Ok(rows)
    }

    /// A read failed: said, kept for the page, and tried again once due.
    fn failed(&self, e: &StoreError) {
        tracing::warn!(error = %e, "status: cannot read the state file");
        let mut refresh = self.refresh.lock();
        refresh.error = Some(e.to_string());
        refresh.due = Some(Instant::now() + ROWS_MAX_AGE);
    }
}

/// The cache's thread: samples the snapshot for the chart and reads the rows, each when due,
/// until the cache's last holder is gone.
fn keep_current(cache: Weak<StatusCache>) {
    let mut sampled: Option<Instant> = None;
    while let Some(cache) = cache.upgrade() {
        if sampled.is_none_or(|at| at.elapsed() >= CHART_SAMPLE_EVERY) {
            sampled = Some(Instant::now());
            let sample = Sample::of(&cache.latest());
            cache.history.lock().push(sample);
        }
        cache.read_if_due();
        drop(cache);
        std::thread::sleep(TICK);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A quick read is made again after 5 s; one that took seconds only after ten times as long,
    /// so that reading never takes more than a tenth of a core.
    #[test]
    fn sums_that_take_long_are_read_again_less_often() {
        let at = Instant::now();
        let after = |took: f64| (next_read(at, Duration::from_secs_f64(took)) - at).as_secs_f64();
        assert_eq!(after(0.3), 5.0);
        assert!((after(2.0) - 20.0).abs() < 1e-9);
    }

    /// A fresh N=8 state file, its snapshot as read offline, and the sender that publishes
    /// others.
    fn run_file(dir: &Path) -> (PathBuf, watch::Sender<Arc<RunSnapshot>>) {
        let path = dir.join("cache.db");
        let snapshot = RunSnapshot::of_fresh_run_file(&path);
        (path, watch::channel(Arc::new(snapshot)).0)
    }

    /// Rows read before the run's end do not answer for its end: a caller with a complete
    /// snapshot has them read once more, and the read after the end answers every later caller.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn rows_read_before_the_end_are_read_once_more_after_it() {
        let dir = tempfile::tempdir().unwrap();
        let (path, publish) = run_file(dir.path());
        let cache = StatusCache::start(path, publish.subscribe()).unwrap();
        let running = RunSnapshot::clone(&cache.latest());
        let first = cache.rows(&running).await.unwrap();
        assert!(!first.after_end);
        assert!(Arc::ptr_eq(&first, &cache.rows(&running).await.unwrap()), "kept, not read");
        let mut ended = running.clone();
        ended.progress.complete = true;
        publish.send_replace(Arc::new(ended.clone()));
        let after = cache.rows(&ended).await.unwrap();
        assert!(after.after_end && !Arc::ptr_eq(&first, &after), "read once more");
        assert!(Arc::ptr_eq(&after, &cache.rows(&ended).await.unwrap()), "and only once");
        assert_eq!(cache.last_error(), None);
    }

    /// The thread reads the rows at once and samples the snapshot for the chart; it reads them
    /// again only once due and the file changed.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_thread_reads_once_then_only_what_changed_when_due() {
        let dir = tempfile::tempdir().unwrap();
        let (path, publish) = run_file(dir.path());
        let cache = StatusCache::start(path, publish.subscribe()).unwrap();
        let started = Instant::now();
        while cache.kept_rows(false).is_none() {
            assert!(started.elapsed() < Duration::from_secs(10), "the first read");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert_eq!(cache.history.lock().len(), 1);
        let first = cache.kept_rows(false).unwrap();
        // Due at once, but the file is unchanged: not read again.
        cache.refresh.lock().due = Some(Instant::now());
        tokio::time::sleep(2 * TICK).await;
        assert!(Arc::ptr_eq(&first, &cache.kept_rows(false).unwrap()));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn one_index_is_built_per_worker_table() {
        let dir = tempfile::tempdir().unwrap();
        let (path, publish) = run_file(dir.path());
        let cache = StatusCache::start(path, publish.subscribe()).unwrap();
        let table: Arc<[WorkerView]> = crate::snapshot::fleet::tests::fleet_of(300).into();
        let first = cache.fleet_index(&table);
        assert!(Arc::ptr_eq(&first, &cache.fleet_index(&table.clone())), "the same: reused");
        let (fleet, page) = first.select(&WorkerQuery { limit: 300, ..Default::default() });
        assert_eq!((fleet.workers, page.len()), (300, 300));
        let mut changed = table.to_vec();
        changed[0].untrusted = true;
        let next = cache.fleet_index(&changed.into());
        assert!(!Arc::ptr_eq(&first, &next), "another table: built anew");
        assert_eq!(next.select(&WorkerQuery::default()).1[0].worker_id, 1, "untrusted first");
    }
}
