//! The invariants of the parent module's docs, checked against the ground truth after every
//! step, and the honest parties' finish of a run.

use super::*;
use std::panic::{catch_unwind, AssertUnwindSafe};

impl World {
    pub(super) fn giver(&self, w: WorkerId) -> Giver {
        if w == COORDINATOR {
            return Giver::Coordinator;
        }
        self.idents.get(&w.get()).map_or(Giver::Stranger(w.get()), |i| Giver::Party(i.party))
    }

    /// Whether an identity of honest `party` falls under the shared token's stated limit: a
    /// plain run without the referee, the party and the adversary both on the shared token.
    pub(super) fn stated_limit(&self, party: usize) -> bool {
        let p = &self.setup.parties;
        self.setup.replication < 2 && !self.setup.referee && p[0].shared && p[party].shared
    }

    /// The invariants, against the ground truth.
    pub(super) fn check(&self) -> Result<(), String> {
        let s = &self.scheduler;
        catch_unwind(AssertUnwindSafe(|| s.check_invariants()))
            .map_err(|e| format!("scheduler invariant: {}", panic_text(&e)))?;
        let untrusted = |w: WorkerId| self.stored.untrusted.contains(&w);
        for i in 0..self.setup.jobs {
            let job = JobId::new(i);
            let state = s.state(job).unwrap();
            if self.stored.jobs[i as usize].state != state {
                return Err(format!("job {i}: stored state differs from the scheduler's {state}"));
            }
            let rows = self.stored.results.get(&job).map_or(&[][..], Vec::as_slice);
            let counted: Vec<_> = rows.iter().filter(|r| r.counted).collect();
            if counted.len() > 1 {
                return Err(format!("job {i} has {} counted rows", counted.len()));
            }
            let Some(c) = counted.first() else { continue };
            if s.counted(job) != Some((c.worker, c.counts)) {
                return Err(format!(
                    "job {i}: the stored counted row differs from the scheduler's"
                ));
            }
            let agreeing = rows.iter().filter(|r| r.counts.same_answer(&c.counts));
            let givers: BTreeSet<Giver> = agreeing.clone().map(|r| self.giver(r.worker)).collect();
            let is_lie = !c.counts.same_answer(&truth(i));
            // 1. A record run counts a job only on two real parties (or the coordinator and one).
            // The coordinator's own solve alone (a referee's ruling on a job in dispute or
            // under review) is no party's word: the evidence calls it `Coordinator`.
            let coordinator_alone = givers.len() == 1 && givers.contains(&Giver::Coordinator);
            if self.setup.replication >= 2 && givers.len() < 2 && !coordinator_alone {
                return Err(format!(
                    "invariant 1: record run counted job {i} ({}) on one real party's word: {givers:?}",
                    if is_lie { "a lie" } else { "the truth" }
                ));
            }
            // 3. A lie is counted only where an escape is allowed.
            if is_lie && (self.setup.replication >= 2 || self.setup.recheck >= 1.0) {
                return Err(format!("invariant 3: a lie counted on job {i} by {givers:?}"));
            }
            // 2. The evidence claims no more independence than the truth.
            if state == JobState::Done {
                let answers: Vec<_> = rows.iter().map(|r| r.answer()).collect();
                let claimed = basis(&answers, &c.counts, untrusted);
                let live: BTreeSet<Giver> = agreeing
                    .filter(|r| !untrusted(r.worker))
                    .map(|r| self.giver(r.worker))
                    .collect();
                let ok = match claimed {
                    Basis::Independent => live.len() >= 2,
                    Basis::Coordinator => live.contains(&Giver::Coordinator),
                    Basis::OneParty => true,
                };
                if !ok {
                    return Err(format!(
                        "invariant 2: evidence says {claimed:?} for job {i}, given by {live:?}"
                    ));
                }
            }
        }
        // 4. No honest identity is untrusted.
        for (&w, ident) in &self.idents {
            if ident.party != 0 && s.is_untrusted(WorkerId::new(w)) {
                if self.stated_limit(ident.party) {
                    continue;
                }
                return Err(format!(
                    "invariant 4: honest identity w{w} of {} is untrusted",
                    self.setup.parties[ident.party].name
                ));
            }
        }
        Ok(())
    }
}

impl World {
    /// How many credentials the honest parties hold (the shared token counts once, whoever else
    /// holds it).
    pub(super) fn honest_credentials(&self) -> usize {
        let creds: BTreeSet<u64> =
            (1..self.setup.parties.len()).map(|p| self.credential(p)).collect();
        creds.len()
    }

    /// Whether the run is promised to end (`docs/threat-model.md`, "No party stalls a run"):
    /// with the referee, one honest credential in a plain run and two in a record run; without
    /// it, two honest credentials.
    pub(super) fn liveness_promised(&self) -> bool {
        let needed = if self.setup.referee && self.setup.replication < 2 { 1 } else { 2 };
        self.honest_credentials() >= needed
    }

    /// Honest identities (a fresh one per honest party, and every live honest one) finish the
    /// run where they can, with the referee's rulings where it has one; checked after every step.
    /// The adversary is silent from here on. A held job does not stop the finish: the honest
    /// parties go on, and a run promised to end that does not within `FINISH_ROUNDS` rounds of
    /// leases (or only by an operator's requeue) is a violation ("liveness").
    pub(super) fn finish(&mut self) -> Result<(), String> {
        let last = self.idents.keys().max().copied().unwrap_or(0);
        for party in 1..self.setup.parties.len() {
            self.apply(&Ev::Register { w: last + party as u64, party })?;
        }
        let held_seen = self.finish_rounds()?;
        let complete = self.scheduler.is_complete();
        if complete {
            let exact = (0..self.setup.jobs).all(|i| {
                self.scheduler.counted(JobId::new(i)).is_some_and(|(_, c)| c.same_answer(&truth(i)))
            });
            self.note(if exact { "finished exact" } else { "finished with an escaped lie" });
        } else {
            self.note("not finished");
        }
        if held_seen {
            self.note("held job seen");
        }
        if self.liveness_promised() && (!complete || held_seen) {
            let states: Vec<String> = (0..self.setup.jobs)
                .map(|i| format!("{i}:{:?}", self.scheduler.state(JobId::new(i)).unwrap()))
                .collect();
            let why = if held_seen { "a job was held" } else { "stalled" };
            return Err(format!(
                "liveness: {why} with {} honest credential(s), referee {}, replication {}: {}",
                self.honest_credentials(),
                self.setup.referee,
                self.setup.replication,
                states.join(" ")
            ));
        }
        // Record-run jobs settled by the coordinator's own solve alone (a referee's ruling):
        // allowed by invariant 1, counted here.
        if self.setup.replication >= 2 {
            for i in 0..self.setup.jobs {
                let rows = self.stored.results.get(&JobId::new(i)).map_or(&[][..], Vec::as_slice);
                let Some(c) = rows.iter().find(|r| r.counted) else { continue };
                let givers: BTreeSet<Giver> = rows
                    .iter()
                    .filter(|r| r.counts.same_answer(&c.counts))
                    .map(|r| self.giver(r.worker))
                    .collect();
                if givers.len() == 1 && givers.contains(&Giver::Coordinator) {
                    self.note("record-run job on the coordinator's solve alone");
                }
            }
        }
        let honest_untrusted = self
            .idents
            .iter()
            .any(|(&w, i)| i.party != 0 && self.scheduler.is_untrusted(WorkerId::new(w)));
        if honest_untrusted {
            self.note("honest shared identity untrusted under the stated limit");
        }
        let adversary_untrusted = self
            .idents
            .iter()
            .any(|(&w, i)| i.party == 0 && self.scheduler.is_untrusted(WorkerId::new(w)));
        if adversary_untrusted {
            self.note("adversary caught");
        }
        self.note(format!(
            "runs replication={} recheck={} referee={} adversary={}",
            self.setup.replication,
            self.setup.recheck,
            self.setup.referee,
            if self.setup.parties[0].shared { "shared" } else { "host" }
        ));
        Ok(())
    }

    /// The rounds of [`Self::finish`]: a wait past every lease, the referee's rulings, and the
    /// honest identities' leases and answers, until the run completes or nobody honest gets work.
    /// Returns whether a job was seen held.
    fn finish_rounds(&mut self) -> Result<bool, String> {
        let mut idle_rounds = 0;
        let mut held_seen = false;
        for _round in 0..FINISH_ROUNDS {
            let s = &self.scheduler;
            held_seen |= s.count(JobState::Held) > 0;
            if s.is_complete() {
                break;
            }
            self.apply(&Ev::Wait { secs: 3 * LEASE.as_secs() })?;
            if self.setup.referee {
                self.apply(&Ev::Referee)?;
            }
            let honest: Vec<u64> = self
                .idents
                .iter()
                .filter(|(&w, i)| {
                    i.party != 0 && !i.forgotten && !self.scheduler.is_untrusted(WorkerId::new(w))
                })
                .map(|(&w, _)| w)
                .collect();
            idle_rounds += 1;
            for w in honest {
                let before = self.idents[&w].leases.len();
                self.apply(&Ev::Lease { w, size: 4, checks: false })?;
                let ident = &self.idents[&w];
                if ident.leases.len() == before {
                    continue;
                }
                idle_rounds = 0;
                let jobs = ident.leases.last().unwrap().1.clone();
                for job in jobs {
                    self.apply(&Ev::Answer { w, job: job.get(), lie: 0 })?;
                }
            }
            // Nothing to lease for anyone honest, with every lease expired: it is stuck (jobs
            // only another credential may answer, probation answers nobody can check, or held).
            if idle_rounds >= 3 {
                break;
            }
        }
        Ok(held_seen)
    }
}
