//! Where the wire meets the domain: conversions between the generated messages and `nqueens_core`
//! types, in both directions.
//!
//! Everything that comes off the wire goes through a checked [`TryFrom`]: a field that does not fit
//! its domain type, or a required field that is missing, is a [`WireError`], never a silent
//! truncation. Job counts are the exception: every value fits, and whether a solver could give
//! them is judged where their sender can be untrusted (see `From<pb::Counts>`). What goes onto
//! the wire is a plain [`From`].

use crate::v1 as pb;
use nqueens_core::{Classes, Constellation, Job, JobCounts};
use thiserror::Error;

/// A message that cannot stand for a domain value.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum WireError {
    /// A required sub-message is absent.
    #[error("{0} is missing")]
    Missing(&'static str),
    /// A number does not fit the domain type it stands for.
    #[error("{field} = {value} is out of range")]
    OutOfRange {
        /// The message field.
        field: &'static str,
        /// The value received.
        value: u64,
    },
    /// A number of seconds that is not a finite, non-negative number.
    #[error("{field} = {value} is not a duration")]
    NotANumber {
        /// The message field.
        field: &'static str,
        /// The value received.
        value: f64,
    },
    /// Counts that contradict each other (e.g. classes that do not add up to the total).
    #[error("inconsistent counts: {0}")]
    Inconsistent(String),
    /// A text or value that breaks the protocol's bounds (length, characters, format).
    #[error("{field}: {reason}")]
    Invalid {
        /// The message field.
        field: &'static str,
        /// What is wrong with it.
        reason: String,
    },
}

/// A 128-bit count as its wire fields `(lo, hi)`: the low and the high 64 bits (see "Wide counts"
/// in `cluster.proto`).
pub fn split_wide(value: u128) -> (u64, u64) {
    (value as u64, (value >> 64) as u64)
}

/// The 128-bit count whose wire fields are `lo` and `hi`. Every pair is a valid count, so this
/// cannot fail; what the count must agree with is checked where it is used.
pub fn join_wide(lo: u64, hi: u64) -> u128 {
    (u128::from(hi) << 64) | u128::from(lo)
}

impl From<Classes> for pb::Classes {
    fn from(c: Classes) -> Self {
        let ((count2, count2_hi), (count4, count4_hi), (count8, count8_hi)) =
            (split_wide(c.count2), split_wide(c.count4), split_wide(c.count8));
        pb::Classes { count2, count4, count8, count2_hi, count4_hi, count8_hi }
    }
}

impl From<pb::Classes> for Classes {
    fn from(c: pb::Classes) -> Self {
        Classes {
            count2: join_wide(c.count2, c.count2_hi),
            count4: join_wide(c.count4, c.count4_hi),
            count8: join_wide(c.count8, c.count8_hi),
        }
    }
}

/// Narrows a wire integer to a domain integer, naming the field when it does not fit.
pub fn narrow<T: TryFrom<u64>>(field: &'static str, value: impl Into<u64>) -> Result<T, WireError> {
    let value = value.into();
    T::try_from(value).map_err(|_| WireError::OutOfRange { field, value })
}

impl From<JobCounts> for pb::Counts {
    fn from(c: JobCounts) -> Self {
        pb::Counts { solutions: c.solutions, sym180: c.sym180, sym90: c.sym90, nodes: c.nodes }
    }
}

/// The counts as sent, whatever they are. Whether any solver could give them (symmetric
/// solutions within the solutions, a weight that allows them, solutions per node, nodes per job,
/// every count within the state file's 64-bit columns) is the coordinator's to judge, and it
/// untrusts the sender of counts that fail (`nqueens_scheduler::implausible`): refusing them here
/// would let their sender off with a refused message.
impl From<pb::Counts> for JobCounts {
    fn from(c: pb::Counts) -> Self {
        JobCounts { solutions: c.solutions, sym180: c.sym180, sym90: c.sym90, nodes: c.nodes }
    }
}

impl From<&Job> for pb::JobSpec {
    fn from(job: &Job) -> Self {
        let c = job.constellation;
        pb::JobSpec {
            job_id: job.id.get(),
            n: job.n.into(),
            constellation: Some(pb::Constellation {
                top: c.top.into(),
                bottom: c.bottom.into(),
                left: c.left.into(),
                right: c.right.into(),
            }),
            weight: job.weight.into(),
            prefix: job.prefix.clone(),
            estimate: job.estimate,
        }
    }
}

/// The fields must fit a job's types; whether they describe a valid pre-placement for the board is
/// checked by the solver itself ([`Job::solve`] refuses an invalid job).
impl TryFrom<&pb::JobSpec> for Job {
    type Error = WireError;
    fn try_from(spec: &pb::JobSpec) -> Result<Self, WireError> {
        let c = spec.constellation.ok_or(WireError::Missing("job constellation"))?;
        Ok(Job {
            id: spec.job_id.into(),
            n: narrow("job n", spec.n)?,
            constellation: Constellation {
                top: narrow("constellation top", c.top)?,
                bottom: narrow("constellation bottom", c.bottom)?,
                left: narrow("constellation left", c.left)?,
                right: narrow("constellation right", c.right)?,
            },
            weight: narrow("job weight", spec.weight)?,
            prefix: spec.prefix.clone(),
            estimate: spec.estimate,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nqueens_core::{job_list, SplitParams};

    #[test]
    fn jobs_round_trip_and_oversized_fields_are_refused() {
        let list = job_list(9, &SplitParams::default()).unwrap();
        for job in &list.jobs {
            assert_eq!(Job::try_from(&pb::JobSpec::from(job)).as_ref(), Ok(job));
        }
        let mut spec = pb::JobSpec::from(&list.jobs[0]);
        spec.n = 265; // would truncate to 9
        assert_eq!(Job::try_from(&spec), Err(WireError::OutOfRange { field: "job n", value: 265 }));
        let mut spec = pb::JobSpec::from(&list.jobs[0]);
        spec.constellation = None;
        assert_eq!(Job::try_from(&spec), Err(WireError::Missing("job constellation")));
    }

    #[test]
    fn wide_counts_split_and_join_exactly() {
        for value in [0, 1, u128::from(u64::MAX), u128::from(u64::MAX) + 1, u128::MAX, 3 << 70] {
            let (lo, hi) = split_wide(value);
            assert_eq!(join_wide(lo, hi), value);
        }
        // Below 2^64 the high half is zero: the message encodes as it did with plain uint64 fields.
        assert_eq!(split_wide(42), (42, 0));
        let classes = Classes { count2: 7, count4: u128::from(u64::MAX) + 5, count8: 1 << 100 };
        let wire = pb::Classes::from(classes);
        assert_eq!((wire.count4, wire.count4_hi), (4, 1));
        assert_eq!(Classes::from(wire), classes);
    }

    #[test]
    fn job_counts_cross_the_wire_as_they_are() {
        for counts in [
            JobCounts { solutions: 10, sym180: 4, sym90: 2, nodes: 99 },
            JobCounts { solutions: 1, sym180: 11, sym90: 12, nodes: u64::MAX },
        ] {
            assert_eq!(JobCounts::from(pb::Counts::from(counts)), counts);
        }
    }
}
