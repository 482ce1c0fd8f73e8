//! Trust: which workers are believed, and how far. Workers of one group (credential) never
//! confirm each other; a newcomer is on probation until its answers agreed with other groups'
//! often enough; a worker that loses a settled verification, fails a check or floods solver
//! errors is untrusted, and everything it counted is solved again. Solver errors are recorded
//! here too: they fail a job only when they come from several groups.

use crate::ids::{JobId, LeaseId, WorkerId};
use crate::jobs::Standing;
use crate::outcome::{Change, Verdict};
use crate::Scheduler;
use nqueens_core::JobCounts;
use std::collections::{HashMap, HashSet};

/// The trust the scheduler puts in each worker.
#[derive(Debug, Default)]
pub(crate) struct Trust {
    /// Workers that disagreed with a settled verification. Their opinions no longer count as
    /// agreement or disagreement, and they get no leases.
    pub(crate) untrusted: HashSet<WorkerId>,
    /// Per worker: the jobs on which another trusted worker gave the same answer.
    pub(crate) agreements: HashMap<WorkerId, u32>,
    /// A worker with fewer agreements than this is on probation (0: nobody is).
    pub(crate) probation: u32,
    /// Per worker: the group whose members never confirm each other (its credential). A worker
    /// without an entry is a group of its own (the shared token: see `docs/threat-model.md`).
    pub(crate) groups: HashMap<WorkerId, u64>,
    /// Per worker: solver errors reported, and answers given.
    pub(crate) error_record: HashMap<WorkerId, (u32, u32)>,
}

impl Trust {
    /// Nobody untrusted yet; `probation` agreements take a worker off probation.
    pub(crate) fn new(probation: u32, groups: HashMap<WorkerId, u64>) -> Self {
        Trust { probation, groups, ..Trust::default() }
    }
    /// The group of `worker_id` (itself, where none was set).
    pub(crate) fn group(&self, worker_id: WorkerId) -> u64 {
        self.groups.get(&worker_id).copied().unwrap_or(worker_id.get())
    }
    /// `worker_id` agreed with another group once more.
    pub(crate) fn agreed(&mut self, worker_id: WorkerId) {
        *self.agreements.entry(worker_id).or_default() += 1;
    }
}

impl Scheduler {
    /// Whether `worker_id` lost a verification or a check: nothing it sends is taken.
    pub fn is_untrusted(&self, worker_id: WorkerId) -> bool {
        self.trust.untrusted.contains(&worker_id)
    }
    /// How many workers are untrusted.
    pub fn untrusted_count(&self) -> u64 {
        self.trust.untrusted.len() as u64
    }
    /// Whether `worker_id` has yet to agree with others often enough to be believed alone.
    pub fn on_probation(&self, worker_id: WorkerId) -> bool {
        self.trust.agreements.get(&worker_id).copied().unwrap_or(0) < self.trust.probation
    }
    /// Puts `worker_id` in `group`: workers of one group (one credential) never confirm each
    /// other's answers, nor take each other off probation.
    pub fn set_group(&mut self, worker_id: WorkerId, group: u64) {
        self.trust.groups.insert(worker_id, group);
    }
    /// The group of `worker_id` (itself, where none was set).
    pub fn group(&self, worker_id: WorkerId) -> u64 {
        self.trust.group(worker_id)
    }

    /// `worker_id` and every other trusted worker that gave `agreed` for the job agreed once more.
    pub(crate) fn credit_agreement(
        &mut self,
        job_id: JobId,
        worker_id: WorkerId,
        agreed: JobCounts,
    ) {
        let mut agreeing: Vec<WorkerId> = self
            .jobs
            .entry(job_id)
            .opinions
            .iter()
            .filter(|(w, c)| c.same_answer(&agreed) && !self.is_untrusted(*w))
            .map(|(w, _)| *w)
            .chain([worker_id])
            .collect();
        agreeing.sort_unstable();
        agreeing.dedup();
        let mut groups: Vec<u64> = agreeing.iter().map(|&w| self.group(w)).collect();
        groups.sort_unstable();
        groups.dedup();
        if groups.len() < 2 {
            return; // a worker (or a credential) confirming itself proves nothing
        }
        for w in agreeing {
            self.trust.agreed(w);
        }
    }

    /// A verification settled on `agreed`: every worker that reported something else is no longer
    /// trusted, so its counted results elsewhere are in doubt too. They are un-counted and solved
    /// again by others; its active leases are taken back.
    ///
    /// A worker that also gave the agreed answer (`settled_by` just did) is not a dissenter: it
    /// was right this time, and only repeated answers tell a faulty solver from a passing fault.
    pub(crate) fn untrust_dissenters(
        &mut self,
        job_id: JobId,
        settled_by: WorkerId,
        agreed: JobCounts,
        changes: &mut Vec<Change>,
    ) {
        let opinions = &self.jobs.entry(job_id).opinions;
        let gave_agreed = |w: WorkerId| {
            w == settled_by || opinions.iter().any(|(o, c)| *o == w && c.same_answer(&agreed))
        };
        let mut dissenters: Vec<(WorkerId, JobCounts)> = opinions
            .iter()
            .filter(|(w, c)| !c.same_answer(&agreed) && !gave_agreed(*w) && !self.is_untrusted(*w))
            .copied()
            .collect();
        dissenters.sort_by_key(|(w, _)| *w);
        dissenters.dedup_by_key(|(w, _)| *w);
        for (worker_id, wrong) in dissenters {
            let detail = format!("reported {wrong:?}, agreed {agreed:?}");
            self.untrust(worker_id, job_id, detail, changes);
        }
    }

    /// Untrusts `worker_id` for the reason `detail` (found on `job_id`): it is refused from now
    /// on, its counted results are un-counted and solved again by others, its leases taken back.
    pub(crate) fn untrust(
        &mut self,
        worker_id: WorkerId,
        job_id: JobId,
        detail: String,
        changes: &mut Vec<Change>,
    ) {
        if !self.trust.untrusted.insert(worker_id) {
            return;
        }
        let mut requeued = 0;
        for id in self.jobs.ids() {
            let job = self.jobs.entry_mut(id);
            match (job.counted, job.standing()) {
                (Some((w, counts)), standing) if w == worker_id => {
                    changes.push(Change::Uncount { job_id: id });
                    job.counted = None;
                    // Kept as an (ignored) opinion, the same as a reload sees the un-counted row.
                    job.opinions.push((w, counts));
                    if standing == Standing::Done {
                        self.jobs.set_state(id, Standing::Pending, changes);
                    }
                    requeued += 1;
                }
                (_, Standing::Leased { worker_id: w, .. }) if w == worker_id => {
                    self.jobs.set_state(id, Standing::Pending, changes)
                }
                _ => {}
            }
        }
        self.leases.end_all_of(worker_id);
        changes.push(Change::Untrust { worker_id, job_id, detail, requeued });
    }

    /// A solver error from `worker_id`. From a worker on probation it only gives the job back;
    /// otherwise it counts towards failing the job, which takes `max_errors` errors from at
    /// least `min_error_groups` groups. A worker whose errors pass `error_untrust_min` and a
    /// quarter of its answers is untrusted: one participant cannot fail a run's jobs.
    pub(crate) fn record_error(
        &mut self,
        worker_id: WorkerId,
        lease_id: LeaseId,
        job_id: JobId,
        changes: &mut Vec<Change>,
    ) -> Verdict {
        let job = self.jobs.entry(job_id);
        if job.standing() == Standing::Done {
            return Verdict::Duplicate;
        }
        let held_here = job.held_by(lease_id, worker_id);
        let record = self.trust.error_record.entry(worker_id).or_default();
        record.0 += 1;
        let (errors, answers) = *record;
        if errors >= self.config.error_untrust_min && errors * 4 > errors + answers {
            let detail = format!("{errors} solver errors against {answers} answers");
            self.untrust(worker_id, job_id, detail, changes);
            return Verdict::ErrorRecorded;
        }
        if self.on_probation(worker_id) {
            if held_here {
                self.jobs.set_state(job_id, Standing::Pending, changes);
            }
            return Verdict::ErrorRecorded;
        }
        let group = self.group(worker_id);
        let job = self.jobs.entry_mut(job_id);
        job.errors += 1;
        if !job.error_groups.contains(&group) {
            job.error_groups.push(group);
        }
        let failed = job.errors >= self.config.max_errors
            && job.error_groups.len() >= self.config.min_error_groups;
        if failed {
            self.jobs.set_state(job_id, Standing::Failed, changes);
        } else if held_here {
            self.jobs.set_state(job_id, Standing::Pending, changes);
        }
        Verdict::ErrorRecorded
    }
}

#[cfg(test)]
impl Scheduler {
    /// Puts every worker on probation until `results` of its answers agreed with another
    /// worker's (tests change it mid-run; the coordinator sets it in the config).
    pub(crate) fn set_probation(&mut self, results: u32) {
        self.config.probation_results = results;
        self.trust.probation = results;
    }
}
