//! Prometheus metrics: the counters the engine and the services bump (atomics, so that no caller
//! waits), and [`render`], which writes the Prometheus text of a [`StatusView`] (the one `status`
//! and the page show): jobs by state, workers and rates come from its snapshot, as on every other
//! view of the run.
//! [`crate::http`] serves it on `/metrics` (beside the status page), so scraping needs no
//! framework and a slow scraper can never hold up the engine.

use crate::snapshot::{Counters, RunSnapshot};
use crate::status::StatusView;
use nqueens_scheduler::state::JobState;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};

/// The coordinator's counters, shared by the engine and the services (which bump them); the
/// engine copies them into each snapshot ([`Metrics::counters`]). Every counter starts at zero.
#[derive(Debug, Default)]
pub struct Metrics {
    pub results_accepted: AtomicU64,
    pub results_duplicate: AtomicU64,
    pub results_rejected: AtomicU64,
    pub job_errors: AtomicU64,
    pub conflicts: AtomicU64,
    pub nodes: AtomicU64,
    pub commits: AtomicU64,
    pub auth_failures: AtomicU64,
}

impl Metrics {
    /// The counters now.
    pub fn counters(&self) -> Counters {
        let g = |a: &AtomicU64| a.load(Ordering::Relaxed);
        Counters {
            results_accepted: g(&self.results_accepted),
            results_duplicate: g(&self.results_duplicate),
            results_rejected: g(&self.results_rejected),
            job_errors: g(&self.job_errors),
            conflicts: g(&self.conflicts),
            nodes: g(&self.nodes),
            commits: g(&self.commits),
            auth_failures: g(&self.auth_failures),
        }
    }
}

/// The Prometheus text exposition of `view`.
pub fn render(view: &StatusView) -> String {
    let snapshot = &view.run;
    let mut out = String::new();
    let p = &snapshot.progress;
    let _ =
        writeln!(out, "# HELP nqueens_jobs Jobs of the run by state.\n# TYPE nqueens_jobs gauge");
    for (state, jobs) in [
        (JobState::Pending, p.jobs_pending),
        (JobState::Leased, p.jobs_leased),
        (JobState::Done, p.jobs_done),
        (JobState::Held, p.jobs_held),
        (JobState::Failed, p.jobs_failed),
    ] {
        let _ = writeln!(out, "nqueens_jobs{{state=\"{state}\"}} {jobs}");
    }
    for (name, kind, help, value) in series(snapshot) {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {value}");
    }
    out
}

/// One series of [`render`] with one value: name, type, help and value.
type Series = (&'static str, &'static str, &'static str, f64);

/// Every one-value series of [`render`], in the order they are written.
fn series(snapshot: &RunSnapshot) -> Vec<Series> {
    let c = snapshot.live.counters.unwrap_or_default();
    [results_series(snapshot, &c), coordinator_series(snapshot, &c)].concat()
}

/// The workers seen and what became of their results.
fn results_series(snapshot: &RunSnapshot, c: &Counters) -> Vec<Series> {
    let g = |v: u64| v as f64;
    vec![
        (
            "nqueens_jobs_disputed",
            "gauge",
            "Jobs not counted whose answers disagree, waiting for another credential or the referee.",
            g(snapshot.live.disputed_jobs.unwrap_or(0)),
        ),
        (
            "nqueens_workers",
            "gauge",
            "Workers seen within three heartbeats.",
            g(snapshot.live.live_workers.unwrap_or(0)),
        ),
        (
            "nqueens_results_total",
            "counter",
            "Results committed (accepted or verified) since start; rate() gives results/s.",
            g(c.results_accepted),
        ),
        (
            "nqueens_results_duplicate_total",
            "counter",
            "Duplicate results acknowledged and ignored.",
            g(c.results_duplicate),
        ),
        (
            "nqueens_results_rejected_total",
            "counter",
            "Results refused (unknown job or lease, malformed, implausible, untrusted or not the caller's).",
            g(c.results_rejected),
        ),
        (
            "nqueens_job_errors_total",
            "counter",
            "Solver errors reported by workers.",
            g(c.job_errors),
        ),
        ("nqueens_conflicts_total", "counter", "Conflicting results recorded.", g(c.conflicts)),
    ]
}

/// The coordinator's own work (leases, nodes, commits), whom it refuses, and the rates.
fn coordinator_series(snapshot: &RunSnapshot, c: &Counters) -> Vec<Series> {
    let p = &snapshot.progress;
    let g = |v: u64| v as f64;
    vec![
            (
                "nqueens_lease_expiries_total",
                "counter",
                "Leases that expired and returned their jobs.",
                g(snapshot.live.lease_expiries.unwrap_or(0)),
            ),
            (
                "nqueens_nodes_total",
                "counter",
                "Search nodes of committed results; rate() gives nodes/s.",
                g(c.nodes),
            ),
            (
                "nqueens_commits_total",
                "counter",
                "Store transactions committed.",
                g(c.commits),
            ),
            (
                "nqueens_untrusted_workers",
                "gauge",
                "Workers that disagreed with a settled verification; refused, their jobs re-run.",
                g(snapshot.untrusted_workers),
            ),
            (
                "nqueens_auth_failures_total",
                "counter",
                "gRPC calls refused for a missing, wrong or revoked token, or a wrong worker secret.",
                g(c.auth_failures),
            ),
            (
                "nqueens_results_per_second",
                "gauge",
                "Jobs counted per second over the last minutes: the rate behind the ETA (see `snapshot/rate.rs`).",
                p.results_per_second.unwrap_or(0.0),
            ),
            (
                "nqueens_nodes_per_second",
                "gauge",
                "Search nodes per second over the same window.",
                snapshot.live.nodes_per_second.unwrap_or(0.0),
            ),
    ]
}
