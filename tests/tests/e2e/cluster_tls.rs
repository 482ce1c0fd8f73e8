//! TLS: a coordinator serving with --tls-cert/--tls-key, a worker and the health check trusting the
//! CA with --tls-ca; one worker alone also gives the second opinions of the verified jobs (default
//! --verify-fraction). Certificates are made with the `openssl` command; the test is skipped (with
//! a message) on a machine without it.

use nqueens_coordinator::result_file;
use nqueens_tests::cluster::*;
use nqueens_tests::harness::RunDir;
use std::process::Command;
use std::time::Duration;

fn openssl(dir: &std::path::Path, args: &[&str]) -> bool {
    Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false)
}

/// A CA (`ca.pem`) and a leaf certificate it signs for localhost (`leaf.pem`, `leaf.key`) in
/// `d`; false if the openssl command cannot make them.
fn make_certificates(d: &std::path::Path) -> bool {
    std::fs::write(
        d.join("ext.cnf"),
        "subjectAltName=DNS:localhost,IP:127.0.0.1\nbasicConstraints=CA:FALSE\n",
    )
    .unwrap();
    openssl(
        d,
        &[
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            "ca.key",
            "-out",
            "ca.pem",
            "-days",
            "2",
            "-subj",
            "/CN=nq-test-ca",
        ],
    ) && openssl(
        d,
        &[
            "req",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            "leaf.key",
            "-out",
            "leaf.csr",
            "-subj",
            "/CN=localhost",
        ],
    ) && openssl(
        d,
        &[
            "x509",
            "-req",
            "-in",
            "leaf.csr",
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-out",
            "leaf.pem",
            "-days",
            "2",
            "-extfile",
            "ext.cnf",
        ],
    )
}

#[test]
fn worker_and_healthcheck_over_tls() {
    let dir = RunDir::new();
    let d = dir.path();
    if !make_certificates(d) {
        eprintln!("SKIPPED: the openssl command is not available to make test certificates");
        return;
    }
    let (state, port) = (d.join("run12.db"), dir.port());
    let cert = d.join("leaf.pem").display().to_string();
    let key = d.join("leaf.key").display().to_string();
    let ca = d.join("ca.pem").display().to_string();
    let serve = dir.coordinator(12).state(&state).args(&["--tls-cert", &cert, "--tls-key", &key]);
    let mut coordinator = serve.exit_when_done().start();
    let url = format!("https://localhost:{port}");
    wait_until(Duration::from_secs(60), "the TLS health check to pass", || {
        Command::new(nqueens_tests::binary("nqueens-coordinator"))
            .args(["healthcheck", "--connect", &url, "--tls-ca", &ca])
            .output()
            .unwrap()
            .status
            .success()
    });
    let mut worker = Proc::spawn(
        "nqueens-worker",
        &[
            "--connect".to_string(),
            url.clone(),
            "--tls-ca".into(),
            ca.clone(),
            "--threads".into(),
            "1".into(),
        ],
        d.join("worker.log"),
    );
    assert!(worker.wait_exit(Duration::from_secs(120)).success(), "{}", worker.log_text());
    assert!(coordinator.wait_exit(Duration::from_secs(60)).success(), "{}", coordinator.log_text());
    assert_matches_reference(&read_result_file(&result_file(&state)));
}
