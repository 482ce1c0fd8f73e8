//! What `status` prints: progress, rate, ETA, workers, partial totals and conflicts, either asked of
//! a live coordinator or read offline from a state file. One [`StatusView`] serves both, as text or
//! as one JSON object.

use crate::report::{hms, ResultRecord};
use crate::store::{Store, StoreError};
use nqueens_proto as pb;
use serde::Serialize;
use std::fmt::Write as _;
use std::path::Path;

#[derive(Debug, Clone, Serialize)]
pub struct WorkerView {
    pub worker_id: u64,
    pub name: String,
    pub host: String,
    pub cores: u32,
    pub version: String,
    pub results: u64,
    pub conflicts: u64,
    pub jobs_leased: u64,
    pub last_seen_seconds_ago: f64,
    pub untrusted: bool,
}

#[derive(Debug, Clone, Serialize)]
pub struct StatusView {
    pub n: u32,
    pub fingerprint: String,
    pub source: String,
    pub jobs_total: u64,
    pub jobs_pending: u64,
    pub jobs_leased: u64,
    pub jobs_done: u64,
    pub jobs_held: u64,
    pub jobs_failed: u64,
    pub percent_done: f64,
    pub conflicts: u64,
    pub untrusted_workers: u64,
    pub lease_expiries: Option<u64>,
    pub results_per_second: Option<f64>,
    pub eta_seconds: Option<f64>,
    pub partial_total: u64,
    pub partial_sym180: u64,
    pub partial_sym90: u64,
    pub nodes: u64,
    pub complete: bool,
    pub result: Option<ResultRecord>,
    pub workers: Vec<WorkerView>,
}

impl StatusView {
    /// From a live coordinator's status call.
    pub fn from_response(r: pb::StatusResponse, source: &str) -> StatusView {
        let run = r.run.unwrap_or_default();
        StatusView {
            n: run.n,
            fingerprint: run.fingerprint,
            source: source.to_owned(),
            jobs_total: r.jobs_total,
            jobs_pending: r.jobs_pending,
            jobs_leased: r.jobs_leased,
            jobs_done: r.jobs_done,
            jobs_held: r.jobs_held,
            jobs_failed: r.jobs_failed,
            percent_done: percent(r.jobs_done, r.jobs_total),
            conflicts: r.conflicts,
            untrusted_workers: r.untrusted_workers,
            lease_expiries: Some(r.lease_expiries),
            results_per_second: Some(r.results_per_second),
            eta_seconds: (r.eta_seconds >= 0.0).then_some(r.eta_seconds),
            partial_total: r.partial_total,
            partial_sym180: r.partial_sym180,
            partial_sym90: r.partial_sym90,
            nodes: r.nodes,
            complete: r.complete,
            result: serde_json::from_str(&r.result_json).ok(),
            workers: r
                .workers
                .into_iter()
                .map(|w| WorkerView {
                    worker_id: w.worker_id,
                    name: w.name,
                    host: w.host,
                    cores: w.cores,
                    version: w.version,
                    results: w.results,
                    conflicts: w.conflicts,
                    jobs_leased: w.jobs_leased,
                    last_seen_seconds_ago: w.last_seen_seconds_ago,
                    untrusted: w.untrusted,
                })
                .collect(),
        }
    }

    /// Offline, from the committed rows of a state file.
    pub fn from_state(path: &Path) -> Result<StatusView, StoreError> {
        let store = Store::open_existing(path)?;
        let s = store.summary()?;
        let meta = store.meta();
        let complete = s.done == meta.job_count;
        let result = if complete {
            store
                .final_totals()?
                .map(|t| ResultRecord::new(&t, meta.job_count, store.age(), s.tally.nodes))
        } else {
            None
        };
        let rate = match (s.first_result_unix, s.last_result_unix) {
            (Some(a), Some(b)) if b > a => Some(s.done as f64 / (b - a)),
            _ => None,
        };
        let remaining = meta.job_count - s.done.min(meta.job_count);
        Ok(StatusView {
            n: meta.n as u32,
            fingerprint: meta.fingerprint.clone(),
            source: path.display().to_string(),
            jobs_total: meta.job_count,
            jobs_pending: s.pending,
            jobs_leased: s.leased,
            jobs_done: s.done,
            jobs_held: s.held,
            jobs_failed: s.failed,
            percent_done: percent(s.done, meta.job_count),
            conflicts: s.conflicts,
            untrusted_workers: s.untrusted_workers,
            lease_expiries: None,
            results_per_second: rate,
            eta_seconds: rate.filter(|r| *r > 0.0).map(|r| remaining as f64 / r),
            partial_total: s.tally.total,
            partial_sym180: s.tally.sym180,
            partial_sym90: s.tally.sym90,
            nodes: s.tally.nodes,
            complete,
            result,
            workers: Vec::new(),
        })
    }

    pub fn json(&self) -> String {
        serde_json::to_string(self).expect("status serializes")
    }

    /// The human-readable report.
    pub fn text(&self) -> String {
        let mut o = String::new();
        let _ =
            writeln!(o, "run      N={} fingerprint {} ({})", self.n, self.fingerprint, self.source);
        let _ = writeln!(
            o,
            "jobs     {}/{} done ({:.2}%), {} pending, {} leased, {} held, {} failed",
            self.jobs_done,
            self.jobs_total,
            self.percent_done,
            self.jobs_pending,
            self.jobs_leased,
            self.jobs_held,
            self.jobs_failed
        );
        let rate = self.results_per_second.map_or("-".into(), |r| format!("{r:.1} jobs/s"));
        let eta = if self.complete {
            "done".into()
        } else {
            self.eta_seconds.map_or("unknown".into(), hms)
        };
        let _ = writeln!(o, "rate     {rate}, ETA {eta}");
        let _ = writeln!(
            o,
            "partial  total {} (sym180 {}, sym90 {}), {} nodes",
            self.partial_total, self.partial_sym180, self.partial_sym90, self.nodes
        );
        let _ = writeln!(
            o,
            "problems {} conflicts, {} untrusted workers{}",
            self.conflicts,
            self.untrusted_workers,
            self.lease_expiries.map_or(String::new(), |e| format!(", {e} lease expiries"))
        );
        if self.jobs_held + self.jobs_failed > 0 {
            // `source` is the state file when read offline, the coordinator's URL when live.
            let file = if self.source.contains("://") { "<FILE>" } else { self.source.as_str() };
            let _ = writeln!(
                o,
                "blocked  the run cannot complete while jobs are held or failed: once the cause is found, stop the coordinator and run `nqueens-coordinator requeue --state {file}`"
            );
        }
        if !self.workers.is_empty() {
            let _ = writeln!(o, "workers  {}", self.workers.len());
            for w in &self.workers {
                let _ = writeln!(
                    o,
                    "  #{:<4} {:<20} {:<20} {:>3} cores  {:>8} results  {:>5} leased  {} conflicts  seen {:.0}s ago{}",
                    w.worker_id,
                    w.name,
                    w.host,
                    w.cores,
                    w.results,
                    w.jobs_leased,
                    w.conflicts,
                    w.last_seen_seconds_ago,
                    if w.untrusted { "  UNTRUSTED" } else { "" }
                );
            }
        }
        match &self.result {
            Some(r) => {
                let _ = writeln!(o, "RESULT   {}", r.json_line());
            }
            None => {
                let _ = writeln!(o, "result   not complete yet");
            }
        }
        o
    }
}

fn percent(done: u64, total: u64) -> f64 {
    if total == 0 {
        100.0
    } else {
        done as f64 * 100.0 / total as f64
    }
}
