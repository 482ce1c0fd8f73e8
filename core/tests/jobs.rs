//! Job lists: deterministic, complete, and solvable in any order and any process.

use nqueens_core::reference::{all_solutions, count_all};
use nqueens_core::{
    job_list, Constellation, CoreError, Job, JobCounts, JobId, SplitParams, Symmetry, Tally,
};

fn tally_of(n: u32, jobs: &[Job], counts: &[JobCounts]) -> Tally {
    let mut tally = Tally::new(n).unwrap();
    for (job, c) in jobs.iter().zip(counts) {
        tally.add(job.weight, c).unwrap();
    }
    tally
}

#[test]
fn job_lists_are_deterministic_and_numbered_in_order() {
    for (n, params) in [
        (12, SplitParams::default()),
        (13, SplitParams::with_target(5_000)),
        (16, SplitParams::default()),
    ] {
        let a = job_list(n, &params).unwrap();
        let b = job_list(n, &params).unwrap();
        assert_eq!(a, b, "n={n}");
        assert_eq!(a.fingerprint(), b.fingerprint());
        assert!(a.jobs.iter().enumerate().all(|(i, j)| j.id.index() == i));
    }
    let coarse = job_list(13, &SplitParams::with_target(1)).unwrap();
    let fine = job_list(13, &SplitParams::with_target(50_000)).unwrap();
    assert!(fine.jobs.len() > 10 * coarse.jobs.len());
    assert_ne!(coarse.fingerprint(), fine.fingerprint());
    assert_ne!(
        job_list(12, &SplitParams::default()).unwrap().fingerprint(),
        job_list(13, &SplitParams::default()).unwrap().fingerprint()
    );
}

/// The lists a build with the `parallel` feature and one without it give, pinned: a state file
/// names its run by this fingerprint, so every build must number the same jobs.
#[test]
fn job_list_fingerprints_are_pinned() {
    for (n, params, fingerprint) in [
        (12, SplitParams::default(), "2b7563fbb6dbbe45"),
        (16, SplitParams::with_target(10_000), "cf667cd9ff66c8fe"),
    ] {
        assert_eq!(job_list(n, &params).unwrap().fingerprint(), fingerprint, "n={n}");
    }
}

#[test]
fn split_target_lands_near_the_wanted_count() {
    for target in [1_000u64, 10_000, 100_000] {
        let list = job_list(16, &SplitParams::with_target(target)).unwrap();
        let got = list.jobs.len() as f64;
        assert!(
            got > target as f64 / 16.0 && got < target as f64 * 16.0,
            "target {target}: {got} jobs"
        );
    }
}

#[test]
fn jobs_solved_in_any_order_and_any_process_sum_to_the_same_result() {
    let n = 12;
    let list = job_list(n, &SplitParams::with_target(3_000)).unwrap();
    let in_order: Vec<JobCounts> = list.jobs.iter().map(|j| j.solve().unwrap()).collect();
    let expected = tally_of(n, &list.jobs, &in_order).totals().unwrap();

    // Another process sees each job only as its serialized form, and solves them in another order.
    let mut shipped: Vec<String> =
        list.jobs.iter().map(|j| serde_json::to_string(j).unwrap()).collect();
    shipped.reverse();
    shipped.rotate_left(list.jobs.len() / 3);
    let mut tally = Tally::new(n).unwrap();
    for text in &shipped {
        let job: Job = serde_json::from_str(text).unwrap();
        let counts: JobCounts =
            serde_json::from_str(&serde_json::to_string(&job.solve().unwrap()).unwrap()).unwrap();
        tally.add(job.weight, &counts).unwrap();
    }
    assert_eq!(tally.totals().unwrap(), expected);
    assert_eq!(expected.total, u128::from(count_all(n).unwrap()));

    // And a different split of the same board gives the same answer.
    let other = job_list(n, &SplitParams::with_target(10)).unwrap();
    let counts: Vec<JobCounts> = other.jobs.iter().map(|j| j.solve().unwrap()).collect();
    assert_eq!(tally_of(n, &other.jobs, &counts).totals().unwrap(), expected);
}

/// Every solution found by a plain search belongs to exactly one job's orbit, and each job counts
/// exactly the plain solutions that contain its pre-placed queens, symmetric ones included.
#[test]
fn per_job_counts_match_a_plain_bitboard_search() {
    for n in 4..=10u32 {
        let solutions = all_solutions(n).unwrap();
        assert_eq!(solutions.len() as u64, count_all(n).unwrap());
        for target in [1, 400] {
            let list = job_list(n, &SplitParams::with_target(target)).unwrap();
            for job in &list.jobs {
                let mine: Vec<&Vec<u8>> = solutions.iter().filter(|s| job.contains(s)).collect();
                let fixed_by =
                    |rot: Symmetry| mine.iter().filter(|s| is_fixed(s, rot)).count() as u64;
                let counts = job.solve().unwrap();
                assert_eq!(counts.solutions, mine.len() as u64, "n={n} job {job:?}");
                assert_eq!(counts.sym180, fixed_by(Symmetry::Rotate180), "n={n} job {job:?}");
                assert_eq!(counts.sym90, fixed_by(Symmetry::Rotate90), "n={n} job {job:?}");
            }
            // Each solution lies in the orbit of a job's constellation ...
            for s in &solutions {
                let c = Constellation::of_solution(s);
                let rep = Symmetry::ALL.iter().map(|&g| c.transformed(n as u8, g)).min().unwrap();
                assert!(
                    list.jobs.iter().any(|j| j.constellation == rep),
                    "n={n}: solution {s:?} has no job"
                );
            }
            // ... so the weighted job counts add up to the plain total.
            let counts: Vec<JobCounts> = list.jobs.iter().map(|j| j.solve().unwrap()).collect();
            assert_eq!(tally_of(n, &list.jobs, &counts).total, solutions.len() as u128, "n={n}");
        }
    }
}

fn transform(s: &[u8], g: Symmetry) -> Vec<u8> {
    let n = s.len() as u8;
    let mut out = vec![0; s.len()];
    for (r, &c) in s.iter().enumerate() {
        let (r2, c2) = g.apply(n, (r as u8, c));
        out[r2 as usize] = c2;
    }
    out
}

fn is_fixed(s: &[u8], g: Symmetry) -> bool {
    transform(s, g) == s
}

#[test]
fn split_parts_add_up_to_their_job() {
    let list = job_list(14, &SplitParams::with_target(1)).unwrap();
    for job in list.jobs.iter().filter(|j| j.weight < 8).chain(list.jobs.iter().step_by(97)) {
        let whole = job.solve().unwrap();
        let mut parts = JobCounts::default();
        for part in job.split(3).unwrap() {
            assert_eq!(part.id, job.id);
            parts.merge(&part.solve().unwrap()).unwrap();
        }
        assert_eq!(
            (parts.solutions, parts.sym180, parts.sym90),
            (whole.solutions, whole.sym180, whole.sym90)
        );
    }
}

#[test]
fn bad_input_gets_a_clear_error() {
    for n in [0, 33, 1000] {
        let err = job_list(n, &SplitParams::default()).unwrap_err();
        assert!(matches!(err, CoreError::BoardSize { .. }), "{err}");
        assert!(err.to_string().contains("between 1 and 32"), "{err}");
    }
    let job = job_list(10, &SplitParams::default()).unwrap().jobs[3].clone();
    let broken = [
        Job { weight: if job.weight == 8 { 4 } else { 8 }, ..job.clone() },
        Job { prefix: vec![job.constellation.top], ..job.clone() },
        Job { n: 40, ..job.clone() },
        Job {
            constellation: Constellation { top: 9, bottom: 9, left: 9, right: 9 },
            ..job.clone()
        },
    ];
    for bad in broken {
        assert!(
            matches!(bad.solve(), Err(CoreError::InvalidJob { .. } | CoreError::BoardSize { .. })),
            "{bad:?}"
        );
    }
    // Sums past 64 bits stay exact (Q(29) needs them); past 128 bits they are reported, never
    // wrapped.
    let mut tally = Tally::new(29).unwrap();
    let huge = JobCounts { solutions: u64::MAX / 4, ..JobCounts::default() };
    tally.add(8, &huge).unwrap();
    tally.add(8, &huge).unwrap();
    assert_eq!(tally.total, u128::from(u64::MAX / 4) * 16);
    tally.total = u128::MAX - 1;
    assert!(matches!(tally.add(8, &huge), Err(CoreError::Overflow { .. })));
    // Totals that break the symmetry identities (a lost or doubled result) are refused.
    let mut tally = Tally::new(8).unwrap();
    tally.add(2, &JobCounts { solutions: 1, ..JobCounts::default() }).unwrap();
    assert!(matches!(tally.totals(), Err(CoreError::Inconsistent { .. })));
}

#[test]
fn every_board_size_up_to_32_has_a_job_list_or_a_clear_error() {
    // Large boards only build their constellations here (splitting them is the slow part).
    for n in 1..=32u32 {
        let list = job_list(n, &SplitParams::with_target(1)).unwrap();
        assert!(list.jobs.iter().all(|j| matches!(j.weight, 1 | 2 | 4 | 8)));
        assert_eq!(list.jobs.is_empty(), n == 2 || n == 3, "n={n}");
    }
}

#[test]
fn boards_28_to_32_split_into_sane_job_lists() {
    for n in 28..=32u32 {
        let list = job_list(n, &SplitParams::with_target(4096)).unwrap();
        let jobs = list.jobs.len() as u64;
        // Near the target, unless the constellations alone outnumber it (from N = 31).
        let near = (1024..=65_536).contains(&jobs);
        assert!(near || (list.depth == 0 && jobs > 4096), "n={n}: {jobs} jobs for 4096");
        assert!(list.jobs.iter().all(|j| matches!(j.weight, 2 | 4 | 8) && j.n as u32 == n));
        assert!(list.jobs.iter().all(|j| j.prefix.len() == list.depth), "n={n}");
        // Estimates order the work: positive for nearly every job, and spread out.
        let positive = list.jobs.iter().filter(|j| j.estimate > 0).count() as u64;
        assert!(positive * 10 >= jobs * 9, "n={n}: {positive} of {jobs} jobs have an estimate");
        let max = list.jobs.iter().map(|j| j.estimate).max().unwrap();
        let min = list.jobs.iter().map(|j| j.estimate).min().unwrap();
        assert!(max > min, "n={n}");
        // The weights, summed over constellations, count every border placement once: the
        // list's constellations are exactly the canonical ones.
        let mut seen = std::collections::HashSet::new();
        let constellations: Vec<_> =
            list.jobs.iter().filter(|j| seen.insert(j.constellation)).collect();
        assert!(constellations.len() <= nqueens_core::canonical_constellations(n as u8).len());
        assert!(constellations.len() * 2 > nqueens_core::canonical_constellations(n as u8).len());
    }
}

/// A job is named by its board alone: every job of a list comes back from its fixed queens (in
/// any order), and boards that are no job's are refused.
#[test]
fn jobs_are_rebuilt_from_their_queens_alone() {
    for n in [1u32, 4, 5, 8, 11] {
        let list = job_list(n, &SplitParams::default()).unwrap();
        for job in &list.jobs {
            let mut queens = job.fixed_queens();
            queens.reverse();
            let rebuilt = Job::from_board(job.n, &queens).unwrap();
            assert_eq!(rebuilt, Job { id: JobId::new(0), estimate: 0, ..job.clone() }, "N={n}");
        }
    }
    let list = job_list(11, &SplitParams::with_target(5_000)).unwrap();
    let job = list.jobs.iter().find(|j| j.prefix.len() >= 2).unwrap();
    let border = job.constellation.queens(11);
    let queens = job.fixed_queens();
    // The first searched row's queen taken away (the others are then not in the first rows), a
    // queen added, a queen off the board, one border queen taken away.
    let first = queens.iter().position(|q| !border.contains(q)).unwrap();
    let mut gap = queens.clone();
    gap.remove(first);
    let mut extra = queens.clone();
    extra.push((5, 5));
    let mut off = queens.clone();
    off.push((11, 0));
    let no_top: Vec<_> = queens.iter().copied().filter(|&(r, _)| r != 0).collect();
    for bad in [gap, extra, off, no_top] {
        assert!(Job::from_board(11, &bad).is_err(), "{bad:?}");
    }
}
