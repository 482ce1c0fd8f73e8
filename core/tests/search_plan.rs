//! `Job::search_plan` and `Job::symmetric_counts` describe exactly what `Job::solve` counts.

use nqueens_core::{job_list, Job, SearchPlan, SplitParams};

/// The plain depth-first search that the plan's documentation describes.
fn count(plan: &SearchPlan, depth: usize, cols: u32, right: u32, left: u32) -> u64 {
    if depth == plan.rows {
        return 1;
    }
    let mut free = !(cols | right | left | plan.blocked[depth]);
    let s = plan.shift[depth];
    let mut total = 0;
    while free != 0 {
        let b = free & free.wrapping_neg();
        free ^= b;
        total += count(plan, depth + 1, cols | b, (right | b) << s, (left | b) >> s);
    }
    total
}

fn check(job: &Job) {
    let plan = job.search_plan().unwrap();
    assert_eq!(plan.depth, job.prefix.len());
    assert!(plan.shift.iter().take(plan.rows.saturating_sub(1)).all(|&s| (1..=3).contains(&s)));
    let want = job.solve().unwrap();
    let got = count(&plan, plan.depth, plan.cols, plan.down_right, plan.down_left);
    assert_eq!(got, want.solutions, "job {job:?}");
    assert_eq!(job.symmetric_counts().unwrap(), (want.sym180, want.sym90), "job {job:?}");
}

#[test]
fn plain_search_over_the_plan_counts_what_solve_counts() {
    for n in 4..=12 {
        for params in [SplitParams::default(), SplitParams::with_target(5_000)] {
            for job in &job_list(n, &params).unwrap().jobs {
                check(job);
            }
        }
    }
}

#[test]
fn an_invalid_job_has_no_plan() {
    let mut job = job_list(8, &SplitParams::default()).unwrap().jobs[0].clone();
    job.prefix = vec![0; 40];
    assert!(job.search_plan().is_err());
    assert!(job.symmetric_counts().is_err());
}
