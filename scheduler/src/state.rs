//! The names of a job's states and of a result row's kinds: one enum each, used by the scheduler,
//! the store (whose SQL text takes the names from [`JobState::as_str`] and [`ResultKind::as_str`]),
//! the metrics and `status`.

use std::fmt;

/// Where a job stands. The scheduler adds the lease details a leased job carries; this is the
/// name that is stored and reported.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum JobState {
    /// Waiting for a worker.
    Pending,
    /// Handed to a worker under a lease.
    Leased,
    /// Counted in the totals.
    Done,
    /// Stopped after repeated conflicting results, until a person requeues it.
    Held,
    /// Stopped after repeated solver errors, until a person requeues it.
    Failed,
}

impl JobState {
    /// Every state, in the order of [`JobsByState`].
    pub const ALL: [JobState; 5] =
        [JobState::Pending, JobState::Leased, JobState::Done, JobState::Held, JobState::Failed];

    /// The name stored in the `jobs.state` column and used in metrics labels.
    pub fn as_str(self) -> &'static str {
        match self {
            JobState::Pending => "pending",
            JobState::Leased => "leased",
            JobState::Done => "done",
            JobState::Held => "held",
            JobState::Failed => "failed",
        }
    }

    /// The state named `name`, if it is one.
    pub fn parse(name: &str) -> Option<JobState> {
        JobState::ALL.into_iter().find(|s| s.as_str() == name)
    }
}

impl fmt::Display for JobState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How many jobs stand in each state.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct JobsByState([u64; 5]);

impl JobsByState {
    /// Jobs in `state`.
    pub fn get(&self, state: JobState) -> u64 {
        self.0[state as usize]
    }
    /// Counts `count` more jobs in `state`.
    pub fn add(&mut self, state: JobState, count: u64) {
        self.0[state as usize] += count;
    }
    /// A job moved from `from` to `to`.
    pub fn moved(&mut self, from: JobState, to: JobState) {
        self.0[from as usize] -= 1;
        self.0[to as usize] += 1;
    }
    /// Jobs in all states.
    pub fn total(&self) -> u64 {
        self.0.iter().sum()
    }
}

/// Why a result row was stored (the `results.kind` column).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ResultKind {
    /// The first result of a job that needs no second opinion: counted.
    First,
    /// A result that agreed with another worker's: counted.
    Verified,
    /// A first opinion waiting for a second worker's: not counted.
    Opinion,
    /// Another worker agreeing with a counted result: not counted again.
    Confirm,
    /// A result that disagrees with another: not counted.
    Conflict,
    /// A result of the one-machine `solve --state`: counted.
    Local,
    /// The coordinator's own answer (worker 0) to a job it solved to check workers, kept to
    /// check them against after a restart: not counted (a job it settles is counted as
    /// [`ResultKind::Verified`] under worker 0 instead).
    Reference,
    /// An answer under a lease that no longer held the job for its worker (released, expired,
    /// re-leased): an opinion of its credential only, never counted by itself.
    Late,
}

impl ResultKind {
    /// The name stored in the `results.kind` column.
    pub fn as_str(self) -> &'static str {
        match self {
            ResultKind::First => "first",
            ResultKind::Verified => "verified",
            ResultKind::Opinion => "opinion",
            ResultKind::Confirm => "confirm",
            ResultKind::Conflict => "conflict",
            ResultKind::Local => "local",
            ResultKind::Reference => "reference",
            ResultKind::Late => "late",
        }
    }
}

/// Why a job must be answered by a second, independent party beyond what the run's rules ask
/// of every job (the `jobs.review` column; `None` is stored as NULL). Set when an answer arrives,
/// kept for good: a job under review is counted only once another party (or the coordinator)
/// gave the same answer, so the run is complete only when every review is settled.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Review {
    /// Nothing beyond the run's rules.
    #[default]
    None,
    /// A trusted party's answer drawn, in secret, for a re-check (`--recheck-fraction`).
    Recheck,
    /// An answer given by a party on probation: it waits for evidence, also once the party is
    /// trusted.
    Probation,
}

impl Review {
    /// The name stored in the `jobs.review` column (`None` for no review: NULL).
    pub fn as_str(self) -> Option<&'static str> {
        match self {
            Review::None => None,
            Review::Recheck => Some("recheck"),
            Review::Probation => Some("probation"),
        }
    }

    /// The review named `name` (NULL: none), if it is one.
    pub fn parse(name: Option<&str>) -> Option<Review> {
        match name {
            None => Some(Review::None),
            Some("recheck") => Some(Review::Recheck),
            Some("probation") => Some(Review::Probation),
            Some(_) => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for s in JobState::ALL {
            assert_eq!(JobState::parse(s.as_str()), Some(s));
        }
        assert_eq!(JobState::parse("finished"), None);
        for r in [Review::None, Review::Recheck, Review::Probation] {
            assert_eq!(Review::parse(r.as_str()), Some(r));
        }
        assert_eq!(Review::parse(Some("later")), None);
    }
}
