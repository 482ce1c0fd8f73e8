//! What runs beside a live coordinator never costs it an acknowledged result: `token add`, `token
//! revoke` (also of a name not in force), `backup`, `sqlite3 FILE .backup`, `status --state` and
//! `token list` all open the state file while a coordinator commits to it under load. Its `-wal`
//! stays the file it writes (never unlinked under it), `status --connect` answers throughout, and
//! after a SIGKILL every result acknowledged before it is in the file; the run then ends exact.
//! (Before the store kept one never-closed descriptor per state file, each of these commands made
//! the coordinator commit to a deleted `-wal`: a SIGKILL then lost most acknowledged results.)

use nqueens_coordinator::result_file;
use nqueens_core::Job;
use nqueens_proto as pb;
use nqueens_tests::cluster::*;
use nqueens_tests::harness::RunDir;
use nqueens_tests::rogue::{claimed_self_test, outcome, Rogue};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

const LONG: Duration = Duration::from_secs(300);
const TOKEN: &str = "durability-test-token";

/// `path` with `suffix` appended.
fn beside(path: &Path, suffix: &str) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(suffix);
    name.into()
}

/// Runs `nqueens-coordinator ARGS`, returning (exit code, stdout, stderr).
fn cli(args: &[&str]) -> (i32, String, String) {
    let out = coordinator_output(args);
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    (out.status.code().unwrap_or(-1), text(&out.stdout), text(&out.stderr))
}

/// The live coordinator's status, through `status --connect`; panics if it does not answer.
fn live_status(port: u16) -> serde_json::Value {
    let url = format!("http://127.0.0.1:{port}");
    let (code, out, err) = cli(&["status", "--json", "--connect", &url, "--token", TOKEN]);
    assert_eq!(code, 0, "status --connect failed: {err}");
    serde_json::from_str(&out).unwrap()
}

/// The coordinator (process `pid`) still writes the `-wal` it started with: the file at its path
/// has the inode `wal_inode`, and none of the coordinator's descriptors points to a deleted
/// `-wal` or `-shm`.
fn assert_wal_intact(state: &Path, pid: u32, wal_inode: u64, after: &str) {
    let wal = beside(state, "-wal");
    let inode = std::fs::metadata(&wal).map(|m| m.ino()).ok();
    assert_eq!(inode, Some(wal_inode), "after {after}: the coordinator's -wal was unlinked");
    for entry in std::fs::read_dir(format!("/proc/{pid}/fd")).unwrap().flatten() {
        let target = std::fs::read_link(entry.path()).unwrap_or_default();
        let target = target.to_string_lossy();
        assert!(
            !(target.contains("-wal (deleted)") || target.contains("-shm (deleted)")),
            "after {after}: the coordinator writes to a deleted file: {target}"
        );
    }
}

/// A hand-written client that leases, solves and reports true counts until `stop`, and returns
/// every (job, lease) the coordinator acknowledged as committed, and its worker id.
async fn acknowledged_results(port: u16, stop: Arc<AtomicBool>) -> (u64, Vec<(u64, u64)>) {
    let request = pb::RegisterRequest {
        name: "ack-counter".into(),
        host: "here".into(),
        slots: 4,
        version: env!("CARGO_PKG_VERSION").into(),
        self_test: Some(claimed_self_test()),
        device: "cpu".into(),
        ..Default::default()
    };
    let mut rogue = Rogue::register_with(port, TOKEN, request).await;
    let mut acked = Vec::new();
    while !stop.load(Ordering::SeqCst) {
        let lease = rogue.lease(4).await;
        if lease.run_complete {
            break;
        }
        let results: Vec<pb::JobResult> = lease
            .jobs
            .iter()
            .map(|spec| {
                let counts = Job::try_from(spec).unwrap().solve().unwrap();
                rogue.result(lease.lease_id, spec.job_id, Some(counts), 0.001)
            })
            .collect();
        if results.is_empty() {
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        }
        for ack in rogue.send(results).await {
            let committed = [pb::Outcome::Accepted, pb::Outcome::Confirmed, pb::Outcome::Conflict];
            if committed.contains(&outcome(&ack)) {
                acked.push((ack.job_id, ack.lease_id));
            }
        }
    }
    (rogue.id, acked)
}

/// The commands an operator runs beside a live run, each checked; the `-wal` and the status call
/// are checked after each.
fn operations_beside_a_live_run(dir: &Path, state: &Path, port: u16, pid: u32, wal_inode: u64) {
    let state_arg = state.to_str().unwrap();
    let name = format!("host-{}", committed_results(state));
    let name = name.as_str();
    let check = |after: &str| {
        assert_wal_intact(state, pid, wal_inode, after);
        assert!(live_status(port)["jobs_total"].as_u64().unwrap() > 0, "after {after}");
    };
    check("start");
    let (code, token, err) = cli(&["token", "add", name, "--state", state_arg]);
    assert_eq!(code, 0, "token add: {err}");
    assert_eq!(token.trim().len(), 64);
    check("token add");
    let (code, list, _) = cli(&["token", "list", "--state", state_arg]);
    assert!(code == 0 && list.contains(&format!("{name}\tmade")), "{list}");
    assert!(list.contains("in force"), "{list}");
    check("token list");
    let (code, _, err) = cli(&["token", "revoke", name, "--state", state_arg]);
    assert_eq!(code, 0, "token revoke: {err}");
    check("token revoke");
    let (code, _, err) = cli(&["token", "revoke", "nobody", "--state", state_arg]);
    assert_eq!(code, 1, "a revoke of a name not in force says so: {err}");
    assert!(err.contains("no token named \"nobody\" in force"), "{err}");
    check("token revoke of an unknown name");
    let copy = dir.join("copy.db");
    let (code, out, err) = cli(&["backup", "--state", state_arg, "--to", copy.to_str().unwrap()]);
    assert_eq!(code, 0, "backup: {err}");
    assert!(out.contains("backed up"), "{out}");
    check("backup");
    let (code, out, err) = cli(&["status", "--json", "--state", copy.to_str().unwrap()]);
    assert_eq!(code, 0, "the backup opens as a state file: {err}");
    let copied: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(copied["fingerprint"], live_status(port)["fingerprint"]);
    check("status --state of the copy");
    let (code, _, err) = cli(&["status", "--state", state_arg]);
    assert_eq!(code, 0, "status --state: {err}");
    check("status --state");
    if sqlite3_shell() {
        let shell_copy = dir.join("shell-copy.db");
        let out = std::process::Command::new("sqlite3")
            .arg(state)
            .arg(format!(".backup '{}'", shell_copy.display()))
            .output()
            .unwrap();
        assert!(out.status.success(), "sqlite3 .backup: {}", String::from_utf8_lossy(&out.stderr));
        check("sqlite3 .backup");
    }
}

/// Whether the sqlite3 shell is installed (CI installs it, and there its absence is a failure).
fn sqlite3_shell() -> bool {
    let found = std::process::Command::new("sqlite3").arg("-version").output().is_ok();
    if !found {
        assert!(std::env::var("CI").is_err(), "sqlite3 is missing under CI (see .ci/run)");
        eprintln!("sqlite3 not installed: its .backup is not run beside the coordinator");
    }
    found
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commands_beside_a_live_run_lose_no_acknowledged_result() {
    let dir = RunDir::new();
    let (state, port) = (dir.state(), dir.port());
    let serve = dir.coordinator(18).token(TOKEN).lease_seconds(6);
    let mut coordinator = serve.start();
    let worker = coordinator.worker("loader").token(TOKEN).log("worker.log").start();
    let stop = Arc::new(AtomicBool::new(false));
    let counter = tokio::spawn(acknowledged_results(port, stop.clone()));
    let watched = state.clone();
    tokio::task::spawn_blocking(move || {
        wait_until(LONG, "results committed", || committed_results(&watched) >= 50)
    })
    .await
    .unwrap();
    let wal_inode = std::fs::metadata(beside(&state, "-wal")).unwrap().ino();
    let pid = coordinator.child.id();
    let (ops_dir, ops_state) = (dir.path().to_owned(), state.clone());
    tokio::task::spawn_blocking(move || {
        for _ in 0..2 {
            let renamed = |n: &str| ops_dir.join(n);
            for f in ["copy.db", "shell-copy.db"] {
                let _ = std::fs::remove_file(renamed(f));
            }
            operations_beside_a_live_run(&ops_dir, &ops_state, port, pid, wal_inode);
        }
    })
    .await
    .unwrap();
    // More results acknowledged after every command ran, then the kill.
    let done_then = committed_results(&state);
    let watched = state.clone();
    tokio::task::spawn_blocking(move || {
        wait_until(LONG, "more results", || committed_results(&watched) >= done_then + 30)
    })
    .await
    .unwrap();
    stop.store(true, Ordering::SeqCst);
    let (rogue_id, acked) = counter.await.unwrap();
    let before_kill = live_status(port);
    assert!(!before_kill["complete"].as_bool().unwrap(), "the run ended before the kill");
    let done_before = before_kill["jobs_done"].as_u64().unwrap();
    assert_wal_intact(&state, pid, wal_inode, "the last command");
    coordinator.sigkill();
    assert!(acked.len() >= 10, "the client's results were acknowledged: {}", acked.len());

    // Every acknowledged result is in the file the coordinator left.
    assert!(committed_results(&state) as u64 >= done_before, "counted jobs were lost");
    for (job, lease) in &acked {
        let rows = query_count(
            &state,
            &format!("SELECT COUNT(*) FROM results WHERE job_id={job} AND lease_id={lease} AND worker_id={rogue_id}"),
        );
        assert_eq!(rows, 1, "the acknowledged result of job {job} (lease {lease}) was lost");
    }

    // The run resumes and ends exact.
    let mut coordinator = serve.exit_when_done().log("coordinator-2.log").start();
    let status = tokio::task::spawn_blocking(move || coordinator.wait_exit(LONG)).await.unwrap();
    assert!(status.success(), "the resumed coordinator: {status}");
    assert_matches_reference(&read_result_file(&result_file(&state)));
    assert_each_job_counted_once(&state);
    drop(worker);
}
