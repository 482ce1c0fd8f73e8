//! Every view of a run shows the engine's one snapshot: for the same moment of a run, `status
//! --connect` (gRPC), `/status.json`, the status page (as served, before its script runs) and
//! `/metrics` agree on the jobs by state, the rate and the ETA; `status --state` (offline, read
//! from the state file beside the running coordinator) agrees on the jobs by state and applies
//! the same ETA rule to the rate the file can tell (over the span of its result rows: it has no
//! live clock, see `coordinator/src/snapshot/rate.rs`).
//!
//! The same moment: a run whose only worker was killed, so that nothing changes but the clocks;
//! the live views name the snapshot they show (`snapshot_seq`), and are compared when all three
//! name the same one.

use super::status_page::{get, number, status, text_of, u};
use nqueens_tests::cluster::*;
use nqueens_tests::harness::RunDir;
use serde_json::Value;
use std::time::{Duration, Instant};

/// Small jobs, many of them: a worker counts a few hundred in seconds, and thousands are left.
const N: u32 = 18;

/// `status --state FILE --json`.
fn offline_status(state: &std::path::Path) -> Value {
    let out = coordinator_output([
        "status".to_string(),
        "--state".into(),
        state.display().to_string(),
        "--json".into(),
    ]);
    assert!(out.status.success(), "status --state: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

/// `/status.json` of the HTTP port.
fn page_json(http: u16) -> Value {
    let (line, body) = get(http, "/status.json");
    assert!(line.ends_with(" 200 OK"), "{line}");
    serde_json::from_str(&body).unwrap()
}

const JOB_KEYS: [&str; 6] =
    ["jobs_total", "jobs_pending", "jobs_leased", "jobs_done", "jobs_held", "jobs_failed"];

/// The jobs by state of a status object.
fn jobs(v: &Value) -> Vec<u64> {
    JOB_KEYS.iter().map(|k| u(v, k)).collect()
}

/// Waits until the run stands still: the same jobs by state for three reads over two seconds.
fn wait_still(http: u16) -> Vec<u64> {
    let start = Instant::now();
    let mut seen = Vec::new();
    loop {
        seen.push(jobs(&page_json(http)));
        let last = &seen[seen.len().saturating_sub(3)..];
        if last.len() == 3 && last.iter().all(|j| j == &last[0]) {
            return last[0].clone();
        }
        assert!(start.elapsed() < Duration::from_secs(60), "the run never stood still: {seen:?}");
        std::thread::sleep(Duration::from_secs(1));
    }
}

/// The rate and ETA of a status object: (results_per_second, eta_seconds, waiting_on_leases).
fn pace(v: &Value) -> (Option<f64>, Option<f64>, u64) {
    (v["results_per_second"].as_f64(), v["eta_seconds"].as_f64(), u(v, "waiting_on_leases"))
}

/// The ETA rule every view applies, checked on one of them: the jobs left at its rate.
fn assert_eta_follows_the_rate(v: &Value) {
    let rate = v["results_per_second"].as_f64().expect("a rate");
    assert!(rate > 0.0, "{v}");
    let left = u(v, "jobs_total") - u(v, "jobs_done");
    let eta = v["eta_seconds"].as_f64().expect("an ETA: jobs are pending");
    assert!((eta - left as f64 / rate).abs() <= 1e-9 * eta.max(1.0), "{v}");
}

#[test]
fn status_connect_status_json_the_page_and_status_state_show_one_snapshot() {
    let dir = RunDir::new();
    let state = dir.path().join("views.db");
    let (port, http) = (dir.port(), free_port());
    // Leases outlive the test: the killed worker's jobs stay leased, nothing moves.
    let serve = dir.coordinator(N).state(&state).http_port(http).verify_fraction("0");
    let _coordinator = serve.lease_seconds(900).log("c.log").start();
    let mut worker = dir.worker("w1").log("w.log").start();
    wait_until(Duration::from_secs(120), "some results committed", || {
        committed_results(&state) >= 50
    });
    worker.sigkill();
    let still = wait_still(http);
    let (total, done) = (still[0], still[3]);
    assert!(done > 0 && done < total && still[1] > 0, "mid-run, jobs pending: {still:?}");

    // The live views, read until all three show the same snapshot (one is published each second
    // while the run stands still).
    let mut tries = 0;
    let (grpc, json, html) = loop {
        tries += 1;
        assert!(tries <= 30, "never read one snapshot through all three views");
        let grpc = status(port);
        let json = page_json(http);
        let (line, html) = get(http, "/");
        assert!(line.ends_with(" 200 OK"), "{line}");
        let seq = u(&json, "snapshot_seq");
        if u(&grpc, "snapshot_seq") == seq && number(&html, "seq") == seq {
            break (grpc, json, html);
        }
    };
    eprintln!("one snapshot through the three live views after {tries} tries: {json}");
    assert!(u(&json, "snapshot_seq") > 0);
    assert_eq!(jobs(&grpc), still, "status --connect: {grpc}");
    assert_eq!(jobs(&json), still, "/status.json: {json}");
    assert_eq!(pace(&grpc), pace(&json), "the rate and ETA: {grpc}\n{json}");
    assert_eq!(grpc["quiet_seconds"], json["quiet_seconds"]);
    assert_eq!(grpc["uptime_seconds"], json["uptime_seconds"]);
    assert_eta_follows_the_rate(&json);
    // The same fleet, counted whole, and the same first worker listed.
    for key in ["workers", "matching", "by_state", "by_device", "by_credential", "by_version"] {
        assert_eq!(grpc["fleet"][key], json["fleet"][key], "fleet {key}: {grpc}\n{json}");
    }
    assert_eq!(u(&grpc["fleet"], "workers"), 1, "{grpc}");
    assert_eq!(grpc["workers"][0]["name"], json["workers"][0]["name"]);

    // The page, as served: its numbers are the snapshot's.
    for (id, key) in [
        ("total", "jobs_total"),
        ("done", "jobs_done"),
        ("pending", "jobs_pending"),
        ("leased", "jobs_leased"),
        ("held", "jobs_held"),
        ("failed", "jobs_failed"),
    ] {
        assert_eq!(number(&html, id), u(&json, key), "#{id}");
    }
    assert_eq!(text_of(&html, "eta"), json["eta_text"].as_str().unwrap());
    let rate = json["results_per_second"].as_f64().unwrap();
    assert_eq!(text_of(&html, "rps"), format!("{rate:.1}"));

    // `/metrics` renders the same jobs by state.
    let (_, metrics) = get(http, "/metrics");
    for (state_name, key) in
        [("pending", "jobs_pending"), ("leased", "jobs_leased"), ("done", "jobs_done")]
    {
        let line = format!("nqueens_jobs{{state=\"{state_name}\"}} {}\n", u(&json, key));
        assert!(metrics.contains(&line), "{line} in {metrics}");
    }

    // Offline: the same jobs by state; the rate is the file's own (no live window), and the ETA
    // follows it by the same rule.
    let offline = offline_status(&state);
    assert_eq!(jobs(&offline), still, "status --state: {offline}");
    assert_eq!(u(&offline, "snapshot_seq"), 0, "offline: {offline}");
    assert_eta_follows_the_rate(&offline);
}
