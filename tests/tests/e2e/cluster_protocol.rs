//! Replayed and forged results against a real coordinator process: a replay is counted once; a
//! result for another run, an unknown job, a lease that does not cover the job, or a call with a
//! wrong token is refused with a typed reason and changes nothing.

use nqueens_core::{job_list, JobCounts, SplitParams};
use nqueens_proto as pb;
use nqueens_proto::Reason;
use nqueens_tests::cluster::*;
use nqueens_tests::harness::RunDir;
use nqueens_tests::rogue::{connect, reason};
use std::collections::HashMap;
use std::path::Path;
use std::time::Duration;
use tokio::sync::mpsc;
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
async fn referee_settles(state: &Path, job_id: u64) {
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

/// Runs the coordinator binary's command line against the live coordinator at `port`.
fn coordinator_command(port: u16, args: &[&str], token: Option<&str>) -> std::process::Output {
    let bin = nqueens_tests::binary("nqueens-coordinator");
    let mut command = std::process::Command::new(&bin);
    command.args(args).args(["--connect", &format!("http://127.0.0.1:{port}")]);
    if let Some(token) = token {
        command.env("NQ_TOKEN", token);
    }
    command.output().unwrap()
}

/// One open results stream: what is sent on it, and its acknowledgements.
struct Results {
    tx: mpsc::Sender<pb::JobResult>,
    acks: tonic::Streaming<pb::ResultAck>,
}

impl Results {
    async fn open(client: &mut pb::Client) -> Results {
        let (tx, rx) = mpsc::channel(16);
        let acks = client
            .results(tokio_stream::wrappers::ReceiverStream::new(rx))
            .await
            .unwrap()
            .into_inner();
        Results { tx, acks }
    }

    async fn send(&self, r: pb::JobResult) {
        self.tx.send(r).await.unwrap();
    }

    async fn ack(&mut self) -> pb::ResultAck {
        tokio::time::timeout(Duration::from_secs(30), self.acks.next())
            .await
            .unwrap()
            .unwrap()
            .unwrap()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replayed_result_counts_once_and_forged_results_change_nothing() {
    let dir = RunDir::new();
    let (state, port) = (dir.path().join("run12.db"), dir.port());
    // No spot checks: this test reads the exact outcome of each answer it sends, and a spot check
    // would turn some into confirmations of known answers.
    let extra =
        ["--lease-seconds", "60", "--verify-fraction", "0", "--token", TOKEN, "--no-spot-checks"];
    let mut coordinator = dir.coordinator(12).state(&state).args(&extra).start();
    let mut client = connect(port, Some(TOKEN)).await;

    wrong_or_missing_tokens_are_refused(port).await;
    let other = other_versions_and_runs_are_refused(&mut client).await;
    let first = first_answer(&mut client).await;
    let mut results = Results::open(&mut client).await;
    let before = a_replay_counts_once(&mut results, &mut client, &state, &first).await;
    forgeries_change_nothing(&mut results, &mut client, &state, &first, other, &before).await;
    a_conflicting_duplicate_is_settled_by_the_referee(&mut results, &mut client, &state, &first)
        .await;
    status_and_healthcheck_answer(port);

    drop(results.tx);
    coordinator.stop_within(Duration::from_secs(60));
}

/// Wrong or missing token: refused on every call, with the typed reason.
async fn wrong_or_missing_tokens_are_refused(port: u16) {
    let mut intruder = connect(port, Some("guess")).await;
    let e = intruder.register(register_request(None, env!("CARGO_PKG_VERSION"))).await.unwrap_err();
    assert_eq!((e.code(), reason(&e)), (tonic::Code::Unauthenticated, Reason::BadToken));
    let e = intruder.status(pb::StatusRequest::default()).await.unwrap_err();
    assert_eq!(reason(&e), Reason::BadToken);
    let mut anonymous = connect(port, None).await;
    let e = anonymous.lease(pb::LeaseRequest::default()).await.unwrap_err();
    assert_eq!(reason(&e), Reason::BadToken);
}

/// Incompatible version, and a worker of another run (whose id it returns): refused.
async fn other_versions_and_runs_are_refused(client: &mut pb::Client) -> pb::RunId {
    let e = client.register(register_request(None, "99.0.0")).await.unwrap_err();
    assert_eq!(reason(&e), Reason::VersionMismatch);
    let other = pb::RunId { n: 13, fingerprint: "n13-0000000000000000-p1".into() };
    let e = client
        .register(register_request(Some(other.clone()), env!("CARGO_PKG_VERSION")))
        .await
        .unwrap_err();
    assert_eq!(reason(&e), Reason::WrongRun);
    assert!(e.message().contains("N=13"), "{}", e.message());
    other
}

/// A true answer to the first job of a real lease, and what forgeries need besides.
struct FirstAnswer {
    result: pb::JobResult,
    /// The job's weighted solutions: what the run's partial total is once it counts.
    expected_total: u64,
    /// A job the lease does not cover.
    other_job: u64,
}

/// Registers, takes a lease and solves its first job.
async fn first_answer(client: &mut pb::Client) -> FirstAnswer {
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
    let other_job = list
        .jobs
        .iter()
        .find(|j| !lease.jobs.iter().any(|s| s.job_id == j.id.get()))
        .unwrap()
        .id
        .get();
    FirstAnswer { result, expected_total: job.weight as u64 * counts.solutions, other_job }
}

/// The same result twice: accepted once, then acknowledged as a duplicate; counted once. Returns
/// the status once it counts.
async fn a_replay_counts_once(
    results: &mut Results,
    client: &mut pb::Client,
    state: &Path,
    first: &FirstAnswer,
) -> pb::StatusResponse {
    let expected_total = first.expected_total;
    results.send(first.result.clone()).await;
    results.send(first.result.clone()).await;
    let mut outcomes = vec![];
    for _ in 0..2 {
        let ack = results.ack().await;
        outcomes.push(pb::Outcome::try_from(ack.outcome).unwrap());
    }
    outcomes.sort_by_key(|o| *o as i32);
    assert_eq!(outcomes, vec![pb::Outcome::Accepted, pb::Outcome::Duplicate]);
    // A new credential's answer is done once the coordinator's own check agrees (probation):
    // both acknowledgements may come in one commit, before that check. (The partial sums are
    // read again at most every few seconds.)
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let mut before = status(client).await;
    while (before.jobs_done == 0 || before.partial_total != expected_total)
        && std::time::Instant::now() < deadline
    {
        tokio::time::sleep(Duration::from_millis(20)).await;
        before = status(client).await;
    }
    assert_eq!((before.jobs_done, before.partial_total, before.conflicts), (1, expected_total, 0));
    assert_eq!(committed_results(state), 1, "the replay added no counted row");
    before
}

/// Forged results: another run, an unknown job, a job the lease does not cover. Each is rejected
/// with its reason, and the status stays as `before`.
async fn forgeries_change_nothing(
    results: &mut Results,
    client: &mut pb::Client,
    state: &Path,
    first: &FirstAnswer,
    other: pb::RunId,
    before: &pb::StatusResponse,
) {
    let result = &first.result;
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
        (pb::JobResult { job_id: first.other_job, ..result.clone() }, Reason::UnknownLease),
        (pb::JobResult { lease_id: 987_654, ..result.clone() }, Reason::UnknownLease),
    ];
    for (forged, want) in forgeries {
        results.send(forged).await;
        let ack = results.ack().await;
        assert_eq!(pb::Outcome::try_from(ack.outcome).unwrap(), pb::Outcome::Rejected);
        assert_eq!(Reason::try_from(ack.reason).unwrap(), want, "{}", ack.message);
        assert!(!ack.message.is_empty());
    }
    let after = status(client).await;
    assert_eq!(
        (after.jobs_done, after.partial_total, after.conflicts, after.jobs_pending),
        (before.jobs_done, before.partial_total, 0, before.jobs_pending)
    );
    assert_eq!(committed_results(state), 1, "forgeries changed nothing");
}

/// A duplicate with different counts is a conflict: recorded, uncounted, the job re-run.
async fn a_conflicting_duplicate_is_settled_by_the_referee(
    results: &mut Results,
    client: &mut pb::Client,
    state: &Path,
    first: &FirstAnswer,
) {
    let mut wrong = first.result.clone();
    wrong.counts.as_mut().unwrap().solutions += 1;
    results.send(wrong).await;
    let ack = results.ack().await;
    assert_eq!(pb::Outcome::try_from(ack.outcome).unwrap(), pb::Outcome::Conflict);
    assert_eq!(query_count(state, "SELECT COUNT(*) FROM conflicts"), 1);
    // The coordinator settles the dispute itself: its own answer is counted (as worker 0).
    referee_settles(state, first.result.job_id).await;
    let s = status(client).await;
    assert_eq!((s.jobs_done, s.partial_total, s.conflicts), (1, first.expected_total, 1));
}

/// The status command and the health check against the live coordinator.
fn status_and_healthcheck_answer(port: u16) {
    let out = coordinator_command(port, &["status", "--json"], Some(TOKEN));
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["n"], 12);
    assert_eq!(v["conflicts"], 1);
    assert_eq!(v["workers"][0]["name"], "probe");
    let out = coordinator_command(port, &["healthcheck"], None);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stdout));
}

/// Three registered credentials (A, B, C) of one run, and the answers and leases they send.
struct Workers {
    run: pb::RunId,
    list: nqueens_core::JobList,
    secrets: HashMap<u64, String>,
    a: u64,
    b: u64,
    c: u64,
}

impl Workers {
    async fn register(client: &mut pb::Client) -> Workers {
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
        let secrets = ids.iter().map(|(id, _, secret)| (*id, secret.clone())).collect();
        Workers { run, list, secrets, a, b, c }
    }

    /// `worker_id`'s answer to `job_id`: true, or off by one solution if `wrong`.
    fn result(&self, worker_id: u64, lease_id: u64, job_id: u64, wrong: bool) -> pb::JobResult {
        let k = self.list.jobs[job_id as usize].solve().unwrap();
        let counts = JobCounts { solutions: k.solutions + wrong as u64, ..k };
        pb::JobResult {
            run: Some(self.run.clone()),
            worker_id,
            lease_id,
            job_id,
            counts: Some(counts.into()),
            seconds: 0.01,
            error: String::new(),
            worker_secret: self.secrets[&worker_id].clone(),
        }
    }

    /// New workers get one job per free thread: B takes two, A four (B's two and two new ones).
    async fn lease(
        &self,
        client: &mut pb::Client,
        worker_id: u64,
    ) -> Result<tonic::Response<pb::LeaseResponse>, tonic::Status> {
        let free_slots = if worker_id == self.b { 2 } else { 4 };
        let req = pb::LeaseRequest {
            run: Some(self.run.clone()),
            worker_id,
            free_slots,
            worker_secret: self.secrets[&worker_id].clone(),
        };
        client.clone().lease(req).await
    }
}

/// A forged worker that loses a verification: untrusted, its counted results un-counted and its
/// further leases and results refused with the typed reason.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_that_loses_a_verification_is_untrusted_and_its_jobs_rerun() {
    let dir = RunDir::new();
    let (state, port) = (dir.path().join("run12v.db"), dir.port());
    let extra = [
        "--lease-seconds",
        "60",
        "--verify-fraction",
        "1",
        "--no-spot-checks",
        "--no-coordinator-checks",
        // Agreement of identities under one credential is re-checked at random; none here, so
        // that what counts is certain.
        "--recheck-fraction",
        "0",
    ];
    let mut coordinator = dir.coordinator(12).state(&state).args(&extra).start();
    let mut client = connect(port, None).await;
    let w = Workers::register(&mut client).await;
    let mut results = Results::open(&mut client).await;

    let (la, confirmed, v) =
        a_confirms_b_and_is_wrong_on_v(&w, &mut client, &mut results, &state).await;
    b_and_c_outvote_a_on_v(&w, &mut client, &mut results, v).await;
    a_is_untrusted_and_uncounted(&w, &mut client, &state).await;
    a_is_refused(&w, &mut client, &mut results, la.lease_id, confirmed[0]).await;
    status_shows_the_untrusted_worker(port);

    drop(results.tx);
    coordinator.stop_within(Duration::from_secs(60));
    assert!(coordinator.log_text().contains("untrusted"), "warned in the log");
}

/// The counted rows of worker `id`.
fn counted_rows_of(state: &Path, id: u64) -> i64 {
    query_count(state, &format!("SELECT COUNT(*) FROM results WHERE counted=1 AND worker_id={id}"))
}

/// B gives first opinions; A confirms them (A's rows are counted) and is wrong on one new job V.
/// Returns A's lease, the jobs A confirmed, and V.
async fn a_confirms_b_and_is_wrong_on_v(
    w: &Workers,
    client: &mut pb::Client,
    results: &mut Results,
    state: &Path,
) -> (pb::LeaseResponse, Vec<u64>, u64) {
    let (a, b) = (w.a, w.b);
    let lb = w.lease(client, b).await.unwrap().into_inner();
    for spec in &lb.jobs {
        results.send(w.result(b, lb.lease_id, spec.job_id, false)).await;
        assert_eq!(
            pb::Outcome::try_from(results.ack().await.outcome).unwrap(),
            pb::Outcome::Accepted
        );
    }
    let la = w.lease(client, a).await.unwrap().into_inner();
    let confirmed: Vec<u64> = la
        .jobs
        .iter()
        .map(|s| s.job_id)
        .filter(|id| lb.jobs.iter().any(|s| s.job_id == *id))
        .collect();
    assert!(!confirmed.is_empty(), "A's lease holds B's jobs");
    for &id in &confirmed {
        results.send(w.result(a, la.lease_id, id, false)).await;
        assert_eq!(
            pb::Outcome::try_from(results.ack().await.outcome).unwrap(),
            pb::Outcome::Confirmed
        );
    }
    let v = la
        .jobs
        .iter()
        .map(|s| s.job_id)
        .find(|id| !confirmed.contains(id))
        .expect("A's lease holds a new job");
    results.send(w.result(a, la.lease_id, v, true)).await;
    assert_eq!(pb::Outcome::try_from(results.ack().await.outcome).unwrap(), pb::Outcome::Accepted);
    assert_eq!(counted_rows_of(state, a), confirmed.len() as i64);
    (la, confirmed, v)
}

/// B disagrees with A on V: a conflict. With the coordinator's own checks off, a third credential
/// settles it: C agrees with B, against A.
async fn b_and_c_outvote_a_on_v(
    w: &Workers,
    client: &mut pb::Client,
    results: &mut Results,
    v: u64,
) {
    let lb2 = w.lease(client, w.b).await.unwrap().into_inner();
    assert!(lb2.jobs.iter().any(|s| s.job_id == v), "V goes to B");
    results.send(w.result(w.b, lb2.lease_id, v, false)).await;
    assert_eq!(pb::Outcome::try_from(results.ack().await.outcome).unwrap(), pb::Outcome::Conflict);
    let lc = w.lease(client, w.c).await.unwrap().into_inner();
    assert!(lc.jobs.iter().any(|s| s.job_id == v), "V goes to C");
    results.send(w.result(w.c, lc.lease_id, v, false)).await;
    assert_eq!(pb::Outcome::try_from(results.ack().await.outcome).unwrap(), pb::Outcome::Confirmed);
}

/// A's rows are un-counted, and A alone is untrusted: in the state and in the status.
async fn a_is_untrusted_and_uncounted(w: &Workers, client: &mut pb::Client, state: &Path) {
    let a = w.a;
    assert_eq!(counted_rows_of(state, a), 0, "A's rows un-counted");
    assert_eq!(query_count(state, "SELECT COUNT(*) FROM untrusted_workers"), 1);
    let s = status(client).await;
    assert_eq!((s.jobs_done, s.untrusted_workers), (1, 1));
    assert!(s.workers.iter().any(|w| w.worker_id == a && w.untrusted));
    assert!(s.workers.iter().all(|w| w.worker_id == a || !w.untrusted));
}

/// A is refused from now on: its leases and its results, with the typed reason.
async fn a_is_refused(
    w: &Workers,
    client: &mut pb::Client,
    results: &mut Results,
    lease_id: u64,
    job_id: u64,
) {
    let e = w.lease(client, w.a).await.unwrap_err();
    assert_eq!((e.code(), reason(&e)), (tonic::Code::PermissionDenied, Reason::UntrustedWorker));
    results.send(w.result(w.a, lease_id, job_id, false)).await;
    let refused = results.ack().await;
    assert_eq!(pb::Outcome::try_from(refused.outcome).unwrap(), pb::Outcome::Rejected);
    assert_eq!(Reason::try_from(refused.reason).unwrap(), Reason::UntrustedWorker);
}

/// The status command shows the untrusted worker, in JSON and in text.
fn status_shows_the_untrusted_worker(port: u16) {
    let out = coordinator_command(port, &["status", "--json"], None);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let j: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(j["untrusted_workers"], 1);
    let out = coordinator_command(port, &["status"], None);
    assert!(String::from_utf8_lossy(&out.stdout).contains("UNTRUSTED"));
}
