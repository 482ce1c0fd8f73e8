//! The engine in process, over a temporary store: workers register, take leases and send the
//! answers `Job::solve` gives, over the engine's command handle; the run completes with the
//! known total.

use super::{
    Caller, Command, Engine, EngineConfig, EngineHandle, Granted, JobAnswer, Refusal, Registered,
    Registration, Started,
};
use crate::metrics::Metrics;
use crate::secrets::Credential;
use nqueens_core::{job_list, SplitParams};
use nqueens_scheduler::{Finding, Verdict};
use nqueens_store::{RunKind, Store};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::oneshot;

/// Sends the command `make` builds and waits for its answer.
fn ask<T>(engine: &EngineHandle, make: impl FnOnce(oneshot::Sender<T>) -> Command) -> T {
    let (tx, rx) = oneshot::channel();
    assert!(engine.send(make(tx)), "the engine stopped");
    rx.blocking_recv().expect("the engine answers")
}

/// An engine over a fresh N=8 run in `dir`, with its completion signal and thread.
fn start_engine(dir: &std::path::Path) -> (Started, nqueens_core::JobList) {
    let list = job_list(8, &SplitParams::default()).unwrap();
    let state = dir.join("run8.db");
    let store =
        Store::open_or_create(&state, &list, nqueens_proto::PROTOCOL_MAJOR, 0.0, RunKind::Cluster)
            .unwrap();
    let config = EngineConfig {
        result_file: dir.join("result.json"),
        heartbeat: Duration::from_secs(10),
        spot_checks: false,
        jobs: None,
        recheck_fraction: 0.0,
    };
    let metrics = Arc::new(Metrics::default());
    let started = Engine::start(store, Duration::from_secs(30), metrics, config).unwrap();
    (started, list)
}

/// Registers a worker under the credential `name`.
fn register(engine: &EngineHandle, name: &str) -> Caller {
    let credential = Credential::named(name);
    let worker = Registration {
        previous_worker_id: None,
        previous_secret: String::new(),
        credential: credential.clone(),
        name: name.into(),
        host: "localhost".into(),
        cores: 4,
        version: env!("CARGO_PKG_VERSION").into(),
        device: "cpu".into(),
        peer: None,
    };
    let reply = ask(engine, |reply| Command::Register { worker, reply });
    let Registered { worker_id, secret } = reply.outcome.expect("registration taken");
    Caller { worker_id, secret, credential }
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
        let answer = JobAnswer {
            caller,
            lease_id,
            job_id: nqueens_scheduler::JobId::new(0),
            finding: Finding::SolverError("x".into()),
        };
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

#[test]
fn an_engine_in_process_completes_n8_with_the_known_total() {
    let dir = tempfile::tempdir().unwrap();
    let (started, list) = start_engine(dir.path());
    let (engine, complete, snapshots) =
        (started.handle.clone(), started.complete.clone(), started.snapshots.clone());
    // Two workers under two credentials, so that they can confirm each other's answers.
    let workers = [register(&engine, "a"), register(&engine, "b")];
    let mut rounds = 0;
    while complete.borrow().is_none() {
        rounds += 1;
        assert!(rounds < 10_000, "the run does not complete");
        let caller = workers[rounds % workers.len()].clone();
        let lease =
            ask(&engine, |reply| Command::Lease { caller: caller.clone(), free_slots: 4, reply });
        let Granted { lease_id, job_ids } = lease.outcome.expect("lease granted");
        if lease.run_complete {
            break;
        }
        if job_ids.is_empty() {
            std::thread::sleep(Duration::from_millis(5));
            continue;
        }
        for job_id in job_ids {
            let counts = list.jobs[job_id.get() as usize].solve().unwrap();
            let answer = JobAnswer {
                caller: caller.clone(),
                lease_id,
                job_id,
                finding: Finding::Solved { counts, seconds: 0.001 },
            };
            let reply = ask(&engine, |reply| Command::Results { answers: vec![(answer, reply)] });
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
    // The result is published once the engine has checked the committed rows.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while complete.borrow().is_none() {
        assert!(std::time::Instant::now() < deadline, "no result published");
        std::thread::sleep(Duration::from_millis(10));
    }
    let record = complete.borrow().clone().unwrap();
    assert_eq!(record.total, 92, "Q(8)");
    // The snapshot published with the result shows the run complete, every job done.
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while snapshots.borrow().progress.result.is_none() {
        assert!(std::time::Instant::now() < deadline, "no complete snapshot published");
        std::thread::sleep(Duration::from_millis(10));
    }
    let last = snapshots.borrow().clone();
    assert!(last.progress.complete && last.progress.jobs_done == last.progress.jobs_total);
    assert_eq!(last.progress.result.as_ref().map(|r| r.total), Some(92));
    assert!(engine.send(Command::Shutdown));
    started.thread.join().unwrap().unwrap();
}
