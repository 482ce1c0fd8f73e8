//! The host's speed, so that an estimate carries across hosts: the thread-CPU time of one fixed
//! job list (every job of [`REFERENCE_N`], default split) solved on one thread. A *reference
//! core* solves it in [`REFERENCE_CORE_SECONDS`]; an estimate's CPU time times
//! `REFERENCE_CORE_SECONDS / reference_seconds` is in reference-core seconds, which two hosts of
//! different speeds (or one host on a busy and a quiet day) should agree on. The list is timed
//! before and after the sample: a host whose speed moved in between (other load, a frequency
//! change) says so in [`HostSpeed::drift`], which widens the interval in reference units.

use super::paths::timed_here;
use super::{Projection, YEAR_SECONDS};
use crate::{job_list, CoreError, SplitParams};
use serde::{Deserialize, Serialize};

/// The board whose whole default job list is the reference work.
pub const REFERENCE_N: u32 = 16;

/// Thread-CPU seconds a reference core takes for the reference list: what the project's 2-vCPU
/// VM (an Intel Xeon, AVX-512 build) took on 2026-12-05, quiet, so that a core-year there is
/// about a reference-core-year.
pub const REFERENCE_CORE_SECONDS: f64 = 0.22;

/// Times the reference list is solved; the median counts (the first warms the caches).
pub const REFERENCE_ROUNDS: usize = 3;

/// The Total of the reference board, checked on every round: a speed is only taken from a
/// solver that counts right.
const REFERENCE_TOTAL: u64 = 14_772_512;

/// This host's measured speed.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct HostSpeed {
    /// Seconds (thread CPU, or wall where there is no thread clock) this host took for the
    /// reference list on one thread: the median of [`REFERENCE_ROUNDS`].
    pub reference_seconds: f64,
    /// Reference cores per core of this host: `REFERENCE_CORE_SECONDS / reference_seconds`
    /// (above 1: faster than a reference core).
    pub reference_cores_per_core: f64,
    /// How far the host's speed moved between two timings (before and after the sample):
    /// `|a - b| / (a + b)`, 0 for one timing.
    pub drift: f64,
}

impl HostSpeed {
    /// The speed from two timings of the reference list (before and after the sample): their
    /// mean, and how far they differ as [`HostSpeed::drift`].
    pub fn combine(self, other: HostSpeed) -> HostSpeed {
        let (a, b) = (self.reference_seconds, other.reference_seconds);
        let reference_seconds = (a + b) / 2.0;
        HostSpeed {
            reference_seconds,
            reference_cores_per_core: REFERENCE_CORE_SECONDS / reference_seconds,
            drift: (a - b).abs() / (a + b),
        }
    }

    /// `cpu_seconds` of this host in reference-core-years.
    pub fn reference_core_years(&self, cpu_seconds: f64) -> f64 {
        cpu_seconds * self.reference_cores_per_core / YEAR_SECONDS
    }
}

/// The projected CPU time in reference-core-years, at the speed this host measured. Field
/// names are those of `estimate --json`, which leaves them out where no speed was measured.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Reference {
    /// This host's speed on the reference list.
    pub speed: HostSpeed,
    /// `total_cpu_seconds` in reference-core-years.
    #[serde(rename = "reference_core_years")]
    pub core_years: f64,
    /// Lower end of the 95% interval of `core_years`, widened by the speed's drift.
    #[serde(rename = "reference_core_years_low")]
    pub core_years_low: f64,
    /// Upper end of the 95% interval of `core_years`, widened by the speed's drift.
    #[serde(rename = "reference_core_years_high")]
    pub core_years_high: f64,
}

impl Reference {
    /// `projection`'s CPU time at `speed`; its interval is widened by the speed's drift (a host
    /// whose speed moved during the estimate cannot say its CPU time in reference units more
    /// closely than that).
    pub fn new(projection: &Projection, speed: HostSpeed) -> Reference {
        let years = |seconds: f64| speed.reference_core_years(seconds);
        Reference {
            speed,
            core_years: years(projection.total_cpu_seconds),
            core_years_low: years(projection.total_cpu_seconds_low) * (1.0 - speed.drift),
            core_years_high: years(projection.total_cpu_seconds_high) * (1.0 + speed.drift),
        }
    }
}

/// Solves the reference list [`REFERENCE_ROUNDS`] times on the calling thread.
pub fn measure_host_speed() -> Result<HostSpeed, CoreError> {
    let list = job_list(REFERENCE_N, &SplitParams::default())?;
    let mut rounds = Vec::with_capacity(REFERENCE_ROUNDS);
    for _ in 0..REFERENCE_ROUNDS {
        let (total, seconds, _) = timed_here(|| {
            list.jobs.iter().try_fold(0u64, |total, job| {
                Ok::<_, CoreError>(total + job.solve()?.solutions * u64::from(job.weight))
            })
        });
        let total = total?;
        if total != REFERENCE_TOTAL {
            return Err(CoreError::Estimate {
                reason: format!(
                    "the reference list (N={REFERENCE_N}) counted {total}, not {REFERENCE_TOTAL}"
                ),
            });
        }
        rounds.push(seconds);
    }
    rounds.sort_by(f64::total_cmp);
    let reference_seconds = rounds[rounds.len() / 2].max(1e-6);
    Ok(HostSpeed {
        reference_seconds,
        reference_cores_per_core: REFERENCE_CORE_SECONDS / reference_seconds,
        drift: 0.0,
    })
}
