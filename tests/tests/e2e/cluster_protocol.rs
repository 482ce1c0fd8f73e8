//! Replayed and forged results against a real coordinator process: a replay is counted once; a
//! result for another run, an unknown job, a lease that does not cover the job, or a call with a
//! wrong token is refused with a typed reason and changes nothing.

use nqueens_core::{job_list, JobCounts, SplitParams};
use nqueens_proto as pb;
use nqueens_proto::Reason;
use nqueens_tests::cluster::*;
use nqueens_tests::rogue::{connect, reason};
use std::time::Duration;
use tokio_stream::StreamExt;

const TOKEN: &str = "sesame";

fn self_test() -> pb::SelfTest {
    nqueens_worker::self_test()
}

fn register_request(run: Option<pb::RunId>, version: &str) -> pb::RegisterRequest {
    pb::RegisterRequest {
        run,
        name: "probe".into(),
        host: "test".into(),
        slots: 1,
        version: version.into(),
        self_test: Some(self_test()),
        previous_worker_id: 0,
        previous_worker_secret: String::new(),
        device: String::new(),
    }
}

/// Waits until the coordinator's own answer (worker 0) is the counted row of `job_id`.
async fn referee_settles(state: &std::path::Path, job_id: u64) {
    let settled =
        format!("SELECT COUNT(*) FROM results WHERE job_id={job_id} AND counted=1 AND worker_id=0");
    let state = state.to_owned();
    tokio::task::spawn_blocking(move || {
        wait_until(Duration::from_secs(60), "the referee's answer", || {
            query_count(&state, &settled) == 1
        })
    })
    .await
    .unwrap();
}

async fn status(client: &mut pb::Client) -> pb::StatusResponse {
    client.status(pb::StatusRequest::default()).await.unwrap().into_inner()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replayed_result_counts_once_and_forged_results_change_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("run12.db");
    let port = free_port();
    let mut coordinator = Proc::spawn(
        "nqueens-coordinator",
        &serve_args(
            12,
            &state,
            port,
            // No spot checks: this test reads the exact outcome of each answer it sends, and a
            // spot check would turn some into confirmations of known answers.
            &[
                "--lease-seconds",
                "60",
                "--verify-fraction",
                "0",
                "--token",
                TOKEN,
                "--no-spot-checks",
            ],
        ),
        dir.path().join("coordinator.log"),
    );
    let mut client = connect(port, Some(TOKEN)).await;

    // Wrong or missing token: refused on every call, with the typed reason.
    let mut intruder = connect(port, Some("guess")).await;
    let e = intruder.register(register_request(None, env!("CARGO_PKG_VERSION"))).await.unwrap_err();
    assert_eq!((e.code(), reason(&e)), (tonic::Code::Unauthenticated, Reason::BadToken));
    let e = intruder.status(pb::StatusRequest::default()).await.unwrap_err();
    assert_eq!(reason(&e), Reason::BadToken);
    let mut anonymous = connect(port, None).await;
    let e = anonymous.lease(pb::LeaseRequest::default()).await.unwrap_err();
    assert_eq!(reason(&e), Reason::BadToken);

    // Incompatible version, and a worker of another run.
    let e = client.register(register_request(None, "99.0.0")).await.unwrap_err();
    assert_eq!(reason(&e), Reason::VersionMismatch);
    let other = pb::RunId { n: 13, fingerprint: "n13-0000000000000000-p1".into() };
    let e = client
        .register(register_request(Some(other.clone()), env!("CARGO_PKG_VERSION")))
        .await
        .unwrap_err();
    assert_eq!(reason(&e), Reason::WrongRun);
    assert!(e.message().contains("N=13"), "{}", e.message());

    let reg = client
        .register(register_request(None, env!("CARGO_PKG_VERSION")))
        .await
        .unwrap()
        .into_inner();
    let run = reg.run.clone().unwrap();
    let lease = client
        .lease(pb::LeaseRequest {
            run: Some(run.clone()),
            worker_id: reg.worker_id,
            free_slots: 1,
            worker_secret: reg.worker_secret.clone(),
        })
        .await
        .unwrap()
        .into_inner();
    assert!(!lease.jobs.is_empty());
    let list = job_list(12, &SplitParams::default()).unwrap();
    let job = &list.jobs[lease.jobs[0].job_id as usize];
    let counts = job.solve().unwrap();
    let result = pb::JobResult {
        run: Some(run.clone()),
        worker_id: reg.worker_id,
        lease_id: lease.lease_id,
        job_id: job.id.get(),
        counts: Some(counts.into()),
        seconds: 0.01,
        error: String::new(),
        worker_secret: reg.worker_secret.clone(),
    };

    let (tx, rx) = tokio::sync::mpsc::channel(16);
    let mut acks =
        client.results(tokio_stream::wrappers::ReceiverStream::new(rx)).await.unwrap().into_inner();
    let send = |r: pb::JobResult| {
        let tx = tx.clone();
        async move {
            tx.send(r).await.unwrap();
        }
    };
    // The same result twice: accepted once, then acknowledged as a duplicate.
    send(result.clone()).await;
    send(result.clone()).await;
    let mut outcomes = vec![];
    for _ in 0..2 {
        let ack = tokio::time::timeout(Duration::from_secs(30), acks.next())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        outcomes.push(pb::Outcome::try_from(ack.outcome).unwrap());
    }
    outcomes.sort_by_key(|o| *o as i32);
    assert_eq!(outcomes, vec![pb::Outcome::Accepted, pb::Outcome::Duplicate]);
    let expected_total = job.weight as u64 * counts.solutions;
    // A new credential's answer is done once the coordinator's own check agrees (probation):
    // both acknowledgements may come in one commit, before that check. (The partial sums are
    // read again at most every few seconds.)
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let mut before = status(&mut client).await;
    while (before.jobs_done == 0 || before.partial_total != expected_total)
        && std::time::Instant::now() < deadline
    {
        tokio::time::sleep(Duration::from_millis(20)).await;
        before = status(&mut client).await;
    }
    assert_eq!((before.jobs_done, before.partial_total, before.conflicts), (1, expected_total, 0));
    assert_eq!(committed_results(&state), 1, "the replay added no counted row");

    // Forged results: another run, an unknown job, a job the lease does not cover.
    let other_job = list
        .jobs
        .iter()
        .find(|j| !lease.jobs.iter().any(|s| s.job_id == j.id.get()))
        .unwrap()
        .id
        .get();
    let forgeries = [
        (pb::JobResult { run: Some(other), ..result.clone() }, Reason::WrongRun),
        (
            pb::JobResult {
                run: Some(pb::RunId { n: 12, fingerprint: "n12-forged-p1".into() }),
                ..result.clone()
            },
            Reason::WrongRun,
        ),
        (pb::JobResult { job_id: 1_000_000_000, ..result.clone() }, Reason::UnknownJob),
        (pb::JobResult { job_id: other_job, ..result.clone() }, Reason::UnknownLease),
        (pb::JobResult { lease_id: 987_654, ..result.clone() }, Reason::UnknownLease),
    ];
    for (forged, want) in forgeries {
        send(forged).await;
        let ack = tokio::time::timeout(Duration::from_secs(30), acks.next())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        assert_eq!(pb::Outcome::try_from(ack.outcome).unwrap(), pb::Outcome::Rejected);
        assert_eq!(Reason::try_from(ack.reason).unwrap(), want, "{}", ack.message);
        assert!(!ack.message.is_empty());
    }
    let after = status(&mut client).await;
    assert_eq!(
        (after.jobs_done, after.partial_total, after.conflicts, after.jobs_pending),
        (before.jobs_done, before.partial_total, 0, before.jobs_pending)
    );
    assert_eq!(committed_results(&state), 1, "forgeries changed nothing");

    // A duplicate with different counts is a conflict: recorded, uncounted, the job re-run.
    let mut wrong = result.clone();
    wrong.counts.as_mut().unwrap().solutions += 1;
    send(wrong).await;
    let ack =
        tokio::time::timeout(Duration::from_secs(30), acks.next()).await.unwrap().unwrap().unwrap();
    assert_eq!(pb::Outcome::try_from(ack.outcome).unwrap(), pb::Outcome::Conflict);
    assert_eq!(query_count(&state, "SELECT COUNT(*) FROM conflicts"), 1);
    // The coordinator settles the dispute itself: its own answer is counted (as worker 0).
    referee_settles(&state, job.id.get()).await;
    let s = status(&mut client).await;
    assert_eq!((s.jobs_done, s.partial_total, s.conflicts), (1, expected_total, 1));

    // The status command and the health check against the live coordinator.
    let bin = nqueens_tests::binary("nqueens-coordinator");
    let out = std::process::Command::new(&bin)
        .args(["status", "--json", "--connect", &format!("http://127.0.0.1:{port}")])
        .env("NQ_TOKEN", TOKEN)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["n"], 12);
    assert_eq!(v["conflicts"], 1);
    assert_eq!(v["workers"][0]["name"], "probe");
    let out = std::process::Command::new(&bin)
        .args(["healthcheck", "--connect", &format!("http://127.0.0.1:{port}")])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stdout));

    drop(tx);
    coordinator.signal(libc::SIGTERM);
    let s = coordinator.wait_exit(Duration::from_secs(60));
    assert!(s.success(), "{s}\n{}", coordinator.log_text());
}

/// A forged worker that loses a verification: untrusted, its counted results un-counted and its
/// further leases and results refused with the typed reason.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_that_loses_a_verification_is_untrusted_and_its_jobs_rerun() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("run12v.db");
    let port = free_port();
    let mut coordinator = Proc::spawn(
        "nqueens-coordinator",
        &serve_args(
            12,
            &state,
            port,
            &[
                "--lease-seconds",
                "60",
                "--verify-fraction",
                "1",
                "--no-spot-checks",
                "--no-coordinator-checks",
                // Agreement of identities under one credential is re-checked at random; none
                // here, so that what counts is certain.
                "--recheck-fraction",
                "0",
            ],
        ),
        dir.path().join("coordinator.log"),
    );
    let mut client = connect(port, None).await;
    let list = job_list(12, &SplitParams::default()).unwrap();
    let mut ids = vec![];
    for name in ["a", "b", "c"] {
        let reg = client
            .register(pb::RegisterRequest {
                name: name.into(),
                slots: 4,
                ..register_request(None, env!("CARGO_PKG_VERSION"))
            })
            .await
            .unwrap()
            .into_inner();
        ids.push((reg.worker_id, reg.run.unwrap(), reg.worker_secret));
    }
    let run = ids[0].1.clone();
    let (a, b, c) = (ids[0].0, ids[1].0, ids[2].0);
    let secrets: std::collections::HashMap<u64, String> =
        ids.iter().map(|(id, _, secret)| (*id, secret.clone())).collect();

    let (tx, rx) = tokio::sync::mpsc::channel(16);
    let mut acks =
        client.results(tokio_stream::wrappers::ReceiverStream::new(rx)).await.unwrap().into_inner();
    let result = |worker_id: u64, lease_id: u64, job_id: u64, wrong: bool| {
        let k = list.jobs[job_id as usize].solve().unwrap();
        let counts = JobCounts { solutions: k.solutions + wrong as u64, ..k };
        pb::JobResult {
            run: Some(run.clone()),
            worker_id,
            lease_id,
            job_id,
            counts: Some(counts.into()),
            seconds: 0.01,
            error: String::new(),
            worker_secret: secrets[&worker_id].clone(),
        }
    };
    let send = |r: pb::JobResult| {
        let tx = tx.clone();
        async move {
            tx.send(r).await.unwrap();
        }
    };
    macro_rules! ack {
        () => {
            tokio::time::timeout(Duration::from_secs(30), acks.next())
                .await
                .unwrap()
                .unwrap()
                .unwrap()
        };
    }
    // New workers get one job per free thread: B takes two, A four (B's two and two new ones).
    let lease = |client: &mut pb::Client, worker_id: u64| {
        let free_slots = if worker_id == b { 2 } else { 4 };
        let req = pb::LeaseRequest {
            run: Some(run.clone()),
            worker_id,
            free_slots,
            worker_secret: secrets[&worker_id].clone(),
        };
        let mut client = client.clone();
        async move { client.lease(req).await }
    };

    // B gives first opinions; A confirms them (A's rows are counted) and is wrong on one new job V.
    let lb = lease(&mut client, b).await.unwrap().into_inner();
    for spec in &lb.jobs {
        send(result(b, lb.lease_id, spec.job_id, false)).await;
        assert_eq!(pb::Outcome::try_from(ack!().outcome).unwrap(), pb::Outcome::Accepted);
    }
    let la = lease(&mut client, a).await.unwrap().into_inner();
    let confirmed: Vec<u64> = la
        .jobs
        .iter()
        .map(|s| s.job_id)
        .filter(|id| lb.jobs.iter().any(|s| s.job_id == *id))
        .collect();
    assert!(!confirmed.is_empty(), "A's lease holds B's jobs");
    for &id in &confirmed {
        send(result(a, la.lease_id, id, false)).await;
        assert_eq!(pb::Outcome::try_from(ack!().outcome).unwrap(), pb::Outcome::Confirmed);
    }
    let v = la
        .jobs
        .iter()
        .map(|s| s.job_id)
        .find(|id| !confirmed.contains(id))
        .expect("A's lease holds a new job");
    send(result(a, la.lease_id, v, true)).await;
    assert_eq!(pb::Outcome::try_from(ack!().outcome).unwrap(), pb::Outcome::Accepted);
    assert_eq!(
        query_count(
            &state,
            &format!("SELECT COUNT(*) FROM results WHERE counted=1 AND worker_id={a}")
        ),
        confirmed.len() as i64
    );

    // B disagrees with A on V: a conflict. With the coordinator's own checks off, a third
    // credential settles it: C agrees with B, against A.
    let lb2 = lease(&mut client, b).await.unwrap().into_inner();
    assert!(lb2.jobs.iter().any(|s| s.job_id == v), "V goes to B");
    send(result(b, lb2.lease_id, v, false)).await;
    assert_eq!(pb::Outcome::try_from(ack!().outcome).unwrap(), pb::Outcome::Conflict);
    let lc = lease(&mut client, c).await.unwrap().into_inner();
    assert!(lc.jobs.iter().any(|s| s.job_id == v), "V goes to C");
    send(result(c, lc.lease_id, v, false)).await;
    assert_eq!(pb::Outcome::try_from(ack!().outcome).unwrap(), pb::Outcome::Confirmed);

    assert_eq!(
        query_count(
            &state,
            &format!("SELECT COUNT(*) FROM results WHERE counted=1 AND worker_id={a}")
        ),
        0,
        "A's rows un-counted"
    );
    assert_eq!(query_count(&state, "SELECT COUNT(*) FROM untrusted_workers"), 1);
    let s = status(&mut client).await;
    assert_eq!((s.jobs_done, s.untrusted_workers), (1, 1));
    assert!(s.workers.iter().any(|w| w.worker_id == a && w.untrusted));
    assert!(s.workers.iter().all(|w| w.worker_id == a || !w.untrusted));

    // A is refused from now on.
    let e = lease(&mut client, a).await.unwrap_err();
    assert_eq!((e.code(), reason(&e)), (tonic::Code::PermissionDenied, Reason::UntrustedWorker));
    send(result(a, la.lease_id, confirmed[0], false)).await;
    let refused = ack!();
    assert_eq!(pb::Outcome::try_from(refused.outcome).unwrap(), pb::Outcome::Rejected);
    assert_eq!(Reason::try_from(refused.reason).unwrap(), Reason::UntrustedWorker);

    let bin = nqueens_tests::binary("nqueens-coordinator");
    let out = std::process::Command::new(&bin)
        .args(["status", "--json", "--connect", &format!("http://127.0.0.1:{port}")])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let j: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(j["untrusted_workers"], 1);
    let out = std::process::Command::new(&bin)
        .args(["status", "--connect", &format!("http://127.0.0.1:{port}")])
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&out.stdout).contains("UNTRUSTED"));

    drop(tx);
    coordinator.signal(libc::SIGTERM);
    let s = coordinator.wait_exit(Duration::from_secs(60));
    assert!(s.success(), "{s}\n{}", coordinator.log_text());
    assert!(coordinator.log_text().contains("untrusted"), "warned in the log");
}
