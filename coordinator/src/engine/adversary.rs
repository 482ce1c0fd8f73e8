//! The adversary model on the engine: seeded sequences of registrations, leases, releases,
//! answers (in time and late), forgetting floods and restarts, driven through the engine's
//! command loop over a state file on disk, where the test knows which real party controls each
//! identity. After every step the state file is read beside the running engine (a read-only
//! connection) and checked against that ground truth:
//!
//! 1. in a record run (replication 2), every counted answer was given by two real parties (the
//!    coordinator's own rows count as one);
//! 2. `Store::evidence()` never claims more independent jobs than real parties gave;
//! 3. no honest identity is ever untrusted;
//! 4. every result row carries the credential its identity really used.
//!
//! At the end the honest parties answer everything; a record run, and a run re-checking every
//! one-credential answer, must then be exact with none of the adversary's lies counted (and a
//! record run rests nothing on one credential's word). A failing sequence is shrunk and printed.
//!
//! `NQ_ENGINE_ADVERSARY_SEQUENCES` runs more sequences, `NQ_ENGINE_ADVERSARY_SEED` others;
//! `NQ_ENGINE_ADVERSARY_STRICT` also fails a record run's job counted on the coordinator's solve
//! alone, and `NQ_ENGINE_ADVERSARY_IGNORE_STALLS` lets a run the honest parties cannot finish
//! pass (to hunt for wrong counts past a stall).

use super::{Caller, Command, Engine, EngineConfig, EngineHandle, JobAnswer, Refusal, Registered};
use super::{Registration, Started};
use crate::metrics::Metrics;
use crate::secrets::Credential;
use nqueens_core::{job_list, JobCounts, JobList, SplitMix64, SplitParams};
use nqueens_scheduler::{Finding, JobId, LeaseId, Verdict, WorkerId};
use nqueens_store::{Requeue, RunKind, RunPolicy, Store};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::oneshot;

/// How long a lease lasts: only leases nobody can give back any more wait for it.
const LEASE: Duration = Duration::from_secs(3);
/// How long the honest parties get to finish a run (expiry of stranded leases included).
const FINISH_WITHIN: Duration = Duration::from_secs(6);
/// Events per generated sequence (after the first registrations).
const EVENTS: usize = 60;
/// Sequences run by default.
const SEQUENCES: u64 = 200;
/// The party of the coordinator's own rows (worker 0).
const COORDINATOR: usize = usize::MAX;

/// Sends the command `make` builds and waits for its answer.
fn ask<T>(engine: &EngineHandle, make: impl FnOnce(oneshot::Sender<T>) -> Command) -> T {
    let rx = engine.ask(make).expect("the engine runs");
    rx.blocking_recv().expect("the engine answers")
}

/// Ends the engine's wait for more results (a batch of nothing but results waits a while): a
/// call of a worker nobody registered, refused before anything is decided.
fn kick(engine: &EngineHandle) {
    let caller = Caller {
        worker_id: WorkerId::new(1 << 40),
        secret: String::new(),
        credential: Credential::shared(),
    };
    let (reply, _) = oneshot::channel();
    engine.send(Command::Heartbeat { caller, lease_ids: vec![], reply });
}

/// Sends answers as one result stream and waits for their verdicts.
fn send_answers(engine: &EngineHandle, answers: Vec<JobAnswer>) -> Vec<Result<Verdict, Refusal>> {
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

/// A run's board and its true answers.
struct Board {
    list: JobList,
    truth: Vec<JobCounts>,
    total: u128,
}

impl Board {
    fn new(n: u32) -> Board {
        let list = job_list(n, &SplitParams::default()).unwrap();
        let truth = list.jobs.iter().map(|j| j.solve().unwrap()).collect();
        let total = match n {
            8 => 92,
            9 => 352,
            _ => unreachable!("boards of the model: 8 and 9"),
        };
        Board { list, truth, total }
    }
}

/// What a sequence runs against.
#[derive(Debug, Clone, Copy)]
struct Setup {
    n: u32,
    replication: u8,
    max_unproven: usize,
    referee: bool,
    recheck: f64,
    /// The adversary holds the shared token (else the per-host credential `evil`).
    adversary_shared: bool,
    /// Honest per-host parties `h1`...
    honest_hosts: usize,
    /// An honest party under the shared token too (only beside a per-host adversary).
    honest_shared: bool,
}

impl Setup {
    /// Whether the run must end exact with no lie counted: a record run, or one that re-checks
    /// every answer resting on one credential's word (the adversary is one credential).
    fn must_be_exact(&self) -> bool {
        self.replication >= 2 || self.recheck >= 1.0
    }
}

/// A real party: who controls identities.
struct Party {
    label: String,
    credential: Credential,
    honest: bool,
}

/// The parties of `setup`: the adversary first.
fn parties(setup: &Setup) -> Vec<Party> {
    let adversary =
        if setup.adversary_shared { Credential::shared() } else { Credential::named("evil") };
    let mut parties = vec![Party { label: "adv".into(), credential: adversary, honest: false }];
    for i in 1..=setup.honest_hosts {
        let label = format!("h{i}");
        parties.push(Party { credential: Credential::named(&label), label, honest: true });
    }
    if setup.honest_shared && !setup.adversary_shared {
        parties.push(Party { label: "hs".into(), credential: Credential::shared(), honest: true });
    }
    parties
}

/// Whose identity an event acts through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Side {
    Adversary,
    Honest,
}

/// One step of a sequence. Indices are resolved when the step runs (modulo what exists then),
/// so that a shrunk sequence stays meaningful.
#[derive(Debug, Clone, Copy)]
enum Event {
    /// A new identity of party `party`.
    Register {
        party: usize,
    },
    Lease {
        side: Side,
        who: usize,
        slots: u32,
    },
    /// Gives back one held job.
    Release {
        side: Side,
        who: usize,
        pick: usize,
    },
    /// Answers one held job (an honest identity always tells the truth).
    Answer {
        side: Side,
        who: usize,
        pick: usize,
        lie: bool,
    },
    /// Answers a job any earlier lease of the identity named, under that lease.
    Late {
        side: Side,
        who: usize,
        pick: usize,
        lie: bool,
    },
    /// The adversary registers `max_unproven + 2` idle identities.
    Flood,
    /// The coordinator restarts; every identity registers again.
    Restart,
}

/// One identity, as its party knows it.
struct Ident {
    party: usize,
    name: String,
    /// Registered with the running engine (None: forgotten, or refused).
    caller: Option<Caller>,
    /// The id and secret it last had (for registering again).
    last: Option<(WorkerId, String)>,
    /// Every lease it was granted, with its jobs.
    leases: Vec<(LeaseId, Vec<JobId>)>,
    /// The jobs it believes it holds.
    held: Vec<(LeaseId, JobId)>,
}

/// What a sequence's run ended with.
#[derive(Debug, Default, Clone)]
struct Stats {
    complete: bool,
    lies_counted: usize,
    adversary_untrusted: usize,
    forgotten: usize,
    late_answers: usize,
    requeues: usize,
    /// Jobs counted at the end on the coordinator's own solve alone.
    coordinator_alone: usize,
}

/// The world of one sequence: the engine, the parties and their identities.
struct World<'a> {
    setup: Setup,
    board: &'a Board,
    dir: tempfile::TempDir,
    state: PathBuf,
    started: Option<Started>,
    parties: Vec<Party>,
    idents: Vec<Ident>,
    /// Every worker id ever given, and its real party.
    party_of: HashMap<u64, usize>,
    trace: Vec<String>,
    stats: Stats,
}

/// A temporary directory in memory where there is one (every commit is an fsync).
fn temp_dir() -> tempfile::TempDir {
    let shm = Path::new("/dev/shm");
    if shm.is_dir() {
        if let Ok(dir) = tempfile::tempdir_in(shm) {
            return dir;
        }
    }
    tempfile::tempdir().unwrap()
}

impl<'a> World<'a> {
    fn new(setup: Setup, board: &'a Board) -> World<'a> {
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

    fn start(&mut self) {
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

    fn engine(&self) -> EngineHandle {
        self.started.as_ref().expect("the engine runs").handle.clone()
    }

    fn stop(&mut self) {
        let started = self.started.take().expect("the engine runs");
        assert!(started.handle.send(Command::Shutdown));
        started.thread.join().unwrap().unwrap();
    }

    fn log(&mut self, line: String) {
        self.trace.push(line);
    }

    fn who(&self, i: usize) -> String {
        let id = self.idents[i].caller.as_ref().map_or(0, |c| c.worker_id.get());
        format!("{}(w{id})", self.idents[i].name)
    }

    /// Registers identity `i` (again, with its last id and secret, where it had one).
    fn register(&mut self, i: usize) {
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

    fn new_ident(&mut self, party: usize) -> usize {
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
    fn pick(&self, side: Side, who: usize) -> Option<usize> {
        let of_side: Vec<usize> = (0..self.idents.len())
            .filter(|&i| self.idents[i].caller.is_some())
            .filter(|&i| (self.idents[i].party == 0) == (side == Side::Adversary))
            .collect();
        (!of_side.is_empty()).then(|| of_side[who % of_side.len()])
    }

    /// What identity `i` answers for `job`.
    fn counts(&self, i: usize, job: JobId, lie: bool) -> JobCounts {
        let mut counts = self.board.truth[job.get() as usize];
        if lie && !self.parties[self.idents[i].party].honest {
            counts.solutions += 1;
        }
        counts
    }

    fn answer(&mut self, i: usize, lease_id: LeaseId, job_id: JobId, lie: bool, late: bool) {
        let caller = self.idents[i].caller.clone().expect("registered");
        let counts = self.counts(i, job_id, lie);
        let told = if counts == self.board.truth[job_id.get() as usize] { "truth" } else { "LIE" };
        let answer = JobAnswer {
            caller,
            lease_id,
            job_id,
            finding: Finding::Solved { counts, seconds: 0.001 },
        };
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

    fn apply(&mut self, event: Event) {
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
    fn restart(&mut self, requeue: bool) {
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

    /// Marks the identities whose worker rows are gone as forgotten.
    fn sync_forgotten(&mut self, reader: &Reader) {
        let rows: BTreeSet<u64> = reader.worker_ids();
        for i in 0..self.idents.len() {
            let Some(caller) = &self.idents[i].caller else { continue };
            if !rows.contains(&caller.worker_id.get()) {
                let line = format!("{} forgotten", self.who(i));
                self.log(line);
                self.idents[i].caller = None;
                self.idents[i].held.clear();
                self.stats.forgotten += 1;
            }
        }
    }

    /// The invariants over the committed rows (see the module doc).
    fn check(&mut self) -> Result<(), String> {
        // The engine commits meanwhile (the referee's rulings): the rows are read before and
        // after the evidence, until nothing changed in between.
        for _ in 0..20 {
            let reader = Reader::open(&self.state);
            let before = (reader.results(), reader.job_states());
            let evidence = Store::open_existing(&self.state).unwrap().evidence().unwrap();
            let after = (reader.results(), reader.job_states());
            if before == after {
                return self.check_rows(&reader, &before.0, &before.1, &evidence);
            }
        }
        Err("the state file kept changing while it was checked".into())
    }

    fn check_rows(
        &mut self,
        reader: &Reader,
        rows: &[Row],
        states: &BTreeMap<u64, String>,
        evidence: &nqueens_store::Evidence,
    ) -> Result<(), String> {
        self.sync_forgotten(reader);
        let party = |w: u64| -> Result<usize, String> {
            if w == 0 {
                return Ok(COORDINATOR);
            }
            self.party_of.get(&w).copied().ok_or_else(|| format!("a row of unknown worker {w}"))
        };
        // 4: every row carries the credential its identity gave it under.
        for r in rows {
            let p = party(r.worker_id)?;
            let expected = (p != COORDINATOR).then(|| self.parties[p].credential.name.clone());
            if r.credential != expected {
                return Err(format!(
                    "invariant 4: the row of job {} by w{} carries credential {:?}, given under {:?}",
                    r.job_id, r.worker_id, r.credential, expected
                ));
            }
        }
        // 3: no honest identity untrusted.
        for w in reader.untrusted() {
            let p = party(w)?;
            if p == COORDINATOR || self.parties[p].honest {
                return Err(format!("invariant 3: honest w{w} ({}) is untrusted", self.label(p)));
            }
        }
        // 1, 2: what the counted answers rest on.
        let mut two_parties_done = 0u64;
        for r in rows.iter().filter(|r| r.counted) {
            let givers: BTreeSet<usize> = rows
                .iter()
                .filter(|o| o.job_id == r.job_id && o.solutions == r.solutions)
                .map(|o| party(o.worker_id))
                .collect::<Result<_, _>>()?;
            let done = states.get(&r.job_id).map(String::as_str) == Some("done");
            if givers.len() >= 2 && done {
                two_parties_done += 1;
            }
            // The coordinator's own solve alone is the truth, though not the two answers a
            // record run asks for: allowed unless NQ_ENGINE_ADVERSARY_STRICT is set.
            let coordinator_alone = givers.len() == 1 && givers.contains(&COORDINATOR);
            if self.setup.replication >= 2
                && givers.len() < 2
                && (!coordinator_alone || strict_coordinator())
            {
                let names: Vec<String> = givers.iter().map(|&p| self.label(p)).collect();
                return Err(format!(
                    "invariant 1: job {} ({}) counts {} solutions (truth {}) given only by {names:?}",
                    r.job_id,
                    states.get(&r.job_id).map_or("?", String::as_str),
                    r.solutions,
                    self.board.truth[r.job_id as usize].solutions,
                ));
            }
        }
        if evidence.jobs_independent > two_parties_done {
            return Err(format!(
                "invariant 2: evidence claims {} independent jobs, two real parties gave {}",
                evidence.jobs_independent, two_parties_done
            ));
        }
        Ok(())
    }

    fn label(&self, p: usize) -> String {
        if p == COORDINATOR {
            "coordinator".into()
        } else {
            self.parties[p].label.clone()
        }
    }

    /// The honest per-host parties answer everything until the run completes; then the end's
    /// checks.
    fn finish(&mut self) -> Result<(), String> {
        self.log("-- the honest parties finish the run".into());
        // Everyone gives back what it holds (nobody waits for leases to expire).
        for i in 0..self.idents.len() {
            let Some(caller) = self.idents[i].caller.clone() else { continue };
            let lease_id = LeaseId::new(0);
            ask(&self.engine(), |reply| Command::Release {
                caller,
                lease_id,
                job_ids: vec![],
                reply,
            });
            self.idents[i].held.clear();
        }
        let finishers: Vec<usize> =
            (1..=self.setup.honest_hosts).map(|p| self.new_ident(p)).collect();
        self.check()?;
        let deadline = Instant::now() + FINISH_WITHIN;
        let mut idle_rounds = 0;
        let complete = 'rounds: loop {
            if Instant::now() >= deadline {
                break false;
            }
            let mut any = false;
            for &i in &finishers {
                let Some(caller) = self.idents[i].caller.clone() else {
                    self.register(i);
                    continue;
                };
                let c = caller.clone();
                let reply =
                    ask(&self.engine(), |reply| Command::Lease { caller: c, free_slots: 4, reply });
                if reply.run_complete {
                    break 'rounds true;
                }
                let Ok(granted) = reply.outcome else { continue };
                if granted.job_ids.is_empty() {
                    continue;
                }
                any = true;
                let answers = granted
                    .job_ids
                    .iter()
                    .map(|&job_id| JobAnswer {
                        caller: caller.clone(),
                        lease_id: granted.lease_id,
                        job_id,
                        finding: Finding::Solved {
                            counts: self.board.truth[job_id.get() as usize],
                            seconds: 0.001,
                        },
                    })
                    .collect();
                send_answers(&self.engine(), answers);
                self.check()?;
            }
            if any {
                idle_rounds = 0;
                continue;
            }
            idle_rounds += 1;
            let held = Reader::open(&self.state).job_states().values().any(|s| s == "held");
            if held && idle_rounds > 3 && self.stats.requeues < 3 {
                self.restart(true);
                self.check()?;
                idle_rounds = 0;
                continue;
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let result = if complete { self.published_result() } else { None };
        let reader = Reader::open(&self.state);
        let rows = reader.results();
        let lies: Vec<u64> = rows
            .iter()
            .filter(|r| r.counted && r.solutions != self.board.truth[r.job_id as usize].solutions)
            .map(|r| r.job_id)
            .collect();
        self.stats.coordinator_alone = rows
            .iter()
            .filter(|r| r.counted)
            .filter(|r| {
                rows.iter()
                    .filter(|o| o.job_id == r.job_id && o.solutions == r.solutions)
                    .all(|o| o.worker_id == 0)
            })
            .count();
        self.stats.complete = result.is_some();
        self.stats.lies_counted = lies.len();
        self.stats.adversary_untrusted =
            reader.untrusted().iter().filter(|w| self.party_of.get(w) == Some(&0)).count();
        self.log(format!(
            "-- end: complete {}, total {:?}, lies counted on jobs {lies:?}",
            result.is_some(),
            result.as_ref().map(|r| r.total)
        ));
        if !self.setup.must_be_exact() {
            return Ok(());
        }
        if !lies.is_empty() {
            return Err(format!("end: the adversary's lies counted on jobs {lies:?}"));
        }
        let Some(result) = result else {
            if std::env::var_os("NQ_ENGINE_ADVERSARY_IGNORE_STALLS").is_some() {
                return Ok(());
            }
            let mut states: BTreeMap<&str, usize> = BTreeMap::new();
            let all = reader.job_states();
            for s in all.values() {
                *states.entry(s.as_str()).or_default() += 1;
            }
            return Err(format!("end: the run did not complete (jobs: {states:?})"));
        };
        if result.total != self.board.total {
            return Err(format!("end: total {} instead of {}", result.total, self.board.total));
        }
        if self.setup.replication >= 2 {
            let evidence = Store::open_existing(&self.state).unwrap().evidence().unwrap();
            if evidence.jobs_one_party != 0 {
                return Err(format!(
                    "end: a record run rests {} jobs on one credential's word",
                    evidence.jobs_one_party
                ));
            }
        }
        Ok(())
    }

    fn published_result(&self) -> Option<nqueens_result::RunResult> {
        let snapshots = &self.started.as_ref()?.snapshots;
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let result = snapshots.borrow().progress.result.clone();
            if result.is_some() || Instant::now() >= deadline {
                return result;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

/// One result row, as the checks read it.
#[derive(Debug, PartialEq)]
struct Row {
    job_id: u64,
    worker_id: u64,
    counted: bool,
    solutions: u64,
    credential: Option<String>,
}

/// A read-only connection to the state file, beside the running engine.
struct Reader(rusqlite::Connection);

impl Reader {
    fn open(path: &Path) -> Reader {
        let flags = rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY;
        Reader(rusqlite::Connection::open_with_flags(path, flags).unwrap())
    }

    fn results(&self) -> Vec<Row> {
        let mut q = self
            .0
            .prepare("SELECT job_id, worker_id, counted, solutions, credential FROM results")
            .unwrap();
        q.query_map([], |r| {
            Ok(Row {
                job_id: r.get::<_, i64>(0)? as u64,
                worker_id: r.get::<_, i64>(1)? as u64,
                counted: r.get(2)?,
                solutions: r.get::<_, i64>(3)? as u64,
                credential: r.get(4)?,
            })
        })
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap()
    }

    fn ids(&self, query: &str) -> BTreeSet<u64> {
        let mut q = self.0.prepare(query).unwrap();
        q.query_map([], |r| r.get::<_, i64>(0)).unwrap().map(|v| v.unwrap() as u64).collect()
    }

    fn worker_ids(&self) -> BTreeSet<u64> {
        self.ids("SELECT id FROM workers")
    }

    fn untrusted(&self) -> BTreeSet<u64> {
        self.ids("SELECT worker_id FROM untrusted_workers")
    }

    fn job_states(&self) -> BTreeMap<u64, String> {
        let mut q = self.0.prepare("SELECT id, state FROM jobs").unwrap();
        q.query_map([], |r| Ok((r.get::<_, i64>(0)? as u64, r.get(1)?)))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap()
    }
}

/// Runs `events` under `setup`: the first failed check (with the trace), or what the run
/// ended with.
fn run_sequence(setup: Setup, events: &[Event], board: &Board) -> Result<Stats, (String, String)> {
    let mut world = World::new(setup, board);
    let mut outcome = Ok(());
    for (step, &event) in events.iter().enumerate() {
        world.log(format!("#{step} {event:?}"));
        world.apply(event);
        outcome = world.check().map_err(|e| format!("after step {step}: {e}"));
        if outcome.is_err() {
            break;
        }
    }
    if outcome.is_ok() {
        outcome = world.finish();
    }
    let stats = world.stats.clone();
    let trace = world.trace.join("\n");
    if world.started.is_some() {
        world.stop();
    }
    match outcome {
        Ok(()) => Ok(stats),
        Err(e) => Err((e, trace)),
    }
}

/// A sequence from `rng`: its setup, the first registrations, and events biased toward the
/// attack shapes (releases and late answers of the adversary, floods that forget its idle
/// identities, restarts).
fn generate(rng: &mut SplitMix64) -> (Setup, Vec<Event>) {
    let mut below = |k: u64| rng.below(k) as usize;
    let adversary_shared = below(2) == 0;
    let setup = Setup {
        n: if below(5) == 0 { 9 } else { 8 },
        replication: if below(3) == 0 { 1 } else { 2 },
        max_unproven: 2 + below(2),
        referee: below(3) == 0,
        recheck: [0.0, 0.5, 1.0][below(3)],
        adversary_shared,
        honest_hosts: 2 + below(2),
        honest_shared: !adversary_shared && below(2) == 0,
    };
    // How often the adversary lies: rarely (to earn trust first), or mostly.
    let lie_in_10 = [2, 5, 9][below(3)];
    let party_count = 1 + setup.honest_hosts + usize::from(setup.honest_shared);
    let mut events = vec![Event::Register { party: 0 }, Event::Register { party: 0 }];
    events.extend((1..party_count).map(|party| Event::Register { party }));
    for _ in 0..EVENTS {
        let side = |below: &mut dyn FnMut(u64) -> usize, adversary_in_10: usize| {
            if below(10) < adversary_in_10 {
                Side::Adversary
            } else {
                Side::Honest
            }
        };
        let roll = below(100);
        let who = below(8);
        let pick = below(8);
        let lie = below(10) < lie_in_10;
        let event = match roll {
            0..=9 => {
                let party = if below(10) < 6 { 0 } else { below(party_count as u64) };
                Event::Register { party }
            }
            10..=33 => Event::Lease { side: side(&mut below, 6), who, slots: 1 + below(3) as u32 },
            34..=45 => Event::Release { side: side(&mut below, 8), who, pick },
            46..=70 => Event::Answer { side: side(&mut below, 5), who, pick, lie },
            71..=87 => Event::Late { side: side(&mut below, 8), who, pick, lie },
            88..=95 => Event::Flood,
            _ => Event::Restart,
        };
        events.push(event);
    }
    (setup, events)
}

/// Drops events while the sequence still fails the same way; the shortest found.
fn shrink(setup: Setup, mut events: Vec<Event>, board: &Board, kind: &str) -> Vec<Event> {
    let fails = |events: &[Event]| match run_sequence(setup, events, board) {
        Err((e, _)) => failure_kind(&e) == kind,
        Ok(_) => false,
    };
    let started = Instant::now();
    let mut chunk = events.len() / 2;
    while chunk >= 1 && started.elapsed() < Duration::from_secs(120) {
        let mut at = 0;
        let mut dropped = false;
        while at < events.len() {
            let mut candidate = events.clone();
            candidate.drain(at..(at + chunk).min(events.len()));
            if fails(&candidate) {
                events = candidate;
                dropped = true;
            } else {
                at += chunk;
            }
        }
        if !dropped {
            chunk /= 2;
        }
    }
    events
}

/// Which check a failure broke ("invariant 1", "end", ...).
fn failure_kind(failure: &str) -> String {
    let tail = failure.split_once(": ").map_or(failure, |(head, tail)| {
        if head.starts_with("after step") {
            tail
        } else {
            failure
        }
    });
    tail.split(':').next().unwrap_or(tail).to_owned()
}

/// Whether a record run's job counted on the coordinator's own solve alone fails invariant 1.
fn strict_coordinator() -> bool {
    std::env::var_os("NQ_ENGINE_ADVERSARY_STRICT").is_some()
}

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.parse().ok())
}

#[test]
fn adversary_engine_random_sequences_keep_the_invariants() {
    let sequences = env_u64("NQ_ENGINE_ADVERSARY_SEQUENCES").unwrap_or(SEQUENCES);
    let seed = env_u64("NQ_ENGINE_ADVERSARY_SEED").unwrap_or(0x00ad_7e25_a121);
    let boards = [Board::new(8), Board::new(9)];
    let started = Instant::now();
    let mut summary: BTreeMap<String, [usize; 7]> = BTreeMap::new();
    for k in 0..sequences {
        let mut rng = SplitMix64::new(seed.wrapping_add(k));
        let (setup, events) = generate(&mut rng);
        let board = &boards[usize::from(setup.n == 9)];
        match run_sequence(setup, &events, board) {
            Ok(stats) => {
                let key = format!(
                    "r{} {} ref={} recheck={}",
                    setup.replication,
                    if setup.adversary_shared { "shared" } else { "per-host" },
                    setup.referee,
                    setup.recheck
                );
                let e = summary.entry(key).or_default();
                let figures = [
                    1,
                    usize::from(stats.complete),
                    stats.lies_counted,
                    stats.adversary_untrusted,
                    stats.forgotten,
                    stats.late_answers,
                    stats.coordinator_alone,
                ];
                for (sum, x) in e.iter_mut().zip(figures) {
                    *sum += x;
                }
            }
            Err((failure, first_trace)) => {
                let kind = failure_kind(&failure);
                eprintln!(
                    "sequence {k} (seed {seed:#x}+{k}) {setup:?} fails: {failure}\nshrinking..."
                );
                let shrunk = shrink(setup, events.clone(), board, &kind);
                let (failure, trace, shown) = match run_sequence(setup, &shrunk, board) {
                    Err((f, t)) => (f, t, shrunk.as_slice()),
                    // Not reproduced (a race with the referee): the first run as it was.
                    Ok(_) => (failure, first_trace, events.as_slice()),
                };
                let mut text = String::new();
                for (i, e) in shown.iter().enumerate() {
                    let _ = writeln!(text, "  {i}: {e:?}");
                }
                panic!(
                    "adversary model: sequence {k} (seed {seed:#x}+{k}) fails\n{setup:?}\n{failure}\n\
                     shrunk to {} of {} events:\n{text}what happened:\n{trace}",
                    shown.len(),
                    events.len()
                );
            }
        }
    }
    eprintln!(
        "adversary model: {sequences} sequences in {:.1} s (runs, complete, lies counted, adversary identities untrusted, identities forgotten, late answers, jobs counted on the coordinator alone):",
        started.elapsed().as_secs_f64()
    );
    for (key, v) in summary {
        eprintln!("  {key}: {v:?}");
    }
}

/// The attack that once got a wrong total into a record run, replayed on the engine: shared-token
/// identities answer a job late with one lie, a flood of idle registrations gets two of them
/// forgotten, and a third agrees late. The forgotten identities' answers stay the shared
/// token's word: the job does not count on them, and the honest parties finish the run exact.
#[test]
fn adversary_engine_forgotten_identities_stay_one_credential() {
    let board = Board::new(8);
    let setup = Setup {
        n: 8,
        replication: 2,
        max_unproven: 3,
        referee: false,
        recheck: 0.0,
        adversary_shared: true,
        honest_hosts: 2,
        honest_shared: false,
    };
    let mut world = World::new(setup, &board);
    let [s1, s2, s3] = [0, 0, 0].map(|p| world.new_ident(p));
    let engine = world.engine();
    let caller = |world: &World, i: usize| world.idents[i].caller.clone().expect("registered");
    let lease_jobs = |c: Caller, slots: u32| {
        let reply = ask(&engine, |reply| Command::Lease { caller: c, free_slots: slots, reply });
        reply.outcome.expect("lease granted")
    };
    let release = |c: Caller, lease_id: LeaseId, job: JobId| {
        let reply = ask(&engine, |reply| Command::Release {
            caller: c,
            lease_id,
            job_ids: vec![job],
            reply,
        });
        assert_eq!(reply.outcome, Ok(1), "released");
    };
    let lie = |job: JobId| {
        let mut counts = board.truth[job.get() as usize];
        counts.solutions += 1;
        Finding::Solved { counts, seconds: 0.001 }
    };
    // s3 leases two jobs and gives the first (J) back, keeping the second.
    let held = lease_jobs(caller(&world, s3), 1);
    assert!(held.job_ids.len() >= 2, "s3 leases two jobs: {:?}", held.job_ids);
    let j = held.job_ids[0];
    release(caller(&world, s3), held.lease_id, j);
    // s1 and s2 each lease J and give it back.
    let mut old = Vec::new();
    for i in [s1, s2] {
        let granted = lease_jobs(caller(&world, i), 1);
        assert!(granted.job_ids.contains(&j), "{} leases J: {:?}", world.idents[i].name, granted);
        let c = caller(&world, i);
        let lease_id = granted.lease_id;
        let reply =
            ask(&engine, |reply| Command::Release { caller: c, lease_id, job_ids: vec![], reply });
        assert_eq!(reply.outcome, Ok(granted.job_ids.len() as u32), "released");
        old.push(granted.lease_id);
    }
    // s1 and s2 answer J late with the lie.
    let mut verdicts = Vec::new();
    for (i, lease_id) in [s1, s2].into_iter().zip(old) {
        let answer = JobAnswer { caller: caller(&world, i), lease_id, job_id: j, finding: lie(j) };
        let verdict = send_answers(&engine, vec![answer]).remove(0);
        world.log(format!("{} answers J late with the lie: {verdict:?}", world.idents[i].name));
        verdicts.push(verdict);
    }
    world.check().unwrap();
    // The first late lie is kept as the shared token's opinion (Accepted: s1 has delivered, so
    // the registry keeps it); the second is that credential's word again (a duplicate).
    assert_eq!(verdicts, [Ok(Verdict::Accepted), Ok(Verdict::Duplicate)]);
    // A flood of idle identities gets those that delivered nothing forgotten: s2.
    let ids = [s1, s2].map(|i| caller(&world, i).worker_id.get());
    world.apply(Event::Flood);
    world.check().unwrap();
    let rows = Reader::open(&world.state).worker_ids();
    assert!(
        rows.contains(&ids[0]) && !rows.contains(&ids[1]),
        "the flood forgot s2 and kept s1 (w{ids:?}); worker rows {rows:?}\n{}",
        world.trace.join("\n")
    );
    // s3 answers J late with the lie.
    let answer = JobAnswer {
        caller: caller(&world, s3),
        lease_id: held.lease_id,
        job_id: j,
        finding: lie(j),
    };
    let verdict = send_answers(&engine, vec![answer]).remove(0);
    world.log(format!("s3 answers J late with the lie: {verdict:?}"));
    world.check().unwrap();
    let counted =
        Reader::open(&world.state).results().into_iter().any(|r| r.job_id == j.get() && r.counted);
    assert!(!counted, "J counted on the shared token's word\n{}", world.trace.join("\n"));
    // The honest parties finish: exact, nothing on one credential's word.
    world.finish().unwrap_or_else(|e| panic!("{e}\n{}", world.trace.join("\n")));
    let evidence = Store::open_existing(&world.state).unwrap().evidence().unwrap();
    assert_eq!(evidence.jobs_one_party, 0, "{}", evidence.summary());
    world.stop();
}
