//! The engine in process, over a temporary store: workers register, take leases and send the
//! answers `Job::solve` gives, over the engine's command handle; the run completes with the
//! known total.

use super::{
    Caller, Command, Engine, EngineConfig, EngineHandle, Granted, JobAnswer, Refusal, Registered,
    Registration, RowChanges, Started, Wired,
};
use crate::metrics::Metrics;
use crate::secrets::Credential;
use nqueens_core::{job_list, SplitParams};
use nqueens_scheduler::{Finding, Verdict};
use nqueens_store::RunPolicy;
use nqueens_store::{RunKind, Store};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::oneshot;

/// Sends the command `make` builds and waits for its answer.
fn ask<T>(engine: &EngineHandle, make: impl FnOnce(oneshot::Sender<T>) -> Command) -> T {
    let rx = engine.ask(make).expect("the engine runs");
    rx.blocking_recv().expect("the engine answers")
}

/// An engine over a fresh N=8 run in `dir`, with its completion signal and thread.
fn start_engine(dir: &std::path::Path) -> (Started, nqueens_core::JobList) {
    start_engine_writing(dir, &dir.join("result.json"))
}

/// An engine over a fresh N=8 run in `dir` that writes its result to `result_file`.
fn start_engine_writing(
    dir: &std::path::Path,
    result_file: &std::path::Path,
) -> (Started, nqueens_core::JobList) {
    let (store, config, list) = new_run(dir, result_file);
    let metrics = Arc::new(Metrics::default());
    let started = Engine::start(store, metrics, config).unwrap();
    (started, list)
}

/// A fresh N=8 run at `dir/run8.db`, and the settings of an engine over it that writes its
/// result to `result_file`.
fn new_run(
    dir: &std::path::Path,
    result_file: &std::path::Path,
) -> (Store, EngineConfig, nqueens_core::JobList) {
    let list = job_list(8, &SplitParams::default()).unwrap();
    let state = dir.join("run8.db");
    let store = Store::open_or_create(
        &state,
        &list,
        nqueens_proto::PROTOCOL_MAJOR,
        RunPolicy::default(),
        RunKind::Cluster,
    )
    .unwrap();
    let config = EngineConfig {
        result_file: result_file.to_path_buf(),
        lease_duration: Duration::from_secs(30),
        heartbeat: Duration::from_secs(10),
        spot_checks: false,
        jobs: None,
        coordinator_checks: false,
        recheck_fraction: 0.0,
        max_unproven: 64,
    };
    (store, config, list)
}

/// Registers a worker under the credential `name`.
fn register(engine: &EngineHandle, name: &str) -> Caller {
    register_as(engine, name, name, 4).expect("registration taken")
}

#[test]
fn every_command_of_a_caller_that_is_not_the_worker_it_names_is_refused_alike() {
    let dir = tempfile::tempdir().unwrap();
    let (started, _) = start_engine(dir.path());
    let engine = started.handle.clone();
    let honest = register(&engine, "a");
    let wrong_secret = Caller { secret: "not-it".into(), ..honest.clone() };
    let unknown = Caller { worker_id: nqueens_scheduler::WorkerId::new(99), ..honest.clone() };
    for (caller, refusal) in [(wrong_secret, Refusal::BadSecret), (unknown, Refusal::UnknownWorker)]
    {
        let c = caller.clone();
        let lease = ask(&engine, |reply| Command::Lease { caller: c, free_slots: 4, reply });
        assert_eq!(lease.outcome.unwrap_err(), refusal);
        let c = caller.clone();
        let beat = ask(&engine, |reply| Command::Heartbeat { caller: c, lease_ids: vec![], reply });
        assert_eq!(beat.outcome.unwrap_err(), refusal);
        let c = caller.clone();
        let lease_id = nqueens_scheduler::LeaseId::new(0);
        let release =
            ask(&engine, |reply| Command::Release { caller: c, lease_id, job_ids: vec![], reply });
        assert_eq!(release.outcome.unwrap_err(), refusal);
        let answer = JobAnswer::new(
            caller,
            lease_id,
            nqueens_scheduler::JobId::new(0),
            Finding::SolverError("x".into()),
        );
        let result = ask(&engine, |reply| Command::Results { answers: vec![(answer, reply)] });
        assert_eq!(result.outcome.unwrap_err(), refusal);
    }
    // The worker itself is served.
    let c = honest.clone();
    let lease = ask(&engine, |reply| Command::Lease { caller: c, free_slots: 4, reply });
    assert!(!lease.outcome.unwrap().job_ids.is_empty());
    assert!(engine.send(Command::Shutdown));
    started.thread.join().unwrap().unwrap();
}

/// A worker with `slots` under the credential `credential` named `name`.
fn register_as(
    engine: &EngineHandle,
    credential: &str,
    name: &str,
    slots: u32,
) -> Result<Caller, Refusal> {
    let credential = Credential::named(credential);
    let worker = Registration {
        previous_worker_id: None,
        previous_secret: String::new(),
        credential: credential.clone(),
        name: name.into(),
        host: "localhost".into(),
        slots,
        version: env!("CARGO_PKG_VERSION").into(),
        device: "cpu".into(),
        peer: None,
    };
    let reply = ask(engine, |reply| Command::Register { worker, reply });
    reply.outcome.map(|Registered { worker_id, secret }| Caller { worker_id, secret, credential })
}

/// A credential's flood of identities that never deliver is never refused for its pace: each
/// new one past the budget (64 here) evicts the credential's oldest idle one. Identities that
/// hold jobs or delivered stay, another credential is untouched, and the stored worker rows stay
/// within the budget.
#[test]
fn a_flood_of_idle_identities_evicts_its_own_oldest_and_the_rows_stay_bounded() {
    let dir = tempfile::tempdir().unwrap();
    let (started, _) = start_engine(dir.path());
    let engine = started.handle.clone();
    let other = register(&engine, "other");
    let holder = register_as(&engine, "flood", "holder", 1).unwrap();
    let c = holder.clone();
    let lease = ask(&engine, |reply| Command::Lease { caller: c, free_slots: 1, reply });
    assert!(!lease.outcome.unwrap().job_ids.is_empty(), "the holder holds a job");
    let first_idle = register_as(&engine, "flood", "idle-0", 1).unwrap();
    for i in 1..1000 {
        register_as(&engine, "flood", &format!("idle-{i}"), 1).expect("a flood is not refused");
    }
    let beat = |caller: &Caller| {
        let c = caller.clone();
        ask(&engine, |reply| Command::Heartbeat { caller: c, lease_ids: vec![], reply }).outcome
    };
    assert_eq!(beat(&first_idle), Err(Refusal::UnknownWorker), "the oldest idle one was evicted");
    assert!(beat(&holder).is_ok(), "an identity holding a job stays");
    assert!(beat(&other).is_ok(), "another credential's worker stays");
    assert!(engine.send(Command::Shutdown));
    started.thread.join().unwrap().unwrap();
    let rows = Store::open_existing(&dir.path().join("run8.db")).unwrap().workers().unwrap();
    assert!(rows.len() <= 64 + 1, "{} worker rows kept", rows.len());
}

/// Two workers under two credentials (so that they can confirm each other's answers) lease
/// and answer with `Job::solve` until the engine says the run is complete.
fn answer_every_job(engine: &EngineHandle, list: &nqueens_core::JobList) {
    let workers = [register(engine, "a"), register(engine, "b")];
    for round in 0.. {
        assert!(round < 10_000, "the run does not complete");
        let caller = workers[round % workers.len()].clone();
        let lease =
            ask(engine, |reply| Command::Lease { caller: caller.clone(), free_slots: 4, reply });
        let Granted { lease_id, job_ids } = lease.outcome.expect("lease granted");
        if lease.run_complete {
            return;
        }
        if job_ids.is_empty() {
            std::thread::sleep(Duration::from_millis(5));
            continue;
        }
        for job_id in job_ids {
            let counts = list.jobs[job_id.get() as usize].solve().unwrap();
            let answer = JobAnswer::new(
                caller.clone(),
                lease_id,
                job_id,
                Finding::Solved { counts, seconds: 0.001 },
            );
            let reply = ask(engine, |reply| Command::Results { answers: vec![(answer, reply)] });
            assert!(
                matches!(
                    reply.outcome,
                    Ok(Verdict::Accepted | Verdict::Confirmed | Verdict::Duplicate)
                ),
                "{:?}",
                reply.outcome
            );
        }
    }
}

/// Waits up to `within` for the engine to publish the run's result.
fn published_result(
    snapshots: &tokio::sync::watch::Receiver<Arc<crate::snapshot::RunSnapshot>>,
    within: Duration,
) -> Option<nqueens_result::RunResult> {
    let deadline = std::time::Instant::now() + within;
    loop {
        let result = snapshots.borrow().progress.result.clone();
        if result.is_some() || std::time::Instant::now() >= deadline {
            return result;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn an_engine_in_process_completes_n8_with_the_known_total() {
    let dir = tempfile::tempdir().unwrap();
    let (started, list) = start_engine(dir.path());
    let (engine, snapshots) = (started.handle.clone(), started.snapshots.clone());
    answer_every_job(&engine, &list);
    // The result is published once the engine has checked the committed rows.
    let record =
        published_result(&snapshots, Duration::from_secs(30)).expect("no result published");
    assert_eq!(record.total, 92, "Q(8)");
    // The snapshot published with the result shows the run complete, every job done.
    let last = snapshots.borrow().clone();
    assert!(last.progress.complete && last.progress.jobs_done == last.progress.jobs_total);
    assert_eq!(last.progress.result.as_ref().map(|r| r.total), Some(92));
    let written = std::fs::read_to_string(dir.path().join("result.json")).unwrap();
    assert_eq!(written.trim(), record.json_line());
    let matched = "Total, Unique, COUNT2, COUNT4, COUNT8 match the published values";
    assert!(written.contains(&format!("\"summary\":\"{matched}\"")), "{written}");
    assert!(record.not_exact().is_none());
    assert!(engine.send(Command::Shutdown));
    started.thread.join().unwrap().unwrap();
}

/// A result file that cannot be written (here its directory is missing; in the field a full
/// disk or no descriptor left) leaves the run unpublished, so that `--exit-when-done` and every
/// reader wait for it; the write is tried again until it works, and an engine stopped before it
/// ever works ends with the error instead of looking finished.
#[test]
fn a_result_file_that_cannot_be_written_is_tried_again_and_never_looks_finished() {
    let dir = tempfile::tempdir().unwrap();
    let later = dir.path().join("later");
    let (started, list) = start_engine_writing(dir.path(), &later.join("result.json"));
    let (engine, snapshots) = (started.handle.clone(), started.snapshots.clone());
    answer_every_job(&engine, &list);
    assert!(published_result(&snapshots, Duration::from_secs(2)).is_none(), "published unwritten");
    std::fs::create_dir(&later).unwrap();
    let record = published_result(&snapshots, Duration::from_secs(30)).expect("never written");
    assert_eq!(record.total, 92, "Q(8)");
    let written = std::fs::read_to_string(later.join("result.json")).unwrap();
    assert_eq!(written.trim(), record.json_line());
    assert!(engine.send(Command::Shutdown));
    started.thread.join().unwrap().unwrap();

    let dir = tempfile::tempdir().unwrap();
    let never = dir.path().join("never").join("result.json");
    let (started, list) = start_engine_writing(dir.path(), &never);
    let (engine, snapshots) = (started.handle.clone(), started.snapshots.clone());
    answer_every_job(&engine, &list);
    assert!(published_result(&snapshots, Duration::from_millis(1500)).is_none());
    assert!(engine.send(Command::Shutdown));
    match started.thread.join().unwrap() {
        Err(super::EngineError::ResultFile { path, .. }) => assert_eq!(path, never),
        other => panic!("the engine ended with {other:?}, not the unwritten result file"),
    }
}

/// A token command's row is written when it is decided, but its reply waits for the batch's
/// commit like every other: deciding it sends nothing, the batch's replies carry it.
#[test]
fn a_token_reply_leaves_with_its_batch_after_the_commit() {
    let dir = tempfile::tempdir().unwrap();
    let (store, config, _) = new_run(dir.path(), &dir.path().join("result.json"));
    let Wired { mut engine, .. } =
        Engine::wire(store, Arc::new(Metrics::default()), config).unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let (mut rows, mut replies) = (RowChanges::default(), Vec::new());
    let add = Command::AddToken { name: "host-a".into(), digest: [7; 32], reply: tx };
    engine.decide(add, &mut rows, &mut replies);
    assert!(rx.try_recv().is_err(), "the token reply left before its batch committed");
    assert_eq!(replies.len(), 1);
    for reply in replies {
        reply.send(false);
    }
    let now = rx.try_recv().expect("the reply, sent with the batch's").unwrap();
    assert!(now.changed && now.had_credentials);
    assert_eq!(now.active, vec![("host-a".to_string(), [7; 32])]);
}

/// A finished N = 8 run, every job done on one answer, one job of `weight` counted with one
/// solution too many; its directory, result file path and engine.
fn n8_run_done_with_one_extra_solution(
    weight: u8,
) -> (tempfile::TempDir, std::path::PathBuf, Engine) {
    use nqueens_scheduler::Change;
    let dir = tempfile::tempdir().unwrap();
    let result_file = dir.path().join("result.json");
    let (mut store, config, list) = new_run(dir.path(), &result_file);
    let liar = list.jobs.iter().find(|j| j.weight == weight).expect("a job of that weight").id;
    let mut changes = Vec::new();
    for job in &list.jobs {
        let mut counts = job.solve().unwrap();
        counts.solutions += u64::from(job.id == liar);
        changes.extend(Change::finished_on_one_answer(job.id, 1.into(), counts));
    }
    store.apply(&changes, &[]).unwrap();
    let Wired { engine, .. } = Engine::wire(store, Arc::new(Metrics::default()), config).unwrap();
    (dir, result_file, engine)
}

/// A run complete in its rows whose final tally breaks the symmetry identities (one solution
/// too many on a weight-4 job) writes no result: the jobs that can explain it are pending again,
/// in memory and in the file, and nothing is published as the run's end.
#[test]
fn a_final_tally_that_breaks_the_identities_is_solved_again_not_written() {
    use nqueens_scheduler::state::JobState;
    let (dir, result_file, mut engine) = n8_run_done_with_one_extra_solution(4);
    assert!(engine.scheduler.is_complete(), "every job is done in the rows");
    engine.end_if_complete().unwrap();
    assert!(!engine.ending.is_final() && engine.ending.published().is_none());
    assert!(!result_file.exists(), "a result was written from a broken tally");
    let pending = engine.scheduler.count(JobState::Pending);
    assert!(pending > 0, "no job is solved again");
    drop(engine);
    let summary = Store::open_existing(&dir.path().join("run8.db")).unwrap().summary().unwrap();
    assert_eq!(summary.jobs.get(JobState::Pending), pending, "the doubt is not committed");
}

/// A run complete in its rows whose final tally holds the symmetry identities but differs from
/// the published counts (one solution too many on a weight-8 job: Total 100, where Q(8) = 92) is
/// written and published all the same, so that readers and `--exit-when-done` see its end, but
/// as not exact, the result file saying why.
#[test]
fn a_final_tally_that_differs_from_the_published_counts_is_written_as_not_exact() {
    let (_dir, result_file, mut engine) = n8_run_done_with_one_extra_solution(8);
    engine.end_if_complete().unwrap();
    let record = engine.ending.published().expect("the result is written and published");
    assert_eq!((record.total, record.unique), (100, 13));
    let why = record.not_exact().expect("not exact");
    assert!(why.contains("Total is 100 but the published value is 92"), "{why}");
    let written = std::fs::read_to_string(&result_file).unwrap();
    assert!(written.contains("\"outcome\":\"mismatch\""), "{written}");
    assert!(written.contains("Unique is 13 but the published value is 12"), "{written}");
}
