//! Trust: which parties are believed, and how far. A *credential* is a token: a per-host token
//! (`token add NAME`), the shared `--token`, or none at all on loopback. A *party* is who is
//! trusted as one: every identity of one per-host credential together, or one identity under the
//! shared token or none (which cannot tell their holders apart). Identities of one party never
//! confirm each other, and answers count as *independent* only from different credentials (or the
//! coordinator): agreement among identities of the shared token is one party's word (see
//! `docs/threat-model.md`).
//!
//! Trust is earned only from evidence the coordinator has itself: a party on probation becomes
//! trusted after [`SchedulerConfig::probation_results`](crate::SchedulerConfig) of its answers
//! were verified, by the coordinator's own answer (a spot check, or a re-solve of one of its
//! answers on the referee) or by an agreeing answer from another party. Nobody is believed alone
//! because nobody else happens to be around. A failed check untrusts the worker, and every
//! identity of its credential with it; everything they counted is solved again.
//!
//! Solver errors are recorded here too: a job fails only when the coordinator's own attempt fails
//! as well, or trusted workers of two per-host credentials failed it.

use crate::credential::{party_of, PER_HOST_CREDENTIALS};
use crate::ids::{JobId, LeaseId, WorkerId};
use crate::jobs::Standing;
use crate::outcome::{Change, Verdict};
use crate::Scheduler;
use std::collections::{HashMap, HashSet};

/// The trust the scheduler puts in each worker and party.
#[derive(Debug, Default)]
pub(crate) struct Trust {
    /// Workers caught giving a wrong answer (or flooding errors). Their opinions no longer count
    /// as agreement or disagreement, and they get no leases.
    pub(crate) untrusted: HashSet<WorkerId>,
    /// Per party: its answers verified by the coordinator or by another party.
    pub(crate) verified: HashMap<u64, u32>,
    /// A party with fewer verified answers than this is on probation (0: nobody is).
    pub(crate) probation: u32,
    /// Per worker: its credential. A worker without an entry is a credential of its own.
    pub(crate) credentials: HashMap<WorkerId, u64>,
    /// Per worker: solver errors reported, and answers given.
    pub(crate) error_record: HashMap<WorkerId, (u32, u32)>,
}

impl Trust {
    /// Nobody untrusted yet; `probation` verified answers take a party off probation.
    pub(crate) fn new(probation: u32, credentials: HashMap<WorkerId, u64>) -> Self {
        Trust { probation, credentials, ..Trust::default() }
    }
    /// The credential of `worker_id` (its own id, where none was set).
    pub(crate) fn credential(&self, worker_id: WorkerId) -> u64 {
        self.credentials.get(&worker_id).copied().unwrap_or(worker_id.get())
    }
    /// The party (party) of `worker_id`: its per-host credential, else itself.
    pub(crate) fn party(&self, worker_id: WorkerId) -> u64 {
        party_of(worker_id, self.credential(worker_id))
    }
    /// One more answer of `party` (given by `worker_id`) was verified.
    pub(crate) fn agreed_party(&mut self, party: u64, worker_id: WorkerId) {
        let verified = self.verified.entry(party).or_default();
        *verified += 1;
        if *verified == self.probation {
            tracing::info!(%worker_id, party, verified = *verified, "credential trusted: enough of its answers were verified (by the coordinator or another credential); its answers now count alone, re-checked at random");
        }
    }
    /// Whether the party `party` has yet to earn trust.
    pub(crate) fn party_on_probation(&self, party: u64) -> bool {
        self.verified.get(&party).copied().unwrap_or(0) < self.probation
    }
    /// The parties every known worker of which is untrusted (a worker's own party: whether it
    /// is), in one walk over the workers.
    pub(crate) fn untrusted_parties(&self) -> HashSet<u64> {
        let mut trusted_member = HashSet::new();
        let mut parties: HashSet<u64> = self.untrusted.iter().map(|w| self.party(*w)).collect();
        for (w, &c) in &self.credentials {
            if c >= PER_HOST_CREDENTIALS && !self.untrusted.contains(w) {
                trusted_member.insert(c);
            }
        }
        parties.retain(|g| !trusted_member.contains(g));
        parties
    }
    /// The workers known to be in `party` (`worker_id` included): its registered identities and
    /// `answered`, those that gave answers under it (forgotten ones too).
    pub(crate) fn members(
        &self,
        party: u64,
        worker_id: WorkerId,
        answered: impl IntoIterator<Item = WorkerId>,
    ) -> Vec<WorkerId> {
        if party < PER_HOST_CREDENTIALS {
            return vec![worker_id];
        }
        let mut members: Vec<WorkerId> = self
            .credentials
            .iter()
            .filter(|(_, c)| **c == party)
            .map(|(w, _)| *w)
            .chain(answered)
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
    /// Whether `worker_id`'s party has yet to earn trust: its answers count only once verified.
    pub fn on_probation(&self, worker_id: WorkerId) -> bool {
        self.trust.party_on_probation(self.party(worker_id))
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
    /// Records the credential `worker_id` registered under (see [`PER_HOST_CREDENTIALS`],
    /// [`crate::SHARED_CREDENTIAL`], [`crate::OPEN_CREDENTIAL`]): identities of one per-host credential are one
    /// party (they never confirm each other, share its trust and its cap on held jobs); answers
    /// are independent evidence only from different credentials.
    pub fn set_credential(&mut self, worker_id: WorkerId, credential: u64) {
        let before = self.party(worker_id);
        self.trust.credentials.insert(worker_id, credential);
        let (after, held) = (self.party(worker_id), self.jobs.leased_by(worker_id));
        if before != after && held > 0 {
            // Its jobs are held by its new party from now on.
            let old = self.party_holds.entry(before).or_default();
            *old = old.saturating_sub(held);
            *self.party_holds.entry(after).or_default() += held;
        }
    }
    /// The party (party) of `worker_id`: its per-host credential, else itself.
    pub fn party(&self, worker_id: WorkerId) -> u64 {
        self.trust.party(worker_id)
    }
    /// The credential of `worker_id` (its own id where none was recorded).
    pub fn credential(&self, worker_id: WorkerId) -> u64 {
        self.trust.credential(worker_id)
    }
    /// Untrusts `worker_id` (a registered identity) for the reason `detail` (found on `job_id`):
    /// see [`Scheduler::untrust_party`], for its party now.
    pub(crate) fn untrust(&mut self, worker_id: WorkerId, job_id: JobId, detail: String) {
        self.untrust_party(self.party(worker_id), worker_id, job_id, detail);
        self.untrust_found();
    }

    /// Untrusts `worker_id` of `party`, and with it every other identity of its per-host
    /// credential (one party), those forgotten since they answered included: they are refused
    /// from now on, their leases are taken back, and every job they answered is ruled again
    /// without their answers (see [`Scheduler::settle`]): a job that stood on them is counted
    /// again from what is left, or solved again by others. The credential is on probation
    /// again for any identity it registers later (its verified answers were its untrusted
    /// identities').
    pub(crate) fn untrust_party(
        &mut self,
        party: u64,
        worker_id: WorkerId,
        job_id: JobId,
        detail: String,
    ) {
        let answered =
            if party >= PER_HOST_CREDENTIALS { self.identities_of(party) } else { vec![] };
        let members = self.trust.members(party, worker_id, answered);
        self.trust.verified.remove(&party);
        let members: Vec<WorkerId> =
            members.into_iter().filter(|m| self.trust.untrusted.insert(*m)).collect();
        if members.is_empty() {
            return;
        }
        let mut to_rule = Vec::new();
        for id in self.jobs.ids() {
            let job = self.jobs.entry(id);
            if let Standing::Leased { worker_id: w, .. } = job.standing() {
                if members.contains(&w) {
                    self.move_job(id, Standing::Pending);
                }
            }
            let job = self.jobs.entry(id);
            if job.counted.iter().chain(&job.opinions).any(|a| members.contains(&a.worker_id)) {
                to_rule.push(id);
            }
        }
        let mut requeued = 0;
        for id in to_rule {
            let was_counted = self.jobs.entry(id).counted.is_some();
            self.rule_again(id);
            if was_counted && self.jobs.entry(id).counted.is_none() {
                requeued += 1;
            }
        }
        for member in members {
            self.leases.end_all_of(member);
            let (detail, requeued) = if member == worker_id {
                (detail.clone(), requeued)
            } else {
                (format!("same credential as worker {worker_id}, which {detail}"), 0)
            };
            self.outbox.push(Change::Untrust { worker_id: member, job_id, detail, requeued });
        }
    }

    /// The identities that gave answers under the credential `credential`.
    fn identities_of(&self, credential: u64) -> Vec<WorkerId> {
        let mut ids: Vec<WorkerId> = self
            .jobs
            .ids()
            .flat_map(|id| {
                let job = self.jobs.entry(id);
                job.counted.iter().chain(&job.opinions).copied().collect::<Vec<_>>()
            })
            .filter(|a| a.credential == credential && !a.by_coordinator())
            .map(|a| a.worker_id)
            .collect();
        ids.sort_unstable();
        ids.dedup();
        ids
    }

    /// A solver error from `worker_id`. From a party on probation it only gives the job back.
    /// From a trusted one it counts towards failing the job, and asks the coordinator to solve
    /// the job itself: the job fails when the coordinator's attempt fails too
    /// ([`Scheduler::coordinator_failed`]), or after `max_errors` errors from at least
    /// `min_error_parties` per-host credentials (identities under the shared token cannot tell
    /// each other apart, so they never fail a job alone). A worker whose errors pass
    /// `error_untrust_min` and a quarter of its answers is untrusted.
    pub(crate) fn record_error(
        &mut self,
        worker_id: WorkerId,
        lease_id: LeaseId,
        job_id: JobId,
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
            self.untrust(worker_id, job_id, detail);
            return Verdict::ErrorRecorded;
        }
        if self.on_probation(worker_id) {
            if held_here {
                self.move_job(job_id, Standing::Pending);
            }
            return Verdict::ErrorRecorded;
        }
        let party = self.party(worker_id);
        let job = self.jobs.entry_mut(job_id);
        job.errors += 1;
        if party >= PER_HOST_CREDENTIALS && !job.error_parties.contains(&party) {
            job.error_parties.push(party);
        }
        let failed = job.errors >= self.config.max_errors
            && job.error_parties.len() >= self.config.min_error_parties;
        if failed {
            self.move_job(job_id, Standing::Failed);
        } else {
            if held_here {
                self.move_job(job_id, Standing::Pending);
            }
            self.refer(job_id);
        }
        Verdict::ErrorRecorded
    }

    /// The coordinator's own attempt at `job_id` failed too: a job that trusted workers reported
    /// errors for is failed (a person looks at it; `requeue` puts it back).
    pub fn coordinator_failed(&mut self, job_id: JobId) {
        self.checks.awaiting_ruling.remove(&job_id);
        self.checks.refereed.remove(&job_id);
        let Some(job) = self.jobs.get(job_id) else { return };
        if job.errors > 0 && matches!(job.standing(), Standing::Pending | Standing::Held) {
            self.move_job(job_id, Standing::Failed);
        }
        self.checked("coordinator_failed");
    }
}
