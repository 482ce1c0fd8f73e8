//! The coordinator binary's cluster commands: bad input gives a clear error.

use std::process::Command;

fn coordinator() -> Command {
    Command::new(env!("CARGO_BIN_EXE_nqueens-coordinator"))
}

#[test]
fn serve_without_board_size_for_a_new_run_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("new.db");
    let out = coordinator()
        .args(["serve", "--listen", "127.0.0.1:0", "--http-listen", "off", "--state"])
        .arg(&state)
        .env_remove("NQ_N")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("give --n"), "{err}");
}

#[test]
fn serve_refuses_a_corrupt_state_file() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("junk.db");
    std::fs::write(&state, vec![b'x'; 4096]).unwrap();
    let out = coordinator()
        .args(["serve", "--n", "8", "--listen", "127.0.0.1:0", "--http-listen", "off", "--state"])
        .arg(&state)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("corrupt"), "{err}");
    // A refusal leaves nothing behind: not even the writer's lock file it took first.
    let left: Vec<_> =
        std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(left, vec!["junk.db"], "{left:?}");
}

/// Serves with `args` on a free port without metrics, and returns the exit code and stderr.
fn serve_fails(args: &[&str]) -> (Option<i32>, String) {
    let out = coordinator()
        .args(["serve", "--listen", "127.0.0.1:0", "--http-listen", "off"])
        .args(args)
        .env("RUST_LOG", "info")
        .output()
        .unwrap();
    (out.status.code(), String::from_utf8_lossy(&out.stderr).into_owned())
}

#[test]
fn an_error_and_its_cause_are_printed_once() {
    let (code, err) = serve_fails(&["--n", "8", "--state", "/nonexistent-dir/run.db"]);
    assert_eq!(code, Some(1));
    assert!(err.contains("cannot open the lock file /nonexistent-dir/run.db.lock"), "{err}");
    assert_eq!(err.matches("No such file or directory").count(), 1, "{err}");
}

#[test]
fn bad_settings_are_refused_before_anything_is_logged_or_created() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("run.db");
    let state = state.to_str().unwrap();
    for (flag, value, message) in [
        ("--verify-fraction", "2", "--verify-fraction 2 must be between 0 and 1"),
        ("--lease-seconds", "1", "--lease-seconds 1 must be at least 2"),
    ] {
        let (code, err) = serve_fails(&["--n", "8", "--state", state, flag, value]);
        assert_eq!(code, Some(1), "{err}");
        assert_eq!(err.trim(), format!("error: {message}"));
    }
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
}

#[test]
fn a_target_jobs_above_the_cap_is_refused_before_anything_is_created() {
    let cap = nqueens_coordinator::MAX_TARGET_JOBS;
    let over = (cap + 1).to_string();
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("run.db");
    let state = state.to_str().unwrap();
    let message = format!("--target-jobs {over} is above the cap of {cap}");
    let (code, err) = serve_fails(&["--n", "18", "--state", state, "--target-jobs", &over]);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.trim().starts_with(&format!("error: {message}")), "{err}");
    let out = coordinator()
        .args(["solve", "18", "--no-progress", "--target-jobs", &over, "--state", state])
        .env("RUST_LOG", "info")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.trim().starts_with(&format!("error: {message}")), "{err}");
    assert!(out.stdout.is_empty());
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0, "nothing created");
    // The cap itself is accepted (checked without building a list: N=4 splits into few jobs).
    let out = coordinator()
        .args(["solve", "4", "--json", "--no-progress", "--target-jobs", &cap.to_string()])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn status_of_a_missing_state_file_is_a_clear_error() {
    let out = coordinator().args(["status", "--state", "/nonexistent/run.db"]).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("does not exist"));
}

#[test]
fn healthcheck_of_nothing_fails() {
    let out =
        coordinator().args(["healthcheck", "--connect", "http://127.0.0.1:1"]).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stdout).contains("UNREACHABLE"));
}

#[test]
fn serving_a_network_address_needs_a_token_or_insecure() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("run.db");
    let state = state.to_str().unwrap();
    let out = coordinator()
        .args(["serve", "--n", "8", "--listen", "0.0.0.0:0", "--http-listen", "off"])
        .args(["--state", state])
        .env_remove("NQ_TOKEN")
        .env_remove("NQ_INSECURE")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("refusing to serve 0.0.0.0:") && err.contains("--insecure"), "{err}");
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0, "nothing created");

    // With --insecure it serves: the health check answers on the network address's port.
    let port = std::net::TcpListener::bind("0.0.0.0:0").unwrap().local_addr().unwrap().port();
    let mut serve = coordinator()
        .args(["serve", "--n", "8", "--http-listen", "off", "--insecure"])
        .args(["--listen", &format!("0.0.0.0:{port}"), "--state", state])
        .env_remove("NQ_TOKEN")
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let serving = loop {
        let out = coordinator()
            .args(["healthcheck", "--connect", &format!("http://127.0.0.1:{port}")])
            .output()
            .unwrap();
        if out.status.success() || std::time::Instant::now() > deadline {
            break out.status.success();
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
    };
    serve.kill().unwrap();
    serve.wait().unwrap();
    assert!(serving, "the --insecure coordinator never reported SERVING");
}
