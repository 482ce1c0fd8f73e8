//! What the status page shows, and `/status.json` is: a [`PageView`] of the [`StatusCache`]'s
//! latest snapshot (the one `status` and `/metrics` show), with the page of workers asked for, the
//! rate chart and the held and failed jobs as the cache last read them.

use crate::snapshot::fleet::{Fleet, WorkerQuery};
use crate::snapshot::{RunSnapshot, WorkerView};
use crate::status::{shell_word, RatePoint, StatusCache, CHART_SAMPLE_EVERY};
use serde::Serialize;
use std::sync::Arc;

/// Everything the status page shows; `/status.json` is this object: the run's [`RunSnapshot`]
/// (flattened in, exactly as the engine published it), the page of workers the reader asked for
/// and the page's own details.
#[derive(Debug, Clone, Serialize)]
pub struct PageView {
    /// The run at the moment shown.
    #[serde(flatten)]
    pub run: RunSnapshot,
    /// The page of workers listed, in the order of attention.
    pub workers: Arc<[WorkerView]>,
    /// All the workers in aggregate, and which of them `workers` holds.
    pub fleet: Fleet,
    /// The ETA in words, as `status` words it ([`RunSnapshot::eta_text`]): the page shows it.
    pub eta_text: String,
    /// The state file, as `requeue --state` needs it.
    pub state_file: String,
    /// The first held and failed job ids (at most `BLOCKED_LISTED`: see `status/cache.rs`).
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

impl PageView {
    /// The page's data now, with the workers `query` asks for, and the held and failed jobs as
    /// the cache last read them (see [`StatusCache::rows`]).
    pub async fn read(cache: &Arc<StatusCache>, query: &WorkerQuery) -> PageView {
        let run = RunSnapshot::clone(&cache.latest());
        let (blocked, rows_error) = match cache.rows(&run).await {
            Ok(rows) => (rows.blocked.clone(), cache.last_error()),
            Err(e) => (Default::default(), Some(e.to_string())),
        };
        let (fleet, page) = cache.workers(&run, query);
        let state_file = cache.state_file().display().to_string();
        let state = shell_word(&state_file);
        let requeue = |count: u64, flag: &str| {
            (count > 0).then(|| format!("nqueens-coordinator requeue --state {state} --{flag}"))
        };
        PageView {
            eta_text: run.eta_text(),
            held_jobs: blocked.held,
            failed_jobs: blocked.failed,
            requeue_held: requeue(run.progress.jobs_held, "held"),
            requeue_failed: requeue(run.progress.jobs_failed, "failed"),
            history: cache.rate_points(&run),
            sample_seconds: CHART_SAMPLE_EVERY.as_secs_f64(),
            rows_error,
            state_file,
            workers: page.into(),
            run,
            fleet,
        }
    }

    /// What `viewer` may see: a viewer without the token gets the state file's name only (in the
    /// requeue commands too), never its absolute path.
    pub fn for_viewer(mut self, viewer: super::Viewer) -> PageView {
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
