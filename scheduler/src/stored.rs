//! The scheduler rebuilt from the store's plain rows after a restart. The store knows nothing
//! of the scheduler's internals: it hands over [`StoredJob`]s and [`StoredLease`]s, and
//! [`Scheduler::restore`] rebuilds the job table, the lease book, the agreements, the
//! coordinator's own answers, the spot-check pool and the open checks from them: every job under
//! review, in dispute or awaiting a second answer is asked of the coordinator's referee again, so
//! no check a count drew is forgotten by a restart.

use crate::answer::Answer;
use crate::checks::Checks;
use crate::config::SchedulerConfig;
use crate::credential::UNKNOWN_CREDENTIAL;
use crate::ids::{JobId, LeaseId, WorkerId};
use crate::jobs::{JobEntry, JobTable, Standing};
use crate::leases::{LeaseBook, LeaseRecord};
use crate::pace::Pace;
use crate::settle::credited;
use crate::state::{JobState, Review};
use crate::trust::Trust;
use crate::Scheduler;
use nqueens_core::SplitMix64;
use std::collections::HashMap;
use std::time::Instant;

/// One job as stored: what [`Scheduler::restore`] rebuilds the job table from.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredJob {
    /// The job's id: its index in the run's job list.
    pub id: JobId,
    /// The job's cost estimate (leases take the most expensive pending jobs first).
    pub estimate: u64,
    /// Orbit size of the job's constellation (2, 4 or 8).
    pub weight: u8,
    /// Must be solved by two different workers that agree.
    pub verify: bool,
    /// Why it waits for another party's answer, if it does.
    pub review: Review,
    /// Its state as stored.
    pub state: JobState,
    /// The lease a leased job is under.
    pub lease: Option<LeaseId>,
    /// The counted answer, if any.
    pub counted: Option<Answer>,
    /// Answers received but not counted (the coordinator's own, under worker 0, among them).
    pub opinions: Vec<Answer>,
    /// Solver errors reported for it.
    pub errors: u32,
    /// Conflicting results it had.
    pub conflicts: u32,
}

impl StoredJob {
    /// A new pending job without results.
    pub fn new(id: JobId, estimate: u64, weight: u8, verify: bool) -> Self {
        StoredJob {
            id,
            estimate,
            weight,
            verify,
            review: Review::None,
            state: JobState::Pending,
            lease: None,
            counted: None,
            opinions: Vec::new(),
            errors: 0,
            conflicts: 0,
        }
    }
}

/// One lease as stored: its worker and every job it named.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredLease {
    /// The lease's id.
    pub id: LeaseId,
    /// The worker it was issued to.
    pub worker: WorkerId,
    /// Every job it named (spot checks and copies included).
    pub jobs: Vec<JobId>,
}

impl Scheduler {
    /// The scheduler of a run as reloaded from the store: its jobs (in id order, ids 0, 1, 2...),
    /// the leases issued so far, the workers' credentials and the untrusted workers. Leased jobs
    /// keep their lease, with a fresh grace period of one lease duration from `now`; a leased
    /// job whose lease is not among `leases` is pending again. Open checks are asked again.
    ///
    /// # Panics
    /// When the jobs' ids are not 0, 1, 2... in order (the store checks that when it loads them).
    pub fn restore(
        config: SchedulerConfig,
        jobs: Vec<StoredJob>,
        leases: Vec<StoredLease>,
        credentials: HashMap<WorkerId, u64>,
        untrusted: impl IntoIterator<Item = WorkerId>,
        now: Instant,
    ) -> Self {
        let mut leases = lease_records(leases);
        let deadline = now + config.lease_duration;
        let mut trust = Trust::new(config.probation_results, credentials);
        trust.untrusted.extend(untrusted);
        let mut checks = Checks::default();
        let mut conflicts_total = 0;
        let mut entries = Vec::with_capacity(jobs.len());
        for (index, row) in jobs.into_iter().enumerate() {
            assert_eq!(row.id.index(), index, "stored jobs must come in id order");
            let standing = restored_standing(&row, &mut leases, deadline, now);
            let job = restored_job(row, standing, &mut checks, &mut trust);
            conflicts_total += job.conflicts as u64;
            entries.push(job);
        }
        let rng = SplitMix64::new(config.seed);
        let mut scheduler = Scheduler {
            jobs: JobTable::new(entries),
            leases: LeaseBook::new(leases),
            trust,
            checks,
            pace: Pace::default(),
            conflicts_total,
            rng,
            config,
            outbox: Vec::new(),
            party_holds: HashMap::new(),
            untrust_queue: Vec::new(),
            disputed: Default::default(),
        };
        scheduler.party_holds = scheduler.recount_party_holds();
        scheduler.pool_and_refer_stored();
        scheduler.checked("restore");
        scheduler
    }

    /// After a restart: every job whose answer is known joins the spot-check pool, and every
    /// open check is asked of the referee again (where the coordinator solves jobs): every job
    /// that wants its ruling (see [`Scheduler::wants_ruling`]), as it did before the restart.
    fn pool_and_refer_stored(&mut self) {
        for id in self.jobs.ids() {
            self.pool(id);
            // Only a waiting job can be in dispute: a counted or held one needs no ruling here.
            let job = self.jobs.entry(id);
            let waiting = matches!(job.standing(), Standing::Pending | Standing::Leased { .. });
            if waiting && job.opinions.iter().any(|o| !self.is_untrusted(o.worker_id)) {
                let ruling = self.ruling_now(id);
                self.mark_disputed(id, &ruling);
            }
            if self.wants_ruling(id) {
                self.refer(id);
            }
        }
    }
}

/// The stored leases by id, each inactive until a leased job names it.
fn lease_records(leases: Vec<StoredLease>) -> HashMap<LeaseId, LeaseRecord> {
    leases
        .into_iter()
        .map(|l| {
            let record =
                LeaseRecord { worker_id: l.worker, job_ids: l.jobs, active: false, extra: vec![] };
            (l.id, record)
        })
        .collect()
}

/// A stored job's standing: a leased job keeps its lease (marked active) with a fresh grace
/// period until `deadline`, or is pending again when its lease is not among `leases`.
fn restored_standing(
    row: &StoredJob,
    leases: &mut HashMap<LeaseId, LeaseRecord>,
    deadline: Instant,
    now: Instant,
) -> Standing {
    match row.state {
        JobState::Pending => Standing::Pending,
        JobState::Leased => match row.lease.and_then(|id| Some((id, leases.get_mut(&id)?))) {
            Some((lease_id, lease)) => {
                lease.active = true;
                let worker_id = lease.worker_id;
                Standing::Leased { lease_id, worker_id, deadline, since: now }
            }
            None => Standing::Pending,
        },
        JobState::Done => Standing::Done,
        JobState::Held => Standing::Held,
        JobState::Failed => Standing::Failed,
    }
}

/// A stored job's entry, its coordinator answers moved into `checks` and the agreements it
/// records credited in `trust`.
fn restored_job(
    row: StoredJob,
    standing: Standing,
    checks: &mut Checks,
    trust: &mut Trust,
) -> JobEntry {
    let mut job = JobEntry::new(row.estimate, row.weight, row.verify, standing);
    job.review = row.review;
    job.counted = row.counted;
    job.errors = row.errors;
    job.conflicts = row.conflicts;
    // The coordinator's own answers (its reference rows, or its counted answer) check
    // workers from now on; the workers' uncounted rows are opinions, under the credential
    // each was given with (an opinion stored before answers carried one, whose worker
    // row is gone, is nobody's evidence: it is dropped, never promoted).
    for opinion in row.opinions {
        if opinion.by_coordinator() {
            checks.reference.insert(row.id, opinion.counts);
        } else if opinion.credential != UNKNOWN_CREDENTIAL {
            job.opinions.push(opinion);
        }
    }
    if let Some(counted) = job.counted.filter(Answer::by_coordinator) {
        checks.reference.insert(row.id, counted.counts);
    }
    let reference = checks.reference.get(&row.id);
    let untrusted = |w: WorkerId| trust.untrusted.contains(&w);
    for (party, _) in credited(job.counted.iter().chain(&job.opinions), reference, untrusted) {
        *trust.verified.entry(party).or_default() += 1;
    }
    job
}
