//! The checks of an export that cost no solving, made on every `verify --export`: coverage (the
//! rows against the job list rebuilt from the header), the figures against their published
//! values, and a bound on every row's solutions (plausibility).

use crate::export::{ExportHeader, ExportRow};
use nqueens_core::published_counts;
use nqueens_core::{job_list, Job, SplitParams};
use rayon::prelude::*;

/// The largest split target a run is made with (`serve --target-jobs`' cap): a header asking for
/// more is refused before a list is built.
const MOST_TARGET_JOBS: u64 = 1 << 21;

/// The coverage findings: the header against the job list rebuilt from its `n` and
/// `target_jobs` (its depth, job count and fingerprint), and every row against the job of its
/// id (its queens, fill and weight). A row that matches its job is exactly the fillings of its
/// pre-placed rows, and the list holds every canonical orbit once, so rows that all match, one
/// per job, cover every solution once.
pub(crate) fn coverage(header: &ExportHeader, rows: &[ExportRow]) -> Vec<String> {
    if header.target_jobs == 0 || header.target_jobs > MOST_TARGET_JOBS {
        return vec![format!(
            "the header's target_jobs {} is not a split any run is made with (1 to {MOST_TARGET_JOBS})",
            header.target_jobs
        )];
    }
    let list = match job_list(header.n as u32, &SplitParams::with_target(header.target_jobs)) {
        Ok(list) => list,
        Err(e) => return vec![format!("the header's job list cannot be rebuilt: {e}")],
    };
    let mut found = Vec::new();
    if header.depth != list.depth as u64 || header.jobs != list.jobs.len() as u64 {
        found.push(format!(
            "the header says {} jobs of depth {}; N = {} split for {} gives {} jobs of depth {}",
            header.jobs,
            header.depth,
            header.n,
            header.target_jobs,
            list.jobs.len(),
            list.depth
        ));
    }
    let rebuilt = format!("n{}-{}", list.n, list.fingerprint());
    let major = header.fingerprint.strip_prefix(&format!("{rebuilt}-p"));
    if major.is_none_or(|p| p.parse::<u32>().is_err()) {
        found.push(format!(
            "the header's fingerprint {} is not the rebuilt list's {rebuilt}-p<protocol>",
            header.fingerprint
        ));
    }
    let wrong: Vec<String> =
        rows.par_iter().filter_map(|row| row_against_list(header.n, row, &list.jobs)).collect();
    found.extend(wrong);
    found
}

/// What is wrong with `row` against the job of its id in `jobs`, if anything.
fn row_against_list(n: u8, row: &ExportRow, jobs: &[Job]) -> Option<String> {
    let Some(job) = jobs.get(row.job as usize) else {
        return Some(format!("job {}: not in the rebuilt list of {} jobs", row.job, jobs.len()));
    };
    let mut queens = job.fixed_queens();
    queens.sort_unstable();
    let fill = n as usize - queens.len();
    if row.queens != queens || row.fill as usize != fill || row.weight != job.weight {
        return Some(format!(
            "job {}: queens {:?}, fill {}, weight {}; the job of that id has {:?}, {fill}, {}",
            row.job, row.queens, row.fill, row.weight, queens, job.weight
        ));
    }
    None
}

/// The findings of the export's figures against the published ones: a complete export's Total,
/// Unique and classes where published; a partial export's Total above the published Total.
pub(crate) fn published(
    n: u8,
    total: u128,
    unique: Option<u128>,
    classes: Option<[u128; 3]>,
) -> Vec<String> {
    let Some(known) = published_counts(n as u32) else { return Vec::new() };
    if unique.is_none() {
        return match known.total {
            Some(all) if total > all => {
                vec![format!("a partial Total of {total} is above the published Total {all}")]
            }
            _ => Vec::new(),
        };
    }
    known.mismatches(Some(total), unique, classes).iter().map(|m| m.to_string()).collect()
}

/// Which figures have a published value for an `n`-board, for the report (`-` for none).
pub(crate) fn published_names(n: u8) -> String {
    let Some(known) = published_counts(n as u32) else { return "-".into() };
    let names: Vec<&str> = [
        ("Total", known.total),
        ("Unique", known.unique),
        ("COUNT2", known.count2),
        ("COUNT4", known.count4),
        ("COUNT8", known.count8),
    ]
    .iter()
    .filter(|(_, v)| v.is_some())
    .map(|(name, _)| *name)
    .collect();
    if names.is_empty() {
        "-".into()
    } else {
        names.join(", ")
    }
}

/// The plausibility findings: rows whose counts no board allows. A row's solutions are at most
/// the Bregman bound of its free squares (see [`ln_bound`]); its `sym180` at most its solutions,
/// its `sym90` at most its `sym180`.
pub(crate) fn implausible(n: u8, rows: &[ExportRow]) -> Vec<String> {
    let check = |row: &ExportRow| -> Option<String> {
        if row.sym180 > row.solutions || row.sym90 > row.sym180 {
            return Some(format!(
                "job {}: sym90 {} <= sym180 {} <= solutions {} does not hold",
                row.job, row.sym90, row.sym180, row.solutions
            ));
        }
        let bound = ln_bound(n, &row.queens);
        // A margin far above the rounding of a sum of 32 logarithms.
        if row.solutions > 0 && (row.solutions as f64).ln() > bound + 1e-9 {
            return Some(format!(
                "job {}: {} solutions, but its free squares allow at most {:.0}",
                row.job,
                row.solutions,
                bound.exp().floor()
            ));
        }
        None
    };
    rows.par_iter().filter_map(check).collect()
}

/// The natural logarithm of an upper bound on the solutions that contain `queens` (negative
/// infinity where a free row has no free square). Each free row's free squares are those of a
/// free column that no fixed queen attacks along a diagonal; a solution puts one queen on a free
/// square of every free row, in distinct columns, so the solutions are at most the permanent of
/// that 0/1 matrix, which Bregman's theorem bounds by the product over free rows of
/// `(r!)^(1/r)`, `r` the row's free squares.
pub(crate) fn ln_bound(n: u8, queens: &[(u8, u8)]) -> f64 {
    let (n, m) = (n as i32, n as i32 - 1);
    let used_rows = queens.iter().fold(0u64, |a, &(r, _)| a | 1 << r);
    let used_cols = queens.iter().fold(0u64, |a, &(_, c)| a | 1 << c);
    let mut sum = 0.0;
    for r in (0..n).filter(|r| used_rows & 1 << r == 0) {
        let mut free = !used_cols & ((1u64 << n) - 1);
        for &(qr, qc) in queens {
            let d = r - qr as i32;
            for c in [qc as i32 + d, qc as i32 - d] {
                if (0..=m).contains(&c) {
                    free &= !(1u64 << c);
                }
            }
        }
        let k = free.count_ones();
        if k == 0 {
            return f64::NEG_INFINITY;
        }
        sum += (1..=k).map(|i| (i as f64).ln()).sum::<f64>() / k as f64;
    }
    sum
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bound_holds_for_every_job_of_small_boards_and_is_a_bound() {
        for n in 6..=11u8 {
            let list = job_list(n as u32, &SplitParams::with_target(200)).unwrap();
            for job in &list.jobs {
                let queens = job.fixed_queens();
                let solutions = job.solve().unwrap().solutions;
                let bound = ln_bound(n, &queens);
                assert!(
                    solutions == 0 || (solutions as f64).ln() <= bound + 1e-9,
                    "N={n} job {}: {solutions} > e^{bound}",
                    job.id
                );
            }
        }
        // The empty 8-board: 8 free squares in every row, so at most 8! placements.
        assert!((ln_bound(8, &[]) - (1..=8).map(|i| (i as f64).ln()).sum::<f64>()).abs() < 1e-9);
        // A row with no free square: no solution.
        assert_eq!(ln_bound(4, &[(0, 0), (1, 2)]), f64::NEG_INFINITY);
    }
}
