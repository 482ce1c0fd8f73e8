//! The status page in a real browser: a real coordinator and worker mid-run, headless Chromium
//! renders `http://127.0.0.1:PORT/` (its script polling `/status.json`), and what it shows is
//! checked against `status --connect --json` taken just before and just after.
//!
//! Without a Chromium binary the browser part is skipped with a message, unless `CI` is set, where
//! it fails. The page's data and routes are checked over a plain socket either way.

use nqueens_coordinator::escape_html;
use nqueens_tests::cluster::*;
use nqueens_tests::harness::{Coordinator, RunDir};
use serde_json::Value;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// Long enough that the run is still going when the page is looked at: about 16k jobs, minutes
/// of work for one thread.
const N: u32 = 19;

/// A worker name with markup in it: the page must show it as text.
const NAME: &str = "w<i>1</i>&amp;'\"";

/// The first Chromium found: `$CHROMIUM`, or one of the usual names on the PATH.
fn chromium() -> Option<PathBuf> {
    if let Some(path) = std::env::var_os("CHROMIUM") {
        return Some(PathBuf::from(path));
    }
    let names = ["chromium", "chromium-browser", "google-chrome", "google-chrome-stable"];
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .flat_map(|dir| names.iter().map(move |name| dir.join(name)))
        .find(|p| p.is_file())
}

/// `status --connect URL --json`.
pub(crate) fn status(port: u16) -> Value {
    let out = coordinator_output([
        "status".to_string(),
        "--connect".into(),
        format!("http://127.0.0.1:{port}"),
        "--json".into(),
    ]);
    assert!(out.status.success(), "status: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

/// GET `path` from the HTTP port: (status line, body).
pub(crate) fn get(port: u16, path: &str) -> (String, String) {
    let mut conn = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    conn.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    write!(conn, "GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n").unwrap();
    let mut answer = String::new();
    conn.read_to_string(&mut answer).unwrap();
    let (head, body) = answer.split_once("\r\n\r\n").unwrap();
    (head.lines().next().unwrap().to_owned(), body.to_owned())
}

/// Runs headless Chromium on `url` with `args` (`--dump-dom` or `--screenshot=...`).
fn run_chromium(chromium: &Path, url: &str, args: &[String]) -> String {
    let profile = tempfile::tempdir().unwrap();
    let out = Command::new(chromium)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--no-first-run",
            "--hide-scrollbars",
            "--window-size=1200,900",
            "--virtual-time-budget=3000",
        ])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .args(args)
        .arg(url)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", chromium.display()));
    assert!(
        out.status.success(),
        "chromium {args:?}: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// The text of the element with `id` in serialized HTML (up to its first child tag).
pub(crate) fn text_of<'a>(dom: &'a str, id: &str) -> &'a str {
    let marker = format!("id=\"{id}\"");
    let at = dom.find(&marker).unwrap_or_else(|| panic!("no #{id} in the page:\n{dom}"));
    let rest = &dom[at..];
    let start = rest.find('>').unwrap() + 1;
    let len = rest[start..].find('<').unwrap();
    &rest[start..start + len]
}

/// A number as the page shows it (with thousands separators).
pub(crate) fn number(dom: &str, id: &str) -> u64 {
    let text = text_of(dom, id).replace(',', "");
    text.parse().unwrap_or_else(|_| panic!("#{id} is {text:?}, not a number"))
}

pub(crate) fn u(v: &Value, key: &str) -> u64 {
    v[key].as_u64().unwrap_or_else(|| panic!("{key} in {v}"))
}

#[test]
fn the_status_page_in_a_browser_matches_status() {
    let dir = RunDir::new();
    let state = dir.path().join("page.db");
    let (port, http) = (dir.port(), free_port());
    let _processes = start_mid_run(&dir, &state, http);
    the_routes_serve_the_page_and_its_data(port, http);

    let Some(chromium) = chromium() else {
        assert!(
            std::env::var_os("CI").is_none(),
            "chromium not found, and CI is set: install it (apt-get install chromium)"
        );
        eprintln!("skipped: chromium not found (set CHROMIUM or install chromium to run the browser part)");
        return;
    };

    let url = format!("http://127.0.0.1:{http}/");
    the_page_in_a_browser_shows_what_status_shows(&chromium, &url, port);
    a_screenshot_of_the_page_is_written(&chromium, &url);
}

/// A coordinator (its page on port `http`) and one worker, mid-run with a few rate samples (one
/// every 10 s) behind it. The processes are stopped when what it returns is dropped.
fn start_mid_run(dir: &RunDir, state: &Path, http: u16) -> (Coordinator, Proc) {
    let serve = dir.coordinator(N).state(state).http_port(http).verify_fraction("0");
    // Built first (the first test to ask builds them), so that the wait below counts run time.
    nqueens_tests::binary("nqueens-coordinator");
    let started = Instant::now();
    let coordinator = serve.start();
    let worker = coordinator.worker(NAME).log("w.log").start();

    // Mid-run, with a few rate samples (one every 10 s) behind it.
    wait_until(Duration::from_secs(120), "some results committed", || committed_results(state) > 0);
    let settle = Duration::from_secs(22).saturating_sub(started.elapsed());
    std::thread::sleep(settle);
    (coordinator, worker)
}

/// Without a browser: the routes and the page's data.
fn the_routes_serve_the_page_and_its_data(port: u16, http: u16) {
    let before = status(port);
    let (line, json) = get(http, "/status.json");
    let after_json = status(port);
    assert!(line.ends_with(" 200 OK"), "{line}");
    let json: Value = serde_json::from_str(&json).unwrap();
    assert_eq!(json["n"], before["n"]);
    assert_eq!(json["fingerprint"], before["fingerprint"]);
    // Loopback, no token presented: the state file's name, not its path.
    assert_eq!(json["state_file"], "page.db", "{json}");
    assert_eq!(u(&json, "jobs_total"), u(&before, "jobs_total"));
    let done = u(&json, "jobs_done");
    assert!((u(&before, "jobs_done")..=u(&after_json, "jobs_done")).contains(&done), "{json}");
    assert!(done > 0 && done < u(&json, "jobs_total"), "mid-run: {json}");
    assert_eq!(json["workers"][0]["name"], NAME, "{json}");
    assert!(json["history"].as_array().unwrap().len() >= 2, "rate points: {json}");
    assert!(json["eta_seconds"].as_f64().is_some_and(|e| e > 0.0), "{json}");
    // The ETA in `status`'s words (h:mm:ss), which the page shows.
    assert!(json["eta_text"].as_str().is_some_and(|t| t.contains(':')), "{json}");
    let (line, metrics) = get(http, "/metrics");
    assert!(line.ends_with(" 200 OK"), "{line}");
    assert!(metrics.contains("nqueens_jobs{state=\"done\"}"), "{metrics}");
    assert!(get(http, "/no-such-page").0.ends_with(" 404 Not Found"));
    let (line, html) = get(http, "/");
    assert!(line.ends_with(" 200 OK"), "{line}");
    assert!(html.contains(&escape_html(NAME)) && !html.contains(NAME), "{html}");
}

/// The page as the browser renders it shows the figures `status` shows just before and after.
fn the_page_in_a_browser_shows_what_status_shows(chromium: &Path, url: &str, port: u16) {
    let before = status(port);
    let took = Instant::now();
    let dom = run_chromium(chromium, url, &["--dump-dom".into()]);
    let after = status(port);
    eprintln!("chromium --dump-dom took {:.1} s", took.elapsed().as_secs_f64());

    // The script ran: it fills in the chart's span and the time of its last update.
    assert!(text_of(&dom, "span").starts_with("(last "), "{dom}");
    assert!(text_of(&dom, "err").starts_with("updated "), "{dom}");
    assert_eq!(number(&dom, "n"), u(&before, "n"));
    assert_eq!(number(&dom, "total"), u(&before, "jobs_total"));
    let done = number(&dom, "done");
    assert!(
        (u(&before, "jobs_done")..=u(&after, "jobs_done")).contains(&done),
        "page shows {done} done, status {} then {}",
        before["jobs_done"],
        after["jobs_done"]
    );
    assert!(done > 0 && done < u(&before, "jobs_total"), "mid-run");
    assert_eq!(number(&dom, "held"), u(&before, "jobs_held"));
    assert_eq!(number(&dom, "failed"), u(&before, "jobs_failed"));
    assert_eq!(text_of(&dom, "state"), "running");
    assert_eq!(text_of(&dom, "fp"), before["fingerprint"].as_str().unwrap());
    let workers = before["workers"].as_array().unwrap();
    assert_eq!(number(&dom, "wn"), workers.len() as u64);
    for w in workers {
        // Shown as text: escaped in the serialized DOM, never as an element.
        let name = w["name"].as_str().unwrap();
        assert!(
            dom.contains(&format!(
                "<td>{}</td>",
                escape_html(name).replace("&#39;", "'").replace("&quot;", "\"")
            )),
            "{name} in {dom}"
        );
    }
    assert!(!dom.contains("<i>"), "a worker name became markup:\n{dom}");
    let line = dom.split("<polyline id=\"pr\"").nth(1).and_then(|l| l.split('>').next());
    let points = line.and_then(|l| l.split("points=\"").nth(1)).unwrap_or_default();
    assert!(points.contains(','), "the results/s line has points: {dom}");
}

/// A screenshot of the page, a real PNG, for a person to look at.
fn a_screenshot_of_the_page_is_written(chromium: &Path, url: &str) {
    let shot = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("status-page.png");
    let _ = std::fs::remove_file(&shot);
    run_chromium(chromium, url, &[format!("--screenshot={}", shot.display())]);
    let png = std::fs::read(&shot).expect("the screenshot was written");
    assert!(png.starts_with(b"\x89PNG\r\n\x1a\n") && png.len() > 10_000, "{} bytes", png.len());
    println!("status page screenshot: {} ({} bytes)", shot.display(), png.len());
    eprintln!("status page screenshot: {} ({} bytes)", shot.display(), png.len());
}

/// The figures `status --connect` and `status --state` both show and that do not move with the
/// clock: equal on a finished run. (Rates, quiet and last-seen times are read at two moments;
/// a worker's trust and lease size of the moment are known only to the live coordinator.)
fn same_figures(live: &Value, offline: &Value) {
    let run = [
        "n",
        "fingerprint",
        "jobs_total",
        "jobs_done",
        "jobs_pending",
        "jobs_leased",
        "jobs_held",
        "jobs_failed",
        "percent_done",
        "complete",
        "conflicts",
        "partial_total",
        "partial_sym180",
        "partial_sym90",
        "nodes",
        "evidence",
        "result",
        "untrusted_workers",
        "bad_rows",
    ];
    for key in run {
        assert_eq!(live[key], offline[key], "{key}: live {live}\noffline {offline}");
    }
    let by_id = |v: &Value| -> std::collections::BTreeMap<u64, Value> {
        v["workers"].as_array().unwrap().iter().map(|w| (u(w, "worker_id"), w.clone())).collect()
    };
    let (live_workers, offline_workers) = (by_id(live), by_id(offline));
    assert_eq!(live_workers.len(), 2, "{live}");
    assert_eq!(live_workers.keys().collect::<Vec<_>>(), offline_workers.keys().collect::<Vec<_>>());
    for (id, w) in &live_workers {
        let o = &offline_workers[id];
        let same =
            ["name", "host", "slots", "version", "credential", "device", "results", "conflicts"];
        for key in same {
            assert_eq!(w[key], o[key], "worker {id} {key}: live {w}\noffline {o}");
        }
        for key in ["jobs_leased", "untrusted"] {
            assert_eq!(w[key], o[key], "worker {id} {key}: live {w}\noffline {o}");
        }
    }
    let groups = |v: &Value, by: &str| {
        v["fleet"][by]
            .as_array()
            .unwrap()
            .iter()
            .map(|g| (g["key"].clone(), g["workers"].clone(), g["results"].clone()))
            .collect::<Vec<_>>()
    };
    for by in ["by_state", "by_device", "by_version", "by_credential"] {
        assert_eq!(
            groups(live, by),
            groups(offline, by),
            "fleet {by}: live {live}\noffline {offline}"
        );
    }
}

/// A finished run: offline and live status agree, and the page shows what the total rests on,
/// the symmetry classes and the export digest, beside a rate chart with labelled axes.
#[test]
fn a_finished_runs_page_shows_what_the_total_rests_on_and_status_agrees_offline() {
    let dir = RunDir::new();
    let state = dir.path().join("done.db");
    let (port, http) = (dir.port(), free_port());
    let serve = dir.coordinator(13).state(&state).http_port(http).verify_fraction("0.05");
    let _coordinator = serve.start();
    let _workers: Vec<Proc> = ["one", "two"].iter().map(|name| dir.worker(name).start()).collect();
    let result = nqueens_coordinator::result_file(&state);
    wait_until(Duration::from_secs(120), "the run finished", || result.exists());
    std::thread::sleep(Duration::from_secs(1));
    let live = status(port);
    let out = coordinator_output([
        "status".to_string(),
        "--state".into(),
        state.display().to_string(),
        "--json".into(),
    ]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let offline: Value = serde_json::from_slice(&out.stdout).unwrap();
    same_figures(&live, &offline);
    let record = &live["result"];
    let digest = record["export_sha256"].as_str().expect("the digest").to_owned();
    assert_eq!(read_result_file(&result).export_sha256.as_deref(), Some(digest.as_str()));

    // Without script: the page as served holds the same.
    let (_, html) = get(http, "/");
    assert!(html.contains(&format!("export_sha256 {digest}")), "{html}");
    assert!(html.contains("rests on: "), "{html}");
    the_published_values_match(&state, &result, &live, http, &html);

    let Some(chromium) = chromium() else {
        assert!(std::env::var_os("CI").is_none(), "chromium not found, and CI is set");
        eprintln!("skipped: chromium not found");
        return;
    };
    let dom = run_chromium(&chromium, &format!("http://127.0.0.1:{http}/"), &["--dump-dom".into()]);
    let classes = text_of(&dom, "r_classes");
    for key in ["count2", "count4", "count8"] {
        let value = record[key].as_u64().unwrap();
        assert!(
            classes.contains(&format!("{} {}", key.to_uppercase(), fmt_thousands(value))),
            "{classes}"
        );
    }
    let e = &record["evidence"];
    let evidence = text_of(&dom, "r_evidence");
    assert!(
        evidence.contains(&format!(
            "{} jobs on independent answers",
            fmt_thousands(u(e, "jobs_independent"))
        )) && evidence.contains(&format!(
            "{} on one credential's word",
            fmt_thousands(u(e, "jobs_one_party"))
        )),
        "{evidence}"
    );
    assert_eq!(text_of(&dom, "r_digest"), format!("export_sha256 {digest}"));
    assert_eq!(text_of(&dom, "r_published"), MATCHED);
    let ticks = dom.split("id=\"ticks\"").nth(1).unwrap_or_default();
    for label in ["now", "results/s", "nodes/s", "time before now"] {
        assert!(dom.contains(&format!(">{label}<")), "the chart's axes name {label}: {ticks}");
    }
}

/// What a finished run of a board with every figure published was checked against.
const MATCHED: &str = "Total, Unique, COUNT2, COUNT4, COUNT8 match the published values";

/// The result file, `status` (text, `--connect --json`), `/status.json` and the page as served
/// (`html`) all say that the finished run's figures match the published values.
fn the_published_values_match(state: &Path, result: &Path, live: &Value, http: u16, html: &str) {
    let written = read_result_file(result).published;
    assert_eq!((written.summary.as_str(), written.compared.len()), (MATCHED, 5));
    assert_eq!(live["result"]["published"]["summary"], MATCHED, "{live}");
    assert_eq!(live["result"]["published"]["outcome"], "match", "{live}");
    let (_, json) = get(http, "/status.json");
    let page: Value = serde_json::from_str(&json).unwrap();
    assert_eq!(page["result"]["published"]["summary"], MATCHED, "{json}");
    let out =
        coordinator_output(["status".to_string(), "--state".into(), state.display().to_string()]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains(&format!("\nchecked  {MATCHED}\n")), "{text}");
    assert!(html.contains(MATCHED), "{html}");
}

/// `n` with thousands separators, as the page's script writes numbers.
fn fmt_thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}
