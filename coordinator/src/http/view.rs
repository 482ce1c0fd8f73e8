//! What the status page shows, and `/status.json` is: a [`PageView`], the [`StatusView`] that
//! `status`, gRPC `Status` and `/metrics` show (built from the [`StatusCache`]'s latest snapshot,
//! with the page of workers asked for), and beside it the rate chart and the held and failed
//! jobs as the cache last read them.

use crate::snapshot::fleet::WorkerQuery;
use crate::status::{shell_word, RatePoint, StatusCache, StatusView, CHART_SAMPLE_EVERY};
use nqueens_store::BlockedJobs;
use serde::Serialize;
use std::sync::Arc;

/// Everything the status page shows; `/status.json` is this object: the run's [`StatusView`]
/// (flattened in, the one `status --connect` gets: the snapshot exactly as the engine published
/// it, the page of workers the reader asked for, what the rows tell) and the page's own details,
/// derived from it by [`PageView::new`].
#[derive(Debug, Clone, Serialize)]
pub struct PageView {
    /// The run's status at the moment shown.
    #[serde(flatten)]
    pub status: StatusView,
    /// The ETA in words, as `status` words it ([`crate::snapshot::RunSnapshot::eta_text`]): the page shows it.
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

/// What the page shows beside a [`StatusView`], from the status cache.
pub struct PageDetails {
    /// The state file, absolute.
    pub state_file: String,
    /// The first held and failed job ids, as the rows were last read.
    pub blocked: BlockedJobs,
    /// The rate chart.
    pub history: Vec<RatePoint>,
    /// Why the rows could not be read, if they could not.
    pub rows_error: Option<String>,
}

impl PageView {
    /// The page's data now, with the workers `query` asks for, and the held and failed jobs as
    /// the cache last read them (see [`StatusCache::view_and_rows`]).
    pub async fn read(cache: &Arc<StatusCache>, query: &WorkerQuery) -> PageView {
        let (status, rows, rows_error) = cache.view_and_rows(query).await;
        let details = PageDetails {
            state_file: cache.state_file().display().to_string(),
            blocked: rows.map(|rows| rows.blocked.clone()).unwrap_or_default(),
            history: cache.rate_points(&status.run),
            rows_error,
        };
        PageView::new(status, details)
    }

    /// The page of `status`: the one function from the view every reader gets to the page's.
    pub fn new(status: StatusView, details: PageDetails) -> PageView {
        let state = shell_word(&details.state_file);
        let requeue = |count: u64, flag: &str| {
            (count > 0).then(|| format!("nqueens-coordinator requeue --state {state} --{flag}"))
        };
        let p = &status.run.progress;
        PageView {
            eta_text: status.run.eta_text(),
            requeue_held: requeue(p.jobs_held, "held"),
            requeue_failed: requeue(p.jobs_failed, "failed"),
            held_jobs: details.blocked.held,
            failed_jobs: details.blocked.failed,
            history: details.history,
            sample_seconds: CHART_SAMPLE_EVERY.as_secs_f64(),
            rows_error: details.rows_error,
            state_file: details.state_file,
            status,
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
