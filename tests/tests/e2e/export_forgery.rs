//! A published result whose checkers cannot be gamed: forged exports of a real N = 13 run (each
//! with its sums, last line and digest rewritten, as a forger would) are refused by both checkers
//! in their default mode, each with a one-line reason: rows changed around the fixed sample the
//! checkers once drew, rows that break the coverage, a row beyond its bound. Default runs draw a
//! fresh seed each time; a partial export says so; `export` keeps the user's files; the Python
//! checker answers bad input with one line.

use nqueens_core::SplitMix64;
use nqueens_result::{read_export, ExportEnd, ExportHeader, ExportRow};
use sha2::{Digest, Sha256};
use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use super::export::{checker, run};

fn text(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr)
}

fn python(file: &Path, args: &[&str]) -> Output {
    run(Command::new("python3").arg(checker()).arg(file).args(args))
}

fn verify(file: &Path, args: &[&str]) -> Output {
    run(Command::new(nqueens_tests::binary("nqueens-coordinator"))
        .args(["verify", "--threads", "2", "--export"])
        .arg(file)
        .args(args))
}

/// Solves N = 13 split into about 20,000 jobs on this machine (`solve --state`) and exports it;
/// the state file and the export.
fn honest_export(dir: &Path) -> (PathBuf, PathBuf) {
    let coordinator = nqueens_tests::binary("nqueens-coordinator");
    let state = dir.join("run13.db");
    let out = run(Command::new(&coordinator)
        .args(["solve", "13", "--no-progress", "--threads", "2", "--target-jobs", "20000"])
        .arg("--state")
        .arg(&state));
    assert!(out.status.success());
    let export = dir.join("run13.jsonl");
    let out = run(Command::new(&coordinator)
        .arg("export")
        .arg("--state")
        .arg(&state)
        .arg("--to")
        .arg(&export));
    assert!(out.status.success());
    (state, export)
}

/// Writes `rows` under `header` as a forger would: canonical lines, the sums, the classes and the
/// digest recomputed, so that the form, the digest and the sums hold.
fn forge(path: &Path, header: &ExportHeader, rows: &[ExportRow]) {
    let mut text = serde_json::to_string(header).unwrap() + "\n";
    let mut sha = Sha256::new();
    let (mut total, mut sym180, mut sym90) = (0u128, 0u128, 0u128);
    for row in rows {
        let line = serde_json::to_string(row).unwrap() + "\n";
        sha.update(line.as_bytes());
        text += &line;
        let w = row.weight as u128;
        total += w * row.solutions as u128;
        sym180 += w * row.sym180 as u128;
        sym90 += w * row.sym90 as u128;
    }
    let complete = rows.len() as u64 == header.jobs;
    let (c2, c4, c8) = (sym90 / 2, (sym180 - sym90) / 4, (total - sym180) / 8);
    let end = ExportEnd {
        end: true,
        rows: rows.len() as u64,
        complete,
        total,
        sym180,
        sym90,
        unique: complete.then_some(c2 + c4 + c8),
        count2: complete.then_some(c2),
        count4: complete.then_some(c4),
        count8: complete.then_some(c8),
        rows_sha256: sha.finalize().iter().map(|b| format!("{b:02x}")).collect(),
    };
    text += &(serde_json::to_string(&end).unwrap() + "\n");
    std::fs::write(path, text).unwrap();
}

/// The rows the checkers of the first published version solved again by default (seed 1, 64
/// rows): `verify --export`'s order of keyed rows, and the Python script's
/// `random.Random(1).sample`. A forger leaves these alone.
fn fixed_sample(rows: &[ExportRow]) -> HashSet<u64> {
    let mut keyed: Vec<(u64, u64)> = rows
        .iter()
        .map(|r| (SplitMix64::new(1 ^ r.job.wrapping_mul(0x9e37_79b9_7f4a_7c15)).next_u64(), r.job))
        .collect();
    keyed.sort_unstable();
    let mut jobs: HashSet<u64> = keyed.iter().take(64).map(|&(_, job)| job).collect();
    let script =
        format!("import random; print(*random.Random(1).sample(range({}), 64))", rows.len());
    let out = run(Command::new("python3").args(["-c", &script]));
    for index in String::from_utf8_lossy(&out.stdout).split_whitespace() {
        jobs.insert(rows[index.parse::<usize>().unwrap()].job);
    }
    jobs
}

/// Both checkers refuse `file` in their default mode (exit 1), and each names `reason`.
fn both_refuse(file: &Path, reason: &str) {
    for (tool, out) in [("check_export.py", python(file, &[])), ("verify", verify(file, &[]))] {
        assert_eq!(out.status.code(), Some(1), "{tool} refuses {}", file.display());
        assert!(text(&out).contains(reason), "{tool} names {reason:?}: {}", text(&out));
    }
}

#[test]
fn forged_exports_are_refused_by_both_checkers_in_their_default_mode() {
    let dir = tempfile::tempdir().unwrap();
    let (_, export) = honest_export(dir.path());
    let honest = read_export(&export).unwrap();
    let (header, rows) = (honest.header.clone(), honest.rows.clone());
    for out in [python(&export, &[]), verify(&export, &[])] {
        assert!(out.status.success(), "the honest export passes");
        assert!(text(&out).contains(&format!("re-solved 64 of {} rows", rows.len())));
    }

    // Every weight-8 row outside the old fixed sample gains a solution: the Total moves by 8 a
    // row, and the sample that once passed it is no longer the one drawn.
    let spared = fixed_sample(&rows);
    let mut around = rows.clone();
    for row in around.iter_mut().filter(|r| r.weight == 8 && !spared.contains(&r.job)) {
        row.solutions += 1;
    }
    let file = dir.path().join("around.jsonl");
    forge(&file, &header, &around);
    both_refuse(&file, "PUBLISHED Total is");
    both_refuse(&file, "WRONG");

    // One row copied under a new id at the end of a list one job longer.
    let mut copied = rows.clone();
    let mut copy = rows[rows.len() / 2].clone();
    copy.job = header.jobs;
    copied.push(copy);
    let file = dir.path().join("copied.jsonl");
    forge(&file, &ExportHeader { jobs: header.jobs + 1, ..header.clone() }, &copied);
    both_refuse(&file, "COVERAGE");

    // One job dropped and the later ids renumbered, in a list one job shorter.
    let mut dropped = rows.clone();
    dropped.remove(rows.len() / 3);
    for (i, row) in dropped.iter_mut().enumerate() {
        row.job = i as u64;
    }
    let file = dir.path().join("dropped.jsonl");
    forge(&file, &ExportHeader { jobs: header.jobs - 1, ..header.clone() }, &dropped);
    both_refuse(&file, "COVERAGE");

    // A row whose queens attack each other, a row with a wrong weight.
    for (name, change) in [
        ("attacking", (|r: &mut ExportRow| r.queens[1].1 = r.queens[0].1) as fn(&mut ExportRow)),
        ("weight", |r: &mut ExportRow| r.weight = if r.weight == 8 { 4 } else { 8 }),
    ] {
        let mut changed = rows.clone();
        change(&mut changed[rows.len() / 4]);
        let file = dir.path().join(format!("{name}.jsonl"));
        forge(&file, &header, &changed);
        both_refuse(&file, "COVERAGE");
    }

    // A row beyond its bound: the Total moved by one row that is never drawn.
    let mut inflated = rows.clone();
    let big = inflated.iter_mut().find(|r| !spared.contains(&r.job) && r.weight == 8).unwrap();
    big.solutions = 1 << 40;
    let job = big.job;
    let file = dir.path().join("inflated.jsonl");
    forge(&file, &header, &inflated);
    both_refuse(&file, &format!("IMPLAUSIBLE job {job}: 1099511627776 solutions"));
}

/// The seed printed by a default run.
fn drawn_seed(out: &Output) -> String {
    let said = text(out);
    let at = said.find("--seed ").unwrap_or_else(|| panic!("a seed is printed: {said}"));
    said[at + 7..].split(|c: char| !c.is_ascii_digit()).next().unwrap().to_string()
}

#[test]
fn default_checks_draw_fresh_seeds_and_a_partial_export_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let (_, export) = honest_export(dir.path());
    for check in [python as fn(&Path, &[&str]) -> Output, verify] {
        let (a, b) = (check(&export, &["--rows", "2"]), check(&export, &["--rows", "2"]));
        assert!(a.status.success() && b.status.success());
        let (seed_a, seed_b) = (drawn_seed(&a), drawn_seed(&b));
        assert_ne!(seed_a, seed_b, "two default runs draw two seeds");
        let again = check(&export, &["--rows", "2", "--seed", &seed_a]);
        assert!(text(&again).contains(&format!("seed {seed_a}")), "--seed repeats the draw");
    }

    // The first half of the rows, under the same header: a partial export, checked as one.
    let honest = read_export(&export).unwrap();
    let half = &honest.rows[..honest.rows.len() / 2];
    let partial = dir.path().join("partial.jsonl");
    forge(&partial, &honest.header, half);
    for (tool, out) in
        [("check_export.py", python(&partial, &[])), ("verify", verify(&partial, &[]))]
    {
        assert!(out.status.success(), "{tool} passes the honest partial export");
        assert!(text(&out).contains("OK PARTIAL"), "{tool}: {}", text(&out));
        assert!(text(&out).contains("This export is PARTIAL"), "{tool}: {}", text(&out));
    }
}

#[test]
fn export_keeps_the_users_files_and_the_checker_answers_bad_input_in_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let (state, export) = honest_export(dir.path());
    let coordinator = nqueens_tests::binary("nqueens-coordinator");
    let export_to = |to: &Path, force: bool| {
        let mut command = Command::new(&coordinator);
        command.arg("export").arg("--state").arg(&state).arg("--to").arg(to);
        if force {
            command.arg("--force");
        }
        run(&mut command)
    };
    let before = std::fs::read(&state).unwrap();
    for force in [false, true] {
        let out = export_to(&state, force);
        assert_eq!(out.status.code(), Some(1), "export over its own state file is refused");
        let said = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(said.contains("it is the state file"), "{said}");
        assert_eq!(said.trim().lines().count(), 1, "one line: {said}");
    }
    assert!(std::fs::read(&state).unwrap() == before, "the state file is untouched");
    let other = dir.path().join("notes.txt");
    std::fs::write(&other, "mine").unwrap();
    let out = export_to(&other, false);
    assert_eq!(out.status.code(), Some(1), "an existing file is refused");
    assert!(text(&out).contains("--force replaces it"), "{}", text(&out));
    assert_eq!(std::fs::read_to_string(&other).unwrap(), "mine");
    assert!(export_to(&other, true).status.success(), "--force replaces it");
    assert_eq!(std::fs::read(&other).unwrap(), std::fs::read(&export).unwrap());
    let left: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| name.ends_with(".tmp"))
        .collect();
    assert!(left.is_empty(), "no temporary file is left: {left:?}");

    // A cut gzip file, a malformed queens field, a missing result file: one line each.
    let bytes = std::fs::read(&export).unwrap();
    let gz = dir.path().join("cut.jsonl.gz");
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    std::io::Write::write_all(&mut encoder, &bytes).unwrap();
    let compressed = encoder.finish().unwrap();
    std::fs::write(&gz, &compressed[..compressed.len() / 2]).unwrap();
    let text_export = String::from_utf8(bytes).unwrap();
    let malformed = dir.path().join("malformed.jsonl");
    std::fs::write(&malformed, text_export.replacen("\"queens\":[[", "\"queens\":[[\"x\",", 1))
        .unwrap();
    for (file, args) in [
        (&gz, vec![]),
        (&malformed, vec![]),
        (&export, vec!["--result", "/nonexistent/run.result.json"]),
    ] {
        let out = python(file, &args);
        assert_eq!(out.status.code(), Some(2), "{}", text(&out));
        let said = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(!said.contains("Traceback"), "{said}");
        assert_eq!(said.trim().lines().count(), 1, "one line: {said}");
        assert!(said.starts_with("error: "), "{said}");
    }
}
