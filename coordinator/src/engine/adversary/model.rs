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
    /// The adversary holds the shared token (else the per-host credential `evil`).
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
}

/// A real party: who controls identities.
pub(super) struct Party {
    pub(super) label: String,
    pub(super) credential: Credential,
    pub(super) honest: bool,
}

/// The parties of `setup`: the adversary first.
pub(super) fn parties(setup: &Setup) -> Vec<Party> {
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
pub(super) enum Side {
    Adversary,
    Honest,
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
