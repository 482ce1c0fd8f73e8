//! An adversary model of the trust rules. Seeded random event sequences in which the test knows
//! which real *party* controls each identity and each credential: one adversary party and one to
//! three honest ones, each holding ONE credential (the shared token, or a per-host token of its
//! own), with as many identities as it registers. Events: registrations, forgetting floods (the
//! engine's rule for unproven idle identities), leases, releases, heartbeats, time passing and
//! expiry, honest answers and lies (of several values; one identity answering one job several
//! ways; counts no solver gives), late answers under leases that no longer hold the job, spot
//! checks, restarts from a model of the stored rows, the coordinator's referee rulings and
//! spot-check answers. After every step the run is checked against the ground truth (which real
//! party gave each stored row):
//!
//! 1. in a record run (replication 2) no job is counted unless two different real parties (or the
//!    coordinator and one party) gave the counted answer, or the coordinator's own solve alone
//!    settled it (a referee's ruling: no party's word);
//! 2. the evidence ([`nqueens_scheduler::evidence::basis`] over the stored rows) never claims more
//!    independence than the ground truth;
//! 3. a lie is counted only where the rules allow an escape: a plain run (replication 1) with
//!    `recheck_fraction` < 1. With f = 1 every lie rests on one credential's word (the adversary
//!    holds one) and is always drawn. In general a party lying on L answers that rest on its word
//!    escapes with probability (1 - f)^L; `escape.rs` measures that bound;
//! 4. an honest party's identity is never untrusted (honest parties never lie and report no solver
//!    errors). One exception, the shared token's stated limit (`docs/threat-model.md`, "Shared
//!    token: the stated limit"): in a plain run without the referee, where the adversary holds
//!    the shared token too, an honest identity *of the shared token* may be outvoted by two of
//!    the adversary's shared identities (no rule can tell co-holders of one token apart, and
//!    nothing else settles the dispute). Those are counted in the printed line ("honest shared
//!    identity untrusted under the stated limit"), not failed; honest per-host identities have
//!    no exception.
//!
//! Why one credential per party: no rule can tell two credentials of one party apart (two
//! per-host tokens handed to one host are two independent parties to the coordinator), so a
//! party holding two would trivially "break" invariant 1; the threat model gives each token to
//! one party. The shared token may be held by several real parties at once (the adversary and
//! honest ones): its identities are parties of their own to the scheduler but one credential.
//!
//! After the events honest identities (one fresh one per honest party) finish the run where they
//! can, checked the same way, with the adversary silent: 5. *liveness*: a run promised to end
//! (`docs/threat-model.md`, "The liveness promise": with the referee one honest credential in a
//! plain run, two in a record run; without it two) must end counted within the finish's rounds,
//! no job ever held on the way. `adversary_restart_at_random_points_changes_no_ruling` checks the
//! restart property on the same sequences. A failing sequence is shrunk (delta debugging: events dropped while
//! it still fails) and printed in the case format below, and written under
//! `$CARGO_TARGET_TMPDIR`; keep it in `tests/testdata/adversary/*.txt`, where
//! `adversary_kept_cases_stay_fixed` replays every case.
//!
//! The case format, one item a line (`#` starts a comment):
//!
//! ```text
//! config jobs=5 replication=2 recheck=0 probation=0 referee=off seed=7
//! party adv shared          # the adversary (always named adv); shared or host
//! party h1 host             # honest parties
//! register w1 adv           # a new identity of a party, under the party's credential
//! lease w1 size=2 [checks]  # lease_checked (with spot checks)
//! answer w1 job=3 [lie|lie=K]  # under w1's latest lease naming job 3 (late if it no longer holds it)
//! forget w1                 # forget_worker, where the engine's rule allows it (else nothing)
//! release w1 | heartbeat w1 | wait SECS | restart | referee | reference job=3
//! expect job=3 not-lie      # at the end: job 3 is not counted on a lie
//! expect w2 trusted         # at the end: w2 was never untrusted
//! ```
//!
//! `NQ_ADVERSARY_SEQUENCES` (default 10,000: about 2 s in release on one core) and
//! `NQ_ADVERSARY_SEED` (the first seed, default 0) run more, on every core;
//! `NQ_ADVERSARY_ALL_KINDS=1` reports the first sequence of each kind of violation instead of
//! stopping at the first; `tools/scripts/adversary-long.sh` runs a million. `NQ_ADVERSARY_CASE=FILE`
//! replays one case file (`adversary_replay_one_case`), with `NQ_ADVERSARY_TRACE=1` printing every
//! event and the changes it made.
//!
//! Here the cases are run and the tests live; the parts are in `adversary/`: `case.rs` (a case
//! and its text form), `world.rs` (the scheduler, the stored rows and the ground truth; events
//! applied), `checks.rs` (the invariants and the honest finish) and `generator.rs` (random cases,
//! shrinking and the report of a failure). The generator's parts shared with the engine's
//! adversary model (the kinds of event and their mix, the parties, the runs of many seeds, the
//! delta debugging, the kinds of failure) are in `nqueens-test-support`.

use nqueens_core::{JobCounts, SplitMix64};
use nqueens_scheduler::evidence::{basis, Basis};
use nqueens_scheduler::{
    Delivery, Finding, JobId, JobState, LeaseId, ResultKind, Scheduler, SchedulerConfig, StoredJob,
    Verdict, WorkerId, COORDINATOR, PER_HOST_CREDENTIALS, SHARED_CREDENTIAL,
};
use nqueens_test_support::{catch_panic, env_u64, failure_kind, panic_text, Sequences};
use nqueens_test_support::{pick, EventKind, Mix, PartyDef, Side, ADVERSARY};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

mod common;
use common::Stored;

#[path = "adversary/case.rs"]
mod case;
#[path = "adversary/checks.rs"]
mod checks;
#[path = "adversary/generator.rs"]
mod generator;
#[path = "adversary/world.rs"]
mod world;
use case::*;
use generator::*;
use world::*;

const LEASE: Duration = Duration::from_secs(10);
const DEFAULT_SEQUENCES: u64 = 10_000;
/// Rounds of honest leases the finish of a run promised to end gets.
const FINISH_ROUNDS: usize = 60;

/// The true answer of a job.
fn truth(job: u64) -> JobCounts {
    JobCounts { solutions: job * 3 + 1, sym180: 0, sym90: 0, nodes: 1_000 + job }
}

/// The adversary's lie `k` (the same wrong answer from all its identities for one `k`; its
/// lies take several values); [`IMPOSSIBLE`]: counts no solver gives.
fn lie(job: u64, k: u64) -> JobCounts {
    let mut counts = truth(job);
    if k == IMPOSSIBLE {
        counts.sym180 = 1;
        counts.sym90 = 2;
    } else {
        counts.solutions += k;
    }
    counts
}

/// The lie "counts no solver gives" (`answer wN job=J impossible`): refused, and its party
/// untrusted.
const IMPOSSIBLE: u64 = u64::MAX;

/// `NQ_ADVERSARY_TRACE=1`: every event applied, with the changes it made (for replaying one case).
fn trace() -> bool {
    static TRACE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *TRACE.get_or_init(|| std::env::var("NQ_ADVERSARY_TRACE").is_ok_and(|v| v == "1"))
}

/// Runs a case: its events, the honest finish and its expectations. The world (for its
/// statistics) and the first violation, if any.
fn run_case(case: &Case) -> (Option<World>, Result<(), String>) {
    let mut world = None;
    let result = catch_panic(|| {
        let w = world.insert(World::new(&case.setup));
        for ev in &case.events {
            w.apply(ev)?;
        }
        w.finish()?;
        expectations(w, &case.expects)
    });
    (world, result)
}

fn expectations(w: &World, expects: &[Expect]) -> Result<(), String> {
    for e in expects {
        match *e {
            Expect::NotLie { job } => {
                if let Some((by, c)) = w.scheduler.counted(JobId::new(job)) {
                    if !c.same_answer(&truth(job)) {
                        return Err(format!("expectation: job {job} counted on a lie by {by}"));
                    }
                }
            }
            Expect::Trusted { w: id } => {
                if w.scheduler.is_untrusted(WorkerId::new(id)) {
                    return Err(format!("expectation: w{id} is untrusted"));
                }
            }
            Expect::Finished => {
                if !w.scheduler.is_complete() || w.stats.contains_key("held job seen") {
                    return Err("expectation: the honest finish did not end the run".into());
                }
            }
        }
    }
    Ok(())
}

#[test]
fn adversary_random_sequences_keep_the_trust_rules_and_liveness() {
    // With NQ_ADVERSARY_ALL_KINDS=1 the run goes on after a violation and reports the first
    // sequence of each kind of violation (else it stops at the first).
    let sequences = Sequences::from_env("NQ_ADVERSARY", DEFAULT_SEQUENCES, 0);
    let started = Instant::now();
    let totals = Mutex::new(BTreeMap::<String, u64>::new());
    let failures = sequences.run(
        |seed| {
            let (case, world, result) = generate(seed);
            let mut totals = totals.lock().unwrap();
            for (what, n) in world.stats {
                *totals.entry(what).or_default() += n;
            }
            *totals.entry("events".into()).or_default() += case.events.len() as u64;
            result.map_err(|violation| Box::new((case, violation)))
        },
        |failure| failure_kind(&failure.1).to_owned(),
    );
    let totals = totals.into_inner().unwrap();
    eprintln!("adversary: exercised {totals:?}");
    eprintln!(
        "adversary: {} sequences from seed {} in {:.2} s ({} threads)",
        sequences.count,
        sequences.first,
        started.elapsed().as_secs_f64(),
        sequences.threads
    );
    let mut texts = Vec::new();
    for (seed, failure) in failures.values() {
        let (case, violation) = &**failure;
        texts.push(format!("seed {seed}: {violation}\n{}", report(*seed, case, violation)));
    }
    assert!(texts.is_empty(), "adversary: the trust rules broke:\n{}", texts.join("\n"));
}

/// Where a run stands, ruling by ruling: each job's state and counted answer, the untrusted
/// identities, and whether the run is complete.
fn rulings(w: &World) -> String {
    let s = &w.scheduler;
    let mut out = String::new();
    for i in 0..w.setup.jobs {
        let job = JobId::new(i);
        let counted = s.counted(job).map(|(_, c)| (c.solutions, c.sym180, c.sym90));
        let _ = write!(out, "{i}:{:?}:{counted:?} ", s.state(job).unwrap());
    }
    let untrusted: Vec<u64> =
        w.idents.keys().copied().filter(|&id| s.is_untrusted(WorkerId::new(id))).collect();
    let _ = write!(
        out,
        "untrusted {untrusted:?} disputed {} complete {}",
        s.disputed_jobs(),
        s.is_complete()
    );
    out
}

/// The restart property of one case: a run of its events, and the same run restarted (stored
/// and restored from its rows) before event `at`, must stand the same after every later event:
/// the same rulings and verdicts. The comparison ends, without a verdict, where the two runs no
/// longer see the same events: a lease of other jobs, a lease that expired in one run only (a
/// restart gives every lease a fresh grace period), an identity forgotten in one only (the
/// engine forgets only identities its own process registered), an answer late in one only.
/// How many events were compared, or the first difference.
fn restart_property(case: &Case, at: usize) -> Result<usize, String> {
    let mut plain = World::new(&case.setup);
    let mut restarted = World::new(&case.setup);
    plain.same_seed = true;
    restarted.same_seed = true;
    let mut compared = 0;
    for (i, ev) in case.events.iter().enumerate() {
        if i == at {
            restarted.restart();
            if rulings(&plain) != rulings(&restarted) {
                return Err(format!(
                    "restart before event {i} changed where the run stands:\n  {}\n  {}",
                    rulings(&plain),
                    rulings(&restarted)
                ));
            }
        }
        let a = plain.apply(ev);
        let b = restarted.apply(ev);
        if a.is_err() || b.is_err() {
            // A violation of the rules themselves: the random sequences report it.
            return Ok(compared);
        }
        if i < at {
            continue;
        }
        if plain.effect != restarted.effect {
            return Ok(compared);
        }
        let (x, y) = (rulings(&plain), rulings(&restarted));
        if x != y || plain.verdict != restarted.verdict {
            return Err(format!(
                "after event {i} ({}), restarted before event {at}:\n  without: {x} {:?}\n  with:    {y} {:?}",
                case.event_text(ev),
                plain.verdict,
                restarted.verdict
            ));
        }
        compared += 1;
    }
    Ok(compared)
}

/// "Restarts change nothing": at random points of the adversary model's sequences
/// the scheduler is stored and restored (rebuilt from the rows its changes left, as a restarted
/// coordinator is), then goes on with the same events; every ruling from there on must be the
/// same as without the restart. `NQ_ADVERSARY_RESTART_SEQUENCES` runs more (default 3,000).
#[test]
fn adversary_restart_at_random_points_changes_no_ruling() {
    let sequences = env_u64("NQ_ADVERSARY_RESTART_SEQUENCES").unwrap_or(3_000);
    let first = env_u64("NQ_ADVERSARY_SEED").unwrap_or(0);
    let (mut compared, mut points, mut after) = (0, 0, 0);
    let mut failures = Vec::new();
    for seed in first..first + sequences {
        let (case, _, _) = generate(seed);
        let mut rng = SplitMix64::new(seed ^ 0x7e57_a271);
        for _ in 0..3 {
            let at = rng.below(case.events.len().max(1) as u64) as usize;
            points += 1;
            after += case.events.len().saturating_sub(at);
            match restart_property(&case, at) {
                Ok(n) => compared += n,
                Err(e) => {
                    failures.push(format!("seed {seed}: {e}\n{}", case.to_text()));
                    break;
                }
            }
        }
        if failures.len() >= 3 {
            break;
        }
    }
    eprintln!(
        "adversary restart: {points} restart points, {compared} of the {after} events after them \
         compared (the rest follow a lease, expiry, forgetting or lateness the restart changed)"
    );
    assert!(failures.is_empty(), "a restart changed a ruling:\n{}", failures.join("\n"));
    assert!(compared > points, "too few events compared: {compared} after {points} restarts");
}

fn kept_cases() -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/testdata/adversary");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "txt"))
        .collect();
    files.sort();
    files
}

#[test]
fn adversary_kept_cases_stay_fixed() {
    let files = kept_cases();
    assert!(files.len() >= 2, "expected the kept cases in tests/testdata/adversary");
    let mut broken = Vec::new();
    for path in &files {
        let text = std::fs::read_to_string(path).unwrap();
        let case = Case::parse(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        if let Err(violation) = run_case(&case).1 {
            broken.push(format!("{}: {violation}", path.display()));
        }
    }
    assert!(broken.is_empty(), "kept adversary cases fail again:\n{}", broken.join("\n"));
}

/// `NQ_ADVERSARY_CASE=path`: replays one case file (with `NQ_ADVERSARY_TRACE=1`, traced).
#[test]
fn adversary_replay_one_case() {
    let Ok(path) = std::env::var("NQ_ADVERSARY_CASE") else { return };
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let case = Case::parse(&text).unwrap_or_else(|e| panic!("{path}: {e}"));
    if let Err(violation) = run_case(&case).1 {
        panic!("{path}: {violation}");
    }
}

#[test]
fn adversary_cases_round_trip_through_their_text() {
    for seed in 0..50 {
        let (case, _, _) = generate(seed);
        let text = case.to_text();
        let parsed = Case::parse(&text).unwrap_or_else(|e| panic!("seed {seed}: {e}\n{text}"));
        assert_eq!(parsed, case, "seed {seed}:\n{text}");
        // A replay finds what the generator found.
        let (_, replayed) = run_case(&case);
        let (_, _, generated) = generate(seed);
        assert_eq!(replayed.is_ok(), generated.is_ok(), "seed {seed}: replay differs");
    }
}
