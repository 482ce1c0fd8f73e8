//! What one participant, holding a token, can no longer do to a run: each claim of
//! `docs/threat-model.md` about identities, credentials, stalls, bounds and the state file, shown
//! over the real protocol with a hand-written client beside real coordinator and worker processes.

use nqueens_coordinator::result_file;
use nqueens_core::{job_list, Job, JobCounts, SplitParams};
use nqueens_proto as pb;
use nqueens_proto::Reason;
use nqueens_tests::cluster::*;
use nqueens_tests::harness::{
    spawn_coordinator, spawn_worker, token_add, CoordinatorBuilder, RunDir,
};
use nqueens_tests::rogue::{claimed_self_test, connect, outcome, reason, Rogue};
use std::path::Path;
use std::time::{Duration, Instant};

pub(crate) const LONG: Duration = Duration::from_secs(240);
pub(crate) const TOKEN: &str = "trust-test-token";

pub(crate) fn register_request(name: &str, previous: u64, secret: &str) -> pb::RegisterRequest {
    pb::RegisterRequest {
        run: None,
        name: name.into(),
        host: "nowhere".into(),
        slots: 64,
        version: env!("CARGO_PKG_VERSION").into(),
        self_test: Some(claimed_self_test()),
        previous_worker_id: previous,
        previous_worker_secret: secret.into(),
        device: "cpu".into(),
    }
}

/// Registers a hand-written client named `name` with `token`, claiming a passed self-test.
pub(crate) async fn register(port: u16, token: &str, name: &str) -> Rogue {
    Rogue::register_with(port, token, register_request(name, 0, "")).await
}

/// Heartbeats for `rogue` twice a second, holding `lease_ids`, until the task is aborted.
pub(crate) fn keep_beating(mut rogue: Rogue, lease_ids: Vec<u64>) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        loop {
            let _ = rogue.heartbeat(lease_ids.clone()).await;
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    })
}

/// Waits (off the async runtime) until the log file at `log` contains `text`.
pub(crate) async fn wait_for_log(log: std::path::PathBuf, text: &'static str) {
    tokio::task::spawn_blocking(move || {
        wait_until(LONG, text, || std::fs::read_to_string(&log).unwrap_or_default().contains(text))
    })
    .await
    .unwrap();
}

/// Two identities registered under one per-host token answer one job with the same lie. They
/// never confirm each other: the lie waits for another credential, the honest worker contradicts
/// it, the coordinator settles the dispute itself, and the liars are untrusted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_identities_under_one_token_cannot_confirm_a_lie() {
    let dir = RunDir::new();
    let state = dir.state();
    let port = dir.port();
    let serve = dir.coordinator(12).exit_when_done().token(TOKEN);
    let coordinator =
        serve.recheck_fraction("0").lease_seconds(5).args(&["--no-spot-checks"]).start();
    coordinator.listening().await;
    let evil = token_add(&state, "evil");
    let good = token_add(&state, "good");
    // `token add` returns once the live coordinator has the token in force. The sybils act
    // before the honest worker exists: no race decides what they get, and a lie told while
    // nobody else is around is believed no more than any other.
    let mut a = register(port, &evil, "sybil-a").await;
    let mut b = register(port, &evil, "sybil-b").await;

    // Sybil A lies on a weight-8 job; B, under the same token, says the same.
    let list = job_list(12, &SplitParams::default()).unwrap();
    let (lie_job, lease_a) = loop {
        let lease = a.lease(1).await;
        if let Some(spec) = lease.jobs.iter().find(|s| s.weight == 8) {
            break (spec.job_id, lease.lease_id);
        }
        assert!(!lease.run_complete, "the run ended before the sybil got a job");
        a.release(lease.lease_id, lease.jobs.iter().map(|s| s.job_id).collect()).await;
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let truth = list.jobs[lie_job as usize].solve().unwrap();
    let lie = JobCounts { solutions: truth.solutions + 1, ..truth };
    let acks = a.send(vec![a.result(lease_a, lie_job, Some(lie), 0.01)]).await;
    assert_ne!(outcome(&acks[0]), pb::Outcome::Confirmed);
    // B is not given the job (its credential already answered it), and cannot answer it unleased.
    // (Once the coordinator's check of A's answer found the lie, B gets nothing at all: one
    // credential, one party.)
    let lease_b = match b.try_lease(64).await {
        Ok(lease) => lease,
        Err(e) => {
            assert_eq!(reason(&e), Reason::UntrustedWorker, "{e}");
            pb::LeaseResponse::default()
        }
    };
    assert!(
        lease_b.jobs.iter().all(|s| s.job_id != lie_job),
        "the job went to the same credential"
    );
    let acks = b.send(vec![b.result(lease_b.lease_id, lie_job, Some(lie), 0.01)]).await;
    assert_eq!(outcome(&acks[0]), pb::Outcome::Rejected);
    let honest = spawn_worker(dir.path(), port, "honest", &good);

    coordinator.finishes_exact().await;
    drop(honest);
    let liar_counted = query_count(
        &state,
        &format!(
            "SELECT COUNT(*) FROM results WHERE job_id={lie_job} AND counted=1 AND solutions={}",
            lie.solutions
        ),
    );
    assert_eq!(liar_counted, 0, "the lie was counted");
    let untrusted = query_count(
        &state,
        &format!("SELECT COUNT(*) FROM untrusted_workers WHERE worker_id={}", a.id),
    );
    assert_eq!(untrusted, 1, "sybil A is not untrusted");
    let out = coordinator_output([
        "status".as_ref(),
        "--json".as_ref(),
        "--state".as_ref(),
        state.as_os_str(),
    ]);
    let view: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let credentials: Vec<&str> = view["workers"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|w| w["credential"].as_str())
        .collect();
    assert!(credentials.contains(&"evil") && credentials.contains(&"good"), "{view}");
}

/// Nobody can be another worker: calls naming another worker's id without its secret are
/// refused, and registering as it without the secret gives a new id.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn impersonation_is_refused() {
    let dir = RunDir::new();
    let port = dir.port();
    let coordinator = dir.coordinator(12).token(TOKEN).args(&["--no-spot-checks"]).start();
    let mut victim = register(port, TOKEN, "victim").await;
    let lease = victim.lease(2).await;
    assert!(!lease.jobs.is_empty());
    let mut thief = register(port, TOKEN, "thief").await;
    assert_ne!(thief.id, victim.id);

    // Calls naming the victim with the thief's secret.
    let own = (thief.id, thief.secret.clone());
    thief.id = victim.id;
    let e = thief.heartbeat(vec![lease.lease_id]).await.unwrap_err();
    assert_eq!(reason(&e), Reason::BadWorkerSecret, "{e:?}");
    let e = thief
        .client
        .lease(pb::LeaseRequest {
            run: Some(thief.run.clone()),
            worker_id: victim.id,
            free_slots: 4,
            worker_secret: own.1.clone(),
        })
        .await
        .unwrap_err();
    assert_eq!(reason(&e), Reason::BadWorkerSecret);
    let e = thief
        .client
        .release(pb::ReleaseRequest {
            run: Some(thief.run.clone()),
            worker_id: victim.id,
            lease_id: 0,
            job_ids: vec![],
            worker_secret: own.1.clone(),
        })
        .await
        .unwrap_err();
    assert_eq!(reason(&e), Reason::BadWorkerSecret);
    let spec = &lease.jobs[0];
    let counts = Job::try_from(spec).unwrap().solve().unwrap();
    let forged = pb::JobResult {
        worker_secret: own.1.clone(),
        ..victim.result(lease.lease_id, spec.job_id, Some(counts), 0.01)
    };
    let acks = thief.send(vec![forged]).await;
    assert_eq!(
        (outcome(&acks[0]), Reason::try_from(acks[0].reason).unwrap()),
        (pb::Outcome::Rejected, Reason::BadWorkerSecret)
    );

    // Registering as the victim: without its secret a new id; with it, the victim's own.
    let mut c = connect(port, Some(TOKEN)).await;
    for wrong in ["", "0000", own.1.as_str()] {
        let reply =
            c.register(register_request("thief", victim.id, wrong)).await.unwrap().into_inner();
        assert_ne!(reply.worker_id, victim.id, "took the victim's id with secret {wrong:?}");
    }
    let reply = c
        .register(register_request("victim", victim.id, &victim.secret))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        (reply.worker_id, reply.worker_secret.as_str()),
        (victim.id, victim.secret.as_str())
    );
    // The victim's lease still stands.
    let beat = victim.heartbeat(vec![lease.lease_id]).await.unwrap();
    assert!(beat.lost_lease_ids.is_empty(), "{beat:?}");
    drop(coordinator);
}

/// A participant that leases everything it can and reports solver errors only releases jobs and
/// ends up untrusted: no job fails, and one honest worker finishes the run without `requeue`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_error_flood_ends_exact_with_one_honest_worker() {
    let dir = RunDir::new();
    let state = dir.state();
    let port = dir.port();
    let coordinator = dir.coordinator(12).exit_when_done().token(TOKEN).start();
    let mut flood = register(port, TOKEN, "flood").await;
    let honest = spawn_worker(dir.path(), port, "honest", TOKEN);
    let started = Instant::now();
    let mut refused = false;
    while started.elapsed() < Duration::from_secs(60) && !refused {
        let lease = flood
            .client
            .lease(pb::LeaseRequest {
                run: Some(flood.run.clone()),
                worker_id: flood.id,
                free_slots: 1 << 20,
                worker_secret: flood.secret.clone(),
            })
            .await;
        let lease = match lease {
            Ok(l) => l.into_inner(),
            Err(e) => {
                assert_eq!(reason(&e), Reason::UntrustedWorker, "{e:?}");
                refused = true;
                break;
            }
        };
        if lease.run_complete {
            break;
        }
        let errors: Vec<_> =
            lease.jobs.iter().map(|s| flood.result(lease.lease_id, s.job_id, None, 0.0)).collect();
        if !errors.is_empty() {
            flood.send(errors).await;
        }
    }
    assert!(refused, "the flooding worker was never refused");
    coordinator.finishes_exact().await;
    drop(honest);
    assert_eq!(query_count(&state, "SELECT COUNT(*) FROM jobs WHERE state='failed'"), 0);
}

/// A lie that breaks the symmetry identities (one solution too many on a weight-4 job, told by
/// the only worker) is found at the final tally. The coordinator solves the jobs that can explain
/// it, untrusts the liar and keeps serving; restarted twice on the way, it never exits with an
/// error, and an honest worker then finishes the run exact.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_symmetry_breaking_lie_is_repaired_without_a_crash_loop() {
    let dir = RunDir::new();
    let state = dir.state();
    let port = dir.port();
    let quiet =
        ["--token", TOKEN, "--no-spot-checks", "--verify-fraction", "0", "--recheck-fraction", "0"];
    let mut coordinator = spawn_coordinator(dir.path(), 10, port, &quiet, "coordinator-1.log");
    let mut rogue = register(port, TOKEN, "rogue").await;
    let mut lied = None;
    // Until the run is complete (and the liar found out: it is then refused).
    while let Ok(lease) = rogue.try_lease(64).await {
        if lease.jobs.is_empty() {
            if lease.run_complete || lied.is_some() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        }
        let results = lease
            .jobs
            .iter()
            .map(|spec| {
                let mut counts = Job::try_from(spec).unwrap().solve().unwrap();
                if spec.weight == 4 && lied.is_none() {
                    counts.solutions += 1;
                    lied = Some(spec.job_id);
                }
                rogue.result(lease.lease_id, spec.job_id, Some(counts), 0.001)
            })
            .collect();
        rogue.send(results).await;
    }
    let lied = lied.expect("no weight-4 job at N=10");
    wait_for_log(coordinator.log.clone(), "breaks the symmetry identities").await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(
        coordinator.child.try_wait().unwrap().is_none(),
        "the coordinator exited: {}",
        coordinator.log_text()
    );
    assert!(!result_file(&state).exists(), "a result was written from a broken tally");

    // Restart once (killed) and see it serve; then again, with an honest worker to finish.
    coordinator.sigkill();
    let mut second = spawn_coordinator(dir.path(), 10, port, &quiet, "coordinator-2.log");
    connect(port, Some(TOKEN)).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(second.child.try_wait().unwrap().is_none(), "restart 1 exited: {}", second.log_text());
    second.signal(libc::SIGTERM);
    tokio::task::spawn_blocking(move || second.wait_exit(LONG)).await.unwrap();
    let mut args = quiet.to_vec();
    args.push("--exit-when-done");
    let third = spawn_coordinator(dir.path(), 10, port, &args, "coordinator-3.log");
    let honest = spawn_worker(dir.path(), port, "honest", TOKEN);
    third.finishes_exact().await;
    drop(honest);
    let untrusted = query_count(
        &state,
        &format!("SELECT COUNT(*) FROM untrusted_workers WHERE worker_id={}", rogue.id),
    );
    assert_eq!(untrusted, 1, "the liar on job {lied} is not untrusted");
}

/// A hoarder leases jobs, keeps them with heartbeats, and replays one result 600 times claiming
/// 1e300 seconds. Duplicates teach the duration model nothing, so its jobs still become overdue
/// and are copied to the honest workers, who finish the run while it still heartbeats.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_poisoned_duration_model_still_makes_overdue_copies() {
    let dir = RunDir::new();
    let port = dir.port();
    let coordinator = dir.coordinator(12).exit_when_done().token(TOKEN).lease_seconds(3).start();
    let mut hoarder = register(port, TOKEN, "hoarder").await;
    let lease = hoarder.lease(64).await;
    assert!(lease.jobs.len() >= 2);
    let spec = &lease.jobs[0];
    let counts = Job::try_from(spec).unwrap().solve().unwrap();
    let replay = hoarder.result(lease.lease_id, spec.job_id, Some(counts), 1e300);
    hoarder.send(vec![replay.clone(); 600]).await;
    let honest: Vec<Proc> =
        ["honest-a", "honest-b"].iter().map(|n| spawn_worker(dir.path(), port, n, TOKEN)).collect();
    let beating = keep_beating(hoarder, vec![lease.lease_id]);
    coordinator.finishes_exact().await;
    beating.abort();
    drop(honest);
}

/// An identity that registers and heartbeats but never asks for work cannot keep the one real
/// worker waiting for its opinion: the run finishes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_identity_does_not_stall_a_run_with_one_real_worker() {
    let dir = RunDir::new();
    let port = dir.port();
    let serve = dir.coordinator(11).exit_when_done().token(TOKEN);
    let coordinator = serve.lease_seconds(3).verify_fraction("0.2").start();
    let idle = register(port, TOKEN, "idle").await;
    let worker = spawn_worker(dir.path(), port, "real", TOKEN);
    let beating = keep_beating(idle, vec![]);
    coordinator.finishes_exact().await;
    beating.abort();
    drop(worker);
}

/// Bounds on what comes over the wire: a 1 MiB name, control characters, loose versions and
/// implausible node counts are refused; a credential's idle identities are capped; and the state
/// file stays small.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversized_and_malformed_input_is_refused_and_the_state_file_stays_small() {
    let dir = RunDir::new();
    let state = dir.state();
    let port = dir.port();
    let coordinator =
        // 32 expected workers: a credential's identities that never delivered are capped at 64.
        dir.coordinator(12).token(TOKEN).args(&["--expected-workers", "32"]).start();
    let mut c = connect(port, Some(TOKEN)).await;
    let huge = "x".repeat(1 << 20);
    for _ in 0..70 {
        let e = c
            .register(pb::RegisterRequest { name: huge.clone(), ..register_request("", 0, "") })
            .await
            .unwrap_err();
        // Refused by the field bound, or before decoding by the message size limit.
        assert!(
            matches!(e.code(), tonic::Code::InvalidArgument | tonic::Code::OutOfRange),
            "{e:?}"
        );
    }
    let unshown =
        ["evil\r\nforged log line", "bell\u{7}", "gpj.exe\u{202e}", "a\u{2028}b", "zero\u{200b}"];
    for name in unshown {
        let e = c.register(register_request(name, 0, "")).await.unwrap_err();
        assert_eq!(e.code(), tonic::Code::InvalidArgument, "{name:?}");
    }
    for version in ["0", "0.", "0.1.0\0x", "00.1.0", "0.1"] {
        let e = c
            .register(pb::RegisterRequest {
                version: version.into(),
                ..register_request("v", 0, "")
            })
            .await
            .unwrap_err();
        assert!(
            matches!(e.code(), tonic::Code::InvalidArgument | tonic::Code::FailedPrecondition),
            "{version:?}: {e:?}"
        );
    }
    // An honest registration still works; nodes = 2^63 is refused (and untrusts its sender).
    let mut r = register(port, TOKEN, "nodes").await;
    let lease = r.lease(1).await;
    let spec = &lease.jobs[0];
    let counts = Job::try_from(spec).unwrap().solve().unwrap();
    let acks = r
        .send(vec![r.result(
            lease.lease_id,
            spec.job_id,
            Some(JobCounts { nodes: 1 << 63, ..counts }),
            0.01,
        )])
        .await;
    assert_eq!(outcome(&acks[0]), pb::Outcome::Rejected);
    // What a credential's idle identities cost is capped: a registration past the cap is seated
    // and the oldest identity that never delivered is forgotten, row and all.
    for i in 0..100 {
        c.register(register_request(&format!("n{i}"), 0, "")).await.unwrap();
    }
    drop(coordinator);
    let rows = query_count(&state, "SELECT COUNT(*) FROM workers");
    assert!(rows <= 66, "{rows} worker rows after 100 idle registrations");
    let size = std::fs::metadata(&state).unwrap().len()
        + std::fs::metadata(dir.path().join("run.db-wal")).map_or(0, |m| m.len());
    assert!(size < 2 << 20, "state file and log hold {size} bytes");
}

/// After SIGTERM the `.db` alone holds every acknowledged result: a copy of it without its
/// `-wal` shows the same progress as the original.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_sigterm_the_db_file_alone_holds_every_acknowledged_result() {
    let dir = RunDir::new();
    let state = dir.state();
    let port = dir.port();
    let mut coordinator = dir.coordinator(14).token(TOKEN).start();
    let worker = spawn_worker(dir.path(), port, "w", TOKEN);
    let watched = state.clone();
    tokio::task::spawn_blocking(move || {
        wait_until(LONG, "some results", || committed_results(&watched) > 50)
    })
    .await
    .unwrap();
    drop(worker);
    coordinator.signal(libc::SIGTERM);
    let status = tokio::task::spawn_blocking(move || coordinator.wait_exit(LONG)).await.unwrap();
    assert!(status.success());
    let wal = dir.path().join("run.db-wal");
    assert!(std::fs::metadata(&wal).map_or(0, |m| m.len()) == 0, "a -wal with content is left");
    let copy = dir.path().join("copy.db");
    std::fs::copy(&state, &copy).unwrap();
    let done = |p: &Path| query_count(p, "SELECT COUNT(*) FROM results WHERE counted=1");
    assert!(done(&copy) > 50);
    assert_eq!(done(&copy), done(&state));
}

/// A second writer cannot open the state file through a symbolic or a hard link.
#[test]
fn a_second_writer_through_a_link_is_refused() {
    let dir = RunDir::new();
    let state = dir.state();
    let first = dir.coordinator(12).token(TOKEN).start();
    first.wait_listening();
    std::os::unix::fs::symlink(&state, dir.path().join("sym.db")).unwrap();
    std::fs::hard_link(&state, dir.path().join("hard.db")).unwrap();
    for link in ["sym.db", "hard.db"] {
        let path = dir.path().join(link);
        let out =
            coordinator_output(CoordinatorBuilder::new(dir.path(), 12).state(path).serve_args());
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "a second writer through {link} started");
        assert!(err.contains("in use") || err.contains("locked"), "{link}: {err}");
    }
}
