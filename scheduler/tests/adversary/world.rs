//! The world of one case: the scheduler, the stored rows, and the ground truth (which real party
//! controls each identity); how each event is applied, and a restart from the stored rows.

use super::*;

/// One identity, as the test knows it.
#[derive(Debug, Clone)]
pub(super) struct Ident {
    pub(super) party: usize,
    /// Registered by the current process (a restart makes every identity an old one: the
    /// engine forgets only identities it registered itself).
    pub(super) this_process: bool,
    /// Has had an answer accepted or confirmed (the engine then never forgets it).
    pub(super) proven: bool,
    pub(super) forgotten: bool,
    pub(super) leases: Vec<(LeaseId, Vec<JobId>)>,
}

/// Who gave a stored row, in truth.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Giver {
    Coordinator,
    Party(usize),
    /// A row of a worker the test never registered (none should exist).
    Stranger(u64),
}

pub(super) struct World {
    pub(super) setup: Setup,
    pub(super) config: SchedulerConfig,
    pub(super) scheduler: Scheduler,
    pub(super) stored: Stored,
    pub(super) idents: BTreeMap<u64, Ident>,
    pub(super) restarts: u64,
    pub(super) now: Instant,
    pub(super) stats: BTreeMap<String, u64>,
    /// Restarts keep the run's seed (the restart property compares a run with and without one).
    pub(super) same_seed: bool,
    /// What the last event did, as far as it is not a ruling: the jobs a lease got, whether a
    /// forget forgot, how many leases a wait expired, whether an answer was taken and late, the
    /// jobs handed to the referee.
    pub(super) effect: String,
    /// The verdict of the last answer.
    pub(super) verdict: Option<Verdict>,
}

impl World {
    pub(super) fn new(setup: &Setup) -> World {
        let config = SchedulerConfig {
            lease_duration: LEASE,
            seed: setup.seed,
            probation_results: setup.probation,
            recheck_fraction: setup.recheck,
            coordinator_checks: setup.referee,
            replication: setup.replication,
            ..SchedulerConfig::default()
        };
        let stored = Stored::new(
            (0..setup.jobs).map(|i| StoredJob::new(JobId::new(i), i % 5 + 1, 8, false)).collect(),
        );
        let now = Instant::now();
        let scheduler =
            Scheduler::restore(config.clone(), stored.load(), vec![], Default::default(), [], now);
        World {
            setup: setup.clone(),
            config,
            scheduler,
            stored,
            idents: BTreeMap::new(),
            restarts: 0,
            now,
            stats: BTreeMap::new(),
            same_seed: false,
            effect: String::new(),
            verdict: None,
        }
    }

    pub(super) fn credential(&self, party: usize) -> u64 {
        if self.setup.parties[party].shared {
            SHARED_CREDENTIAL
        } else {
            PER_HOST_CREDENTIALS + 1 + party as u64
        }
    }

    pub(super) fn note(&mut self, what: impl Into<String>) {
        *self.stats.entry(what.into()).or_default() += 1;
    }

    /// A live identity (registered, not forgotten).
    pub(super) fn live(&self, w: u64) -> Option<&Ident> {
        self.idents.get(&w).filter(|i| !i.forgotten)
    }

    /// Whether the engine may forget `w` now: registered by this process, no answer of it
    /// accepted yet, holding no job.
    pub(super) fn forgettable(&self, w: u64) -> bool {
        self.live(w).is_some_and(|i| i.this_process && !i.proven)
            && self.scheduler.leased_by(WorkerId::new(w)) == 0
    }

    /// Registers identity `w` of `party`; false (nothing done) if it exists or the party does not.
    fn register(&mut self, w: u64, party: usize) -> bool {
        if self.idents.contains_key(&w) || party >= self.setup.parties.len() {
            return false;
        }
        let credential = self.credential(party);
        self.scheduler.set_credential(WorkerId::new(w), credential);
        let ident = Ident {
            party,
            this_process: true,
            proven: false,
            forgotten: false,
            leases: Vec::new(),
        };
        self.idents.insert(w, ident);
        self.note("register");
        true
    }

    /// A lease for `w`; false (nothing done) if `w` is not live.
    fn lease(&mut self, w: u64, size: usize, checks: bool) -> bool {
        if self.live(w).is_none() {
            return false;
        }
        let granted = self.scheduler.lease_checked(WorkerId::new(w), size, checks, self.now);
        self.effect = format!("{:?}", granted.as_ref().map(|(_, jobs)| jobs.clone()));
        match granted {
            Some((lease, jobs)) => {
                self.idents.get_mut(&w).unwrap().leases.push((lease, jobs));
                self.note("lease");
            }
            None => self.note("lease none"),
        }
        true
    }

    /// `w`'s answer to `job`, a lie of `k` if `k > 0` and `w` is the adversary's; false (nothing
    /// done) if `w` is not live or holds no lease of the job.
    fn answer(&mut self, w: u64, job: u64, k: u64) -> bool {
        let Some(ident) = self.live(w) else { return false };
        let Some(&(lease, _)) =
            ident.leases.iter().rev().find(|(_, jobs)| jobs.contains(&JobId::new(job)))
        else {
            return false;
        };
        let honest = ident.party != 0;
        let counts = if k == 0 || honest { truth(job) } else { lie(job, k) };
        let finding = Finding::Solved { counts, seconds: 1.0 };
        let delivery = Delivery { job_id: JobId::new(job), lease_id: lease, finding };
        let verdict = self.scheduler.result(WorkerId::new(w), &delivery, self.now);
        self.verdict = Some(verdict);
        self.effect = "answered".into();
        if matches!(verdict, Verdict::Accepted | Verdict::Confirmed) {
            self.idents.get_mut(&w).unwrap().proven = true;
        }
        let who = if honest {
            "honest"
        } else if k > 0 {
            "lie"
        } else {
            "adv truth"
        };
        self.note(format!("{who} {verdict:?}"));
        true
    }

    /// Applies one event (an event that means nothing now does nothing), then commits the
    /// changes and checks the invariants.
    pub(super) fn apply(&mut self, ev: &Ev) -> Result<(), String> {
        let now = self.now;
        self.effect.clear();
        self.verdict = None;
        match *ev {
            Ev::Register { w, party } => {
                if !self.register(w, party) {
                    return Ok(());
                }
            }
            Ev::Forget { w } => {
                if !self.forgettable(w) {
                    return Ok(());
                }
                self.scheduler.forget_worker(WorkerId::new(w));
                self.idents.get_mut(&w).unwrap().forgotten = true;
                self.effect = "forgot".into();
                self.note("forget");
            }
            Ev::Lease { w, size, checks } => {
                if !self.lease(w, size, checks) {
                    return Ok(());
                }
            }
            Ev::Answer { w, job, lie: k } => {
                if !self.answer(w, job, k) {
                    return Ok(());
                }
            }
            Ev::Release { w } => {
                if self.live(w).is_none() {
                    return Ok(());
                }
                self.scheduler.release(WorkerId::new(w), LeaseId::new(0), &[]);
                self.note("release");
            }
            Ev::Heartbeat { w } => {
                let Some(ident) = self.live(w) else { return Ok(()) };
                let leases: Vec<LeaseId> = ident.leases.iter().map(|(l, _)| *l).collect();
                self.scheduler.heartbeat(WorkerId::new(w), &leases, now);
                self.note("heartbeat");
            }
            Ev::Wait { secs } => {
                self.now += Duration::from_secs(secs);
                let expired = self.scheduler.expire(self.now);
                self.effect = format!("expired {expired}");
                self.note(if expired > 0 { "wait expired" } else { "wait" });
            }
            Ev::Restart => {
                self.restart();
            }
            Ev::Referee => {
                let jobs = self.scheduler.take_referee_jobs();
                self.effect = format!("referee {jobs:?}");
                for id in &jobs {
                    self.scheduler.add_reference(*id, truth(id.get()), now);
                }
                self.note(if jobs.is_empty() { "referee idle" } else { "referee ruled" });
            }
            Ev::Reference { job } => {
                if job < self.setup.jobs {
                    self.scheduler.add_reference(JobId::new(job), truth(job), now);
                    self.note("reference");
                }
            }
        }
        let changes = self.scheduler.take_changes();
        if trace() {
            eprintln!("{ev:?}");
            for change in &changes {
                eprintln!("    + {change:?}");
            }
        }
        for change in &changes {
            if let nqueens_scheduler::Change::Result { kind, counted, .. } = change {
                self.note(format!(
                    "row {}{}",
                    kind.as_str(),
                    if *counted { " counted" } else { "" }
                ));
                if *kind == ResultKind::Late {
                    self.note("late answer");
                    self.effect.push_str(" late");
                }
            }
        }
        self.stored.apply(&changes);
        self.check()
    }

    /// A new process: the scheduler rebuilt from the stored rows alone. Forgotten identities'
    /// worker rows were deleted: they are absent from the credentials.
    pub(super) fn restart(&mut self) {
        self.restarts += 1;
        self.note("restart");
        let credentials = self
            .idents
            .iter()
            .filter(|(_, i)| !i.forgotten)
            .map(|(&w, i)| (WorkerId::new(w), self.credential(i.party)))
            .collect();
        let mut config = self.config.clone();
        if !self.same_seed {
            config.seed = self.setup.seed ^ self.restarts.wrapping_mul(0x9e37_79b9);
        }
        self.scheduler = Scheduler::restore(
            config,
            self.stored.load(),
            self.stored.leases.clone(),
            credentials,
            self.stored.untrusted.iter().copied(),
            self.now,
        );
        for ident in self.idents.values_mut() {
            ident.this_process = false;
        }
    }
}
