//! A hostile client built from the protocol alone cannot change a run's answer. It registers
//! claiming a passed self-test and a thousand slots, takes as many jobs as it can in one call,
//! gives back the ones it might guess are cross-checked (weight 2 and 4, and the ids the old public
//! verification hash picked), and reports true counts for the rest except one solution too many
//! on one job. The run still ends exact, the client is untrusted and named by `status`, and its
//! lie is in the conflicts record.
//!
//! Counts that no solver gives (symmetric counts past the solutions or ruled out by the job's
//! weight, too many solutions per node, too many nodes, counts past 64-bit columns) untrust their
//! sender and every identity of its credential, each rule on its own credential.

use nqueens_core::{Job, JobCounts};
use nqueens_proto as pb;
use nqueens_proto::Reason;
use nqueens_tests::cluster::*;
use nqueens_tests::harness::{spawn_worker, token_add, RunDir};
use nqueens_tests::rogue::{claimed_self_test, outcome, reason, Rogue};
use rayon::prelude::*;
use std::path::Path;
use std::time::Duration;

const LONG: Duration = Duration::from_secs(300);
const TOKEN: &str = "rogue-test-token";

/// The fixed public hash that used to pick the cross-checked jobs: what a rogue would try.
fn old_public_choice(job_id: u64) -> bool {
    let mut x = job_id.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^= x >> 31;
    (x as f64 / u64::MAX as f64) < 0.01
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lying_client_is_caught_and_the_run_ends_exact() {
    let dir = RunDir::new();
    let (state, port) = (dir.path().join("run16.db"), dir.port());
    let coordinator = dir.coordinator(16).state(&state).exit_when_done().token(TOKEN).start();
    let mut rogue = Rogue::register_with(
        port,
        TOKEN,
        pb::RegisterRequest {
            run: None,
            name: "rogue".into(),
            host: "nowhere".into(),
            slots: 1_000_000,
            version: env!("CARGO_PKG_VERSION").into(),
            self_test: Some(claimed_self_test()),
            previous_worker_id: 0,
            previous_worker_secret: String::new(),
            device: String::new(),
        },
    )
    .await;
    let rogue_id = rogue.id;
    let honest = honest_workers_join(dir.path(), &state, port).await;
    let lie_job = take_all_and_lie_once(&mut rogue).await;

    // The honest workers finish the run; the answer is exact.
    coordinator.finishes_exact().await;
    drop(honest);

    status_names_the_rogue_and_the_lie_is_recorded(&state, rogue_id, lie_job);
}

/// Two honest workers join, so that every answer can be compared with another worker's.
async fn honest_workers_join(dir: &Path, state: &Path, port: u16) -> Vec<Proc> {
    let honest: Vec<Proc> = ["honest-a", "honest-b"]
        .into_iter()
        .map(|name| spawn_worker(dir, port, name, TOKEN))
        .collect();
    let watched = state.to_owned();
    let registered = move || query_count(&watched, "SELECT COUNT(*) FROM workers") >= 3;
    tokio::task::spawn_blocking(move || wait_until(LONG, "the honest workers", registered))
        .await
        .unwrap();
    honest
}

/// The rogue takes as much as it can, gives back what it guesses is cross-checked, and answers
/// the rest truly but for one job, whose id it returns.
async fn take_all_and_lie_once(rogue: &mut Rogue) -> u64 {
    // Take as much as one call gives: an unproven worker gets one job per thread it registered,
    // and at most 64, whatever it claims.
    let lease = rogue.lease(1 << 20).await;
    assert!(!lease.jobs.is_empty(), "the rogue got no jobs");
    assert!(lease.jobs.len() <= 64, "{} jobs in one lease", lease.jobs.len());
    let (guessed, kept): (Vec<_>, Vec<_>) =
        lease.jobs.iter().partition(|s| s.weight < 8 || old_public_choice(s.job_id));
    rogue.release(lease.lease_id, guessed.iter().map(|s| s.job_id).collect()).await;

    // True counts everywhere but one job.
    let lie_job = kept[0].job_id;
    let results: Vec<pb::JobResult> = kept
        .par_iter()
        .map(|spec| {
            let mut counts = Job::try_from(*spec).unwrap().solve().unwrap();
            if spec.job_id == lie_job {
                counts.solutions += 1;
            }
            rogue.result(lease.lease_id, spec.job_id, Some(counts), 0.01)
        })
        .collect();
    let sent = results.len();
    assert_eq!(rogue.send(results).await.len(), sent);
    lie_job
}

fn status_names_the_rogue_and_the_lie_is_recorded(state: &Path, rogue_id: u64, lie_job: u64) {
    // `status` names the rogue as untrusted; the conflicts record holds its lie.
    let out = coordinator_output([
        "status".as_ref(),
        "--json".as_ref(),
        "--state".as_ref(),
        state.as_os_str(),
    ]);
    let view: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(view["untrusted_workers"], 1, "{view}");
    let rogue = view["workers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|w| w["name"] == "rogue")
        .unwrap_or_else(|| panic!("status does not name the rogue: {view}"));
    assert_eq!(rogue["untrusted"], true, "{view}");
    let lie_recorded = query_count(
        state,
        &format!(
            "SELECT COUNT(*) FROM conflicts WHERE job_id={lie_job} AND (worker_a={rogue_id} OR worker_b={rogue_id})"
        ),
    );
    assert!(lie_recorded > 0, "the lie on job {lie_job} is not in the conflicts record");
}

fn register_request(name: &str) -> pb::RegisterRequest {
    pb::RegisterRequest {
        run: None,
        name: name.into(),
        host: "nowhere".into(),
        slots: 1,
        version: env!("CARGO_PKG_VERSION").into(),
        self_test: Some(claimed_self_test()),
        previous_worker_id: 0,
        previous_worker_secret: String::new(),
        device: String::new(),
    }
}

/// A rule of `nqueens_scheduler::implausible`, as a lie made of a weight-8 job's true counts.
type Rule = (&'static str, fn(JobCounts) -> JobCounts);

/// Each rule against counts no solver gives, sent by one identity of a per-host credential
/// over the real protocol: the result is refused as from an untrusted worker, and from then on
/// both identities of that credential are refused, durably (the state file records them).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn counts_no_solver_gives_untrust_the_sender_and_its_credential() {
    let dir = RunDir::new();
    let (state, port) = (dir.path().join("run12.db"), dir.port());
    let serve = dir.coordinator(12).state(&state).exit_when_done().token(TOKEN);
    let coordinator = serve.args(&["--no-spot-checks", "--verify-fraction", "0"]).start();
    coordinator.listening().await;
    let rules: [Rule; 6] = [
        ("sym90-above-sym180", |t| JobCounts { sym90: t.sym180 + 1, ..t }),
        ("sym180-above-solutions", |t| JobCounts { sym180: t.solutions + 1, ..t }),
        ("symmetric-on-weight-8", |t| JobCounts { sym180: 1, ..t }),
        ("solutions-per-node", |t| JobCounts { solutions: (t.nodes + 1) * 720 + 1, ..t }),
        ("nodes-per-job", |t| JobCounts { nodes: (1 << 52) + 1, ..t }),
        ("past-64-bit-columns", |t| JobCounts { nodes: 1 << 63, ..t }),
    ];
    let mut untrusted = Vec::new();
    for (rule, lie) in rules {
        let token = token_add(&state, rule);
        let mut a = Rogue::register_with(port, &token, register_request("a")).await;
        let mut b = Rogue::register_with(port, &token, register_request("b")).await;
        // A weight-8 job with solutions (every rule then breaks exactly one bound).
        let (spec, lease_id) = loop {
            let lease = a.lease(1).await;
            assert!(!lease.run_complete, "the run ended before {rule} got a job");
            let spec = &lease.jobs[0];
            if spec.weight == 8 && Job::try_from(spec).unwrap().solve().unwrap().solutions > 0 {
                break (spec.clone(), lease.lease_id);
            }
            a.release(lease.lease_id, vec![spec.job_id]).await;
        };
        let counts = lie(Job::try_from(&spec).unwrap().solve().unwrap());
        let acks = a.send(vec![a.result(lease_id, spec.job_id, Some(counts), 0.01)]).await;
        assert_eq!(outcome(&acks[0]), pb::Outcome::Rejected, "{rule}: {:?}", acks[0]);
        assert_eq!(
            Reason::try_from(acks[0].reason),
            Ok(Reason::UntrustedWorker),
            "{rule}: {:?}",
            acks[0]
        );
        for (who, rogue) in [("sender", &mut a), ("its credential's other identity", &mut b)] {
            let e = rogue.try_lease(1).await.expect_err(rule);
            assert_eq!(reason(&e), Reason::UntrustedWorker, "{rule}, {who}: {e}");
        }
        untrusted.extend([a.id, b.id]);
    }
    // An honest worker finishes the run exact; every liar is recorded as untrusted.
    let good = token_add(&state, "good");
    let honest = coordinator.worker("honest").token(&good).start();
    coordinator.finishes_exact().await;
    drop(honest);
    let recorded = query_count(&state, "SELECT COUNT(DISTINCT worker_id) FROM untrusted_workers");
    assert_eq!(recorded, untrusted.len() as i64, "untrusted: {untrusted:?}");
}
