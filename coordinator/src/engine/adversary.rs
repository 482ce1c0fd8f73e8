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
//! `NQ_ENGINE_ADVERSARY_SEQUENCES` runs more sequences, `NQ_ENGINE_ADVERSARY_SEED` others,
//! `NQ_ENGINE_ADVERSARY_ALL_KINDS=1` goes on after a failure for the first of each kind;
//! `NQ_ENGINE_ADVERSARY_STRICT` also fails a record run's job counted on the coordinator's solve
//! alone, and `NQ_ENGINE_ADVERSARY_IGNORE_STALLS` lets a run the honest parties cannot finish
//! pass (to hunt for wrong counts past a stall).
//!
//! Here the sequences are run, shrunk and reported; the parts live in `adversary/`: `model.rs` (the
//! board, the parties, the events), `world.rs` (the engine over a state file and each event run
//! through it), `checks.rs` (the invariants read from the state file, the honest finish) and
//! `generator.rs` (random sequences and shrinking, with the generator shared with the scheduler's
//! adversary model: `nqueens-test-support`).

use super::{Caller, Command, Engine, EngineConfig, EngineHandle, JobAnswer, Refusal, Registered};
use super::{Registration, Started};
use crate::metrics::Metrics;
use crate::secrets::Credential;
use nqueens_core::{job_list, JobCounts, JobList, SplitMix64, SplitParams};
use nqueens_scheduler::{Finding, JobId, LeaseId, Verdict, WorkerId};
use nqueens_store::{Requeue, RunKind, RunPolicy, Store};
use nqueens_test_support::{failure_kind, EventKind, Mix, PartyDef, Sequences, Side};
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

mod checks;
mod generator;
mod model;
mod world;
use checks::*;
use generator::*;
use model::*;
use world::*;

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

/// Whether a record run's job counted on the coordinator's own solve alone fails invariant 1.
fn strict_coordinator() -> bool {
    std::env::var_os("NQ_ENGINE_ADVERSARY_STRICT").is_some()
}

/// What one sequence's run ended with, by its setup's kind (runs, complete, lies counted,
/// adversary identities untrusted, identities forgotten, late answers, jobs counted on the
/// coordinator alone).
type Summary = BTreeMap<String, [usize; 7]>;

fn add_to_summary(summary: &mut Summary, setup: &Setup, stats: &Stats) {
    let key = format!(
        "r{} {} ref={} recheck={}",
        setup.replication,
        if setup.adversary_shared { "shared" } else { "per-host" },
        setup.referee,
        setup.recheck
    );
    let figures = [
        1,
        usize::from(stats.complete),
        stats.lies_counted,
        stats.adversary_untrusted,
        stats.forgotten,
        stats.late_answers,
        stats.coordinator_alone,
    ];
    for (sum, x) in summary.entry(key).or_default().iter_mut().zip(figures) {
        *sum += x;
    }
}

/// A failing sequence: its setup and events, the failure and what happened.
struct Failure {
    setup: Setup,
    events: Vec<Event>,
    failure: String,
    trace: String,
}

/// A failure shrunk: its setup, the failure, the events left and what happened in their run.
fn shrunk_failure(f: Failure, board: &Board) -> String {
    let Failure { setup, events, failure, trace: first_trace } = f;
    eprintln!("{setup:?} fails: {failure}\nshrinking...");
    let shrunk = shrink(setup, &events, board, failure_kind(&failure));
    let (failure, trace, shown) = match run_sequence(setup, &shrunk, board) {
        Err((f, t)) => (f, t, shrunk.as_slice()),
        // Not reproduced (a race with the referee): the first run as it was.
        Ok(_) => (failure, first_trace, events.as_slice()),
    };
    let mut text = String::new();
    for (i, e) in shown.iter().enumerate() {
        let _ = writeln!(text, "  {i}: {e:?}");
    }
    format!(
        "{setup:?}\n{failure}\nshrunk to {} of {} events:\n{text}what happened:\n{trace}",
        shown.len(),
        events.len()
    )
}

#[test]
fn adversary_engine_random_sequences_keep_the_invariants() {
    // One thread: the engine runs on its own threads, against the clock.
    let sequences = Sequences {
        threads: 1,
        ..Sequences::from_env("NQ_ENGINE_ADVERSARY", SEQUENCES, 0x00ad_7e25_a121)
    };
    let seed = sequences.first;
    let boards = [Board::new(8), Board::new(9)];
    let board_of = |setup: &Setup| &boards[usize::from(setup.n == 9)];
    let started = Instant::now();
    let summary = std::sync::Mutex::new(Summary::new());
    let failures = sequences.run(
        |s| {
            let (setup, events) = generate(&mut SplitMix64::new(s));
            match run_sequence(setup, &events, board_of(&setup)) {
                Ok(stats) => {
                    add_to_summary(&mut summary.lock().unwrap(), &setup, &stats);
                    Ok(())
                }
                Err((failure, trace)) => Err(Box::new(Failure { setup, events, failure, trace })),
            }
        },
        |f| failure_kind(&f.failure).to_owned(),
    );
    let texts: Vec<String> = failures
        .into_values()
        .map(|(s, f)| {
            let k = s.wrapping_sub(seed);
            let board = board_of(&f.setup);
            format!("sequence {k} (seed {seed:#x}+{k}) fails\n{}", shrunk_failure(*f, board))
        })
        .collect();
    assert!(texts.is_empty(), "adversary model: {}", texts.join("\n"));
    eprintln!(
        "adversary model: {} sequences in {:.1} s (runs, complete, lies counted, adversary identities untrusted, identities forgotten, late answers, jobs counted on the coordinator alone):",
        sequences.count,
        started.elapsed().as_secs_f64()
    );
    for (key, v) in summary.into_inner().unwrap() {
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
        let answer = JobAnswer::new(caller(&world, i), lease_id, j, lie(j));
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
    let answer = JobAnswer::new(caller(&world, s3), held.lease_id, j, lie(j));
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
