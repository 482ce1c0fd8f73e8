//! Cases: a run's setup, its events and the expectations of hand-written cases, and their text
//! form (the case format of the parent module's docs), which kept cases are written in.

use super::*;

#[derive(Debug, Clone, PartialEq)]
pub(super) struct Setup {
    pub(super) jobs: u64,
    pub(super) replication: u8,
    pub(super) recheck: f64,
    pub(super) probation: u32,
    pub(super) referee: bool,
    pub(super) seed: u64,
    /// Party 0 is the adversary.
    pub(super) parties: Vec<PartyDef>,
}

#[derive(Debug, Clone, PartialEq)]
pub(super) enum Ev {
    Register { w: u64, party: usize },
    Forget { w: u64 },
    Lease { w: u64, size: usize, checks: bool },
    Answer { w: u64, job: u64, lie: u64 },
    Release { w: u64 },
    Heartbeat { w: u64 },
    Wait { secs: u64 },
    Restart,
    Referee,
    Reference { job: u64 },
}

#[derive(Debug, Clone, PartialEq)]
pub(super) enum Expect {
    NotLie {
        job: u64,
    },
    Trusted {
        w: u64,
    },
    /// The honest finish completes the run, no job ever held.
    Finished,
}

#[derive(Debug, Clone, PartialEq)]
pub(super) struct Case {
    pub(super) setup: Setup,
    pub(super) events: Vec<Ev>,
    pub(super) expects: Vec<Expect>,
}

impl Case {
    pub(super) fn to_text(&self) -> String {
        let s = &self.setup;
        let mut out = String::new();
        let on = |b: bool| if b { "on" } else { "off" };
        let _ = writeln!(
            out,
            "config jobs={} replication={} recheck={} probation={} referee={} seed={}",
            s.jobs,
            s.replication,
            s.recheck,
            s.probation,
            on(s.referee),
            s.seed
        );
        for p in &s.parties {
            let _ = writeln!(out, "party {} {}", p.name, if p.shared { "shared" } else { "host" });
        }
        for ev in &self.events {
            let _ = writeln!(out, "{}", self.event_text(ev));
        }
        for e in &self.expects {
            let _ = match e {
                Expect::NotLie { job } => writeln!(out, "expect job={job} not-lie"),
                Expect::Trusted { w } => writeln!(out, "expect w{w} trusted"),
                Expect::Finished => writeln!(out, "expect finished"),
            };
        }
        out
    }

    pub(super) fn event_text(&self, ev: &Ev) -> String {
        match ev {
            Ev::Register { w, party } => {
                format!("register w{w} {}", self.setup.parties[*party].name)
            }
            Ev::Forget { w } => format!("forget w{w}"),
            Ev::Lease { w, size, checks } => {
                format!("lease w{w} size={size}{}", if *checks { " checks" } else { "" })
            }
            Ev::Answer { w, job, lie } => match *lie {
                0 => format!("answer w{w} job={job}"),
                1 => format!("answer w{w} job={job} lie"),
                IMPOSSIBLE => format!("answer w{w} job={job} impossible"),
                k => format!("answer w{w} job={job} lie={k}"),
            },
            Ev::Release { w } => format!("release w{w}"),
            Ev::Heartbeat { w } => format!("heartbeat w{w}"),
            Ev::Wait { secs } => format!("wait {secs}"),
            Ev::Restart => "restart".into(),
            Ev::Referee => "referee".into(),
            Ev::Reference { job } => format!("reference job={job}"),
        }
    }

    pub(super) fn parse(text: &str) -> Result<Case, String> {
        let mut setup: Option<Setup> = None;
        let mut parties: Vec<PartyDef> = Vec::new();
        let mut events = Vec::new();
        let mut expects = Vec::new();
        let mut party_of: BTreeMap<u64, usize> = BTreeMap::new();
        for (n, raw) in text.lines().enumerate() {
            let line = raw.split('#').next().unwrap_or("").trim();
            if line.is_empty() {
                continue;
            }
            let l = Line { n, raw, words: line.split_whitespace().collect() };
            let err = |why: &str| l.err(why);
            let num = |key: &str| l.num(key);
            let worker = |i: usize| l.worker(i);
            match l.words[0] {
                "config" => setup = Some(l.config()?),
                "party" => {
                    let name = l.words.get(1).ok_or_else(|| err("no name"))?.to_string();
                    if parties.is_empty() != (name == ADVERSARY) {
                        return Err(err("the first party must be adv, and only the first"));
                    }
                    let shared = match l.words.get(2) {
                        Some(&"shared") => true,
                        Some(&"host") => false,
                        _ => return Err(err("shared or host")),
                    };
                    parties.push(PartyDef { name, shared });
                }
                "register" => {
                    let w = worker(1)?;
                    let name = l.words.get(2).ok_or_else(|| err("no party"))?;
                    let party = parties
                        .iter()
                        .position(|p| p.name == *name)
                        .ok_or_else(|| err("unknown party"))?;
                    party_of.insert(w, party);
                    events.push(Ev::Register { w, party });
                }
                "forget" => events.push(Ev::Forget { w: worker(1)? }),
                "lease" => events.push(Ev::Lease {
                    w: worker(1)?,
                    size: num("size")? as usize,
                    checks: l.words.contains(&"checks"),
                }),
                "answer" => events.push(l.answer(&party_of)?),
                "release" => events.push(Ev::Release { w: worker(1)? }),
                "heartbeat" => events.push(Ev::Heartbeat { w: worker(1)? }),
                "wait" => events.push(Ev::Wait {
                    secs: l
                        .words
                        .get(1)
                        .and_then(|s| s.parse().ok())
                        .ok_or_else(|| err("seconds"))?,
                }),
                "restart" => events.push(Ev::Restart),
                "referee" => events.push(Ev::Referee),
                "reference" => events.push(Ev::Reference { job: num("job")? }),
                "expect" => expects.push(l.expect()?),
                _ => return Err(err("unknown line")),
            }
        }
        let mut setup = setup.ok_or("no config line")?;
        if parties.first().is_none_or(|p| p.name != ADVERSARY) {
            return Err("no adversary party (party adv ...)".into());
        }
        setup.parties = parties;
        Ok(Case { setup, events, expects })
    }
}

/// One line of a case file, comment cut off: its words, and its number and text for errors.
struct Line<'a> {
    n: usize,
    raw: &'a str,
    words: Vec<&'a str>,
}

impl Line<'_> {
    fn err(&self, why: &str) -> String {
        format!("line {}: {why}: {}", self.n + 1, self.raw)
    }

    /// The value of `key=value` among the words.
    fn kv(&self, key: &str) -> Option<&str> {
        self.words.iter().find_map(|w| w.strip_prefix(key)?.strip_prefix('='))
    }

    fn num(&self, key: &str) -> Result<u64, String> {
        let err = |why: &str| self.err(why);
        self.kv(key).ok_or_else(|| err(&format!("no {key}=")))?.parse().map_err(|_| err(key))
    }

    /// The identity `wN` (N > 0) that is word `i`.
    fn worker(&self, i: usize) -> Result<u64, String> {
        self.words
            .get(i)
            .and_then(|w| w.strip_prefix('w'))
            .and_then(|w| w.parse().ok())
            .filter(|&w: &u64| w > 0)
            .ok_or_else(|| self.err("expected an identity wN (N > 0)"))
    }

    fn config(&self) -> Result<Setup, String> {
        let err = |why: &str| self.err(why);
        let kv = |key: &str| self.kv(key);
        let num = |key: &str| self.num(key);
        Ok(Setup {
            jobs: num("jobs")?,
            replication: num("replication")? as u8,
            recheck: kv("recheck")
                .ok_or_else(|| err("no recheck="))?
                .parse()
                .map_err(|_| err("recheck"))?,
            probation: num("probation")? as u32,
            referee: kv("referee") == Some("on"),
            seed: num("seed")?,
            parties: Vec::new(),
        })
    }

    /// An answer; only the adversary's identities (`party_of`) may lie.
    fn answer(&self, party_of: &BTreeMap<u64, usize>) -> Result<Ev, String> {
        let err = |why: &str| self.err(why);
        let w = self.worker(1)?;
        let lie = if self.words.contains(&"lie") {
            1
        } else if self.words.contains(&"impossible") {
            IMPOSSIBLE
        } else {
            self.kv("lie").map_or(Ok(0), |k| k.parse().map_err(|_| err("lie=")))?
        };
        if lie > 0 && party_of.get(&w).is_some_and(|&p| p != 0) {
            return Err(err("honest parties never lie"));
        }
        Ok(Ev::Answer { w, job: self.num("job")?, lie })
    }

    fn expect(&self) -> Result<Expect, String> {
        Ok(match (self.words.get(1), self.words.get(2)) {
            (Some(&"finished"), None) => Expect::Finished,
            (_, Some(&"not-lie")) => Expect::NotLie { job: self.num("job")? },
            (_, Some(&"trusted")) => Expect::Trusted { w: self.worker(1)? },
            _ => return Err(self.err("expect job=J not-lie | expect wN trusted | expect finished")),
        })
    }
}
