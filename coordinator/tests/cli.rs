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
        .args(["serve", "--listen", "127.0.0.1:0", "--metrics-listen", "off", "--state"])
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
        .args([
            "serve",
            "--n",
            "8",
            "--listen",
            "127.0.0.1:0",
            "--metrics-listen",
            "off",
            "--state",
        ])
        .arg(&state)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("corrupt"), "{err}");
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
