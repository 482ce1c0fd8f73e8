//! The worker binary's command line: bad input gives a clear error, not a hang.

use std::process::Command;

fn worker() -> Command {
    Command::new(env!("CARGO_BIN_EXE_nqueens-worker"))
}

#[test]
fn missing_connect_is_a_usage_error() {
    let out = worker().env_remove("NQ_CONNECT").output().unwrap();
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("--connect"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn zero_threads_is_refused() {
    let out =
        worker().args(["--connect", "http://127.0.0.1:1", "--threads", "0"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--threads must be at least 1"));
}

#[test]
fn help_documents_env_variables() {
    let out = worker().arg("--help").output().unwrap();
    let help = String::from_utf8_lossy(&out.stdout);
    for env in ["NQ_CONNECT", "NQ_THREADS", "NQ_TOKEN"] {
        assert!(help.contains(env), "--help lacks {env}:\n{help}");
    }
}

/// Runs the worker with `args` and returns its exit code and stderr; for settings that must be
/// refused before anything else happens.
fn refused(args: &[&str]) -> (Option<i32>, String) {
    let out = worker().args(args).env_remove("NQ_TOKEN").output().unwrap();
    (out.status.code(), String::from_utf8_lossy(&out.stderr).into_owned())
}

#[test]
fn bad_settings_are_one_error_line_before_any_log() {
    let missing = "/nonexistent/ca.pem";
    for (args, expected) in [
        (&["--connect", ""][..], "no coordinator URL (--connect)"),
        (&["--connect", "http://127.0.0.1:1", "--tls-ca", missing], "reading --tls-ca"),
        (&["--connect", "https://127.0.0.1:1"], "no CA certificate was given (--tls-ca)"),
    ] {
        let (code, stderr) = refused(args);
        assert_eq!(code, Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(expected), "{args:?}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "{args:?}: only the error, no log line: {stderr}");
    }
}

/// A coordinator that is not there: the reconnect loop's line says why in plain words, names the
/// coordinator, gives each cause once, and has no colour codes (stderr is a pipe, not a terminal).
#[test]
fn unreachable_coordinator_is_explained_once_without_colour() {
    use std::io::{BufRead, BufReader};
    use std::process::Stdio;
    use std::time::Duration;

    let mut child = worker()
        .args(["--connect", "http://127.0.0.1:1", "--threads", "1"])
        .env_remove("RUST_LOG")
        .env_remove("NO_COLOR")
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let line = loop {
        match rx.recv_timeout(Duration::from_secs(30)) {
            Ok(line) if line.contains("connection to the coordinator lost") => break Ok(line),
            Ok(_) => continue,
            Err(e) => break Err(e),
        }
    };
    child.kill().unwrap();
    child.wait().unwrap();
    let line = line.expect("a reconnect line within 30 s");
    assert!(line.contains("connection refused"), "{line}");
    assert!(line.contains("coordinator=http://127.0.0.1:1"), "{line}");
    assert_eq!(line.matches("tcp connect error").count(), 1, "{line}");
    assert!(!line.contains('\x1b'), "colour codes in a pipe: {line:?}");
}
