//! The world of one sequence: the engine over a state file on disk, the real parties and their
//! identities; how each event runs through the engine's command loop, and a restart.

use super::*;

/// Sends the command `make` builds and waits for its answer.
pub(super) fn ask<T>(engine: &EngineHandle, make: impl FnOnce(oneshot::Sender<T>) -> Command) -> T {
    let rx = engine.ask(make).expect("the engine runs");
    rx.blocking_recv().expect("the engine answers")
}

/// Ends the engine's wait for more results (a batch of nothing but results waits a while): a
/// call of a worker nobody registered, refused before anything is decided.
pub(super) fn kick(engine: &EngineHandle) {
    let caller = Caller {
        worker_id: WorkerId::new(1 << 40),
        secret: String::new(),
        credential: Credential::shared(),
    };
    let (reply, _) = oneshot::channel();
    engine.send(Command::Heartbeat { caller, lease_ids: vec![], reply });
}

/// Sends answers as one result stream and waits for their verdicts.
pub(super) fn send_answers(
    engine: &EngineHandle,
    answers: Vec<JobAnswer>,
) -> Vec<Result<Verdict, Refusal>> {
    let mut rxs = Vec::new();
    let mut batch = Vec::new();
    for a in answers {
        let (tx, rx) = oneshot::channel();
        batch.push((a, tx));
        rxs.push(rx);
    }
    assert!(engine.send(Command::Results { answers: batch }), "the engine runs");
    kick(engine);
    rxs.into_iter().map(|rx| rx.blocking_recv().expect("the engine answers").outcome).collect()
}

/// The world of one sequence: the engine, the parties and their identities.
pub(super) struct World<'a> {
    pub(super) setup: Setup,
    pub(super) board: &'a Board,
    pub(super) dir: tempfile::TempDir,
    pub(super) state: PathBuf,
    pub(super) started: Option<Started>,
    pub(super) parties: Vec<Party>,
    pub(super) idents: Vec<Ident>,
    /// Every worker id ever given, and its real party.
    pub(super) party_of: HashMap<u64, usize>,
    pub(super) trace: Vec<String>,
    pub(super) stats: Stats,
}

/// A temporary directory in memory where there is one (every commit is an fsync).
pub(super) fn temp_dir() -> tempfile::TempDir {
    let shm = Path::new("/dev/shm");
    if shm.is_dir() {
        if let Ok(dir) = tempfile::tempdir_in(shm) {
            return dir;
        }
    }
    tempfile::tempdir().unwrap()
}

impl<'a> World<'a> {
    pub(super) fn new(setup: Setup, board: &'a Board) -> World<'a> {
        let dir = temp_dir();
        let state = dir.path().join("run.db");
        let mut world = World {
            setup,
            board,
            dir,
            state,
            started: None,
            parties: parties(&setup),
            idents: Vec::new(),
            party_of: HashMap::new(),
            trace: Vec::new(),
            stats: Stats::default(),
        };
        world.start();
        world
    }

    pub(super) fn start(&mut self) {
        let policy = RunPolicy { verify_fraction: 0.0, replication: self.setup.replication };
        let store = Store::open_or_create(
            &self.state,
            &self.board.list,
            nqueens_proto::PROTOCOL_MAJOR,
            policy,
            RunKind::Cluster,
        )
        .unwrap();
        let config = EngineConfig {
            result_file: self.dir.path().join("result.json"),
            lease_duration: LEASE,
            heartbeat: Duration::from_secs(1),
            spot_checks: false,
            jobs: Some(Arc::new(self.board.list.jobs.clone())),
            coordinator_checks: self.setup.referee,
            recheck_fraction: self.setup.recheck,
            max_unproven: self.setup.max_unproven,
        };
        let metrics = Arc::new(Metrics::default());
        self.started = Some(Engine::start(store, metrics, config).unwrap());
    }

    pub(super) fn engine(&self) -> EngineHandle {
        self.started.as_ref().expect("the engine runs").handle.clone()
    }

    pub(super) fn stop(&mut self) {
        let started = self.started.take().expect("the engine runs");
        assert!(started.handle.send(Command::Shutdown));
        started.thread.join().unwrap().unwrap();
    }

    pub(super) fn log(&mut self, line: String) {
        self.trace.push(line);
    }

    pub(super) fn who(&self, i: usize) -> String {
        let id = self.idents[i].caller.as_ref().map_or(0, |c| c.worker_id.get());
        format!("{}(w{id})", self.idents[i].name)
    }

    /// Registers identity `i` (again, with its last id and secret, where it had one).
    pub(super) fn register(&mut self, i: usize) {
        let party = self.idents[i].party;
        let worker = Registration {
            previous_worker_id: self.idents[i].last.as_ref().map(|(id, _)| *id),
            previous_secret: self.idents[i].last.as_ref().map_or(String::new(), |l| l.1.clone()),
            credential: self.parties[party].credential.clone(),
            name: self.idents[i].name.clone(),
            host: "localhost".into(),
            slots: 4,
            version: env!("CARGO_PKG_VERSION").into(),
            device: "cpu".into(),
            peer: None,
        };
        let credential = worker.credential.clone();
        let reply = ask(&self.engine(), |reply| Command::Register { worker, reply });
        match reply.outcome {
            Ok(Registered { worker_id, secret }) => {
                let same = self.idents[i].last.as_ref().is_some_and(|(id, _)| *id == worker_id);
                if !same {
                    self.idents[i].leases.clear();
                    self.idents[i].held.clear();
                }
                self.party_of.insert(worker_id.get(), party);
                self.idents[i].last = Some((worker_id, secret.clone()));
                self.idents[i].caller = Some(Caller { worker_id, secret, credential });
                let again = if same { " again" } else { "" };
                let line = format!("{} registered{again}", self.who(i));
                self.log(line);
            }
            Err(refusal) => {
                self.idents[i].caller = None;
                let line = format!("{} refused registration: {refusal:?}", self.idents[i].name);
                self.log(line);
            }
        }
    }

    pub(super) fn new_ident(&mut self, party: usize) -> usize {
        let k = self.idents.iter().filter(|x| x.party == party).count() + 1;
        let name = format!("{}.{k}", self.parties[party].label);
        self.idents.push(Ident {
            party,
            name,
            caller: None,
            last: None,
            leases: Vec::new(),
            held: Vec::new(),
        });
        let i = self.idents.len() - 1;
        self.register(i);
        i
    }

    /// The `who`-th registered identity of `side`, if any.
    pub(super) fn pick(&self, side: Side, who: usize) -> Option<usize> {
        let of_side: Vec<usize> = (0..self.idents.len())
            .filter(|&i| self.idents[i].caller.is_some())
            .filter(|&i| (self.idents[i].party == 0) == (side == Side::Adversary))
            .collect();
        (!of_side.is_empty()).then(|| of_side[who % of_side.len()])
    }

    /// What identity `i` answers for `job`.
    pub(super) fn counts(&self, i: usize, job: JobId, lie: bool) -> JobCounts {
        let mut counts = self.board.truth[job.get() as usize];
        if lie && !self.parties[self.idents[i].party].honest {
            counts.solutions += 1;
        }
        counts
    }

    pub(super) fn answer(
        &mut self,
        i: usize,
        lease_id: LeaseId,
        job_id: JobId,
        lie: bool,
        late: bool,
    ) {
        let caller = self.idents[i].caller.clone().expect("registered");
        let counts = self.counts(i, job_id, lie);
        let told = if counts == self.board.truth[job_id.get() as usize] { "truth" } else { "LIE" };
        let answer =
            JobAnswer::new(caller, lease_id, job_id, Finding::Solved { counts, seconds: 0.001 });
        let verdict = send_answers(&self.engine(), vec![answer]).remove(0);
        let how = if late { "late " } else { "" };
        let line = format!(
            "{} answers {how}job {} under lease {} with the {told}: {verdict:?}",
            self.who(i),
            job_id.get(),
            lease_id.get()
        );
        self.log(line);
    }

    pub(super) fn apply(&mut self, event: Event) {
        match event {
            Event::Register { party } => {
                self.new_ident(party % self.parties.len());
            }
            Event::Lease { side, who, slots } => {
                let Some(i) = self.pick(side, who) else { return };
                let caller = self.idents[i].caller.clone().unwrap();
                let reply = ask(&self.engine(), |reply| Command::Lease {
                    caller,
                    free_slots: slots,
                    reply,
                });
                match reply.outcome {
                    Ok(granted) if !granted.job_ids.is_empty() => {
                        let jobs: Vec<u64> = granted.job_ids.iter().map(|j| j.get()).collect();
                        let line = format!(
                            "{} leases {slots}: lease {} jobs {jobs:?}",
                            self.who(i),
                            granted.lease_id.get()
                        );
                        self.log(line);
                        let ident = &mut self.idents[i];
                        ident.held.extend(granted.job_ids.iter().map(|&j| (granted.lease_id, j)));
                        ident.leases.push((granted.lease_id, granted.job_ids));
                    }
                    other => {
                        let line = format!("{} leases {slots}: {:?}", self.who(i), other.err());
                        self.log(line);
                    }
                }
            }
            Event::Release { side, who, pick } => {
                let Some(i) = self.pick(side, who) else { return };
                if self.idents[i].held.is_empty() {
                    return;
                }
                let k = pick % self.idents[i].held.len();
                let (lease_id, job_id) = self.idents[i].held.remove(k);
                let caller = self.idents[i].caller.clone().unwrap();
                let reply = ask(&self.engine(), |reply| Command::Release {
                    caller,
                    lease_id,
                    job_ids: vec![job_id],
                    reply,
                });
                let line = format!(
                    "{} releases job {} of lease {}: {:?}",
                    self.who(i),
                    job_id.get(),
                    lease_id.get(),
                    reply.outcome
                );
                self.log(line);
            }
            Event::Answer { side, who, pick, lie } => {
                let Some(i) = self.pick(side, who) else { return };
                if self.idents[i].held.is_empty() {
                    return;
                }
                let k = pick % self.idents[i].held.len();
                let (lease_id, job_id) = self.idents[i].held.remove(k);
                self.answer(i, lease_id, job_id, lie, false);
            }
            Event::Late { side, who, pick, lie } => {
                let Some(i) = self.pick(side, who) else { return };
                let named: Vec<(LeaseId, JobId)> = self.idents[i]
                    .leases
                    .iter()
                    .flat_map(|(l, jobs)| jobs.iter().map(move |j| (*l, *j)))
                    .collect();
                if named.is_empty() {
                    return;
                }
                let (lease_id, job_id) = named[pick % named.len()];
                self.idents[i].held.retain(|&h| h != (lease_id, job_id));
                self.stats.late_answers += 1;
                self.answer(i, lease_id, job_id, lie, true);
            }
            Event::Flood => {
                self.log(format!("flood: {} idle identities", self.setup.max_unproven + 2));
                for _ in 0..self.setup.max_unproven + 2 {
                    self.new_ident(0);
                }
            }
            Event::Restart => self.restart(false),
        }
    }

    /// Restarts the coordinator (returning held jobs to the queue first, with `requeue`, as an
    /// operator would); every identity registers again.
    pub(super) fn restart(&mut self, requeue: bool) {
        self.stop();
        if requeue {
            let mut store = Store::open_existing_for_update(&self.state).unwrap();
            let requeued = store.requeue(Requeue::Held).unwrap();
            self.log(format!("requeue: {} held jobs", requeued.held));
            self.stats.requeues += 1;
        }
        self.start();
        self.log("restart".into());
        for i in 0..self.idents.len() {
            if self.idents[i].last.is_some() {
                self.register(i);
            }
        }
    }
}
