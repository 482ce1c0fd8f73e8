//! Every count for N = 1..17 against the reference table, through the library and through the
//! `solve` command a user runs.

use nqueens_core::{job_list, parallel, SplitParams, Tally};
use nqueens_tests::cluster::solve;
use nqueens_tests::{known_counts, Known};
use std::sync::Mutex;

fn assert_matches(known: &Known, total: u128, unique: u128, classes: [Option<u128>; 3]) {
    assert_eq!(total, known.total, "N={} total", known.n);
    assert_eq!(unique, known.unique, "N={} unique", known.n);
    assert_eq!(classes, [known.count2, known.count4, known.count8], "N={} COUNT2/4/8", known.n);
}

#[test]
fn library_totals_and_classes_match_the_reference_for_n_1_to_17() {
    let table = known_counts();
    let pool = rayon::ThreadPoolBuilder::new().build().unwrap();
    for n in 1..=17u32 {
        let list = job_list(n, &SplitParams::default()).unwrap();
        let tally = Mutex::new(Tally::new(n).unwrap());
        parallel::solve_all(&pool, &list.jobs, |i, c, _| {
            tally.lock().unwrap().add(list.jobs[i].weight, c).unwrap()
        })
        .unwrap();
        let t = tally.into_inner().unwrap().totals().unwrap();
        let classes =
            t.classes.map_or([None; 3], |c| [Some(c.count2), Some(c.count4), Some(c.count8)]);
        assert_matches(&table[&(n as u8)], t.total, t.unique, classes);
    }
}

#[test]
fn solve_json_prints_one_exact_line_per_board_size() {
    let table = known_counts();
    let out = solve(&["1..14", "--json", "--threads", "2"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let lines: Vec<serde_json::Value> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).expect("one JSON object per line"))
        .collect();
    assert_eq!(lines.len(), 14);
    for (i, v) in lines.iter().enumerate() {
        let n = i as u8 + 1;
        assert_eq!(v["n"], n as u64);
        let class = |k: &str| v[k].as_u64().map(u128::from);
        assert_matches(
            &table[&n],
            v["total"].as_u64().unwrap().into(),
            v["unique"].as_u64().unwrap().into(),
            [class("count2"), class("count4"), class("count8")],
        );
        assert!(v["jobs"].is_u64() && v["seconds"].is_f64() && v["nodes"].is_u64(), "{v}");
        // The CPU build that counted: a user sees which hosts run a slow one.
        let build = v["build"].as_str().unwrap_or_default();
        assert!(["avx512", "avx2", "bmi", "portable"].contains(&build), "{v}");
        // Every figure compared with the published counts (N = 1 has no classes).
        assert_eq!(v["published"]["outcome"], "match", "{v}");
        let compared = v["published"]["compared"].as_array().unwrap().len();
        assert_eq!(compared, if n == 1 { 2 } else { 5 }, "{v}");
    }
}

#[test]
fn solve_prints_the_classic_table_and_a_detailed_single_answer() {
    let table = known_counts();
    let out = solve(&["4..8"]);
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    let rows: Vec<&str> = text.lines().skip(1).collect();
    assert_eq!(rows.len(), 5, "{text}");
    for row in rows {
        let f: Vec<&str> = row.split_whitespace().collect();
        let n: u8 = f[0].trim_end_matches(':').parse().unwrap();
        assert_eq!(
            (f[1].parse::<u128>().unwrap(), f[2].parse::<u128>().unwrap()),
            (table[&n].total, table[&n].unique)
        );
        assert_eq!(f[3].len(), "00:00:00.000".len(), "{row}");
    }
    let out = solve(&["12", "--threads", "1"]);
    let text = String::from_utf8(out.stdout).unwrap();
    for (label, value) in [
        ("Total:", table[&12].total),
        ("Unique:", table[&12].unique),
        ("COUNT2:", table[&12].count2.unwrap()),
    ] {
        assert!(
            text.lines()
                .any(|l| l.split_whitespace().collect::<Vec<_>>() == [label, &value.to_string()]),
            "{label} in {text}"
        );
    }
}

#[test]
fn solve_rejects_bad_sizes_clearly() {
    for bad in ["0", "33", "abc", "9..4", "-3"] {
        let out = solve(&[bad]);
        assert_eq!(out.status.code(), Some(1), "{bad}");
        assert!(out.stdout.is_empty(), "{bad}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("error:"), "{bad}: {err}");
    }
    let err = String::from_utf8(solve(&["40"]).stderr).unwrap();
    assert!(err.contains("N must be between 1 and 32"), "{err}");
}
