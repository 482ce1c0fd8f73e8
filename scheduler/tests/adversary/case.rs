//! Cases: a run's setup, its events and the expectations of hand-written cases, and their text
//! form (the case format of the parent module's docs), which kept cases are written in.

use super::*;

#[derive(Debug, Clone, PartialEq)]
pub(super) struct PartyDef {
    pub(super) name: String,
    /// Holds the shared token (else a per-host token of its own).
    pub(super) shared: bool,
}

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
            let err = |why: &str| format!("line {}: {why}: {raw}", n + 1);
            let words: Vec<&str> = line.split_whitespace().collect();
            let kv = |key: &str| -> Option<&str> {
                words.iter().find_map(|w| w.strip_prefix(key)?.strip_prefix('='))
            };
            let num = |key: &str| -> Result<u64, String> {
                kv(key).ok_or_else(|| err(&format!("no {key}=")))?.parse().map_err(|_| err(key))
            };
            let worker = |i: usize| -> Result<u64, String> {
                words
                    .get(i)
                    .and_then(|w| w.strip_prefix('w'))
                    .and_then(|w| w.parse().ok())
                    .filter(|&w: &u64| w > 0)
                    .ok_or_else(|| err("expected an identity wN (N > 0)"))
            };
            match words[0] {
                "config" => {
                    setup = Some(Setup {
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
                "party" => {
                    let name = words.get(1).ok_or_else(|| err("no name"))?.to_string();
                    if parties.is_empty() != (name == ADVERSARY) {
                        return Err(err("the first party must be adv, and only the first"));
                    }
                    let shared = match words.get(2) {
                        Some(&"shared") => true,
                        Some(&"host") => false,
                        _ => return Err(err("shared or host")),
                    };
                    parties.push(PartyDef { name, shared });
                }
                "register" => {
                    let w = worker(1)?;
                    let name = words.get(2).ok_or_else(|| err("no party"))?;
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
                    checks: words.contains(&"checks"),
                }),
                "answer" => {
                    let w = worker(1)?;
                    let lie = if words.contains(&"lie") {
                        1
                    } else if words.contains(&"impossible") {
                        IMPOSSIBLE
                    } else {
                        kv("lie").map_or(Ok(0), |k| k.parse().map_err(|_| err("lie=")))?
                    };
                    if lie > 0 && party_of.get(&w).is_some_and(|&p| p != 0) {
                        return Err(err("honest parties never lie"));
                    }
                    events.push(Ev::Answer { w, job: num("job")?, lie });
                }
                "release" => events.push(Ev::Release { w: worker(1)? }),
                "heartbeat" => events.push(Ev::Heartbeat { w: worker(1)? }),
                "wait" => events.push(Ev::Wait {
                    secs: words
                        .get(1)
                        .and_then(|s| s.parse().ok())
                        .ok_or_else(|| err("seconds"))?,
                }),
                "restart" => events.push(Ev::Restart),
                "referee" => events.push(Ev::Referee),
                "reference" => events.push(Ev::Reference { job: num("job")? }),
                "expect" => match (words.get(1), words.get(2)) {
                    (Some(&"finished"), None) => expects.push(Expect::Finished),
                    (_, Some(&"not-lie")) => expects.push(Expect::NotLie { job: num("job")? }),
                    (_, Some(&"trusted")) => expects.push(Expect::Trusted { w: worker(1)? }),
                    _ => {
                        return Err(err(
                            "expect job=J not-lie | expect wN trusted | expect finished",
                        ))
                    }
                },
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
