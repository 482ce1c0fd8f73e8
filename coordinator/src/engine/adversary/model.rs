//! The adversary model: a run's board and setup, the real parties and their identities, the
//! events of a sequence and what a run ended with.

use super::*;

/// A run's board and its true answers.
pub(super) struct Board {
    pub(super) list: JobList,
    pub(super) truth: Vec<JobCounts>,
    pub(super) total: u128,
}

impl Board {
    pub(super) fn new(n: u32) -> Board {
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
pub(super) struct Setup {
    pub(super) n: u32,
    pub(super) replication: u8,
    pub(super) max_unproven: usize,
    pub(super) referee: bool,
    pub(super) recheck: f64,
    /// The adversary holds the shared token (else a per-host credential of its own).
    pub(super) adversary_shared: bool,
    /// Honest per-host parties `h1`...
    pub(super) honest_hosts: usize,
    /// An honest party under the shared token too (only beside a per-host adversary).
    pub(super) honest_shared: bool,
}

impl Setup {
    /// Whether the run must end exact with no lie counted: a record run, or one that re-checks
    /// every answer resting on one credential's word (the adversary is one credential).
    pub(super) fn must_be_exact(&self) -> bool {
        self.replication >= 2 || self.recheck >= 1.0
    }

    /// The parties: the adversary first, then the honest hosts `h1`..., then `hs` under the
    /// shared token where there is one.
    pub(super) fn party_defs(&self) -> Vec<PartyDef> {
        let mut defs = vec![PartyDef::adversary(self.adversary_shared)];
        defs.extend((1..=self.honest_hosts).map(|i| PartyDef::honest(i, false)));
        if self.honest_shared && !self.adversary_shared {
            defs.push(PartyDef { name: "hs".into(), shared: true });
        }
        defs
    }
}

/// A real party: who controls identities.
pub(super) struct Party {
    pub(super) label: String,
    pub(super) credential: Credential,
    pub(super) honest: bool,
}

/// The parties of `setup` (see [`Setup::party_defs`]), each with its credential: the shared
/// token, or a per-host token named after the party.
pub(super) fn parties(setup: &Setup) -> Vec<Party> {
    let party = |def: PartyDef| {
        let credential =
            if def.shared { Credential::shared() } else { Credential::named(&def.name) };
        Party { honest: !def.is_adversary(), label: def.name, credential }
    };
    setup.party_defs().into_iter().map(party).collect()
}

/// One step of a sequence. Indices are resolved when the step runs (modulo what exists then),
/// so that a shrunk sequence stays meaningful.
#[derive(Debug, Clone, Copy)]
pub(super) enum Event {
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
pub(super) struct Ident {
    pub(super) party: usize,
    pub(super) name: String,
    /// Registered with the running engine (None: forgotten, or refused).
    pub(super) caller: Option<Caller>,
    /// The id and secret it last had (for registering again).
    pub(super) last: Option<(WorkerId, String)>,
    /// Every lease it was granted, with its jobs.
    pub(super) leases: Vec<(LeaseId, Vec<JobId>)>,
    /// The jobs it believes it holds.
    pub(super) held: Vec<(LeaseId, JobId)>,
}

/// What a sequence's run ended with.
#[derive(Debug, Default, Clone)]
pub(super) struct Stats {
    pub(super) complete: bool,
    pub(super) lies_counted: usize,
    pub(super) adversary_untrusted: usize,
    pub(super) forgotten: usize,
    pub(super) late_answers: usize,
    pub(super) requeues: usize,
    /// Jobs counted at the end on the coordinator's own solve alone.
    pub(super) coordinator_alone: usize,
}
