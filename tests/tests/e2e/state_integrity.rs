//! The state file's integrity, through the real binary: a flipped bit in a stored count never
//! makes a wrong total, and a file that is not ours is refused and left exactly as it was.

use nqueens_tests::cluster::coordinator_output;
use nqueens_tests::harness::RunDir;
use nqueens_tests::known_counts;
use std::path::{Path, PathBuf};
use std::time::Instant;

const COUNT_FIELDS: [&str; 4] = ["solutions", "sym180", "sym90", "nodes"];

fn arg(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// A finished N=12 local run in `dir`, made by `solve 12 --state`.
fn finished_n12(dir: &Path) -> PathBuf {
    let state = dir.join("n12.db");
    let out =
        coordinator_output(["solve", "12", "--json", "--no-progress", "--state", arg(&state)]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    state
}

/// Every file in `dir`, sorted.
fn listing(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

#[test]
fn every_flipped_bit_of_a_counted_row_is_solved_again_never_counted() {
    let started = Instant::now();
    let dir = tempfile::tempdir().unwrap();
    let base = finished_n12(dir.path());
    let expected = known_counts()[&12].total;
    // Three counted rows: the largest job, one from the middle, the last.
    let rows: Vec<i64> = {
        let c = rusqlite::Connection::open(&base).unwrap();
        let ids: Vec<i64> = c
            .prepare("SELECT id FROM results WHERE counted=1 ORDER BY nodes DESC")
            .unwrap()
            .query_map([], |r| r.get(0))
            .unwrap()
            .map(|r| r.unwrap())
            .collect();
        vec![ids[0], ids[ids.len() / 2], ids[ids.len() - 1]]
    };
    let cases: Vec<(i64, &str, u32)> = rows
        .iter()
        .flat_map(|&row| {
            COUNT_FIELDS.iter().flat_map(move |&field| (0..64).map(move |bit| (row, field, bit)))
        })
        .collect();
    let run_case = |i: usize, (row, field, bit): (i64, &str, u32)| {
        let state = dir.path().join(format!("case{i}.db"));
        std::fs::copy(&base, &state).unwrap();
        {
            let c = rusqlite::Connection::open(&state).unwrap();
            let value: i64 = c
                .query_row(&format!("SELECT {field} FROM results WHERE id=?1"), [row], |r| r.get(0))
                .unwrap();
            let flipped = value ^ (1i64 << bit);
            c.execute(&format!("UPDATE results SET {field}=?2 WHERE id=?1"), [row, flipped])
                .unwrap();
        }
        let out = coordinator_output([
            "solve",
            "12",
            "--json",
            "--no-progress",
            "--threads",
            "1",
            "--state",
            arg(&state),
        ]);
        let what = format!("row {row} {field} bit {bit}");
        if out.status.success() {
            let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
                panic!("{what}: {e}: {}", String::from_utf8_lossy(&out.stdout))
            });
            assert_eq!(
                v["total"].as_u64().map(u128::from),
                Some(expected),
                "{what}: a wrong total with exit 0"
            );
        } else {
            // Refusing is allowed; a wrong answer is not.
            assert!(
                out.stdout.is_empty(),
                "{what}: printed {}",
                String::from_utf8_lossy(&out.stdout)
            );
        }
        let _ = std::fs::remove_file(&state);
        out.status.success()
    };
    // Two threads: the machine has two cores, each case is one short process.
    let solved: usize = std::thread::scope(|s| {
        let halves: Vec<_> = (0..2)
            .map(|t| {
                let cases = &cases;
                let run_case = &run_case;
                s.spawn(move || {
                    (t..cases.len()).step_by(2).filter(|&i| run_case(i, cases[i])).count()
                })
            })
            .collect();
        halves.into_iter().map(|h| h.join().unwrap()).sum()
    });
    // The checksum catches every flip, so every case re-solves its job and ends exact.
    assert_eq!(solved, cases.len(), "every flipped row is detected and its job solved again");
    eprintln!("{} bit flips checked in {:?}", cases.len(), started.elapsed());

    // And the report: status names the bad row, the resumed run still has the exact total.
    let state = dir.path().join("flipped.db");
    std::fs::copy(&base, &state).unwrap();
    rusqlite::Connection::open(&state)
        .unwrap()
        .execute("UPDATE results SET solutions=solutions+1 WHERE id=?1", [rows[0]])
        .unwrap();
    let status = coordinator_output(["status", "--json", "--state", arg(&state)]);
    assert!(status.status.success(), "{}", String::from_utf8_lossy(&status.stderr));
    let v: serde_json::Value = serde_json::from_slice(&status.stdout).unwrap();
    assert_eq!(v["bad_rows"].as_u64(), Some(1), "{v}");
    assert_eq!(v["complete"].as_bool(), Some(false), "{v}");
    assert_eq!(v["jobs_pending"].as_u64(), Some(1), "{v}");
    let text = coordinator_output(["status", "--state", arg(&state)]);
    assert!(String::from_utf8_lossy(&text.stdout).contains("1 bad_rows"));
}

#[test]
fn files_that_are_not_ours_are_refused_by_every_command_and_left_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let foreign = dir.path().join("other.sqlite");
    {
        let c = rusqlite::Connection::open(&foreign).unwrap();
        c.execute_batch(
            "PRAGMA journal_mode=WAL;
             CREATE TABLE invoices (id INTEGER PRIMARY KEY, customer TEXT, amount REAL);
             INSERT INTO invoices(customer, amount) VALUES ('ACME', 12.5), ('Initech', 99);",
        )
        .unwrap();
    }
    let text = dir.path().join("notes.txt");
    std::fs::write(&text, "shopping: eggs, milk\n".repeat(10)).unwrap();
    let listed = listing(dir.path());
    for file in [&foreign, &text] {
        let before = std::fs::read(file).unwrap();
        let f = arg(file);
        for args in [
            vec![
                "serve",
                "--n",
                "12",
                "--state",
                f,
                "--listen",
                "127.0.0.1:0",
                "--http-listen",
                "off",
            ],
            vec!["serve", "--state", f, "--listen", "127.0.0.1:0", "--http-listen", "off"],
            vec!["solve", "12", "--no-progress", "--state", f],
            vec!["status", "--state", f],
            vec!["requeue", "--state", f],
        ] {
            let out = coordinator_output(&args);
            let err = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
            assert!(err.contains("is not an nqueens state file"), "{args:?}: {err}");
            assert!(out.stdout.is_empty(), "{args:?}");
            assert_eq!(std::fs::read(file).unwrap(), before, "{args:?} changed {f}");
            assert_eq!(listing(dir.path()), listed, "{args:?} left files behind");
        }
    }
    let c = rusqlite::Connection::open(&foreign).unwrap();
    let rows: i64 = c.query_row("SELECT COUNT(*) FROM invoices", [], |r| r.get(0)).unwrap();
    assert_eq!(rows, 2);
}

#[test]
fn a_cluster_run_with_a_damaged_row_solves_its_job_again_and_ends_exact() {
    use nqueens_tests::cluster::{free_port, read_result_file};
    use std::time::Duration;
    let dir = RunDir::new();
    let state = dir.path().join("cluster.db");
    let run = |tag: &str| {
        let serve = dir.coordinator(12).state(&state).port(free_port()).exit_when_done();
        let mut coord = serve.verify_fraction("0").log(&format!("coord-{tag}.log")).start();
        let worker = coord.worker(&format!("w-{tag}")).threads(2);
        let _worker = worker.log(&format!("worker-{tag}.log")).start();
        let status = coord.wait_exit(Duration::from_secs(60));
        assert!(status.success(), "{}", coord.log_text());
        coord.log_text()
    };
    run("first");
    let expected = known_counts()[&12].total;
    assert_eq!(read_result_file(&nqueens_coordinator::result_file(&state)).total, expected);
    let job: i64 = {
        let c = rusqlite::Connection::open(&state).unwrap();
        let (row, job): (i64, i64) = c
            .query_row(
                "SELECT id, job_id FROM results WHERE counted=1 AND solutions>0 ORDER BY id LIMIT 1",
                [],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .unwrap();
        c.execute("UPDATE results SET solutions=solutions+1 WHERE id=?1", [row]).unwrap();
        job
    };
    std::fs::remove_file(nqueens_coordinator::result_file(&state)).unwrap();
    let log = run("second");
    assert!(log.contains("fail their checksum"), "{log}");
    assert!(log.contains(&job.to_string()), "the warning names job {job}: {log}");
    assert_eq!(read_result_file(&nqueens_coordinator::result_file(&state)).total, expected);
    let status = coordinator_output(["status", "--json", "--state", arg(&state)]);
    let v: serde_json::Value = serde_json::from_slice(&status.stdout).unwrap();
    assert_eq!((v["bad_rows"].as_u64(), v["complete"].as_bool()), (Some(1), Some(true)), "{v}");
}

#[test]
fn a_live_status_reports_a_row_damaged_while_the_coordinator_runs() {
    use nqueens_tests::cluster::wait_until;
    use std::time::Duration;
    let dir = RunDir::new();
    let state = dir.path().join("live.db");
    let url = format!("http://127.0.0.1:{}", dir.port());
    let serve = dir.coordinator(12).state(&state).verify_fraction("0");
    let mut coord = serve.log("coord.log").start();
    let live = || {
        let out = coordinator_output(["status", "--json", "--connect", &url]);
        match out.status.success() {
            true => Some(serde_json::from_slice::<serde_json::Value>(&out.stdout).unwrap()),
            false => None,
        }
    };
    let mut worker = coord.worker("w").threads(2).start();
    wait_until(Duration::from_secs(120), "the run to complete", || {
        live().is_some_and(|v| v["complete"].as_bool() == Some(true))
    });
    assert!(worker.wait_exit(Duration::from_secs(60)).success(), "{}", worker.log_text());
    let v = live().unwrap();
    assert_eq!((v["bad_rows"].as_u64(), v["checksums"].as_bool()), (Some(0), Some(true)), "{v}");

    // A counted row is changed behind the running coordinator's back: a status call once the
    // sums are read again (at most `ROWS_MAX_AGE`, 5 s, later), which checks every row as it
    // sums them, names it.
    let row: i64 = {
        let c = rusqlite::Connection::open(&state).unwrap();
        c.busy_timeout(Duration::from_secs(10)).unwrap();
        let row = c
            .query_row(
                "SELECT id FROM results WHERE counted=1 AND solutions>0 ORDER BY id LIMIT 1",
                [],
                |r| r.get(0),
            )
            .unwrap();
        c.execute("UPDATE results SET solutions=solutions+1 WHERE id=?1", [row]).unwrap();
        row
    };
    wait_until(Duration::from_secs(30), "the damaged row in a live status", || {
        live().is_some_and(|v| v["bad_rows"].as_u64() == Some(1))
    });
    let v = live().unwrap();
    assert_eq!(v["bad_rows"].as_u64(), Some(1), "row {row}: {v}");
    let expected = known_counts()[&12].total;
    assert!(
        u128::from(v["partial_total"].as_u64().unwrap()) < expected,
        "the bad row is not counted: {v}"
    );
    let text = coordinator_output(["status", "--connect", &url]);
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(
        text.contains("rows     1 bad_rows") && text.contains("verify --state <FILE>"),
        "{text}"
    );
    // The offline report agrees with the live one.
    let offline = coordinator_output(["status", "--json", "--state", arg(&state)]);
    let o: serde_json::Value = serde_json::from_slice(&offline.stdout).unwrap();
    assert_eq!(o["bad_rows"].as_u64(), Some(1), "{o}");
    coord.signal(libc::SIGTERM);
    assert!(coord.wait_exit(Duration::from_secs(60)).success(), "{}", coord.log_text());
}

#[test]
fn an_empty_state_file_becomes_a_new_run_for_serve_and_solve_alike() {
    use nqueens_tests::cluster::wait_until;
    use std::time::Duration;
    let dir = RunDir::new();
    let expected = known_counts()[&12].total;

    // solve --state on a 0-byte file: initialised, solved, exact.
    let solved = dir.path().join("solve.db");
    std::fs::write(&solved, b"").unwrap();
    let out =
        coordinator_output(["solve", "12", "--json", "--no-progress", "--state", arg(&solved)]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["total"].as_u64().map(u128::from), Some(expected), "{v}");

    // serve --state on a 0-byte file without --n: there is no run to resume, so it asks for
    // --n, and leaves the file as it was.
    let served = dir.path().join("serve.db");
    std::fs::write(&served, b"").unwrap();
    let out = coordinator_output([
        "serve",
        "--state",
        arg(&served),
        "--listen",
        "127.0.0.1:0",
        "--http-listen",
        "off",
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("give --n"), "{err}");
    assert_eq!(std::fs::metadata(&served).unwrap().len(), 0);

    // With --n it is initialised like a missing file, and serves the new run.
    let mut coord = dir.coordinator(12).state(&served).log("serve.log").start();
    wait_until(Duration::from_secs(60), "the run to be created", || {
        let out = coordinator_output(["status", "--json", "--state", arg(&served)]);
        out.status.success()
    });
    coord.signal(libc::SIGTERM);
    assert!(coord.wait_exit(Duration::from_secs(60)).success(), "{}", coord.log_text());
    let out = coordinator_output(["status", "--json", "--state", arg(&served)]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!((v["n"].as_u64(), v["jobs_done"].as_u64()), (Some(12), Some(0)), "{v}");
    assert!(v["jobs_total"].as_u64().unwrap() > 0, "{v}");

    // `status` reads an empty file as what it is: not a run.
    let empty = dir.path().join("empty.db");
    std::fs::write(&empty, b"").unwrap();
    let out = coordinator_output(["status", "--state", arg(&empty)]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("it is empty (0 bytes)"));
}

/// A state file made by an earlier schema (4: the workers' lease slots in a column `cores`, result
/// rows without their credential), stopped by SIGKILL in the middle of an N=17 run with one
/// worker (`tests/testdata`). `status` reads it as it is (showing the worker's slots) and leaves
/// it so; `serve` migrates it to schema 7, resumes it, and a worker finishes it with the known
/// counts, each job counted once, its new rows carrying their credential beside the old ones and
/// the new worker its device.
#[test]
fn a_state_file_of_the_previous_schema_is_read_resumed_and_finished_exact() {
    use nqueens_tests::cluster::{
        assert_each_job_counted_once, assert_matches_reference, query_count, read_result_file,
    };
    let fixture =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata").join("schema4-n17-midrun.db");
    let dir = RunDir::new();
    let state = dir.path().join("old.db");
    std::fs::copy(&fixture, &state).unwrap();
    let schema = |state: &Path| {
        query_count(state, "SELECT CAST(value AS INTEGER) FROM meta WHERE key='schema'")
    };
    assert_eq!(schema(&state), 4);

    let out = coordinator_output(["status", "--state", arg(&state)]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("N=17") && text.contains("done"), "{text}");
    let worker_line = text.lines().find(|l| l.contains("old-worker")).expect("the old worker");
    assert!(worker_line.contains("1 slots"), "{worker_line}");
    assert_eq!(schema(&state), 4, "a read-only look changes nothing");

    let serve = dir.coordinator(17).state(&state).exit_when_done().lease_seconds(5);
    let mut coordinator = serve.args(&["--target-jobs", "300"]).start();
    let worker = coordinator.worker("new-worker").threads(2).log("worker.log").start();
    let status = coordinator.wait_exit(std::time::Duration::from_secs(240));
    drop(worker);
    assert!(status.success(), "{}", coordinator.log_text());
    let record = read_result_file(&dir.path().join("old.db.result.json"));
    assert_matches_reference(&record);
    assert_each_job_counted_once(&state);
    assert_eq!(schema(&state), 7, "migrated by the writer");
    let device = "SELECT COUNT(*) FROM workers WHERE name='new-worker' AND device LIKE 'cpu%'";
    assert_eq!(query_count(&state, device), 1, "the new worker's device is stored");
    let named = "SELECT COUNT(*) FROM results WHERE worker_id != 0 AND credential IS NOT NULL";
    assert!(query_count(&state, named) > 0, "the new rows carry no credential");
    assert_eq!(query_count(&state, "SELECT slots FROM workers WHERE name='old-worker'"), 1);
}
