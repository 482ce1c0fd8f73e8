//! The host side of a batch: jobs split into work items, the per-job table the kernel reads, and
//! the merge of the items' counts back into per-job counts.

use crate::GpuError;
use nqueens_core::{Job, JobCounts, SearchPlan};
use rayon::prelude::*;
use std::ops::Range;

/// Words per job in the table: rows, shifts (low, high), padding, then 32 blocked masks.
pub(crate) const JOB_WORDS: usize = 36;
/// Words per item: job index in the table, start depth, cols, down_right, down_left.
pub(crate) const ITEM_WORDS: usize = 5;

/// One searched state after the split.
#[derive(Clone, Copy)]
struct Masks {
    depth: usize,
    cols: u32,
    right: u32,
    left: u32,
}

impl Masks {
    fn free(&self, plan: &SearchPlan) -> u32 {
        !(self.cols | self.right | self.left | plan.blocked[self.depth])
    }

    fn place(&self, plan: &SearchPlan, bit: u32) -> Masks {
        let s = plan.shift[self.depth];
        Masks {
            depth: self.depth + 1,
            cols: self.cols | bit,
            right: (self.right | bit) << s,
            left: (self.left | bit) >> s,
        }
    }
}

/// Every state `extra` rows below `at` (fewer where the board runs out), as `Job::split` expands
/// them, lowest column first; `placed` counts the queens placed on the way.
fn expand(plan: &SearchPlan, at: Masks, extra: usize, out: &mut Vec<Masks>, placed: &mut u64) {
    if extra == 0 || at.depth == plan.rows {
        out.push(at);
        return;
    }
    let mut free = at.free(plan);
    while free != 0 {
        let bit = free & free.wrapping_neg();
        free ^= bit;
        *placed += 1;
        expand(plan, at.place(plan, bit), extra - 1, out, placed);
    }
}

/// Partial placements `extra` rows below `at`: the cost estimate that orders items (the measure of
/// `Job::estimate`).
fn partial(plan: &SearchPlan, at: Masks, extra: usize) -> u64 {
    if extra == 0 || at.depth == plan.rows {
        return 1;
    }
    let mut free = at.free(plan);
    let mut total = 0;
    while free != 0 {
        let bit = free & free.wrapping_neg();
        free ^= bit;
        total += partial(plan, at.place(plan, bit), extra - 1);
    }
    total
}

/// How the jobs of one call are cut into batches of items.
pub(crate) struct Planner<'a> {
    jobs: &'a [Job],
    plans: Vec<SearchPlan>,
    /// Rows added to every job.
    extra: usize,
    /// Jobs per batch.
    per_batch: usize,
}

impl<'a> Planner<'a> {
    /// Reads every job's plan (an invalid job is an error before anything runs) and picks the
    /// split: the fewest extra rows (2 to 4) that give about `target` items in all, and as many
    /// jobs per batch as keep a batch under `max_items` items.
    pub fn new(jobs: &'a [Job], target: usize, max_items: usize) -> Result<Self, GpuError> {
        let plans: Vec<SearchPlan> =
            jobs.par_iter().map(|j| j.search_plan()).collect::<Result<_, _>>()?;
        for plan in &plans {
            // Two bits per row in the kernel's shift word; the constellations never need more.
            if plan.rows > 32 || plan.shift.iter().any(|&s| s > 3) {
                return Err(GpuError::Config {
                    reason: "a job's row shifts do not fit the kernel's 2-bit fields".into(),
                });
            }
        }
        // Items per job, from a sample spread over the list.
        let step = (plans.len() / 64).max(1);
        let sample: Vec<&SearchPlan> = plans.iter().step_by(step).collect();
        let per_job = |extra: usize| -> f64 {
            let total: usize = sample
                .par_iter()
                .map(|p| {
                    let mut out = Vec::new();
                    expand(p, start(p), extra, &mut out, &mut 0);
                    out.len()
                })
                .sum();
            total as f64 / sample.len().max(1) as f64
        };
        let mut extra = 2;
        let mut items = per_job(extra);
        while extra < 4 && items * (jobs.len() as f64) < target as f64 {
            extra += 1;
            items = per_job(extra);
        }
        let per_batch = ((max_items as f64 / items.max(1.0)) as usize).clamp(1, jobs.len().max(1));
        Ok(Planner { jobs, plans, extra, per_batch })
    }

    /// The job ranges of the batches, in order.
    pub fn ranges(&self) -> impl Iterator<Item = Range<usize>> + '_ {
        (0..self.jobs.len())
            .step_by(self.per_batch)
            .map(|start| start..(start + self.per_batch).min(self.jobs.len()))
    }

    /// The batch of the jobs in `range`: their table, their items longest first, and what the
    /// host counted itself (states that the split took to the last rows, and the symmetric counts).
    pub fn batch(&self, range: Range<usize>) -> Result<Batch, GpuError> {
        struct Split {
            items: Vec<(u64, Masks)>,
            host: JobCounts,
        }
        let splits: Vec<Split> = range
            .clone()
            .into_par_iter()
            .map(|j| -> Result<Split, GpuError> {
                let plan = &self.plans[j];
                let (sym180, sym90) = self.jobs[j].symmetric_counts()?;
                let mut host = JobCounts { sym180, sym90, ..JobCounts::default() };
                let mut leaves = Vec::new();
                expand(plan, start(plan), self.extra, &mut leaves, &mut host.nodes);
                let mut items = Vec::with_capacity(leaves.len());
                for m in leaves {
                    if m.depth == plan.rows {
                        host.solutions += 1;
                    } else if m.depth + 1 == plan.rows {
                        host.solutions += m.free(plan).count_ones() as u64;
                    } else {
                        items.push((partial(plan, m, 2), m));
                    }
                }
                Ok(Split { items, host })
            })
            .collect::<Result<_, _>>()?;

        let mut table = Vec::with_capacity(range.len() * JOB_WORDS);
        for plan in &self.plans[range.clone()] {
            let shifts = plan
                .shift
                .iter()
                .take(plan.rows.saturating_sub(1))
                .enumerate()
                .fold(0u64, |w, (k, &s)| w | (s as u64) << (2 * k));
            table.extend([plan.rows as u32, shifts as u32, (shifts >> 32) as u32, 0]);
            table.extend((0..32).map(|k| plan.blocked.get(k).copied().unwrap_or(!0)));
        }

        let mut order: Vec<(u64, u32, Masks)> = splits
            .iter()
            .enumerate()
            .flat_map(|(j, s)| s.items.iter().map(move |&(e, m)| (e, j as u32, m)))
            .collect();
        // Longest first; the sort is stable, so the order is the same on every run.
        order.par_sort_by_key(|&(e, _, _)| std::cmp::Reverse(e));
        let mut item_words = Vec::with_capacity(order.len() * ITEM_WORDS);
        let mut item_job = Vec::with_capacity(order.len());
        let mut maxl = 0;
        for &(_, j, m) in &order {
            item_words.extend([j, m.depth as u32, m.cols, m.right, m.left]);
            item_job.push(j);
            maxl = maxl.max(self.plans[range.start + j as usize].rows - m.depth);
        }
        Ok(Batch {
            jobs: range,
            table,
            items: order.len(),
            item_words,
            item_job,
            maxl,
            host: splits.into_iter().map(|s| s.host).collect(),
        })
    }
}

fn start(plan: &SearchPlan) -> Masks {
    Masks { depth: plan.depth, cols: plan.cols, right: plan.down_right, left: plan.down_left }
}

/// One upload to the device: some consecutive jobs and their items.
pub(crate) struct Batch {
    /// The jobs, as positions in the call's job list.
    pub jobs: Range<usize>,
    /// [`JOB_WORDS`] per job.
    pub table: Vec<u32>,
    /// Number of items.
    pub items: usize,
    /// [`ITEM_WORDS`] per item, longest first.
    pub item_words: Vec<u32>,
    /// Job (index into `jobs`) of each item.
    item_job: Vec<u32>,
    /// Most rows any item has left to search (the kernel's stack depth).
    pub maxl: usize,
    /// What the host counted per job.
    host: Vec<JobCounts>,
}

impl Batch {
    /// Adds the device's `(count, nodes)` per item and the host's counts into `results`.
    pub fn merge_into(
        &self,
        device: &[(u64, u64)],
        results: &mut [JobCounts],
    ) -> Result<(), GpuError> {
        debug_assert_eq!(device.len(), self.items);
        let mine = &mut results[self.jobs.clone()];
        for (slot, host) in mine.iter_mut().zip(&self.host) {
            slot.merge(host)?;
        }
        for (&j, &(solutions, nodes)) in self.item_job.iter().zip(device) {
            mine[j as usize].merge(&JobCounts { solutions, nodes, ..JobCounts::default() })?;
        }
        Ok(())
    }
}
