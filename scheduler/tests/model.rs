//! A model-based test of the scheduler: seeded random sequences of commands (registrations in
//! shared and own parties, leases, right and wrong answers, solver errors, duplicates, late and
//! unknown results, heartbeats, time passing, releases, the coordinator's own answers and
//! restarts), checked after every step against a recount and against a model of the stored
//! rows kept only from the returned [`Change`]s. A restart rebuilds the scheduler from that
//! model alone, so the changes must be complete.

use nqueens_core::{JobCounts, SplitMix64};
use nqueens_scheduler::{
    Delivery, Finding, JobId, JobState, LeaseId, Scheduler, SchedulerConfig, StoredJob, Verdict,
    WorkerId, PER_HOST_CREDENTIALS, SHARED_CREDENTIAL,
};
use std::collections::{BTreeMap, HashMap};

mod common;
use common::Stored;
use std::time::{Duration, Instant};

const JOBS: u64 = 12;
const WORKERS: u64 = 6;
const SEQUENCES: u64 = 200;
const STEPS: usize = 200;
const LEASE: Duration = Duration::from_secs(10);

/// The true answer of a job.
fn truth(job: JobId) -> JobCounts {
    JobCounts { solutions: job.get() * 3 + 1, sym180: 0, sym90: 0, nodes: 1_000 + job.get() }
}

/// One run of the model.
struct Run {
    rng: SplitMix64,
    config: SchedulerConfig,
    scheduler: Scheduler,
    stored: Stored,
    credentials: HashMap<WorkerId, u64>,
    /// Who lies: its answers are off by one.
    liar: Option<WorkerId>,
    /// Leases granted per worker (kept after they end: late results use them).
    leases: HashMap<WorkerId, Vec<(LeaseId, Vec<JobId>)>>,
    /// Results sent, to send again.
    sent: Vec<(WorkerId, LeaseId, JobId, Finding)>,
    now: Instant,
    steps: u64,
    /// How often each outcome came, and restarts: what the sequences exercised.
    outcomes: HashMap<String, u64>,
}

impl Run {
    fn new(seed: u64) -> Self {
        let mut rng = SplitMix64::new(seed);
        let config = SchedulerConfig {
            lease_duration: LEASE,
            seed,
            probation_results: rng.below(3) as u32,
            recheck_fraction: if rng.below(2) == 0 { 0.0 } else { 0.3 },
            ..SchedulerConfig::default()
        };
        let verify_every = rng.below(4);
        let stored = Stored::new(
            (0..JOBS)
                .map(|i| {
                    let verify = verify_every > 0 && i % verify_every == 0;
                    StoredJob::new(JobId::new(i), i % 5 + 1, 8, verify)
                })
                .collect(),
        );
        // Workers 1 and 2 share a per-host credential, 3 and 4 the shared token (each a party of
        // its own, but one credential); the others are credentials of their own.
        let credentials: HashMap<WorkerId, u64> = [
            (WorkerId::new(1), PER_HOST_CREDENTIALS),
            (WorkerId::new(2), PER_HOST_CREDENTIALS),
            (WorkerId::new(3), SHARED_CREDENTIAL),
            (WorkerId::new(4), SHARED_CREDENTIAL),
        ]
        .into_iter()
        .collect();
        let liar = (rng.below(3) == 0).then(|| WorkerId::new(1 + rng.below(WORKERS)));
        let now = Instant::now();
        let scheduler = Scheduler::restore(
            config.clone(),
            stored.load(),
            stored.leases.clone(),
            credentials.clone(),
            [],
            now,
        );
        Run {
            rng,
            config,
            scheduler,
            stored,
            credentials,
            liar,
            leases: HashMap::new(),
            sent: Vec::new(),
            now,
            steps: 0,
            outcomes: HashMap::new(),
        }
    }

    fn worker(&mut self) -> WorkerId {
        WorkerId::new(1 + self.rng.below(WORKERS))
    }

    fn answer(&mut self, worker: WorkerId, job: JobId) -> Finding {
        let mut counts = truth(job);
        if self.liar == Some(worker) && self.rng.below(2) == 0 {
            counts.solutions += 1;
        }
        if self.rng.below(12) == 0 {
            return Finding::SolverError("boom".into());
        }
        Finding::Solved { counts, seconds: 0.01 * (1 + self.rng.below(100)) as f64 }
    }

    fn step(&mut self) {
        self.steps += 1;
        match self.rng.below(100) {
            0..=24 => {
                let worker = self.worker();
                let size = 1 + self.rng.below(4) as usize;
                let checks = self.rng.below(2) == 0;
                if let Some((lease, jobs)) =
                    self.scheduler.lease_checked(worker, size, checks, self.now)
                {
                    assert!(!jobs.is_empty(), "an empty lease");
                    self.leases.entry(worker).or_default().push((lease, jobs));
                }
            }
            25..=59 => {
                let worker = self.worker();
                let Some(held) = self.leases.get(&worker).filter(|l| !l.is_empty()) else { return };
                let (lease, jobs) = held[self.rng.below(held.len() as u64) as usize].clone();
                let mut job = jobs[self.rng.below(jobs.len() as u64) as usize];
                let mut lease = lease;
                match self.rng.below(40) {
                    0 => job = JobId::new(JOBS + 3),
                    1 => lease = LeaseId::new(lease.get() + 1_000),
                    _ => {}
                }
                let finding = self.answer(worker, job);
                let outcome =
                    self.scheduler.result(worker, &delivery(lease, job, finding.clone()), self.now);
                if job.get() >= JOBS && !self.scheduler.is_untrusted(worker) {
                    assert_eq!(outcome, Verdict::UnknownJob);
                }
                if matches!(
                    outcome,
                    Verdict::UnknownJob | Verdict::UnknownLease | Verdict::UntrustedWorker
                ) {
                    let changes = self.scheduler.take_changes();
                    assert!(changes.is_empty(), "a refusal changed something: {changes:?}");
                }
                *self.outcomes.entry(format!("{outcome:?}")).or_default() += 1;
                self.sent.push((worker, lease, job, finding));
            }
            60..=67 => {
                // The same result again.
                if self.sent.is_empty() {
                    return;
                }
                let (worker, lease, job, finding) =
                    self.sent[self.rng.below(self.sent.len() as u64) as usize].clone();
                let outcome =
                    self.scheduler.result(worker, &delivery(lease, job, finding), self.now);
                *self.outcomes.entry(format!("again {outcome:?}")).or_default() += 1;
            }
            68..=77 => {
                let worker = self.worker();
                let leases: Vec<LeaseId> =
                    self.leases.get(&worker).into_iter().flatten().map(|(l, _)| *l).collect();
                let lost = self.scheduler.heartbeat(worker, &leases, self.now);
                assert!(lost.iter().all(|l| leases.contains(l)));
            }
            78..=87 => {
                self.now += Duration::from_millis(self.rng.below(2 * LEASE.as_millis() as u64));
                self.scheduler.expire(self.now);
            }
            88..=92 => {
                let worker = self.worker();
                let lease = match self.leases.get(&worker) {
                    Some(held) if !held.is_empty() && self.rng.below(2) == 0 => {
                        held[self.rng.below(held.len() as u64) as usize].0
                    }
                    _ => LeaseId::new(0),
                };
                self.scheduler.release(worker, lease, &[]);
            }
            93..=95 => {
                let job = JobId::new(self.rng.below(JOBS));
                self.scheduler.add_reference(job, truth(job), self.now);
            }
            _ => {
                self.restart();
                return;
            }
        }
        self.stored.apply(&self.scheduler.take_changes());
        self.check();
    }

    /// A new process: the scheduler rebuilt from the stored rows alone.
    fn restart(&mut self) {
        *self.outcomes.entry("restart".into()).or_default() += 1;
        let credentials = self.credentials.clone();
        let mut config = self.config.clone();
        config.seed = self.rng.next_u64();
        self.scheduler = Scheduler::restore(
            config,
            self.stored.load(),
            self.stored.leases.clone(),
            credentials,
            self.stored.untrusted.iter().copied(),
            self.now,
        );
        self.check();
    }

    /// The properties that hold after every step.
    fn check(&self) {
        let s = &self.scheduler;
        s.check_invariants();
        let by_state = s.by_state();
        assert_eq!(by_state.total(), JOBS);
        let mut recount = nqueens_scheduler::JobsByState::default();
        let mut leased = 0;
        for i in 0..JOBS {
            let job = JobId::new(i);
            let state = s.state(job).unwrap();
            recount.add(state, 1);
            // The stored rows say what the scheduler says: the changes are complete.
            assert_eq!(self.stored.jobs[i as usize].state, state, "job {job}: stored state");
            let counted = self.stored.counted(job);
            assert!(counted.len() <= 1, "job {job} counted {} times", counted.len());
            assert_eq!(
                counted.first().map(|r| (r.worker, r.counts)),
                s.counted(job),
                "job {job}: stored counted answer"
            );
            if state == JobState::Done {
                assert!(s.counted(job).is_some(), "job {job} done without a counted answer");
            }
            if let Some((by, counts)) = s.counted(job) {
                assert!(!s.is_untrusted(by), "job {job} counts an untrusted worker's answer");
                if self.liar.is_none() {
                    assert!(counts.same_answer(&truth(job)), "job {job}: a wrong answer counted");
                }
            }
            if state == JobState::Leased {
                leased += 1;
            }
        }
        assert_eq!(recount, by_state);
        let held: u64 = (1..=WORKERS).map(|w| s.leased_by(WorkerId::new(w))).sum();
        assert_eq!(held, leased);
        if let Some(liar) = self.liar {
            assert!(!s.is_untrusted(WorkerId::new(0)) && s.leased_by(liar) <= leased);
        }
        for w in &self.stored.untrusted {
            assert!(s.is_untrusted(*w), "stored untrusted worker {w} is trusted");
        }
    }

    /// Honest workers finish the run (unless jobs are held or failed): the counted answers are
    /// then the true ones.
    fn finish(&mut self) {
        let honest: Vec<WorkerId> = (3..=WORKERS)
            .map(WorkerId::new)
            .filter(|w| Some(*w) != self.liar && !self.scheduler.is_untrusted(*w))
            .collect();
        if honest.is_empty() {
            return;
        }
        for round in 0..400 {
            if self.scheduler.is_complete()
                || self.scheduler.count(JobState::Held) + self.scheduler.count(JobState::Failed) > 0
            {
                break;
            }
            let worker = honest[round % honest.len()];
            self.now += LEASE * 3;
            self.scheduler.expire(self.now);
            if let Some((lease, jobs)) = self.scheduler.lease(worker, 4, self.now) {
                for job in jobs {
                    let finding = Finding::Solved { counts: truth(job), seconds: 0.1 };
                    self.scheduler.result(worker, &delivery(lease, job, finding), self.now);
                }
            }
            self.stored.apply(&self.scheduler.take_changes());
            self.check();
        }
        if self.scheduler.is_complete() && self.liar.is_none() {
            for i in 0..JOBS {
                let job = JobId::new(i);
                let (_, counts) = self.scheduler.counted(job).unwrap();
                assert!(
                    counts.same_answer(&truth(job)),
                    "job {job}: {counts:?} counted at the end"
                );
            }
        }
    }
}

#[test]
fn random_command_sequences_keep_the_scheduler_consistent() {
    let started = Instant::now();
    let mut steps = 0;
    let mut complete = 0;
    let mut outcomes: BTreeMap<String, u64> = BTreeMap::new();
    for seed in 0..SEQUENCES {
        let mut run = Run::new(seed);
        for _ in 0..STEPS {
            run.step();
        }
        run.finish();
        steps += run.steps;
        complete += run.scheduler.is_complete() as u32;
        for (what, n) in run.outcomes {
            *outcomes.entry(what).or_default() += n;
        }
        *outcomes.entry("untrusted workers".into()).or_default() += run.scheduler.untrusted_count();
    }
    eprintln!("{outcomes:?}");
    eprintln!(
        "{SEQUENCES} sequences x {STEPS} steps ({steps} steps, {complete} runs completed) in {:.2} s",
        started.elapsed().as_secs_f64()
    );
    assert!(complete > 0);
}

/// `finding` for `job` under `lease`, as a worker sends it.
fn delivery(lease: LeaseId, job: JobId, finding: Finding) -> Delivery {
    Delivery { job_id: job, lease_id: lease, finding }
}
