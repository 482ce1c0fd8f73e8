//! `nqueens-coordinator verify`: agrees on a correct run, names the job and the worker behind a
//! wrong count that was stored with a valid checksum, lists rows whose checksum fails, and refuses
//! a file that is not a state file.

use nqueens_core::{job_list, SplitParams};
use nqueens_scheduler::Change;
use nqueens_store::WorkerRow;
use nqueens_store::{LocalCheckpoint, Store};
use std::path::Path;
use std::process::{Command, Output};

fn verify(state: &Path, extra: &[&str]) -> (Output, serde_json::Value) {
    let out = Command::new(env!("CARGO_BIN_EXE_nqueens-coordinator"))
        .args(["verify", "--json", "--threads", "2", "--state"])
        .arg(state)
        .args(extra)
        .output()
        .unwrap();
    let json = serde_json::from_slice(&out.stdout).unwrap_or(serde_json::Value::Null);
    (out, json)
}

#[test]
fn verify_agrees_on_a_correct_run_and_names_wrong_counts_and_bad_rows() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("n12.db");
    let list = job_list(12, &SplitParams::default()).unwrap();
    {
        let cp = LocalCheckpoint::open(&state, &list, nqueens_proto::PROTOCOL_MAJOR).unwrap();
        for job in &list.jobs {
            cp.record(job.id, &job.solve().unwrap(), 0.0).unwrap();
        }
        assert!(cp.finish().unwrap().1.exact().is_some());
    }
    let (out, v) = verify(&state, &["--all"]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(v["agreements"].as_u64(), Some(list.jobs.len() as u64), "{v}");
    let (out, v) = verify(&state, &[]);
    assert_eq!(out.status.code(), Some(0));
    assert_eq!((v["checked"].as_u64(), v["agreements"].as_u64()), (Some(64), Some(64)), "{v}");

    // A worker's wrong count, stored with a valid checksum (the checksum cannot tell): verify
    // solves the job again and names it and the worker.
    let wrong_job = list.jobs.iter().find(|j| j.solve().unwrap().solutions > 0).unwrap();
    let mut wrong = wrong_job.solve().unwrap();
    wrong.solutions += 2;
    {
        let mut store = Store::open_existing_for_update(&state).unwrap();
        let worker = WorkerRow {
            id: 5,
            name: "flaky".into(),
            host: "node-7".into(),
            slots: 4,
            version: "x".into(),
            credential: String::new(),
            secret_digest: Vec::new(),
            device: String::new(),
        };
        store
            .apply(
                &[
                    [Change::Uncount { job_id: wrong_job.id }].as_slice(),
                    &Change::finished_on_one_answer(wrong_job.id, 5.into(), wrong),
                ]
                .concat(),
                &[worker],
            )
            .unwrap();
    }
    let (out, v) = verify(&state, &["--all"]);
    assert_eq!(out.status.code(), Some(1), "{v}");
    let m = &v["mismatches"][0];
    assert_eq!(m["job_id"].as_u64(), Some(wrong_job.id.get()), "{v}");
    assert_eq!(m["worker_id"].as_u64(), Some(5));
    assert_eq!(m["stored"]["solutions"].as_u64(), Some(wrong.solutions));
    assert_eq!(m["recomputed"]["solutions"].as_u64(), Some(wrong.solutions - 2));
    assert_eq!(v["workers"][0]["name"], "flaky", "{v}");
    assert_eq!(v["workers"][0]["host"], "node-7", "{v}");
    assert_eq!(v["bad_rows"].as_array().unwrap().len(), 0);

    // A flipped count: its checksum fails, and the text report says so.
    let c = rusqlite::Connection::open(&state).unwrap();
    let row: i64 = c
        .query_row(
            "SELECT id FROM results WHERE counted=1 AND job_id<>?1 LIMIT 1",
            [wrong_job.id.get() as i64],
            |r| r.get(0),
        )
        .unwrap();
    c.execute("UPDATE results SET sym180=sym180+4 WHERE id=?1", [row]).unwrap();
    drop(c);
    let (out, v) = verify(&state, &["--all"]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(v["bad_rows"][0]["row_id"].as_i64(), Some(row), "{v}");
    let text = Command::new(env!("CARGO_BIN_EXE_nqueens-coordinator"))
        .args(["verify", "--state"])
        .arg(&state)
        .output()
        .unwrap();
    assert_eq!(text.status.code(), Some(1));
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(text.contains(&format!("BAD ROW  {row}")) && text.contains("FAILED"), "{text}");

    // Not a state file: refused, unchanged.
    let notes = dir.path().join("notes.txt");
    std::fs::write(&notes, "hello\n".repeat(50)).unwrap();
    let (out, _) = verify(&notes, &[]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("not an nqueens state file"));
    assert_eq!(std::fs::read_to_string(&notes).unwrap(), "hello\n".repeat(50));
}
