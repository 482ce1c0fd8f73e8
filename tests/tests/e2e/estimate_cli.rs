//! `estimate`'s card figures come from a named rate: the published default, printed with its
//! source, or `--card-rate`, each over this host's measured solutions per core-second.

use std::process::Command;

fn estimate(extra: &[&str]) -> std::process::Output {
    Command::new(nqueens_tests::binary("nqueens-coordinator"))
        .args(["estimate", "15", "--sample", "16", "--no-reference"])
        .args(extra)
        .output()
        .unwrap()
}

fn json(extra: &[&str]) -> serde_json::Value {
    let out = estimate(&[&["--json"], extra].concat());
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn card_figures_come_from_a_named_rate_over_the_hosts_measured_rate() {
    let out = estimate(&[]);
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text.lines().find(|l| l.starts_with("card ")).expect("a card line");
    assert!(line.contains("Yao & Li") && line.contains("1.49e10 solutions/s at N = 22"), "{line}");
    assert!(text.contains("projected CPU of the sampled jobs"), "{text}");

    let published = json(&[]);
    let card = &published["card"];
    let host = card["host_solutions_per_core_second"].as_f64().unwrap();
    assert!(host > 0.0);
    let cores = card["cores"].as_f64().unwrap();
    assert!((cores - 1.49e10 / host).abs() < 1e-6 * cores, "{card}");
    assert_eq!(published["card_cores"].as_f64(), Some(cores));
    let build = published["build"].as_str().unwrap_or_default();
    assert!(["avx512", "avx2", "bmi", "portable"].contains(&build), "{published}");

    let given = json(&["--card-rate", "1e9"]);
    let host = given["card"]["host_solutions_per_core_second"].as_f64().unwrap();
    assert!((given["card_cores"].as_f64().unwrap() - 1e9 / host).abs() < 1e-3);
    assert!(given["card"]["source"].as_str().unwrap().contains("--card-rate"));
    let cores = json(&["--card-cores", "250"]);
    assert_eq!(cores["card_cores"].as_f64(), Some(250.0));
    assert!(cores["card"]["solutions_per_second"].is_null());

    for bad in [&["--card-rate", "0"][..], &["--card-rate", "1e9", "--card-cores", "5"]] {
        let out = estimate(bad);
        assert!(!out.status.success(), "{bad:?} is refused");
    }
}
