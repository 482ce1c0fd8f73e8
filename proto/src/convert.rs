//! Where the wire meets the domain: conversions between the generated messages and `nqueens_core`
//! types, in both directions.
//!
//! Everything that comes off the wire goes through a checked [`TryFrom`]: a field that does not fit
//! its domain type, or a required field that is missing, is a [`WireError`], never a silent
//! truncation. What goes onto the wire is a plain [`From`].

use crate::v1 as pb;
use nqueens_core::{Constellation, Job, JobCounts};
use thiserror::Error;

/// A message that cannot stand for a domain value.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum WireError {
    /// A required sub-message is absent.
    #[error("{0} is missing")]
    Missing(&'static str),
    /// A number does not fit the domain type it stands for.
    #[error("{field} = {value} is out of range")]
    OutOfRange { field: &'static str, value: u64 },
    /// A number of seconds that is not a finite, non-negative number.
    #[error("{field} = {value} is not a duration")]
    NotANumber { field: &'static str, value: f64 },
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

impl From<pb::Counts> for JobCounts {
    fn from(c: pb::Counts) -> Self {
        JobCounts { solutions: c.solutions, sym180: c.sym180, sym90: c.sym90, nodes: c.nodes }
    }
}

impl From<&Job> for pb::JobSpec {
    fn from(job: &Job) -> Self {
        let c = job.constellation;
        pb::JobSpec {
            job_id: job.id,
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
            id: spec.job_id,
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
}
