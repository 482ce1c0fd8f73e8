//! The run at one moment, as every reader sees it: one [`RunSnapshot`], built by the engine after
//! each batch it commits and published through a `watch` channel (`Engine::start` hands out the
//! receiver). The gRPC `Status` call, the status page, `/status.json` and `/metrics` are views of
//! the latest one, so they never disagree on jobs, rate, quiet time or ETA; `status --state` builds
//! the same type offline from a state file ([`RunSnapshot::from_store`]).
//!
//! A new figure is computed once, here: a field of [`RunSnapshot`] (an argument of
//! [`RunSnapshot::new`], the one constructor), of its [`LiveFigures`] when only the live engine
//! knows it, or of its [`Progress`] (`snapshot/progress.rs`); filled live in `engine/publish.rs`
//! and offline in [`RunSnapshot::from_store`]. Every view renders the one `StatusView`
//! (`status.rs`) that holds the snapshot, so `status --json` and `/status.json` carry it as it
//! is; each view that shows it changes too (follow `jobs_held`): the text of `status`
//! (`status/text.rs`), the page (`http/page.rs` and its markup and script, `http/page.html`),
//! `/metrics` (`metrics.rs`), the wire (a `StatusResponse` field in `cluster.proto`, both
//! directions in `grpc/wire/status.rs`, drawn in `grpc/wire/tests.rs`) and the list of figures
//! in `docs/cluster.md`. ARCHITECTURE.md ("A new status figure") lists the files, a figure
//! read from the committed rows among them.

pub mod fleet;
mod progress;
mod rate;
mod worker;

#[cfg(test)]
pub use progress::{eta, Eta};
pub use progress::{percent, Progress, RunName};
pub use rate::{per_second, RateNow, RunRate};
pub use worker::WorkerView;

use nqueens_result::RunResult;
use nqueens_scheduler::state::JobState;
use nqueens_store::unix_now;
use nqueens_store::{FinalTally, Store, StoreError, Summary};
use serde::Serialize;

/// The coordinator's counters since it started (what `/metrics` exposes beside the jobs).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Counters {
    /// Results committed (accepted or verified).
    pub results_accepted: u64,
    /// Duplicate results acknowledged and ignored.
    pub results_duplicate: u64,
    /// Results refused (unknown job or lease, malformed, implausible, untrusted or not the
    /// caller's).
    pub results_rejected: u64,
    /// Solver errors reported by workers.
    pub job_errors: u64,
    /// Conflicting results recorded.
    pub conflicts: u64,
    /// Search nodes of the committed results.
    pub nodes: u64,
    /// Store transactions committed.
    pub commits: u64,
    /// gRPC calls refused for a missing, wrong or revoked token, or a wrong worker secret.
    pub auth_failures: u64,
}

/// The run at one moment: jobs by state, pace and ETA by the one rule, every worker, and the
/// result once complete; with what only the live engine knows ([`LiveFigures`]).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct RunSnapshot {
    /// Unix time (seconds) of the moment it shows.
    pub taken_unix: f64,
    /// Jobs by state, the rate and the ETA, the conflicts, the result.
    #[serde(flatten)]
    pub progress: Progress,
    /// Seconds since the last counted result (or since the start, if none yet).
    pub quiet_seconds: f64,
    /// Workers refused after losing a verification (or too many solver errors).
    pub untrusted_workers: u64,
    /// What the live engine alone knows: none of it when read offline.
    #[serde(flatten)]
    pub live: LiveFigures,
    /// Every worker, by id: those registered with this process (live), or the stored rows. Not
    /// in the views' JSON, which list a page of them (their `workers`, chosen through the
    /// `fleet` index); a view decoded from the wire, which carries that page alone, has none.
    #[serde(skip)]
    pub all_workers: std::sync::Arc<[WorkerView]>,
}

/// The figures of a [`RunSnapshot`] that only the live engine knows; the default (0 and `None`)
/// is a snapshot read offline from a state file.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct LiveFigures {
    /// Which of the engine's publications this is (1 for its first); 0 when read offline.
    pub snapshot_seq: u64,
    /// Search nodes per second over the same window as the rate.
    pub nodes_per_second: Option<f64>,
    /// Workers heard from within three heartbeats.
    pub live_workers: Option<u64>,
    /// Jobs not counted whose answers disagree, waiting for another credential's answer or the
    /// coordinator's ruling (the scheduler's rulings say it).
    pub disputed_jobs: Option<u64>,
    /// Leases that expired since the coordinator started.
    pub lease_expiries: Option<u64>,
    /// Seconds until the last current lease expires unless its worker renews it.
    pub leases_expire_in_seconds: Option<f64>,
    /// Seconds since the coordinator started.
    pub uptime_seconds: Option<f64>,
    /// The coordinator's counters (not on the status call's wire: they are on `/metrics`).
    pub counters: Option<Counters>,
}

impl RunSnapshot {
    /// The run at `taken_unix` as `progress` counts it, quiet for `quiet_seconds`, with
    /// `untrusted_workers` refused, every worker in `all_workers` and the `live` figures (their
    /// default offline): every snapshot, live, offline or off the wire, is built here.
    pub fn new(
        taken_unix: f64,
        progress: Progress,
        quiet_seconds: f64,
        untrusted_workers: u64,
        all_workers: std::sync::Arc<[WorkerView]>,
        live: LiveFigures,
    ) -> RunSnapshot {
        RunSnapshot { taken_unix, progress, quiet_seconds, untrusted_workers, live, all_workers }
    }

    /// Offline, from the committed rows of a state file (and their `summary`). With no live
    /// clock, the rate is measured over the span of the result rows (the first to the last) and
    /// the quiet time since the last of them: the one rule of `snapshot/rate.rs`
    /// ([`per_second`]) over the window the file can tell.
    pub fn from_store(store: &Store, s: &Summary) -> Result<RunSnapshot, StoreError> {
        let meta = store.meta();
        let done = s.jobs.get(JobState::Done);
        // A finished run took until its last counted result, however long ago that was.
        let took = store.time_to_last_result()?;
        let result = match (done == meta.job_count, store.final_tally(&s.tally)) {
            (true, FinalTally::Exact(t)) => {
                let record = RunResult::new(&t, meta.job_count, took, s.tally.nodes)
                    .with_evidence(store.evidence()?);
                // The digest the live run published: the rows in job order, read again.
                let split = nqueens_core::SplitParams { target_jobs: meta.target_jobs };
                let list = nqueens_core::job_list(meta.n as u32, &split)?;
                Some(match nqueens_result::export_digest(store, &list.jobs) {
                    Ok(digest) => record.with_export_digest(digest),
                    Err(nqueens_result::ExportError::Store(e)) => return Err(e),
                    Err(e) => {
                        tracing::warn!(error = %e, "the export digest cannot be computed");
                        record
                    }
                })
            }
            _ => None,
        };
        let rate = match (s.first_result_unix, s.last_result_unix) {
            (Some(a), Some(b)) => per_second(done, b - a),
            _ => None,
        };
        let now_unix = unix_now();
        let quiet = match s.last_result_unix {
            Some(last) => (now_unix - last).max(0.0),
            None => store.age().as_secs_f64(),
        };
        let run = RunName { n: meta.n.into(), fingerprint: &meta.fingerprint };
        let workers = store.workers()?.into_iter().map(WorkerView::from).collect();
        let progress = Progress::new(run, &s.jobs, rate, quiet, s.conflicts, result);
        let offline = LiveFigures::default();
        Ok(RunSnapshot::new(now_unix, progress, quiet, s.untrusted_workers, workers, offline))
    }

    /// The ETA as words (see [`Progress::eta_text`]), with the leases' expiry when known.
    pub fn eta_text(&self) -> String {
        self.progress.eta_text(self.live.leases_expire_in_seconds)
    }
}

#[cfg(test)]
impl RunSnapshot {
    /// Creates a fresh N = 8 cluster state file at `path` and returns its snapshot as read
    /// offline (for unit tests that serve a real file).
    pub fn of_fresh_run_file(path: &std::path::Path) -> RunSnapshot {
        use nqueens_core::{job_list, SplitParams};
        use nqueens_store::{RunKind, RunPolicy};
        let list = job_list(8, &SplitParams::default()).unwrap();
        let store = Store::open_or_create(
            path,
            &list,
            nqueens_proto::PROTOCOL_MAJOR,
            RunPolicy::default(),
            RunKind::Cluster,
        )
        .unwrap();
        RunSnapshot::from_store(&store, &store.summary().unwrap()).unwrap()
    }

    /// A live-looking snapshot showing `progress`, everything else empty (for unit tests).
    pub fn with_progress(progress: Progress) -> RunSnapshot {
        let live = LiveFigures {
            snapshot_seq: 1,
            live_workers: Some(0),
            disputed_jobs: Some(0),
            lease_expiries: Some(0),
            uptime_seconds: Some(1.0),
            counters: Some(Counters::default()),
            ..LiveFigures::default()
        };
        RunSnapshot::new(0.0, progress, 0.0, 0, std::sync::Arc::from([]), live)
    }
}
