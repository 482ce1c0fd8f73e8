//! An answer's credential is fixed when it is given. One party's identities that answered a job
//! and were then forgotten (an idle registration flood makes room by forgetting identities that
//! delivered nothing counted) keep the credential they answered under: their old opinions never
//! become "independent" credentials, a late answer under a lease that no longer holds the job is
//! only an opinion of its credential, and an honest dissenter is never framed. A record run that
//! catches a turncoat ends with every job on two parties.

use super::open_checks::{answers, same_identity};
use super::record_run::record_run;
use super::trust::{keep_beating, register, register_request, LONG, TOKEN};
use super::trust_evidence::{counted_from, lie, truth, untrusted};
use nqueens_proto as pb;
use nqueens_tests::cluster::*;
use nqueens_tests::harness::{spawn_worker, token_add, RunDir};
use nqueens_tests::rogue::{connect_from, outcome, Rogue};
use std::path::Path;
use std::time::{Duration, Instant};

/// A run without the coordinator's own checks (no referee, no spot checks: every run above
/// N = 22), leases long enough for the turns taken here, and the smallest budget of idle
/// identities (64 a credential).
const QUIET: [&str; 6] = [
    "--no-coordinator-checks",
    "--no-spot-checks",
    "--lease-seconds",
    "60",
    "--expected-workers",
    "8",
];

/// Registrations past every credential's budget of idle identities (64 at the least): enough to
/// get every idle identity of `token` registered before forgotten.
const FLOOD: usize = 80;

/// `holder` leases jobs and gives the first back, keeping the others (a job held keeps an
/// identity from being forgotten); then each of `others` leases that first job (the cheapest
/// pending one: parties on probation take those) and gives its lease back. The job, `holder`'s
/// lease (which still names it) and each of `others`' lease of it.
async fn take_turns_at_one_job(
    holder: &mut Rogue,
    others: &mut [&mut Rogue],
) -> (u64, u64, Vec<u64>) {
    let lease = holder.lease(2).await;
    assert!(lease.jobs.len() >= 2, "the holder got {} jobs", lease.jobs.len());
    let job = lease.jobs[0].job_id;
    holder.release(lease.lease_id, vec![job]).await;
    let mut turns = Vec::new();
    for other in others.iter_mut() {
        let turn = other.lease(1).await;
        let ids: Vec<u64> = turn.jobs.iter().map(|s| s.job_id).collect();
        assert!(ids.contains(&job), "job {job} not leased again: {ids:?}");
        other.release(turn.lease_id, ids).await;
        turns.push(turn.lease_id);
    }
    (job, lease.lease_id, turns)
}

/// `rogue` answers `job` under `lease_id` with `counts`; the outcome.
async fn answer(
    rogue: &mut Rogue,
    lease_id: u64,
    job: u64,
    counts: nqueens_core::JobCounts,
) -> pb::Outcome {
    let acks = rogue.send(vec![rogue.result(lease_id, job, Some(counts), 0.01)]).await;
    outcome(&acks[0])
}

/// Registers `FLOOD` idle identities under `token` from another loopback address.
async fn flood(port: u16, token: &str) {
    let mut client = connect_from(port, [127, 0, 0, 3].into(), Some(token)).await;
    for i in 0..FLOOD {
        let request = register_request(&format!("flood-{i}"), 0, "");
        client.register(request).await.expect("an idle registration is never refused");
    }
}

/// Whether the state file still has a worker row for each of `ids`.
fn rows_of(state: &Path, ids: &[u64]) -> i64 {
    let list = ids.iter().map(u64::to_string).collect::<Vec<_>>().join(",");
    query_count(state, &format!("SELECT COUNT(*) FROM workers WHERE id IN ({list})"))
}

/// The attack that got a wrong total into a record run: one party holding only the shared token
/// (no referee, no spot checks: every run above N = 22). Four of its identities take turns at
/// one job, giving it back each time; after the first answered it truly, two answer it with the
/// same lie (conflicts, which prove nothing: their identities stay idle ones), an idle flood gets
/// those two forgotten, and the fourth, still holding another job, agrees late. The forgotten
/// identities' opinions keep the shared credential: the lie never counts, and two honest
/// per-host workers end the run exact, every job on two credentials.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forgotten_shared_token_identities_never_become_independent_credentials() {
    let dir = RunDir::new();
    let state = dir.state();
    let port = dir.port();
    let n = 12;
    let (coordinator, a, b) = record_run(&dir, n, &QUIET).await;
    let mut s0 = register(port, TOKEN, "sybil-0").await;
    let mut s1 = register(port, TOKEN, "sybil-1").await;
    let mut s2 = register(port, TOKEN, "sybil-2").await;
    let mut s3 = register(port, TOKEN, "sybil-3").await;
    let (job, s3_lease, turns) =
        take_turns_at_one_job(&mut s3, &mut [&mut s0, &mut s1, &mut s2]).await;
    let beating = keep_beating(same_identity(&s3), vec![s3_lease]);
    // The first answer (true) stands; the lies that follow are conflicts: answers that prove
    // nothing, so their identities stay idle ones, which a flood forgets.
    assert_ne!(answer(&mut s0, turns[0], job, truth(n, job)).await, pb::Outcome::Rejected);
    for (sybil, lease) in [&mut s1, &mut s2].into_iter().zip(turns[1..].iter().copied()) {
        assert_ne!(answer(sybil, lease, job, lie(n, job)).await, pb::Outcome::Confirmed);
    }
    flood(port, TOKEN).await;
    assert_eq!(rows_of(&state, &[s1.id, s2.id]), 0, "the flood forgot neither sybil");
    assert_eq!(rows_of(&state, &[s3.id]), 1, "the holder of a job was forgotten");
    let late = answer(&mut s3, s3_lease, job, lie(n, job)).await;
    assert_ne!(late, pb::Outcome::Confirmed, "a late lie agreeing with forgotten identities");
    let lie_counted = format!(
        "SELECT COUNT(*) FROM results WHERE job_id={job} AND counted=1 AND solutions={}",
        lie(n, job).solutions
    );
    assert_eq!(query_count(&state, &lie_counted), 0, "the lie counted");
    beating.abort();
    let honest = [spawn_worker(dir.path(), port, "a", &a), spawn_worker(dir.path(), port, "b", &b)];
    coordinator.finishes_exact().await;
    drop(honest);
    for sybil in [&s1, &s2, &s3] {
        // (s0's true answer may count beside an honest one: it is not checked here.)
        assert_eq!(counted_from(&state, sybil.id), 0, "a sybil's answer was counted");
    }
    let evidence = evidence_of(&state);
    assert_eq!(evidence.jobs_one_party, 0, "{evidence:?}");
    assert_eq!(
        evidence.jobs_independent + evidence.jobs_coordinator,
        job_count(&state),
        "{evidence:?}"
    );
}

/// One per-host party tries to frame an honest credential (plain run, no referee): its
/// identities take turns at a job, the honest one answers it right, two of the party's answer it
/// wrong late (a dispute), an idle flood of its token forgets them, and a third agrees late. The
/// party's answers are one credential's, whoever was forgotten: the honest credential is never
/// untrusted, and the run ends exact without the lie.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forgotten_identities_never_frame_an_honest_per_host_credential() {
    let dir = RunDir::new();
    let state = dir.state();
    let port = dir.port();
    let n = 12;
    let args = [&["--exit-when-done", "--token", TOKEN][..], &QUIET].concat();
    let coordinator = dir.coordinator(n).args(&args).start();
    let [evil, good, other] = coordinator.tokens_in_force(["evil", "good", "other"]).await;
    let mut e1 = register(port, &evil, "evil-1").await;
    let mut e2 = register(port, &evil, "evil-2").await;
    let mut e3 = register(port, &evil, "evil-3").await;
    let (job, e3_lease, turns) = take_turns_at_one_job(&mut e3, &mut [&mut e1, &mut e2]).await;
    let beating = keep_beating(same_identity(&e3), vec![e3_lease]);
    let mut honest = register(port, &good, "honest").await;
    let lease = honest.lease(1).await;
    let others: Vec<u64> = lease.jobs.iter().map(|s| s.job_id).filter(|&j| j != job).collect();
    assert_eq!(others.len() + 1, lease.jobs.len(), "the honest worker did not get job {job}");
    honest.release(lease.lease_id, others).await;
    assert_ne!(
        answer(&mut honest, lease.lease_id, job, truth(n, job)).await,
        pb::Outcome::Rejected
    );
    for (liar, lease) in [&mut e1, &mut e2].into_iter().zip(turns) {
        answer(liar, lease, job, lie(n, job)).await;
    }
    flood(port, &evil).await;
    assert_eq!(rows_of(&state, &[e1.id, e2.id]), 0, "the flood forgot neither liar");
    answer(&mut e3, e3_lease, job, lie(n, job)).await;
    assert!(!untrusted(&state, honest.id), "the honest credential was framed");
    beating.abort();
    let workers = [
        spawn_worker(dir.path(), port, "good", &good),
        spawn_worker(dir.path(), port, "other", &other),
    ];
    coordinator.finishes_exact().await;
    drop(workers);
    assert!(!untrusted(&state, honest.id), "the honest credential was framed");
    for liar in [&e1, &e2, &e3] {
        assert_eq!(counted_from(&state, liar.id), 0, "a liar's answer was counted");
    }
}

/// A record run with a turncoat (no referee, no spot checks): a per-host party answers truly
/// first, alone, so that an honest credential's later answers count with its answers as their
/// agreement; then it lies on jobs the honest one answered. A third credential settles those
/// disputes and the turncoat is untrusted: every job it answered or only confirmed loses its
/// answer and waits for another party, so the result file shows no job on one party's word.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_record_run_that_catches_a_turncoat_ends_with_every_job_on_two_parties() {
    let dir = RunDir::new();
    let state = dir.state();
    let port = dir.port();
    let n = 12;
    let (coordinator, a, b) = record_run(&dir, n, &QUIET).await;
    let jobs = job_count(&state);
    let mut turncoat = register(port, &a, "turncoat").await;
    // Alone, truthful, until it has answered a third of the run: its answers wait.
    let deadline = Instant::now() + Duration::from_secs(120);
    let first = format!("SELECT COUNT(*) FROM results WHERE worker_id={}", turncoat.id);
    while (query_count(&state, &first) as u64) < jobs / 3 {
        assert!(Instant::now() < deadline, "the turncoat answered too little in two minutes");
        let lease = turncoat.lease(8).await;
        let truthful = answers(&turncoat, &lease, n, truth);
        turncoat.send(truthful).await;
    }
    // The honest credential's answers now count, those jobs on the turncoat's agreement.
    let honest = spawn_worker(dir.path(), port, "b", &b);
    let leaned = format!(
        "SELECT COUNT(*) FROM results r WHERE r.counted=1 AND EXISTS (SELECT 1 FROM results t
         WHERE t.job_id=r.job_id AND t.worker_id={} AND t.solutions=r.solutions)",
        turncoat.id
    );
    let (state_file, query, min) = (state.clone(), leaned.clone(), jobs / 4);
    tokio::task::spawn_blocking(move || {
        wait_until(LONG, "counts on the turncoat's agreement", || {
            query_count(&state_file, &query) as u64 >= min
        })
    })
    .await
    .unwrap();
    let leaning = query_count(&state, &leaned);
    // Then it lies on what it gets (jobs the honest credential answered first): disputes.
    let deadline = Instant::now() + Duration::from_secs(60);
    let conflicts = format!("SELECT COUNT(*) FROM conflicts WHERE worker_b={}", turncoat.id);
    while query_count(&state, &conflicts) == 0 {
        assert!(Instant::now() < deadline, "the turncoat's lies started no dispute");
        let Ok(lease) = turncoat.try_lease(4).await else { break };
        let lies = answers(&turncoat, &lease, n, lie);
        turncoat.send(lies).await;
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // A third credential settles the disputes: the turncoat is untrusted.
    let third = token_add(&state, "host-c");
    let finisher = spawn_worker(dir.path(), port, "c", &third);
    coordinator.finishes_exact().await;
    drop((honest, finisher));
    assert!(untrusted(&state, turncoat.id), "the turncoat was never caught");
    assert_eq!(counted_from(&state, turncoat.id), 0, "a turncoat's answer still counts");
    let evidence = evidence_of(&state);
    assert_eq!(evidence.jobs_one_party, 0, "{leaning} counts leaned on the turncoat: {evidence:?}");
    assert_eq!(evidence.jobs_independent, jobs, "{evidence:?}");
}

/// The result file's evidence of the run in `state`.
pub(crate) fn evidence_of(state: &Path) -> nqueens_store::Evidence {
    read_result_file(&nqueens_coordinator::result_file(state))
        .evidence
        .expect("the result file states its evidence")
}

/// How many jobs the run in `state` has.
fn job_count(state: &Path) -> u64 {
    query_count(state, "SELECT COUNT(*) FROM jobs") as u64
}
