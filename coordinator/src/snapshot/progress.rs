//! How far a run is, and what can honestly be said about the time it has left: the rule every
//! view of a run applies ([`Progress::new`] and [`eta`]), live or offline.

use nqueens_result::{hms, RunResult};
use nqueens_scheduler::state::{JobState, JobsByState};
use serde::Serialize;

/// How far a run is: the one shape `status`, `status --json`, `/status.json` and the status page
/// all show (each adds its own details beside it, flattened into the same JSON object). Built by
/// [`Progress::new`] alone, so that the four never disagree on the ETA or on completion.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Progress {
    /// Board size.
    pub n: u32,
    /// The job list's fingerprint (16 hex digits): the run id.
    pub fingerprint: String,
    /// Jobs in the run.
    pub jobs_total: u64,
    /// Jobs waiting to be leased.
    pub jobs_pending: u64,
    /// Jobs leased to workers now.
    pub jobs_leased: u64,
    /// Jobs counted.
    pub jobs_done: u64,
    /// Jobs held after too many conflicts, until a person requeues them.
    pub jobs_held: u64,
    /// Jobs stopped after repeated solver errors, until a person requeues them.
    pub jobs_failed: u64,
    /// Percent of the jobs counted (100 for an empty run).
    pub percent_done: f64,
    /// Jobs counted per second: the rate behind the ETA.
    pub results_per_second: Option<f64>,
    /// Seconds left at that rate; `None` when unknown or waiting on leases.
    pub eta_seconds: Option<f64>,
    /// Every job left is leased and none has reported for longer than the rate predicts: the
    /// number of jobs the run waits on (0 otherwise). See [`eta`].
    pub waiting_on_leases: u64,
    /// Conflicting results on record.
    pub conflicts: u64,
    /// Every job is counted.
    pub complete: bool,
    /// The run's result, once complete and summed from the committed rows.
    pub result: Option<RunResult>,
}

/// The run a [`Progress`] is about: board size and run id.
#[derive(Debug, Clone, Copy)]
pub struct RunName<'a> {
    /// Board size.
    pub n: u32,
    /// The job list's fingerprint: the run id.
    pub fingerprint: &'a str,
}

impl Progress {
    /// The progress of run `run` with `jobs` in each state, counting `rate` jobs per second and
    /// nothing counted for `quiet` seconds (see [`eta`]).
    pub fn new(
        run: RunName<'_>,
        jobs: &JobsByState,
        rate: Option<f64>,
        quiet: f64,
        conflicts: u64,
        result: Option<RunResult>,
    ) -> Progress {
        let total = jobs.total();
        let done = jobs.get(JobState::Done);
        let pending = jobs.get(JobState::Pending);
        let leased = jobs.get(JobState::Leased);
        let estimate = eta(total - done, pending, leased, rate, quiet);
        Progress {
            n: run.n,
            fingerprint: run.fingerprint.to_owned(),
            jobs_total: total,
            jobs_pending: pending,
            jobs_leased: leased,
            jobs_done: done,
            jobs_held: jobs.get(JobState::Held),
            jobs_failed: jobs.get(JobState::Failed),
            percent_done: percent(done, total),
            results_per_second: rate,
            eta_seconds: estimate.seconds(),
            waiting_on_leases: estimate.waiting_on(),
            conflicts,
            complete: result.is_some() || (total > 0 && done == total),
            result,
        }
    }

    /// The ETA as words: `done`, a time, `waiting on K leases` (with `expiry`, when the
    /// leases' expiry is known), or `unknown`.
    pub fn eta_text(&self, expiry: Option<f64>) -> String {
        if self.complete {
            "done".into()
        } else if self.waiting_on_leases > 0 {
            let expiry = expiry.map_or(String::new(), |s| {
                format!(" (expire in {s:.0}s unless their workers report)")
            });
            format!("unknown: waiting on {} leases{expiry}", self.waiting_on_leases)
        } else {
            self.eta_seconds.map_or("unknown".into(), hms)
        }
    }
}

/// What `status` can honestly say about the time a run has left.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Eta {
    /// Seconds left at the measured rate (0 once every job is done).
    In(f64),
    /// Every job left is leased, and none has reported for longer than the measured rate says
    /// they all should have taken: the run waits on these leases (a long job, or a worker that
    /// is gone and whose lease has to expire). The rate says nothing about when that ends.
    WaitingOnLeases(u64),
    /// No rate measured yet.
    Unknown,
}

impl Eta {
    pub fn seconds(self) -> Option<f64> {
        match self {
            Eta::In(s) => Some(s),
            Eta::WaitingOnLeases(_) | Eta::Unknown => None,
        }
    }

    pub fn waiting_on(self) -> u64 {
        match self {
            Eta::WaitingOnLeases(n) => n,
            Eta::In(_) | Eta::Unknown => 0,
        }
    }
}

/// The time left: `remaining` jobs (not done: pending, leased, held or failed), of which
/// `pending` wait for a worker and `leased` are out; `rate` the measured jobs per second; `quiet`
/// the seconds since the last counted result (or since the rate's start, if none yet).
pub fn eta(remaining: u64, pending: u64, leased: u64, rate: Option<f64>, quiet: f64) -> Eta {
    if remaining == 0 {
        return Eta::In(0.0);
    }
    let at_rate = rate.filter(|r| *r > 0.0).map(|r| remaining as f64 / r);
    let all_leased = pending == 0 && leased == remaining;
    match at_rate {
        Some(s) if !(all_leased && quiet > s) => Eta::In(s),
        _ if all_leased => Eta::WaitingOnLeases(leased),
        _ => Eta::Unknown,
    }
}

/// `done` as a percentage of `total` (100 for an empty run).
pub fn percent(done: u64, total: u64) -> f64 {
    if total == 0 {
        100.0
    } else {
        done as f64 * 100.0 / total as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn eta_at_the_measured_rate() {
        // 100 jobs left at 10 jobs/s, 50 of them pending: 10 s.
        assert_eq!(eta(100, 50, 50, Some(10.0), 0.5), Eta::In(10.0));
        // Jobs still pending: the rate holds even after a quiet spell.
        assert_eq!(eta(100, 1, 99, Some(10.0), 60.0), Eta::In(10.0));
        assert_eq!(eta(0, 0, 0, Some(10.0), 60.0), Eta::In(0.0));
        assert_eq!(eta(0, 0, 0, None, 0.0), Eta::In(0.0));
    }

    #[test]
    fn eta_unknown_without_a_rate() {
        assert_eq!(eta(100, 100, 0, None, 5.0), Eta::Unknown);
        assert_eq!(eta(100, 60, 40, Some(0.0), 5.0), Eta::Unknown);
    }

    #[test]
    fn eta_waits_on_leases_when_nothing_arrives() {
        // The last 2 jobs are leased to a worker that is gone: at 10 jobs/s they were due after
        // 0.2 s, 30 s have passed. Not "00:00:00.200": waiting on 2 leases.
        let e = eta(2, 0, 2, Some(10.0), 30.0);
        assert_eq!(e, Eta::WaitingOnLeases(2));
        assert_eq!(e.seconds(), None);
        assert_eq!(e.waiting_on(), 2);
        // Right after a restart: no rate yet, every job left is leased (a stored lease).
        assert_eq!(eta(5, 0, 5, None, 1.0), Eta::WaitingOnLeases(5));
        // All leased but results still arriving in time: the rate holds.
        assert_eq!(eta(20, 0, 20, Some(10.0), 0.5), Eta::In(2.0));
        // A held job is not leased: the run is blocked, not waiting on leases.
        assert_eq!(eta(3, 0, 2, Some(10.0), 30.0), Eta::In(0.3));
    }
}
