//! Prometheus metrics: a handful of atomics updated by the engine, rendered in the Prometheus text
//! format. [`crate::http`] serves them on `/metrics` (beside the status page), so scraping needs no
//! framework and a slow scraper can never hold up the engine.

use nqueens_scheduler::state::{JobState, JobsByState};
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

/// The coordinator's counters and gauges, shared by the engine (which updates them), the services
/// and the HTTP port.
#[derive(Debug)]
pub struct Metrics {
    pub started: Instant,
    /// Jobs by state, indexed by [`JobState`] (the engine's latest count).
    pub jobs: [AtomicU64; 5],
    pub workers: AtomicU64,
    pub results_accepted: AtomicU64,
    pub results_duplicate: AtomicU64,
    pub results_rejected: AtomicU64,
    pub job_errors: AtomicU64,
    pub conflicts: AtomicU64,
    pub lease_expiries: AtomicU64,
    pub nodes: AtomicU64,
    pub commits: AtomicU64,
    pub auth_failures: AtomicU64,
    pub untrusted_workers: AtomicU64,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics {
            started: Instant::now(),
            jobs: Default::default(),
            workers: AtomicU64::new(0),
            results_accepted: AtomicU64::new(0),
            results_duplicate: AtomicU64::new(0),
            results_rejected: AtomicU64::new(0),
            job_errors: AtomicU64::new(0),
            conflicts: AtomicU64::new(0),
            lease_expiries: AtomicU64::new(0),
            nodes: AtomicU64::new(0),
            commits: AtomicU64::new(0),
            auth_failures: AtomicU64::new(0),
            untrusted_workers: AtomicU64::new(0),
        }
    }
}

impl Metrics {
    /// Publishes the engine's count of jobs by state.
    pub fn set_jobs(&self, jobs: JobsByState) {
        for state in JobState::ALL {
            self.jobs[state as usize].store(jobs.get(state), Ordering::Relaxed);
        }
    }

    /// The Prometheus text exposition.
    pub fn render(&self) -> String {
        let mut out = String::new();
        let g = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let _ = writeln!(
            out,
            "# HELP nqueens_jobs Jobs of the run by state.\n# TYPE nqueens_jobs gauge"
        );
        for state in JobState::ALL {
            let jobs = g(&self.jobs[state as usize]);
            let _ = writeln!(out, "nqueens_jobs{{state=\"{state}\"}} {jobs}");
        }
        let uptime = self.started.elapsed().as_secs_f64().max(1e-3);
        let simple: [(&str, &str, &str, f64); 13] = [
            (
                "nqueens_workers",
                "gauge",
                "Workers seen within three heartbeats.",
                g(&self.workers) as f64,
            ),
            (
                "nqueens_results_total",
                "counter",
                "Results committed (accepted or verified) since start; rate() gives results/s.",
                g(&self.results_accepted) as f64,
            ),
            (
                "nqueens_results_duplicate_total",
                "counter",
                "Duplicate results acknowledged and ignored.",
                g(&self.results_duplicate) as f64,
            ),
            (
                "nqueens_results_rejected_total",
                "counter",
                "Results refused (unknown job or lease, wrong run).",
                g(&self.results_rejected) as f64,
            ),
            (
                "nqueens_job_errors_total",
                "counter",
                "Solver errors reported by workers.",
                g(&self.job_errors) as f64,
            ),
            (
                "nqueens_conflicts_total",
                "counter",
                "Conflicting results recorded.",
                g(&self.conflicts) as f64,
            ),
            (
                "nqueens_lease_expiries_total",
                "counter",
                "Leases that expired and returned their jobs.",
                g(&self.lease_expiries) as f64,
            ),
            (
                "nqueens_nodes_total",
                "counter",
                "Search nodes of committed results; rate() gives nodes/s.",
                g(&self.nodes) as f64,
            ),
            (
                "nqueens_commits_total",
                "counter",
                "Store transactions committed.",
                g(&self.commits) as f64,
            ),
            (
                "nqueens_untrusted_workers",
                "gauge",
                "Workers that disagreed with a settled verification; refused, their jobs re-run.",
                g(&self.untrusted_workers) as f64,
            ),
            (
                "nqueens_auth_failures_total",
                "counter",
                "Calls refused for a missing or wrong token.",
                g(&self.auth_failures) as f64,
            ),
            (
                "nqueens_results_per_second",
                "gauge",
                "Committed results per second since this coordinator started.",
                g(&self.results_accepted) as f64 / uptime,
            ),
            (
                "nqueens_nodes_per_second",
                "gauge",
                "Search nodes per second since this coordinator started.",
                g(&self.nodes) as f64 / uptime,
            ),
        ];
        for (name, kind, help, value) in simple {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {value}");
        }
        out
    }
}
