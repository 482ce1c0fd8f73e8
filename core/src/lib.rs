//! Exact N-Queens counting, split into independent jobs.
//!
//! The board is reduced by its 8 symmetries through *canonical constellations*: the queens standing
//! on the four borders (top row, bottom row, left column, right column) of a solution. Each orbit
//! of constellations under the symmetry group is represented once, with its orbit size as a weight
//! (2, 4 or 8), and each representative is split into [`Job`]s by pre-placing queens in a few more
//! rows. A job is a small serializable value that any process can [`solve`](Job::solve) alone;
//! summing the weighted [`JobCounts`] of all jobs in a [`Tally`] gives the exact [`Totals`]: Total,
//! Unique and the symmetry classes COUNT2, COUNT4 and COUNT8.
//!
//! ```
//! use nqueens_core::{job_list, SplitParams, Tally};
//! let jobs = job_list(8, &SplitParams::default()).unwrap();
//! let mut tally = Tally::new(8).unwrap();
//! for job in &jobs.jobs {
//!     tally.add(job.weight, &job.solve().unwrap()).unwrap();
//! }
//! let totals = tally.totals().unwrap();
//! assert_eq!((totals.total, totals.unique), (92, 12));
//! ```
//!
//! The `parallel` feature (on by default) brings in rayon: [`job_list`] is built over the current
//! pool, and the `parallel` (many jobs on all cores) and `estimate` (a run's sizing) modules exist.
//! Without it the crate starts no threads and builds the same job lists on the calling thread.

mod board;
pub mod breakdown;
mod constellation;
mod error;
#[cfg(feature = "parallel")]
pub mod estimate;
mod ids;
mod job;
#[cfg(feature = "parallel")]
pub mod parallel;
mod published;
pub mod reference;
mod rng;
mod search;
mod symmetric;
mod tail;
mod tail6;
mod totals;

pub use board::{check_board_size, MAX_N, MIN_N};
pub use constellation::{canonical_constellations, Constellation, Symmetry};
pub use error::CoreError;
pub use ids::{JobId, LeaseId, WorkerId};
pub use job::{job_list, Job, JobCounts, JobList, SearchPlan, SplitParams, JOB_FORMAT_VERSION};
pub use published::{published_counts, published_table, Mismatch, PublishedCounts};
pub use rng::SplitMix64;
pub use totals::{Classes, Tally, Totals};

/// The search build that this process uses, chosen on first use from the CPU's features.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SolverBuild {
    /// `avx512`, `avx2` (AVX2 without `pext`), `bmi` (BMI2/AVX2) or `portable`: what
    /// `NQ_SOLVER_BUILD=avx2`, `bmi` or `portable` limits it to, to compare builds on one machine.
    pub name: &'static str,
    /// The CPU features it is compiled for (and that this CPU has).
    pub features: &'static [&'static str],
}

/// The search build that this process uses (see [`SolverBuild`]).
pub fn solver_build() -> SolverBuild {
    let build = search::Detected::selected().build();
    SolverBuild { name: build.name(), features: build.features() }
}
