//! Every policy figure of the scheduler in one value, with the seed of its random choices, so
//! that a test can run the scheduler with other figures, or deterministically.

use std::time::Duration;

/// After this many reported solver errors, from at least [`MIN_ERROR_PARTIES`] independent
/// workers, a job is marked failed and left alone.
pub const MAX_ERRORS: u32 = 3;
/// Errors fail a job (short of the coordinator's own failed attempt) only from this many per-host
/// credentials; identities under the shared token never fail a job by their errors alone.
pub const MIN_ERROR_PARTIES: usize = 2;
/// A worker that reported at least this many solver errors, and errors on more than a quarter of
/// what it answered, is untrusted: honest solvers all but never fail.
pub const ERROR_UNTRUST_MIN: u32 = 8;
/// Spot checks per leased job: about one job in this many that a worker is given has an answer
/// the coordinator already knows. The worker cannot tell it from the others; a wrong answer
/// untrusts it. (Each worker's first lease carries one as well: the check at registration.)
pub const SPOT_CHECK_RATE: f64 = 0.005;
/// A job leased for longer than this many times its expected time (plus one lease duration) is
/// also given to another worker, and the first agreeing answer counts; past twice that its
/// holder's lease ends, whatever it heartbeats. The expected time comes from the coordinator's
/// own clock (lease to result), never from what a worker reports.
pub const OVERDUE_FACTOR: f64 = 4.0;
/// How many extra workers one overdue job is given to at most. A copy that is itself overdue
/// (its holder stalls too) is followed by another, on the same rule.
pub const MAX_COPIES: u32 = 4;
/// Jobs in conflict waiting for the coordinator's own answer at most (more wait for workers).
pub const MAX_REFEREE_QUEUE: usize = 256;
/// How many of a new credential's answers must be verified (by the coordinator's own answer or
/// another credential's agreeing one) before one of its results is believed alone.
pub const PROBATION_RESULTS: u32 = 10;
/// The most jobs a credential on probation holds at once, over all its identities and leases.
/// A trusted credential holds at most twice what it delivered in the last lease period (and
/// never less than this).
pub const PROBATION_HOLD: u32 = 16;
/// The most jobs one lease gives any worker, however fast it has shown itself to be.
pub const MAX_LEASE: usize = 65_536;
/// How long a lease lasts without a heartbeat (the coordinator's default `--lease-seconds`).
pub const LEASE_DURATION: Duration = Duration::from_secs(60);

/// The scheduler's policy: every figure its decisions use, and the seed of its random choices
/// (which lease carries a spot check, which known job it is, which counted job is re-checked).
/// [`Default`] gives the coordinator's figures with seed 0; the coordinator seeds it from the
/// operating system, so that no worker can predict the choices.
#[derive(Debug, Clone, PartialEq)]
pub struct SchedulerConfig {
    /// How long a lease lasts without a heartbeat.
    pub lease_duration: Duration,
    /// The seed of the scheduler's random generator.
    pub seed: u64,
    /// See [`MAX_ERRORS`].
    pub max_errors: u32,
    /// See [`MIN_ERROR_PARTIES`].
    pub min_error_parties: usize,
    /// See [`ERROR_UNTRUST_MIN`].
    pub error_untrust_min: u32,
    /// See [`SPOT_CHECK_RATE`].
    pub spot_check_rate: f64,
    /// See [`OVERDUE_FACTOR`].
    pub overdue_factor: f64,
    /// See [`MAX_COPIES`].
    pub max_copies: u32,
    /// See [`MAX_REFEREE_QUEUE`].
    pub max_referee_queue: usize,
    /// A party with fewer verified answers than this is on probation: each of its results waits
    /// for the coordinator's check or another party's agreement (adaptive replication). 0 turns
    /// probation off. See [`PROBATION_RESULTS`].
    pub probation_results: u32,
    /// See [`PROBATION_HOLD`].
    pub probation_hold: u32,
    /// See [`MAX_LEASE`].
    pub max_lease: usize,
    /// The fraction of answers that would count on one credential's word (a trusted party
    /// alone, or identities of the shared token agreeing) drawn for a secret re-check (0 to 1; 0
    /// turns re-checks off): a drawn answer is not counted until another party, or the
    /// coordinator (with `coordinator_checks`), gives the same answer, so the run cannot end with
    /// a re-check open. A party that lies on L answers that rest on its word goes unnoticed with
    /// probability (1 - f)^L.
    pub recheck_fraction: f64,
    /// Whether the coordinator solves this run's jobs itself (its referee): answers of parties on
    /// probation, re-checks and jobs trusted workers failed are then sent to it.
    pub coordinator_checks: bool,
    /// How many independent answers every job needs (a run setting, fixed when the run is made):
    /// 1 counts a trusted party's answer alone (re-checked at `recheck_fraction`); 2 (a record
    /// run) counts a job only when two different credentials, or the coordinator and one
    /// credential, gave the same answer, whoever is trusted (or when the coordinator's own
    /// solve settled it: a dispute's ruling, counted as the coordinator's).
    pub replication: u8,
}

impl Default for SchedulerConfig {
    fn default() -> Self {
        SchedulerConfig {
            lease_duration: LEASE_DURATION,
            seed: 0,
            max_errors: MAX_ERRORS,
            min_error_parties: MIN_ERROR_PARTIES,
            error_untrust_min: ERROR_UNTRUST_MIN,
            spot_check_rate: SPOT_CHECK_RATE,
            overdue_factor: OVERDUE_FACTOR,
            max_copies: MAX_COPIES,
            max_referee_queue: MAX_REFEREE_QUEUE,
            probation_results: PROBATION_RESULTS,
            probation_hold: PROBATION_HOLD,
            max_lease: MAX_LEASE,
            recheck_fraction: 0.0,
            coordinator_checks: false,
            replication: 1,
        }
    }
}
