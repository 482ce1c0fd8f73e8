//! Trust: which parties are believed, and how far. A party is a *group*: every identity of one
//! per-host credential, or one identity under the shared token (which cannot tell its holders
//! apart). Identities of one group never confirm each other.
//!
//! Trust is earned only from evidence the coordinator has itself: a group on probation becomes
//! trusted after [`SchedulerConfig::probation_results`](crate::SchedulerConfig) of its answers
//! were verified, by the coordinator's own answer (a spot check, or a re-solve of one of its
//! answers on the referee) or by an agreeing answer from another group. Nobody is believed alone
//! because nobody else happens to be around. A failed check untrusts the worker, and every
//! identity of its credential with it; everything they counted is solved again.
//!
//! Solver errors are recorded here too: a job fails only when the coordinator's own attempt fails
//! as well, or trusted workers of two per-host credentials failed it.

use crate::ids::{JobId, LeaseId, WorkerId};
use crate::jobs::Standing;
use crate::outcome::{Change, Verdict};
use crate::Scheduler;
use nqueens_core::JobCounts;
use std::collections::{HashMap, HashSet};

/// Group ids at and above this are per-host credentials (the coordinator numbers them so); below
/// it a group is one worker identity (its own id).
pub const CREDENTIAL_GROUPS: u64 = 1 << 62;

/// The trust the scheduler puts in each worker and group.
#[derive(Debug, Default)]
pub(crate) struct Trust {
    /// Workers caught giving a wrong answer (or flooding errors). Their opinions no longer count
    /// as agreement or disagreement, and they get no leases.
    pub(crate) untrusted: HashSet<WorkerId>,
    /// Per group: its answers verified by the coordinator or by another group.
    pub(crate) verified: HashMap<u64, u32>,
    /// Per group: its answers sent to the coordinator for checking and not answered yet.
    pub(crate) checks_asked: HashMap<u64, u32>,
    /// A group with fewer verified answers than this is on probation (0: nobody is).
    pub(crate) probation: u32,
    /// Per worker: its group (credential). A worker without an entry is a group of its own.
    pub(crate) groups: HashMap<WorkerId, u64>,
    /// Per worker: solver errors reported, and answers given.
    pub(crate) error_record: HashMap<WorkerId, (u32, u32)>,
}

impl Trust {
    /// Nobody untrusted yet; `probation` verified answers take a group off probation.
    pub(crate) fn new(probation: u32, groups: HashMap<WorkerId, u64>) -> Self {
        Trust { probation, groups, ..Trust::default() }
    }
    /// The group of `worker_id` (itself, where none was set).
    pub(crate) fn group(&self, worker_id: WorkerId) -> u64 {
        self.groups.get(&worker_id).copied().unwrap_or(worker_id.get())
    }
    /// One more answer of `worker_id`'s group was verified.
    pub(crate) fn agreed(&mut self, worker_id: WorkerId) {
        let group = self.group(worker_id);
        let verified = self.verified.entry(group).or_default();
        *verified += 1;
        if *verified == self.probation {
            tracing::info!(%worker_id, group, verified = *verified, "credential trusted: enough of its answers were verified (by the coordinator or another credential); its answers now count alone, re-checked at random");
        }
    }
    /// Whether the group `group` has yet to earn trust.
    pub(crate) fn group_on_probation(&self, group: u64) -> bool {
        self.verified.get(&group).copied().unwrap_or(0) < self.probation
    }
    /// Whether `group`'s checks asked and passed still fall short of probation: another of its
    /// answers should go to the coordinator.
    pub(crate) fn wants_check(&self, group: u64) -> bool {
        let verified = self.verified.get(&group).copied().unwrap_or(0);
        let asked = self.checks_asked.get(&group).copied().unwrap_or(0);
        asked + verified < self.probation
    }
    /// One of `group`'s answers went to the coordinator for checking.
    pub(crate) fn check_asked(&mut self, group: u64) {
        *self.checks_asked.entry(group).or_default() += 1;
    }
    /// Whether every known worker of `group` is untrusted (a group without known workers: whether
    /// the worker of that id is).
    pub(crate) fn group_untrusted(&self, group: u64) -> bool {
        let mut members = self.groups.iter().filter(|(_, g)| **g == group).peekable();
        if members.peek().is_none() {
            return self.untrusted.contains(&WorkerId::new(group));
        }
        members.all(|(w, _)| self.untrusted.contains(w))
    }
    /// The workers known to be in `group` (`worker_id` included).
    pub(crate) fn members(&self, group: u64, worker_id: WorkerId) -> Vec<WorkerId> {
        let mut members: Vec<WorkerId> = self
            .groups
            .iter()
            .filter(|(_, g)| **g == group)
            .map(|(w, _)| *w)
            .chain([worker_id])
            .collect();
        members.sort_unstable();
        members.dedup();
        members
    }
}

impl Scheduler {
    /// Whether `worker_id` was caught: nothing it sends is taken.
    pub fn is_untrusted(&self, worker_id: WorkerId) -> bool {
        self.trust.untrusted.contains(&worker_id)
    }
    /// How many workers are untrusted.
    pub fn untrusted_count(&self) -> u64 {
        self.trust.untrusted.len() as u64
    }
    /// Whether `worker_id`'s group has yet to earn trust: its answers count only once verified.
    pub fn on_probation(&self, worker_id: WorkerId) -> bool {
        self.trust.group_on_probation(self.group(worker_id))
    }
    /// `worker_id`'s standing in words, as status shows it: `untrusted`, `probation` or
    /// `trusted`.
    pub fn standing_of(&self, worker_id: WorkerId) -> &'static str {
        if self.is_untrusted(worker_id) {
            "untrusted"
        } else if self.on_probation(worker_id) {
            "probation"
        } else {
            "trusted"
        }
    }
    /// How many of the answers of `worker_id`'s group were verified so far.
    pub fn verified_answers(&self, worker_id: WorkerId) -> u32 {
        self.trust.verified.get(&self.group(worker_id)).copied().unwrap_or(0)
    }
    /// Puts `worker_id` in `group`: workers of one group (one credential) never confirm each
    /// other's answers, share its trust and share its cap on held jobs.
    pub fn set_group(&mut self, worker_id: WorkerId, group: u64) {
        self.trust.groups.insert(worker_id, group);
    }
    /// The group of `worker_id` (itself, where none was set).
    pub fn group(&self, worker_id: WorkerId) -> u64 {
        self.trust.group(worker_id)
    }

    /// `worker_id` and every other trusted worker that gave `agreed` for the job are credited,
    /// once per group, when at least two groups agree.
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
        agreeing.sort_unstable_by_key(|&w| (self.group(w), w));
        agreeing.dedup_by_key(|w| self.group(*w));
        if agreeing.len() < 2 {
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

    /// Untrusts `worker_id` for the reason `detail` (found on `job_id`), and with it every other
    /// identity of its per-host credential (one party): they are refused from now on, their
    /// counted results are un-counted and solved again by others, their leases taken back, and
    /// the credential is on probation again for any identity it registers later.
    pub(crate) fn untrust(
        &mut self,
        worker_id: WorkerId,
        job_id: JobId,
        detail: String,
        changes: &mut Vec<Change>,
    ) {
        let group = self.group(worker_id);
        let members = if group >= CREDENTIAL_GROUPS {
            self.trust.members(group, worker_id)
        } else {
            vec![worker_id]
        };
        self.trust.verified.remove(&group);
        for member in members {
            let detail = if member == worker_id {
                detail.clone()
            } else {
                format!("same credential as worker {worker_id}, which {detail}")
            };
            self.untrust_one(member, job_id, detail, changes);
        }
    }

    fn untrust_one(
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

    /// A solver error from `worker_id`. From a group on probation it only gives the job back.
    /// From a trusted one it counts towards failing the job, and asks the coordinator to solve
    /// the job itself: the job fails when the coordinator's attempt fails too
    /// ([`Scheduler::coordinator_failed`]), or after `max_errors` errors from at least
    /// `min_error_groups` per-host credentials (identities under the shared token cannot tell
    /// each other apart, so they never fail a job alone). A worker whose errors pass
    /// `error_untrust_min` and a quarter of its answers is untrusted.
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
        if group >= CREDENTIAL_GROUPS && !job.error_groups.contains(&group) {
            job.error_groups.push(group);
        }
        let failed = job.errors >= self.config.max_errors
            && job.error_groups.len() >= self.config.min_error_groups;
        if failed {
            self.jobs.set_state(job_id, Standing::Failed, changes);
        } else {
            if held_here {
                self.jobs.set_state(job_id, Standing::Pending, changes);
            }
            if self.config.coordinator_checks {
                self.refer(job_id);
            }
        }
        Verdict::ErrorRecorded
    }

    /// The coordinator's own attempt at `job_id` failed too: a job that trusted workers reported
    /// errors for is failed (a person looks at it; `requeue` puts it back).
    pub fn coordinator_failed(&mut self, job_id: JobId, changes: &mut Vec<Change>) {
        let Some(job) = self.jobs.get(job_id) else { return };
        if job.errors > 0 && matches!(job.standing(), Standing::Pending | Standing::Held) {
            self.jobs.set_state(job_id, Standing::Failed, changes);
        }
        self.checked("coordinator_failed");
    }
}

#[cfg(test)]
impl Scheduler {
    /// Puts every group on probation until `results` of its answers were verified (tests change
    /// it mid-run; the coordinator sets it in the config).
    pub(crate) fn set_probation(&mut self, results: u32) {
        self.config.probation_results = results;
        self.trust.probation = results;
    }
}
