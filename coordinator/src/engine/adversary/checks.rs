//! The invariants of the parent module's docs, read from the state file beside the running
//! engine (a read-only connection) after every step, and the honest parties' finish of a run.

use super::*;

impl World<'_> {
    /// Marks the identities whose worker rows are gone as forgotten.
    pub(super) fn sync_forgotten(&mut self, reader: &Reader) {
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
    pub(super) fn check(&mut self) -> Result<(), String> {
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

    pub(super) fn check_rows(
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

    pub(super) fn label(&self, p: usize) -> String {
        if p == COORDINATOR {
            "coordinator".into()
        } else {
            self.parties[p].label.clone()
        }
    }

    /// The honest per-host parties answer everything until the run completes; then the end's
    /// checks.
    pub(super) fn finish(&mut self) -> Result<(), String> {
        self.log("-- the honest parties finish the run".into());
        self.release_all();
        let finishers: Vec<usize> =
            (1..=self.setup.honest_hosts).map(|p| self.new_ident(p)).collect();
        self.check()?;
        let complete = self.finish_rounds(&finishers)?;
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

    /// Everyone gives back what it holds (nobody waits for leases to expire).
    fn release_all(&mut self) {
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
    }

    /// The `finishers` lease and answer truly, round after round, with a restart where a held job
    /// stops them; whether the run completes within [`FINISH_WITHIN`].
    fn finish_rounds(&mut self, finishers: &[usize]) -> Result<bool, String> {
        let deadline = Instant::now() + FINISH_WITHIN;
        let mut idle_rounds = 0;
        loop {
            if Instant::now() >= deadline {
                return Ok(false);
            }
            let mut any = false;
            for &i in finishers {
                let Some(caller) = self.idents[i].caller.clone() else {
                    self.register(i);
                    continue;
                };
                let c = caller.clone();
                let reply =
                    ask(&self.engine(), |reply| Command::Lease { caller: c, free_slots: 4, reply });
                if reply.run_complete {
                    return Ok(true);
                }
                let Ok(granted) = reply.outcome else { continue };
                if granted.job_ids.is_empty() {
                    continue;
                }
                any = true;
                let answers = granted
                    .job_ids
                    .iter()
                    .map(|&job_id| {
                        JobAnswer::new(
                            caller.clone(),
                            granted.lease_id,
                            job_id,
                            Finding::Solved {
                                counts: self.board.truth[job_id.get() as usize],
                                seconds: 0.001,
                            },
                        )
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
        }
    }

    pub(super) fn published_result(&self) -> Option<nqueens_result::RunResult> {
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
pub(super) struct Row {
    pub(super) job_id: u64,
    pub(super) worker_id: u64,
    pub(super) counted: bool,
    pub(super) solutions: u64,
    pub(super) credential: Option<String>,
}

/// A read-only connection to the state file, beside the running engine.
pub(super) struct Reader(rusqlite::Connection);

impl Reader {
    pub(super) fn open(path: &Path) -> Reader {
        let flags = rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY;
        Reader(rusqlite::Connection::open_with_flags(path, flags).unwrap())
    }

    pub(super) fn results(&self) -> Vec<Row> {
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

    pub(super) fn ids(&self, query: &str) -> BTreeSet<u64> {
        let mut q = self.0.prepare(query).unwrap();
        q.query_map([], |r| r.get::<_, i64>(0)).unwrap().map(|v| v.unwrap() as u64).collect()
    }

    pub(super) fn worker_ids(&self) -> BTreeSet<u64> {
        self.ids("SELECT id FROM workers")
    }

    pub(super) fn untrusted(&self) -> BTreeSet<u64> {
        self.ids("SELECT worker_id FROM untrusted_workers")
    }

    pub(super) fn job_states(&self) -> BTreeMap<u64, String> {
        let mut q = self.0.prepare("SELECT id, state FROM jobs").unwrap();
        q.query_map([], |r| Ok((r.get::<_, i64>(0)? as u64, r.get(1)?)))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap()
    }
}
