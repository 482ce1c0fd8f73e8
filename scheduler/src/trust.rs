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

use crate::answer::{party_of, Answer};
use crate::evidence::{basis, Basis};
use crate::ids::{JobId, LeaseId, WorkerId, COORDINATOR};
use crate::jobs::Standing;
use crate::outcome::{Change, Verdict};
use crate::state::ResultKind;
use crate::Scheduler;
use nqueens_core::JobCounts;
use std::collections::{HashMap, HashSet};

/// Credential numbers at and above this are per-host credentials (the coordinator numbers them
/// so): all identities of one are one party. Below it, a worker is a party of its own.
pub const PER_HOST_CREDENTIALS: u64 = 1 << 62;
/// The credential number of the shared `--token`: each of its identities is a party of its own,
/// but they are one credential, so they never give each other independent evidence.
pub const SHARED_CREDENTIAL: u64 = PER_HOST_CREDENTIALS - 1;
/// The credential number of calls without any token (a loopback coordinator without one).
pub const OPEN_CREDENTIAL: u64 = PER_HOST_CREDENTIALS - 2;

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
    /// One more answer of `worker_id`'s party was verified.
    pub(crate) fn agreed(&mut self, worker_id: WorkerId) {
        self.agreed_party(self.party(worker_id), worker_id);
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
    /// [`SHARED_CREDENTIAL`], [`OPEN_CREDENTIAL`]): identities of one per-host credential are one
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
    /// What an answer `worker_id` gave now would be (no counts): its credential as it stands.
    pub(crate) fn live_answer(&self, worker_id: WorkerId) -> Answer {
        let counts = JobCounts { solutions: 0, sym180: 0, sym90: 0, nodes: 0 };
        Answer { worker_id, credential: self.credential(worker_id), counts, late: false }
    }

    /// The party of every trusted answer to the job that agrees with `given` (the answer that
    /// just counted) is credited, once per party, when at least two parties agree.
    pub(crate) fn credit_agreement(&mut self, job_id: JobId, given: &Answer) {
        let mut agreeing: Vec<(u64, WorkerId)> = self
            .jobs
            .entry(job_id)
            .opinions
            .iter()
            .filter(|o| o.agrees(&given.counts) && !self.is_untrusted(o.worker_id))
            .chain([given])
            .filter(|o| !o.by_coordinator())
            .map(|o| (o.party(), o.worker_id))
            .collect();
        agreeing.sort_unstable();
        agreeing.dedup_by_key(|(party, _)| *party);
        if agreeing.len() < 2 {
            return; // a worker (or a credential) confirming itself proves nothing
        }
        for (party, w) in agreeing {
            self.trust.agreed_party(party, w);
        }
    }

    /// A verification settled on `settled`: every worker that reported something else is no
    /// longer trusted, so its counted results elsewhere are in doubt too. They are un-counted
    /// and solved again by others; its active leases are taken back. Where the agreement is not
    /// `independent` (identities of one credential), only that credential's dissenters are:
    /// one credential's word never frames another.
    ///
    /// A worker that also gave the agreed answer (`settled` may be its) is not a dissenter: it
    /// was right this time, and only repeated answers tell a faulty solver from a passing fault.
    pub(crate) fn untrust_dissenters(
        &mut self,
        job_id: JobId,
        settled: &Answer,
        independent: bool,
    ) {
        let opinions = &self.jobs.entry(job_id).opinions;
        let gave_agreed = |w: WorkerId| {
            w == settled.worker_id
                || opinions.iter().any(|o| o.worker_id == w && o.agrees(&settled.counts))
        };
        let mut dissenters: Vec<Answer> = opinions
            .iter()
            .filter(|o| {
                !o.agrees(&settled.counts)
                    && !o.by_coordinator()
                    && (independent || o.credential == settled.credential)
                    && !gave_agreed(o.worker_id)
                    && !self.is_untrusted(o.worker_id)
            })
            .copied()
            .collect();
        dissenters.sort_by_key(|o| o.worker_id);
        dissenters.dedup_by_key(|o| o.worker_id);
        for wrong in dissenters {
            let detail = format!("reported {:?}, agreed {:?}", wrong.counts, settled.counts);
            self.untrust_party(wrong.party(), wrong.worker_id, job_id, detail);
        }
    }

    /// Untrusts `worker_id` (a registered identity) for the reason `detail` (found on `job_id`):
    /// see [`Scheduler::untrust_party`], for its party now.
    pub(crate) fn untrust(&mut self, worker_id: WorkerId, job_id: JobId, detail: String) {
        self.untrust_party(self.party(worker_id), worker_id, job_id, detail);
    }

    /// Untrusts `worker_id` of `party`, and with it every other identity of its per-host
    /// credential (one party), those forgotten since they answered included: they are refused
    /// from now on, every answer they gave stops counting (counted ones, and confirmations a
    /// count stood on: those jobs are counted again from what is left, or solved again by
    /// others), their leases are taken back, and the credential is on probation again for any
    /// identity it registers later.
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
        for member in members {
            let detail = if member == worker_id {
                detail.clone()
            } else {
                format!("same credential as worker {worker_id}, which {detail}")
            };
            self.untrust_one(member, job_id, detail);
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

    fn untrust_one(&mut self, worker_id: WorkerId, job_id: JobId, detail: String) {
        if !self.trust.untrusted.insert(worker_id) {
            return;
        }
        let mut requeued = 0;
        for id in self.jobs.ids() {
            let job = self.jobs.entry(id);
            let counted_by_it = job.counted.is_some_and(|c| c.worker_id == worker_id);
            let confirmed_by_it = job.standing() == Standing::Done
                && job.counted.is_some_and(|c| {
                    !c.by_coordinator()
                        && job
                            .opinions
                            .iter()
                            .any(|o| o.worker_id == worker_id && o.agrees(&c.counts))
                })
                && !self.stands_without(id);
            if counted_by_it || confirmed_by_it {
                let job = self.jobs.entry_mut(id);
                self.outbox.push(Change::Uncount { job_id: id });
                if let Some(counted) = job.counted.take() {
                    // Kept as an opinion, the same as a reload sees the un-counted row.
                    job.opinions.push(counted);
                }
                requeued += 1;
                self.reopen(id);
            } else if let Standing::Leased { worker_id: w, .. } = job.standing() {
                if w == worker_id {
                    self.move_job(id, Standing::Pending);
                }
            }
        }
        self.leases.end_all_of(worker_id);
        self.outbox.push(Change::Untrust { worker_id, job_id, detail, requeued });
    }

    /// Whether job `id`'s counted answer still stands on two parties (or the coordinator) among
    /// the answers of workers still trusted.
    fn stands_without(&self, id: JobId) -> bool {
        let job = self.jobs.entry(id);
        let Some(counted) = job.counted else { return false };
        let reference = self.checks.reference.get(&id).map(|r| Answer::coordinator(*r));
        let answers = job.counted.iter().chain(&job.opinions).chain(reference.as_ref());
        basis(answers, &counted.counts, |w| self.is_untrusted(w)) != Basis::OneParty
    }

    /// A done job whose counted answer was just taken away: counted again at once from the
    /// coordinator's own answer where it has one, or from two other parties' live answers that
    /// agree; else pending again, and asked of the referee where it waits for a second party.
    fn reopen(&mut self, id: JobId) {
        if let Some(truth) = self.checks.reference.get(&id).copied() {
            self.outbox.push(Change::Result {
                job_id: id,
                worker_id: COORDINATOR,
                credential: crate::COORDINATOR_CREDENTIAL,
                lease_id: LeaseId::new(0),
                counts: truth,
                seconds: 0.0,
                counted: true,
                kind: ResultKind::Verified,
            });
            self.jobs.entry_mut(id).counted = Some(Answer::coordinator(truth));
            self.ensure_done(id);
            return;
        }
        if let Some(by) = self.live_agreement(id) {
            self.outbox.push(Change::Result {
                job_id: id,
                worker_id: by.worker_id,
                credential: by.credential,
                lease_id: LeaseId::new(0),
                counts: by.counts,
                seconds: 0.0,
                counted: true,
                kind: ResultKind::Verified,
            });
            self.jobs.entry_mut(id).counted = Some(by);
            self.ensure_done(id);
            return;
        }
        if self.jobs.standing(id) == Standing::Done {
            self.move_job(id, Standing::Pending);
        }
        self.ask_coordinator(id);
    }

    /// A job counted again by [`Scheduler::reopen`] is done (it was, unless it was pending).
    fn ensure_done(&mut self, id: JobId) {
        if self.jobs.standing(id) != Standing::Done {
            self.move_job(id, Standing::Done);
        }
    }

    /// An answer of job `id` that two live parties gave (as the job's rules count parties), if
    /// there is one: the later of the two, which counts.
    fn live_agreement(&self, id: JobId) -> Option<Answer> {
        let live: Vec<Answer> = self
            .jobs
            .entry(id)
            .opinions
            .iter()
            .filter(|o| !self.is_untrusted(o.worker_id) && !o.by_coordinator())
            .copied()
            .collect();
        live.iter().enumerate().find_map(|(i, b)| {
            live[..i]
                .iter()
                .any(|a| a.agrees(&b.counts) && self.distinct_parties(id, a, b))
                .then_some(*b)
        })
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
