//! Jobs: canonical constellations with queens pre-placed in their first searched rows.
//!
//! The job list of a board size is deterministic: the same `n` and [`SplitParams`] always give the
//! same jobs in the same order with the same ids, so a run can be resumed, and results matched to
//! jobs, by id alone; [`JobList::fingerprint`] names the list so that mismatches are caught.

use crate::board::{check_board_size, Cell};
use crate::constellation::{canonical_constellations, Constellation, Symmetry};
use crate::search::{Layout, State};
use crate::symmetric::count_rotation_symmetric;
use crate::{CoreError, JobId};
use serde::{Deserialize, Serialize};

/// Version of the job-list layout; part of every fingerprint, bumped whenever the same
/// parameters would give a different list.
pub const JOB_FORMAT_VERSION: u32 = 1;

/// How finely a board is split into jobs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SplitParams {
    /// Wanted number of jobs. Constellations are split by pre-placing queens in one more row at a
    /// time, each step multiplying the count by roughly the number of free columns, so the list
    /// has the count nearest to this target (on a log scale) that a whole number of rows gives.
    /// `None` picks a default that grows with the board: `2^(n-5)`, at most `2^21`.
    pub target_jobs: Option<u64>,
}

impl SplitParams {
    /// Split to about `target` jobs.
    pub fn with_target(target: u64) -> Self {
        SplitParams { target_jobs: Some(target) }
    }

    /// The target job count in force for an `n`-board.
    pub fn target_for(&self, n: u8) -> u64 {
        self.target_jobs.unwrap_or_else(|| 1u64 << (n.saturating_sub(5)).min(21)).max(1)
    }
}

/// One independent piece of work: the completions of a canonical constellation whose first
/// searched rows (the rows without a border queen, in search order: bottom to top) hold queens in
/// `prefix` columns.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Job {
    /// Position in the job list of its board size and split.
    pub id: JobId,
    /// Board size.
    pub n: u8,
    /// The border queens, a canonical representative of its orbit.
    pub constellation: Constellation,
    /// Orbit size of the constellation: every solution found stands for `weight` solutions.
    pub weight: u8,
    /// Columns of the queens pre-placed in the first searched rows.
    pub prefix: Vec<u8>,
    /// Rough relative cost (partial placements two rows further down); bigger runs longer.
    pub estimate: u64,
}

/// What solving one job found. The counts are not weighted: a [`crate::Tally`] applies the weight.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct JobCounts {
    /// Solutions that contain the job's pre-placed queens.
    pub solutions: u64,
    /// Of these, the solutions that a 180-degree rotation maps onto themselves.
    pub sym180: u64,
    /// Of these, the solutions that a 90-degree rotation maps onto themselves.
    pub sym90: u64,
    /// Queens placed by the search, a measure of work. The last rows, counted in closed form, place
    /// none, so this depends on the solver's version: compare answers with
    /// [`JobCounts::same_answer`].
    pub nodes: u64,
}

impl JobCounts {
    /// Whether two results for the same job agree on everything that is counted (not on `nodes`,
    /// which measures work and differs between solver versions).
    pub fn same_answer(&self, other: &JobCounts) -> bool {
        (self.solutions, self.sym180, self.sym90) == (other.solutions, other.sym180, other.sym90)
    }

    /// Adds the counts of a disjoint part of the same job (see [`Job::split`]).
    pub fn merge(&mut self, other: &JobCounts) -> Result<(), CoreError> {
        let add = |a: u64, b: u64, what| a.checked_add(b).ok_or(CoreError::Overflow { what });
        self.solutions = add(self.solutions, other.solutions, "job solutions")?;
        self.sym180 = add(self.sym180, other.sym180, "job sym180")?;
        self.sym90 = add(self.sym90, other.sym90, "job sym90")?;
        self.nodes = self.nodes.saturating_add(other.nodes);
        Ok(())
    }
}

/// The search of one job as plain masks ([`Job::search_plan`]), enough to count its solutions
/// without this crate's solver.
///
/// Searched rows are numbered `0..rows` in search order (bottom to top, rows holding a border
/// queen skipped). At searched row `depth` with masks `(cols, down_right, down_left)` the free
/// columns are `!(cols | down_right | down_left | blocked[depth])`; placing a queen on free bit
/// `b` moves to row `depth + 1` with `(cols | b, (down_right | b) << shift[depth],
/// (down_left | b) >> shift[depth])`. A state with `depth == rows` is one solution.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SearchPlan {
    /// Number of searched rows.
    pub rows: usize,
    /// Per searched row: columns of border queens, squares they attack, and every bit >= n.
    pub blocked: Vec<u32>,
    /// Per searched row: the board-row distance to the next searched row (1 to 3; 0 for the last).
    pub shift: Vec<u32>,
    /// The searched row after the job's prefix (`prefix.len()`).
    pub depth: usize,
    /// Occupied columns after the prefix (border queens included).
    pub cols: u32,
    /// Diagonal mask moving one column right per searched row, as seen in row `depth`.
    pub down_right: u32,
    /// Diagonal mask moving one column left per searched row, as seen in row `depth`.
    pub down_left: u32,
}

/// The complete, ordered job list of one board size and split.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobList {
    /// Board size.
    pub n: u8,
    /// How the constellations were split into jobs.
    pub params: SplitParams,
    /// Number of searched rows pre-placed in every job (fewer only where a board runs out of rows).
    pub depth: usize,
    /// The jobs, `jobs[i].id == i`.
    pub jobs: Vec<Job>,
}

impl JobList {
    /// A stable 64-bit digest of the list (format version, board size and every job), written as
    /// 16 hex digits: two lists with the same fingerprint hold the same jobs.
    pub fn fingerprint(&self) -> String {
        let mut h = Fnv::new();
        h.write(&JOB_FORMAT_VERSION.to_le_bytes());
        h.write(&[self.n]);
        h.write(&(self.depth as u64).to_le_bytes());
        h.write(&(self.jobs.len() as u64).to_le_bytes());
        for job in &self.jobs {
            let c = job.constellation;
            h.write(&[c.top, c.bottom, c.left, c.right, job.weight, job.prefix.len() as u8]);
            h.write(&job.prefix);
        }
        format!("{:016x}", h.0)
    }
}

/// FNV-1a: tiny, stable across platforms and versions (unlike `std`'s hasher).
struct Fnv(u64);

impl Fnv {
    fn new() -> Self {
        Fnv(0xcbf2_9ce4_8422_2325)
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 ^ b as u64).wrapping_mul(0x0100_0000_01b3);
        }
    }
}

/// Builds the job list of an `n`-board.
///
/// Every canonical constellation is split by pre-placing queens in its first `depth` searched
/// rows, with `depth` chosen as described in [`SplitParams::target_jobs`]. Jobs are ordered by
/// constellation, then by prefix, and numbered from 0. With the `parallel` feature the work is
/// spread over the current rayon pool; without it, it runs on this thread. The list is the same
/// either way, whatever the pool.
pub fn job_list(n: u32, params: &SplitParams) -> Result<JobList, CoreError> {
    build_job_list(n, params, Spread::DEFAULT)
}

/// Where [`job_list`] does its work.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Spread {
    /// On the calling thread, in order.
    #[cfg_attr(
        all(feature = "parallel", not(test)),
        expect(dead_code, reason = "with the pool at hand, only the test builds on one thread")
    )]
    OneThread,
    /// Over the current rayon pool.
    #[cfg(feature = "parallel")]
    Pool,
}

impl Spread {
    #[cfg(feature = "parallel")]
    const DEFAULT: Spread = Spread::Pool;
    #[cfg(not(feature = "parallel"))]
    const DEFAULT: Spread = Spread::OneThread;

    /// `f` of every item, in the items' order.
    fn map<T: Sync, U: Send>(self, items: &[T], f: impl Fn(&T) -> U + Sync + Send) -> Vec<U> {
        match self {
            Spread::OneThread => items.iter().map(f).collect(),
            #[cfg(feature = "parallel")]
            Spread::Pool => {
                use rayon::prelude::*;
                items.par_iter().map(f).collect()
            }
        }
    }
}

/// [`job_list`], its work done as `spread` says.
fn build_job_list(n: u32, params: &SplitParams, spread: Spread) -> Result<JobList, CoreError> {
    let n = check_board_size(n as i64)?;
    let target = params.target_for(n);
    let layouts: Vec<(Constellation, u8, Layout)> =
        spread.map(&canonical_constellations(n), |&(c, w)| (c, w, Layout::new(n, &c)));
    let max_rows = layouts.iter().map(|(_, _, l)| l.rows()).max().unwrap_or(0);

    let count_at = |depth: usize| -> u64 {
        spread.map(&layouts, |(_, _, l)| l.count_partial(&l.start(), depth)).into_iter().sum()
    };
    let mut depth = 0;
    let mut count = count_at(0);
    while count < target && depth < max_rows {
        let deeper = count_at(depth + 1);
        // Take the deeper split only if it lands nearer the target on a log scale.
        let closer =
            (deeper as f64 / target as f64).ln().abs() < (target as f64 / count.max(1) as f64).ln();
        if deeper >= target && !closer {
            break;
        }
        depth += 1;
        count = deeper;
    }

    // Each constellation's jobs in prefix order, then numbered in order.
    let parts: Vec<Vec<Job>> = spread.map(&layouts, |(constellation, weight, layout)| {
        let mut expanded = Vec::new();
        layout.expand(&layout.start(), depth, &mut expanded, &mut Vec::new());
        expanded
            .into_iter()
            .map(|(state, prefix)| Job {
                id: JobId::new(0),
                n,
                constellation: *constellation,
                weight: *weight,
                prefix,
                estimate: layout.count_partial(&state, 2),
            })
            .collect()
    });
    let mut jobs = Vec::with_capacity(count as usize);
    for job in parts.into_iter().flatten() {
        jobs.push(Job { id: JobId::new(jobs.len() as u64), ..job });
    }
    Ok(JobList { n, params: *params, depth, jobs })
}

impl Job {
    /// Checks that the job describes a real pre-placement and returns its layout and start state.
    pub(crate) fn prepare(&self) -> Result<(Layout, State), CoreError> {
        let invalid = |reason: String| Err(CoreError::InvalidJob { reason });
        check_board_size(self.n as i64)?;
        let c = self.constellation;
        if [c.top, c.bottom, c.left, c.right].iter().any(|&x| x >= self.n) {
            return invalid(format!("constellation {c:?} does not fit an {}-board", self.n));
        }
        if !canonical_constellations_contains(self.n, &c) {
            return invalid(format!("constellation {c:?} is not a valid canonical constellation"));
        }
        if c.orbit_size(self.n) != self.weight {
            return invalid(format!(
                "weight {} is not the orbit size {}",
                self.weight,
                c.orbit_size(self.n)
            ));
        }
        let layout = Layout::new(self.n, &c);
        if self.prefix.len() > layout.rows() {
            return invalid(format!(
                "prefix of {} queens exceeds {} searched rows",
                self.prefix.len(),
                layout.rows()
            ));
        }
        let mut state = layout.start();
        for &col in &self.prefix {
            state = layout.place(&state, col)?;
        }
        Ok((layout, state))
    }

    /// The job of an `n`-board whose fixed queens (border and pre-placed, in any order) are
    /// `queens`, as [`Job::fixed_queens`] gives them: a canonical constellation and queens in its
    /// first searched rows. With `id` 0 and `estimate` 0: it names a board, not a place in a list.
    /// Fails on anything else (queens that attack each other, a constellation that is not
    /// canonical, queens outside the first searched rows).
    pub fn from_board(n: u8, queens: &[Cell]) -> Result<Job, CoreError> {
        let invalid = |reason: String| CoreError::InvalidJob { reason };
        check_board_size(n as i64)?;
        if queens.iter().any(|&(r, c)| r >= n || c >= n) {
            return Err(invalid(format!("a queen of {queens:?} is off the {n}-board")));
        }
        let constellation = Constellation::from_queens(n, queens).ok_or_else(|| {
            invalid(format!("{queens:?} has not exactly one queen on each border"))
        })?;
        let border = constellation.queens(n);
        let layout = Layout::new(n, &constellation);
        let mut prefix = Vec::new();
        for depth in 0..layout.rows() {
            let row = layout.row_of(depth);
            let mut here = queens.iter().filter(|&&(r, _)| r == row);
            match (here.next(), here.next()) {
                (Some(&(_, col)), None) => prefix.push(col),
                (None, _) => break,
                (Some(_), Some(_)) => return Err(invalid(format!("two queens in row {row}"))),
            }
        }
        let job = Job {
            id: JobId::new(0),
            n,
            constellation,
            weight: constellation.orbit_size(n),
            prefix,
            estimate: 0,
        };
        job.prepare()?;
        let (mut given, mut rebuilt) = (queens.to_vec(), job.fixed_queens());
        given.sort_unstable();
        rebuilt.sort_unstable();
        if given != rebuilt || border.len() + job.prefix.len() != queens.len() {
            return Err(invalid(format!(
                "{queens:?} are not a constellation's queens and queens in its first searched rows"
            )));
        }
        Ok(job)
    }

    /// The border queens and pre-placed queens of this job as board squares.
    pub fn fixed_queens(&self) -> Vec<Cell> {
        let layout = Layout::new(self.n, &self.constellation);
        let mut queens = self.constellation.queens(self.n);
        queens.extend(layout.placed_queens(&self.prefix));
        queens
    }

    /// Counts this job's solutions and, where its constellation allows them, the rotation-symmetric
    /// ones. Single-threaded; use [`Job::split`], or the `parallel` module (feature `parallel`),
    /// to spread one job over cores.
    pub fn solve(&self) -> Result<JobCounts, CoreError> {
        let (layout, state) = self.prepare()?;
        let found = layout.count(&state);
        let (sym180, sym90) = self.symmetric_counts_of_valid();
        Ok(JobCounts { solutions: found.solutions, sym180, sym90, nodes: found.nodes })
    }

    /// Only the rotation-symmetric counts of [`Job::solve`]: `(sym180, sym90)`. A small search
    /// that costs next to nothing beside the full count, for solvers (such as a GPU's) that count
    /// `solutions` elsewhere.
    pub fn symmetric_counts(&self) -> Result<(u64, u64), CoreError> {
        self.prepare()?;
        Ok(self.symmetric_counts_of_valid())
    }

    /// [`Job::symmetric_counts`] of a job already checked by [`Job::prepare`].
    fn symmetric_counts_of_valid(&self) -> (u64, u64) {
        let (mut sym180, mut sym90) = (0, 0);
        if self.weight < 8 {
            let fixed = self.fixed_queens();
            sym180 = count_rotation_symmetric(self.n, &fixed, Symmetry::Rotate180);
            if self.weight < 4 {
                sym90 = count_rotation_symmetric(self.n, &fixed, Symmetry::Rotate90);
            }
        }
        (sym180, sym90)
    }

    /// The plain bitmask search of this job, for solvers outside this crate (a GPU kernel): the
    /// blocked mask and row shift of every searched row, and the masks after the prefix.
    /// A depth-first search over it counts exactly [`JobCounts::solutions`]; see [`SearchPlan`].
    pub fn search_plan(&self) -> Result<SearchPlan, CoreError> {
        let (layout, state) = self.prepare()?;
        let rows = layout.rows();
        let (cols, down_right, down_left) = state.masks();
        Ok(SearchPlan {
            rows,
            blocked: (0..rows).map(|k| layout.blocked(k)).collect(),
            shift: (0..rows).map(|k| layout.shift(k)).collect(),
            depth: state.depth,
            cols,
            down_right,
            down_left,
        })
    }

    /// Splits this job into disjoint parts by pre-placing queens in up to `extra_rows` more rows.
    /// The parts keep this job's id; their counts [`merge`](JobCounts::merge) to this job's counts.
    pub fn split(&self, extra_rows: usize) -> Result<Vec<Job>, CoreError> {
        let (layout, state) = self.prepare()?;
        let mut expanded = Vec::new();
        layout.expand(&state, extra_rows, &mut expanded, &mut Vec::new());
        Ok(expanded
            .into_iter()
            .map(|(state, more)| {
                let mut prefix = self.prefix.clone();
                prefix.extend(more);
                Job { prefix, estimate: layout.count_partial(&state, 2), ..self.clone() }
            })
            .collect())
    }

    /// Whether a complete solution (one column per row) belongs to this job.
    pub fn contains(&self, columns: &[u8]) -> bool {
        columns.len() == self.n as usize
            && Constellation::of_solution(columns) == self.constellation
            && self.fixed_queens().iter().all(|&(r, c)| columns[r as usize] == c)
    }
}

fn canonical_constellations_contains(n: u8, c: &Constellation) -> bool {
    c.is_valid_for(n) && c.is_canonical(n)
}

#[cfg(all(test, feature = "parallel"))]
mod tests {
    use super::*;

    /// A build without the `parallel` feature must number the same jobs as one with it: ids are
    /// what a resumed run and its results are matched by.
    #[test]
    fn one_thread_and_the_pool_build_the_same_list() {
        for n in 4..=18 {
            for params in [
                SplitParams::default(),
                SplitParams::with_target(1),
                SplitParams::with_target(5_000),
            ] {
                let alone = build_job_list(n, &params, Spread::OneThread).unwrap();
                let spread = build_job_list(n, &params, Spread::Pool).unwrap();
                assert_eq!(alone, spread, "n = {n}, {params:?}");
                assert_eq!(alone.fingerprint(), spread.fingerprint());
            }
        }
    }
}
