//! What the status page shows: the engine's latest [`RunSnapshot`] (the same one `status` and
//! `/metrics` show), the rate chart drawn from the snapshots kept in [`History`], and the held and
//! failed jobs, read on the blocking pool through the [`StatusReader`]'s read-only connection for
//! them at most once per [`ROWS_MAX_AGE`] however many pages poll, and never while a reader waits
//! but the first.

use super::history::{History, RatePoint, Sample};
use crate::snapshot::fleet::{Fleet, FleetCache, WorkerQuery};
use crate::snapshot::RunSnapshot;
use crate::status::{shell_word, StatusReader};
use nqueens_store::BlockedJobs;
use parking_lot::Mutex;
use serde::Serialize;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::watch;

/// How long the held and failed jobs read for the page are reused before they are read again.
pub const ROWS_MAX_AGE: Duration = Duration::from_secs(4);

/// How many held and failed job ids the page lists (the counts are always complete).
pub const BLOCKED_LISTED: usize = 50;

/// At most this many points of the rate chart.
pub const CHART_POINTS: usize = 360;

/// Everything the status page shows; `/status.json` is this object: the run's [`RunSnapshot`]
/// (flattened in, exactly as the engine published it, except that its `workers` are the page of
/// them the reader asked for: see [`fleet`]) and the page's own details.
#[derive(Debug, Clone, Serialize)]
pub struct PageStatus {
    /// The run at the moment shown, with the page of workers asked for.
    #[serde(flatten)]
    pub run: RunSnapshot,
    /// All the workers in aggregate, and which of them `run.workers` holds.
    pub fleet: Fleet,
    /// The ETA in words, as `status` words it ([`RunSnapshot::eta_text`]): the page shows it.
    pub eta_text: String,
    /// The state file, as `requeue --state` needs it.
    pub state_file: String,
    /// The first [`BLOCKED_LISTED`] held and failed job ids.
    pub held_jobs: Vec<u64>,
    pub failed_jobs: Vec<u64>,
    /// The commands that requeue the held and the failed jobs (with the coordinator stopped).
    pub requeue_held: Option<String>,
    pub requeue_failed: Option<String>,
    /// Results/s and nodes/s over the kept history, oldest first (the chart).
    pub history: Vec<RatePoint>,
    pub sample_seconds: f64,
    /// Why the rows could not be read, if they could not (the rest is still current).
    pub rows_error: Option<String>,
}

impl PageStatus {
    /// What `viewer` may see: a viewer without the token gets the state file's name only (in the
    /// requeue commands too), never its absolute path.
    pub fn for_viewer(mut self, viewer: super::Viewer) -> PageStatus {
        if viewer == super::Viewer::Anonymous {
            let path = std::path::Path::new(&self.state_file);
            let name = path.file_name().map_or(String::new(), |n| n.to_string_lossy().into_owned());
            let (full, short) = (shell_word(&self.state_file), shell_word(&name));
            for command in [&mut self.requeue_held, &mut self.requeue_failed].into_iter().flatten()
            {
                *command =
                    command.replace(&format!("--state {full} "), &format!("--state {short} "));
            }
            self.state_file = name;
        }
        self
    }
}

/// The held and failed jobs as last read, and whether a read is under way.
#[derive(Default)]
struct RowsCache {
    read_at: Option<Instant>,
    blocked: BlockedJobs,
    error: Option<String>,
    reading: bool,
}

/// Builds [`PageStatus`] views for the HTTP port.
pub struct StatusSource {
    /// The state file, absolute, for the requeue commands.
    state_file: PathBuf,
    snapshots: watch::Receiver<Arc<RunSnapshot>>,
    history: Arc<Mutex<History>>,
    reader: Arc<StatusReader>,
    rows: Arc<Mutex<RowsCache>>,
    /// Done once the rows were first read (the first readers wait for that read).
    first_read: tokio::sync::OnceCell<()>,
    /// The worker table sorted and counted once, however many pages poll.
    fleet: Arc<FleetCache>,
}

impl StatusSource {
    /// A source for the run in `state_file`, showing the engine's `snapshots`, the rate chart
    /// in `history`, the held and failed jobs read through `reader`, and the workers through
    /// `fleet` (shared with the coordinator's other status readers).
    pub fn new(
        state_file: PathBuf,
        snapshots: watch::Receiver<Arc<RunSnapshot>>,
        history: Arc<Mutex<History>>,
        reader: Arc<StatusReader>,
        fleet: Arc<FleetCache>,
    ) -> StatusSource {
        let (rows, first_read) = Default::default();
        StatusSource { state_file, snapshots, history, reader, rows, first_read, fleet }
    }

    /// The run as the engine last published it.
    pub fn latest(&self) -> Arc<RunSnapshot> {
        self.snapshots.borrow().clone()
    }

    /// The page's data now, with the workers `query` asks for, and the held and failed jobs as
    /// last read (see [`StatusSource::blocked`]).
    pub async fn snapshot(&self, query: &WorkerQuery) -> PageStatus {
        let (blocked, rows_error) = self.blocked().await;
        let mut run = RunSnapshot::clone(&self.latest());
        let (fleet, page) = self.fleet.index(&run.workers).select(query);
        run.workers = page.into();
        let history = self.history.lock().rate_points(&Sample::of(&run), CHART_POINTS);
        let state = shell_word(&self.state_file.display().to_string());
        let requeue = |count: u64, flag: &str| {
            (count > 0).then(|| format!("nqueens-coordinator requeue --state {state} --{flag}"))
        };
        PageStatus {
            eta_text: run.eta_text(),
            state_file: self.state_file.display().to_string(),
            held_jobs: blocked.held,
            failed_jobs: blocked.failed,
            requeue_held: requeue(run.progress.jobs_held, "held"),
            requeue_failed: requeue(run.progress.jobs_failed, "failed"),
            history,
            sample_seconds: super::history::SAMPLE_EVERY.as_secs_f64(),
            rows_error,
            run,
            fleet,
        }
    }

    /// The held and failed jobs as last read. Older than [`ROWS_MAX_AGE`], they are read again
    /// in the background while this answer shows them as they were.
    async fn blocked(&self) -> (BlockedJobs, Option<String>) {
        self.first_read.get_or_init(|| async { self.read_rows().await }).await;
        let stale = {
            let mut rows = self.rows.lock();
            let stale = !rows.reading && rows.read_at.is_none_or(|t| t.elapsed() >= ROWS_MAX_AGE);
            rows.reading |= stale;
            stale
        };
        if stale {
            drop(tokio::spawn(self.read_rows()));
        }
        let rows = self.rows.lock();
        (rows.blocked.clone(), rows.error.clone())
    }

    /// Reads the held and failed jobs on the blocking pool into the cache.
    fn read_rows(&self) -> impl std::future::Future<Output = ()> + Send + 'static {
        let (reader, rows) = (self.reader.clone(), self.rows.clone());
        async move {
            let read = tokio::task::spawn_blocking(move || reader.blocked(BLOCKED_LISTED)).await;
            let mut cache = rows.lock();
            (cache.read_at, cache.reading) = (Some(Instant::now()), false);
            match read {
                Ok(Ok(blocked)) => (cache.blocked, cache.error) = (blocked, None),
                Ok(Err(e)) => {
                    tracing::warn!(error = %e, "status page: cannot read the state file's rows");
                    cache.error = Some(e.to_string());
                }
                Err(e) => cache.error = Some(format!("reading the rows: {e}")),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::status::shell_word;

    #[test]
    fn state_paths_are_quoted_for_the_shell() {
        assert_eq!(shell_word("/var/lib/nq/run-18.db"), "/var/lib/nq/run-18.db");
        assert_eq!(shell_word("/data/my run.db"), "'/data/my run.db'");
        assert_eq!(shell_word("/x/it's;rm -rf"), r"'/x/it'\''s;rm -rf'");
        assert_eq!(shell_word(""), "''");
    }
}

#[cfg(test)]
mod eta_tests {
    use crate::snapshot::{eta, Eta, Progress, RunName};
    use nqueens_scheduler::{JobState, JobsByState};

    /// Every remaining job leased and nothing counted for longer than the rate predicts: the page
    /// and `status` both say the run waits on the leases, and neither gives a time. Both build
    /// their progress with [`Progress::new`]; this pins the rule it applies.
    #[test]
    fn the_page_and_status_agree_when_every_remaining_job_waits_on_a_lease() {
        let mut jobs = JobsByState::default();
        jobs.add(JobState::Done, 7);
        jobs.add(JobState::Leased, 3);
        let run = RunName { n: 12, fingerprint: "f" };
        let waiting = Progress::new(run, &jobs, Some(10.0), 60.0, 0, None);
        assert_eq!(eta(3, 0, 3, Some(10.0), 60.0), Eta::WaitingOnLeases(3));
        assert_eq!((waiting.eta_seconds, waiting.waiting_on_leases), (None, 3));
        assert!(waiting.eta_text(None).contains("waiting on 3 leases"));
        // While results still come in, the time at the rate.
        let arriving = Progress::new(run, &jobs, Some(10.0), 0.1, 0, None);
        assert_eq!((arriving.eta_seconds, arriving.waiting_on_leases), (Some(0.3), 0));
    }
}
