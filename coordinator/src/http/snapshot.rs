//! What the status page shows, gathered without the engine: the job counts and counters the engine
//! publishes in [`Metrics`], the rates kept in [`History`], and the rows (workers, held and failed
//! jobs) read on the blocking pool through the read-only [`StatusReader`] connection, at most once
//! per [`ROWS_MAX_AGE`] however many pages poll.

use super::history::{History, RatePoint, Sample};
use crate::metrics::Metrics;
use crate::run_result::RunResult;
use crate::status::{Progress, RunName, StatusReader, WorkerView};
use nqueens_scheduler::state::{JobState, JobsByState};
use nqueens_store::BlockedJobs;
use parking_lot::Mutex;
use serde::Serialize;
use std::collections::{HashMap, VecDeque};
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::watch;

/// How long the rows read for the page are reused before they are read again.
pub const ROWS_MAX_AGE: Duration = Duration::from_secs(4);

/// How many held and failed job ids the page lists (the counts are always complete).
pub const BLOCKED_LISTED: usize = 50;

/// At most this many points of the rate chart.
pub const CHART_POINTS: usize = 360;

/// The window of the current rates (and of a worker's rate).
pub const RATE_WINDOW: Duration = Duration::from_secs(60);

/// The window of the rate behind the ETA.
pub const ETA_WINDOW: Duration = Duration::from_secs(15 * 60);

/// One worker on the page: what `status` shows, and its results per second lately.
#[derive(Debug, Clone, Serialize)]
pub struct PageWorker {
    #[serde(flatten)]
    pub view: WorkerView,
    /// Counted results per second over about the last minute the page was watched.
    pub results_per_second: Option<f64>,
}

/// Everything the status page shows; `/status.json` is this object: the run's [`Progress`] (the
/// same shape and ETA rule as `status`, at the rate of the page's window) and the page's own
/// details.
#[derive(Debug, Clone, Serialize)]
pub struct PageStatus {
    #[serde(flatten)]
    pub progress: Progress,
    /// The ETA in words, as `status` words it ([`Progress::eta_text`]): the page shows it.
    pub eta_text: String,
    /// The state file, as `requeue --state` needs it.
    pub state_file: String,
    /// Results and nodes per second over the last minute.
    pub recent_results_per_second: Option<f64>,
    pub recent_nodes_per_second: Option<f64>,
    pub uptime_seconds: f64,
    /// Workers heard from within three heartbeats.
    pub live_workers: u64,
    pub lease_expiries: u64,
    pub workers: Vec<PageWorker>,
    /// The first [`BLOCKED_LISTED`] held and failed job ids.
    pub held_jobs: Vec<u64>,
    pub failed_jobs: Vec<u64>,
    /// The commands that requeue the held and the failed jobs (with the coordinator stopped).
    pub requeue_held: Option<String>,
    pub requeue_failed: Option<String>,
    /// Results/s and nodes/s over the kept history, oldest first.
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

/// The run the page is about.
#[derive(Debug, Clone)]
pub struct RunInfo {
    /// Board size.
    pub n: u32,
    /// The run id every request names.
    pub fingerprint: String,
    /// Jobs in the run's list.
    pub jobs_total: u64,
    /// The state file, absolute, for the requeue commands.
    pub state_file: PathBuf,
}

#[derive(Default)]
struct RowsCache {
    read_at: Option<Instant>,
    workers: Vec<WorkerView>,
    blocked: BlockedJobs,
    error: Option<String>,
    /// Results per worker at past reads within [`RATE_WINDOW`], for the workers' rates.
    past: VecDeque<(Instant, HashMap<u64, u64>)>,
}

/// Builds [`PageStatus`] snapshots for the HTTP port.
pub struct StatusSource {
    run: RunInfo,
    metrics: Arc<Metrics>,
    history: Arc<Mutex<History>>,
    reader: Arc<StatusReader>,
    complete: watch::Receiver<Option<RunResult>>,
    rows: tokio::sync::Mutex<RowsCache>,
    /// The done count last seen, and since when it has not moved (for the ETA's quiet time).
    progress: Mutex<Option<(u64, Instant)>>,
}

impl StatusSource {
    /// A source for `run`, reading its rows through `reader`; `complete` carries the result once
    /// the engine has written it.
    pub fn new(
        run: RunInfo,
        metrics: Arc<Metrics>,
        history: Arc<Mutex<History>>,
        reader: Arc<StatusReader>,
        complete: watch::Receiver<Option<RunResult>>,
    ) -> StatusSource {
        StatusSource {
            run,
            metrics,
            history,
            reader,
            complete,
            rows: Default::default(),
            progress: Mutex::new(None),
        }
    }

    /// The page's data now. The rows are read again when older than [`ROWS_MAX_AGE`], on the
    /// blocking pool; concurrent callers wait for that one read.
    pub async fn snapshot(&self) -> PageStatus {
        let (workers, blocked, rows_error) = self.rows().await;
        let m = &self.metrics;
        let g = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed);
        let jobs = |s: JobState| g(&m.jobs[s as usize]);
        let now = Sample::take(m);
        let (rates, eta_rates, history) = {
            let h = self.history.lock();
            (
                h.rates_over(&now, RATE_WINDOW),
                h.rates_over(&now, ETA_WINDOW),
                h.rate_points(&now, CHART_POINTS),
            )
        };
        let mut by_state = JobsByState::default();
        for state in JobState::ALL {
            by_state.add(state, jobs(state));
        }
        // Before the engine first publishes its gauges, every job is still pending.
        if by_state.total() == 0 {
            by_state.add(JobState::Pending, self.run.jobs_total);
        }
        let done = jobs(JobState::Done);
        let quiet = {
            let mut last = self.progress.lock();
            let since = match *last {
                Some((d, t)) if d == done => t,
                _ => last.insert((done, Instant::now())).1,
            }
            .elapsed()
            .as_secs_f64();
            // Before the first move, the run's age: nothing has come in since the start.
            since.max(if done == 0 { m.started.elapsed().as_secs_f64() } else { 0.0 })
        };
        let run = RunName { n: self.run.n, fingerprint: &self.run.fingerprint };
        let rate = eta_rates.map(|r| r.done_per_second);
        let result = self.complete.borrow().clone();
        let progress = Progress::new(run, &by_state, rate, quiet, blocked.conflicts, result);
        let state = shell_word(&self.run.state_file.display().to_string());
        let requeue = |count: u64, flag: &str| {
            (count > 0).then(|| format!("nqueens-coordinator requeue --state {state} --{flag}"))
        };
        PageStatus {
            eta_text: progress.eta_text(None),
            state_file: self.run.state_file.display().to_string(),
            recent_results_per_second: rates.map(|r| r.results_per_second),
            recent_nodes_per_second: rates.map(|r| r.nodes_per_second),
            uptime_seconds: m.started.elapsed().as_secs_f64(),
            live_workers: g(&m.workers),
            lease_expiries: g(&m.lease_expiries),
            workers,
            held_jobs: blocked.held,
            failed_jobs: blocked.failed,
            requeue_held: requeue(progress.jobs_held, "held"),
            requeue_failed: requeue(progress.jobs_failed, "failed"),
            history,
            sample_seconds: super::history::SAMPLE_EVERY.as_secs_f64(),
            rows_error,
            progress,
        }
    }

    async fn rows(&self) -> (Vec<PageWorker>, BlockedJobs, Option<String>) {
        let mut cache = self.rows.lock().await;
        if cache.read_at.is_none_or(|t| t.elapsed() >= ROWS_MAX_AGE) {
            let reader = self.reader.clone();
            let read = tokio::task::spawn_blocking(move || reader.rows(BLOCKED_LISTED)).await;
            let now = Instant::now();
            cache.read_at = Some(now);
            match read {
                Ok(Ok((workers, blocked))) => {
                    let results = workers.iter().map(|w| (w.worker_id, w.results)).collect();
                    cache.past.retain(|(t, _)| now.duration_since(*t) <= RATE_WINDOW);
                    cache.past.push_back((now, results));
                    (cache.workers, cache.blocked, cache.error) = (workers, blocked, None);
                }
                Ok(Err(e)) => {
                    tracing::warn!(error = %e, "status page: cannot read the state file's rows");
                    cache.error = Some(e.to_string());
                }
                Err(e) => cache.error = Some(format!("reading the rows: {e}")),
            }
        }
        let (oldest_at, oldest) =
            cache.past.front().map_or((None, None), |(t, r)| (Some(*t), Some(r)));
        let newest_at = cache.past.back().map(|(t, _)| *t);
        let dt = match (oldest_at, newest_at) {
            (Some(a), Some(b)) => b.duration_since(a).as_secs_f64(),
            _ => 0.0,
        };
        let workers = cache
            .workers
            .iter()
            .map(|w| PageWorker {
                view: w.clone(),
                results_per_second: (dt >= 1.0).then(|| {
                    let before = oldest.and_then(|o| o.get(&w.worker_id)).copied().unwrap_or(0);
                    w.results.saturating_sub(before) as f64 / dt
                }),
            })
            .collect();
        (workers, cache.blocked.clone(), cache.error.clone())
    }
}

/// `word` as one shell word: unchanged when it is plain, otherwise in single quotes.
pub fn shell_word(word: &str) -> String {
    let plain = !word.is_empty()
        && word.chars().all(|c| c.is_ascii_alphanumeric() || "/._-+:,=@%".contains(c));
    if plain {
        word.to_owned()
    } else {
        format!("'{}'", word.replace('\'', r"'\''"))
    }
}

#[cfg(test)]
mod tests {
    use super::shell_word;

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
    use crate::status::{eta, Eta, Progress, RunName};
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
