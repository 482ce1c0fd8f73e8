//! A hostile client built from the protocol alone cannot change a run's answer. It registers
//! claiming a passed self-test and a thousand slots, takes as many jobs as it can in one call,
//! gives back the ones it might guess are cross-checked (weight 2 and 4, and the ids the old public
//! verification hash picked), and reports true counts for the rest except one solution too many
//! on one job. The run still ends exact, the client is untrusted and named by `status`, and its
//! lie is in the conflicts record.

use nqueens_coordinator::result_file;
use nqueens_core::Job;
use nqueens_proto as pb;
use nqueens_tests::cluster::*;
use nqueens_tests::rogue::{claimed_self_test, Rogue};
use rayon::prelude::*;
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
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("run16.db");
    let port = free_port();
    let mut coordinator = Proc::spawn(
        "nqueens-coordinator",
        &serve_args(16, &state, port, &["--exit-when-done", "--token", TOKEN]),
        dir.path().join("coordinator.log"),
    );
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

    // Two honest workers join, so that every answer can be compared with another worker's.
    let honest: Vec<Proc> = ["honest-a", "honest-b"]
        .into_iter()
        .map(|name| {
            Proc::spawn(
                "nqueens-worker",
                &worker_args(port, 1, name, &["--token", TOKEN]),
                dir.path().join(format!("{name}.log")),
            )
        })
        .collect();
    let watched = state.clone();
    let registered = move || query_count(&watched, "SELECT COUNT(*) FROM workers") >= 3;
    tokio::task::spawn_blocking(move || wait_until(LONG, "the honest workers", registered))
        .await
        .unwrap();

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

    // The honest workers finish the run; the answer is exact.
    let status =
        tokio::task::spawn_blocking(move || (coordinator.wait_exit(LONG), coordinator.log_text()))
            .await
            .unwrap();
    assert!(status.0.success(), "coordinator: {}\n{}", status.0, status.1);
    assert_matches_reference(&read_result_file(&result_file(&state)));
    assert_each_job_counted_once(&state);
    drop(honest);

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
        &state,
        &format!(
            "SELECT COUNT(*) FROM conflicts WHERE job_id={lie_job} AND (worker_a={rogue_id} OR worker_b={rogue_id})"
        ),
    );
    assert!(lie_recorded > 0, "the lie on job {lie_job} is not in the conflicts record");
}
