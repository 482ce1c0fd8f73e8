//! `solve --state`: a one-machine run killed part way resumes from its checkpoint, exactly.

use nqueens_tests::cluster::{committed_results, query_count, solve};
use nqueens_tests::{binary, known_counts};
use std::os::unix::process::ExitStatusExt;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

#[test]
fn a_killed_solve_resumes_from_its_checkpoint_and_refuses_foreign_files() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("n17.db");
    let state_arg = state.to_str().unwrap();

    // SIGKILL a one-thread N=17 run as soon as its checkpoint holds some results. The jobs run most
    // expensive first, and the first commit comes with the first job done after a second (or
    // after 512 jobs), so much work is left at that point however fast the machine is.
    let mut first = Command::new(binary("nqueens-coordinator"))
        .args(["solve", "17", "--threads", "1", "--json", "--state", state_arg])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let started = Instant::now();
    while committed_results(&state) == 0 {
        assert!(
            first.try_wait().unwrap().is_none(),
            "the first run ended before its first checkpoint commit"
        );
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "no checkpoint commit within two minutes"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    first.kill().unwrap();
    let status = first.wait().unwrap();
    assert_eq!(status.signal(), Some(9), "the first run must still be working when it is killed");
    let at_kill = committed_results(&state);
    let jobs = query_count(&state, "SELECT COUNT(*) FROM jobs");
    assert!(at_kill > 0 && at_kill < jobs, "killed part way: {at_kill} of {jobs} jobs committed");

    let out = Command::new(binary("nqueens-coordinator"))
        .args(["solve", "17", "--json", "--state", state_arg])
        .env("RUST_LOG", "info")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let log = String::from_utf8_lossy(&out.stderr);
    assert!(log.contains("resuming from the checkpoint"), "the second run must resume: {log}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let known = &known_counts()[&17];
    let num = |k: &str| v[k].as_u64().map(u128::from);
    assert_eq!(num("total"), Some(known.total));
    assert_eq!(num("unique"), Some(known.unique));
    assert_eq!(
        [num("count2"), num("count4"), num("count8")],
        [known.count2, known.count4, known.count8]
    );

    // A checkpoint of another board size, or a file that is not a checkpoint, is refused.
    let other = solve(&["16", "--state", state_arg]);
    assert_eq!(other.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&other.stderr).contains("another run"),
        "{}",
        String::from_utf8_lossy(&other.stderr)
    );
    let junk = dir.path().join("junk.db");
    std::fs::write(&junk, "not a database, but somebody's notes").unwrap();
    let corrupt = solve(&["12", "--state", junk.to_str().unwrap()]);
    assert_eq!(corrupt.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&corrupt.stderr).contains("corrupt"),
        "{}",
        String::from_utf8_lossy(&corrupt.stderr)
    );
    assert_eq!(
        std::fs::read_to_string(&junk).unwrap(),
        "not a database, but somebody's notes",
        "a refused file is left as it was"
    );
    // A range cannot share one checkpoint.
    assert_eq!(solve(&["12..13", "--state", state_arg]).status.code(), Some(1));
}
