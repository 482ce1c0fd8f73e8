//! The generator of random cases, biased toward the attack shapes, and the shrinking and report
//! of a failing one.

use super::*;

/// The events this model draws, and how often (out of 100).
const MIX: Mix = Mix(&[
    (EventKind::Register, 8),
    (EventKind::Forget, 6),
    (EventKind::Lease, 18),
    (EventKind::Answer, 30),
    (EventKind::Release, 4),
    (EventKind::Heartbeat, 4),
    (EventKind::Wait, 8),
    (EventKind::Restart, 2),
    (EventKind::Referee, 6),
    (EventKind::Reference, 2),
    (EventKind::Flood, 6),
    (EventKind::HonestBurst, 3),
    (EventKind::Late, 3),
]);

pub(super) struct Generator {
    pub(super) rng: SplitMix64,
    pub(super) world: World,
    pub(super) events: Vec<Ev>,
    pub(super) next_w: u64,
    /// The jobs the adversary lies on (the same lie from every identity).
    pub(super) targets: BTreeSet<u64>,
    pub(super) failure: Option<String>,
}

impl Generator {
    pub(super) fn new(seed: u64) -> Generator {
        let mut rng = SplitMix64::new(seed);
        let jobs = 3 + rng.below(6);
        let honest = 1 + rng.below(3) as usize;
        let mut parties = vec![PartyDef::adversary(rng.below(2) == 0)];
        for h in 1..=honest {
            parties.push(PartyDef::honest(h, rng.below(5) < 2));
        }
        let setup = Setup {
            jobs,
            replication: 1 + rng.below(2) as u8,
            recheck: [0.0, 0.3, 1.0][rng.below(3) as usize],
            probation: [0, 2][rng.below(2) as usize],
            referee: rng.below(2) == 0,
            seed,
            parties,
        };
        // Lies on a few jobs, the cheapest ones (the run's last) more often.
        let mut targets = BTreeSet::new();
        for _ in 0..1 + rng.below(3) {
            let job = if rng.below(2) == 0 {
                (0..jobs).filter(|i| i % 5 == 0).nth(rng.below(jobs.div_ceil(5)) as usize)
            } else {
                Some(rng.below(jobs))
            };
            targets.extend(job);
        }
        let world = World::new(&setup);
        Generator { rng, world, events: Vec::new(), next_w: 1, targets, failure: None }
    }

    pub(super) fn emit(&mut self, ev: Ev) {
        if self.failure.is_some() {
            return;
        }
        if let Err(e) = self.world.apply(&ev) {
            self.failure = Some(e);
        }
        self.events.push(ev);
    }

    pub(super) fn pick<T: Copy>(&mut self, from: &[T]) -> Option<T> {
        pick(&mut self.rng, from)
    }

    pub(super) fn live(&self, adversary: Option<bool>) -> Vec<u64> {
        self.world
            .idents
            .iter()
            .filter(|(_, i)| !i.forgotten && adversary.is_none_or(|a| a == (i.party == 0)))
            .map(|(&w, _)| w)
            .collect()
    }

    /// A live identity, the adversary's half the time.
    pub(super) fn someone(&mut self) -> Option<u64> {
        let adversary = Side::draw(&mut self.rng, 1, 2).is_adversary();
        let side = self.live(Some(adversary));
        if side.is_empty() {
            let all = self.live(None);
            return self.pick(&all);
        }
        self.pick(&side)
    }

    pub(super) fn register(&mut self, party: usize) -> u64 {
        let w = self.next_w;
        self.next_w += 1;
        self.emit(Ev::Register { w, party });
        w
    }

    pub(super) fn lie_for(&mut self, w: u64, job: u64) -> u64 {
        if self.world.idents.get(&w).is_none_or(|i| i.party != 0) {
            return 0;
        }
        // Mostly a lie on the targets, of one of several values; elsewhere the truth too (to earn
        // trust, and to be counted on a job it then gets untrusted elsewhere for), now and then
        // counts no solver gives.
        match (self.targets.contains(&job), self.rng.below(100)) {
            (_, 0..=1) => IMPOSSIBLE,
            (true, 2..=84) | (false, 2..=44) => 1 + self.rng.below(3),
            _ => 0,
        }
    }

    /// Answers every job of `w`'s latest lease (lies where the adversary lies).
    pub(super) fn answer_latest(&mut self, w: u64) {
        let Some((_, jobs)) = self.world.idents.get(&w).and_then(|i| i.leases.last().cloned())
        else {
            return;
        };
        for job in jobs {
            let lie = self.lie_for(w, job.get());
            self.emit(Ev::Answer { w, job: job.get(), lie });
        }
    }

    pub(super) fn step(&mut self) {
        let honest_parties = self.world.setup.parties.len() as u64 - 1;
        match MIX.draw(&mut self.rng) {
            EventKind::Register => {
                let party =
                    if self.rng.below(10) < 6 { 0 } else { 1 + self.rng.below(honest_parties) };
                self.register(party as usize);
            }
            EventKind::Forget => self.forget_someone(),
            EventKind::Lease => {
                if let Some(w) = self.someone() {
                    let size = 1 + self.rng.below(3) as usize;
                    let checks = self.rng.below(5) == 0;
                    self.emit(Ev::Lease { w, size, checks });
                }
            }
            EventKind::Answer => self.answer_someone(),
            EventKind::Release => {
                if let Some(w) = self.someone() {
                    self.emit(Ev::Release { w });
                }
            }
            EventKind::Heartbeat => {
                if let Some(w) = self.someone() {
                    self.emit(Ev::Heartbeat { w });
                }
            }
            EventKind::Wait => {
                let secs = 1 + self.rng.below(25);
                self.emit(Ev::Wait { secs });
            }
            EventKind::Restart => self.emit(Ev::Restart),
            EventKind::Referee => {
                if self.world.setup.referee {
                    self.emit(Ev::Referee);
                }
            }
            EventKind::Reference => {
                let job = self.rng.below(self.world.setup.jobs);
                self.emit(Ev::Reference { job });
            }
            EventKind::Flood => self.flood(),
            EventKind::HonestBurst => {
                // An honest burst: a lease answered in full.
                let honest = self.live(Some(false));
                let w = match self.pick(&honest) {
                    Some(w) => w,
                    None => {
                        let party = 1 + self.rng.below(honest_parties) as usize;
                        self.register(party)
                    }
                };
                let size = 1 + self.rng.below(3) as usize;
                self.emit(Ev::Lease { w, size, checks: false });
                self.answer_latest(w);
            }
            EventKind::Late => self.late_adversary_answers(),
        }
    }

    /// Forgets a forgettable identity, the adversary's mostly.
    fn forget_someone(&mut self) {
        let all: Vec<u64> =
            self.live(None).into_iter().filter(|&w| self.world.forgettable(w)).collect();
        let adv: Vec<u64> =
            all.iter().copied().filter(|w| self.world.idents[w].party == 0).collect();
        let w = if !adv.is_empty() && self.rng.below(5) > 0 {
            self.pick(&adv)
        } else {
            self.pick(&all)
        };
        if let Some(w) = w {
            self.emit(Ev::Forget { w });
        }
    }

    /// Someone answers one job of one of its leases.
    fn answer_someone(&mut self) {
        let Some(w) = self.someone() else { return };
        let leases = self.world.idents[&w].leases.clone();
        let Some(last) = leases.last() else { return };
        // The latest lease mostly; an older one for a late answer.
        let (_, jobs) = if self.rng.below(10) < 7 {
            last.clone()
        } else {
            leases[self.rng.below(leases.len() as u64) as usize].clone()
        };
        let Some(job) = self.pick(&jobs) else { return };
        let lie = self.lie_for(w, job.get());
        self.emit(Ev::Answer { w, job: job.get(), lie });
    }

    fn late_adversary_answers(&mut self) {
        // A late answer of an adversary identity under any of its leases: the lie, or
        // (saying both) the truth.
        let adv = self.live(Some(true));
        let Some(w) = self.pick(&adv) else { return };
        let leases = self.world.idents[&w].leases.clone();
        let Some((_, jobs)) = self.pick(&leases.iter().collect::<Vec<_>>()).cloned() else {
            return;
        };
        if let Some(job) = self.pick(&jobs) {
            // The lie, another lie, or (saying several things) the truth: one identity
            // answering one job several ways.
            for _ in 0..1 + self.rng.below(3) {
                let lie = self.rng.below(4);
                self.emit(Ev::Answer { w, job: job.get(), lie });
            }
        }
    }

    /// The attack of the record-run incident: fresh adversary identities lease and lie
    /// (conflicting with honest opinions), give their jobs back and are forgotten; then another
    /// identity lies the same, and an older one agrees late.
    pub(super) fn flood(&mut self) {
        let k = 1 + self.rng.below(3);
        let all = self.world.setup.jobs as usize;
        let mut flooders = Vec::new();
        for _ in 0..k {
            let w = self.register(0);
            self.emit(Ev::Lease { w, size: all, checks: false });
            self.answer_latest(w);
            self.emit(Ev::Release { w });
            flooders.push(w);
        }
        if self.rng.below(4) > 0 {
            for &w in &flooders {
                self.emit(Ev::Forget { w });
            }
        }
        if self.rng.below(2) == 0 {
            let w = self.register(0);
            self.emit(Ev::Lease { w, size: all, checks: false });
            self.answer_latest(w);
        }
        // An older identity agrees late, on a target job of one of its old leases.
        let adv = self.live(Some(true));
        if let Some(w) = self.pick(&adv) {
            let leases = self.world.idents[&w].leases.clone();
            for (_, jobs) in leases.iter().rev().skip(1).take(1) {
                let targets: Vec<JobId> =
                    jobs.iter().copied().filter(|j| self.targets.contains(&j.get())).collect();
                for job in targets {
                    self.emit(Ev::Answer { w, job: job.get(), lie: 1 });
                }
            }
        }
    }
}

/// One generated sequence: its case, its world and its first violation (the sequence stops
/// there; the honest finish runs otherwise).
pub(super) fn generate(seed: u64) -> (Case, World, Result<(), String>) {
    let mut g = Generator::new(seed);
    let steps = 20 + g.rng.below(100) as usize;
    while g.events.len() < steps && g.failure.is_none() {
        g.step();
    }
    let case = Case { setup: g.world.setup.clone(), events: g.events, expects: Vec::new() };
    let mut world = g.world;
    let result = match g.failure {
        Some(e) => Err(e),
        None => catch_panic(|| world.finish()),
    };
    (case, world, result)
}

/// Shrinks a failing case: its events (the shared delta debugging), then its honest parties,
/// while it still fails with a violation of the same kind.
pub(super) fn shrink(case: &Case, violation: &str) -> (Case, String) {
    let kind = failure_kind(violation).to_owned();
    let fails = |events: &[Ev]| {
        let candidate = Case { events: events.to_vec(), ..case.clone() };
        run_case(&candidate).1.err().filter(|m| failure_kind(m) == kind)
    };
    let (events, shrunk) = nqueens_test_support::shrink(&case.events, fails, None);
    let mut best = Case { events, ..case.clone() };
    let mut message = shrunk.unwrap_or_else(|| violation.to_owned());
    // Honest parties no event registers: dropped where the case still fails.
    let mut party = best.setup.parties.len();
    while party > 1 {
        party -= 1;
        if best.events.iter().any(|e| matches!(e, Ev::Register { party: p, .. } if *p == party)) {
            continue;
        }
        let mut candidate = best.clone();
        candidate.setup.parties.remove(party);
        for ev in &mut candidate.events {
            if let Ev::Register { party: p, .. } = ev {
                if *p > party {
                    *p -= 1;
                }
            }
        }
        if let Err(m) = run_case(&candidate).1 {
            if failure_kind(&m) == kind {
                best = candidate;
                message = m;
            }
        }
    }
    (best, message)
}

/// Shrinks a failure, prints it in the case format and writes it under the target's temporary
/// directory; the text.
pub(super) fn report(seed: u64, case: &Case, violation: &str) -> String {
    let (small, message) = shrink(case, violation);
    let text = format!(
        "# found by seed {seed} ({} events, shrunk to {}): {message}\n{}",
        case.events.len(),
        small.events.len(),
        small.to_text()
    );
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("adversary");
    let _ = std::fs::create_dir_all(&dir);
    let path = dir.join(format!("failure-{seed}.txt"));
    let _ = std::fs::write(&path, &text);
    eprintln!("adversary: a violation, shrunk (written to {}):\n{text}", path.display());
    text
}
