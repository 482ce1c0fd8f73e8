//! The status page: one self-contained HTML document (inline CSS and script, no external asset),
//! rendered with the data of its first moment so that it reads right without script, then kept
//! current by its script polling `status.json`.
//!
//! Worker names and hosts are chosen by the workers: everything put into the page here goes
//! through [`escape_html`], and the script only ever sets text, never markup.

use super::snapshot::PageStatus;
use crate::run_result::hms;
use std::fmt::Write as _;

/// The page, with `{{name}}` where [`render_page`] fills in a value.
const TEMPLATE: &str = include_str!("page.html");

/// `text` with the characters that mean something in HTML (text or quoted attribute) escaped.
pub fn escape_html(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// A value for the template: text to escape, or markup built here from escaped parts.
enum Fill {
    Text(String),
    Markup(String),
}

fn rate(r: Option<f64>, digits: usize) -> String {
    r.map_or("-".into(), |r| format!("{r:.digits$}"))
}

fn seconds(s: Option<f64>) -> String {
    s.map_or("unknown".into(), |s| hms(s).split('.').next().unwrap_or_default().to_owned())
}

/// The value of the template's `{{key}}` for `s`.
fn fill(s: &PageStatus, key: &str) -> Fill {
    use Fill::{Markup, Text};
    let p = &s.run.progress;
    match key {
        "n" => Text(p.n.to_string()),
        "percent" => Text(format!("{:.2}", p.percent_done)),
        "state" | "state_class" => {
            let (state, class) = if p.complete {
                ("complete", "ok")
            } else if p.jobs_held + p.jobs_failed > 0 {
                ("blocked", "bad")
            } else {
                ("running", "")
            };
            Text(if key == "state" { state } else { class }.into())
        }
        "fingerprint" => Text(p.fingerprint.clone()),
        "state_file" => Text(s.state_file.clone()),
        "uptime" => Text(seconds(s.run.uptime_seconds)),
        "done" => Text(p.jobs_done.to_string()),
        "total" => Text(p.jobs_total.to_string()),
        "eta" => Text(s.eta_text.clone()),
        "pending" => Text(p.jobs_pending.to_string()),
        "leased" => Text(p.jobs_leased.to_string()),
        "held" => Text(p.jobs_held.to_string()),
        "failed" => Text(p.jobs_failed.to_string()),
        "rps" => Text(rate(p.results_per_second, 1)),
        "nps" => Text(rate(s.run.nodes_per_second, 0)),
        "live" => Text(s.run.live_workers.unwrap_or(0).to_string()),
        "conflicts" => Text(p.conflicts.to_string()),
        "expiries" => Text(s.run.lease_expiries.unwrap_or(0).to_string()),
        "worker_count" => Text(s.run.workers.len().to_string()),
        "snapshot_seq" => Text(s.run.snapshot_seq.to_string()),
        "workers" => Markup(worker_rows(s)),
        "blocked" => Markup(blocked(s)),
        "result" => Markup(match &p.result {
            Some(r) => format!(
                "<h2>Result</h2><pre>N={} total {} unique {}\njobs {} {} s {} nodes</pre>",
                r.n, r.total, r.unique, r.jobs, r.seconds, r.nodes
            ),
            None => String::new(),
        }),
        "error" => Text(
            s.rows_error
                .as_ref()
                .map_or(String::new(), |e| format!("Cannot read the state file: {e}")),
        ),
        _ => Text(String::new()),
    }
}

fn worker_rows(s: &PageStatus) -> String {
    let mut out = String::new();
    for v in &s.run.workers {
        let name = format!("{}{}", v.name, if v.untrusted { " (untrusted)" } else { "" });
        let _ = write!(
            out,
            "<tr{}><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{} ago</td><td>{}</td></tr>",
            if v.untrusted || v.conflicts > 0 { " class=\"bad\"" } else { "" },
            v.worker_id,
            escape_html(&name),
            escape_html(&v.host),
            v.cores,
            v.results,
            rate(Some(v.counted_per_second), 2),
            v.jobs_leased,
            escape_html(&v.trust),
            v.lease_size,
            seconds(Some(v.last_seen_seconds_ago)),
            v.conflicts
        );
    }
    out
}

fn blocked(s: &PageStatus) -> String {
    let mut out = String::new();
    let lists = [
        (
            s.run.progress.jobs_held,
            &s.held_jobs,
            &s.requeue_held,
            "held (results kept disagreeing)",
        ),
        (s.run.progress.jobs_failed, &s.failed_jobs, &s.requeue_failed, "failed (solver errors)"),
    ];
    for (count, ids, command, why) in lists {
        let Some(command) = command else { continue };
        let ids: Vec<String> = ids.iter().map(u64::to_string).collect();
        let first = if (ids.len() as u64) < count {
            format!(" (first {})", ids.len())
        } else {
            String::new()
        };
        let _ = write!(
            out,
            "<p class=\"bad\">{count} {why}{first}: {}</p><pre>{}</pre>",
            ids.join(", "),
            escape_html(command)
        );
    }
    out.push_str(if out.is_empty() {
        "<p class=\"dim\">None.</p>"
    } else {
        "<p class=\"dim\">The run cannot complete while jobs are held or failed. Once the cause is found, stop the coordinator and run the command above, then serve the state file again.</p>"
    });
    out
}

/// The status page showing `status`.
pub fn render_page(status: &PageStatus) -> String {
    let mut out = String::with_capacity(TEMPLATE.len() + 4096);
    let mut rest = TEMPLATE;
    while let Some(start) = rest.find("{{") {
        let Some(len) = rest[start..].find("}}") else { break };
        out.push_str(&rest[..start]);
        match fill(status, &rest[start + 2..start + len]) {
            Fill::Text(text) => out.push_str(&escape_html(&text)),
            Fill::Markup(markup) => out.push_str(&markup),
        }
        rest = &rest[start + len + 2..];
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::snapshot::{Progress, RunName, RunSnapshot, WorkerView};
    use nqueens_scheduler::JobState::{Done, Held, Leased, Pending};
    use nqueens_scheduler::JobsByState;

    fn status_with_worker(name: &str, host: &str) -> PageStatus {
        let mut jobs = JobsByState::default();
        for (state, count) in [(Pending, 50), (Leased, 8), (Done, 40), (Held, 2)] {
            jobs.add(state, count);
        }
        let name_of_run = RunName { n: 17, fingerprint: "n17-abc-p1" };
        let mut run =
            RunSnapshot::with_progress(Progress::new(name_of_run, &jobs, Some(1.5), 1.0, 3, None));
        run.nodes_per_second = Some(2.0e9);
        run.uptime_seconds = Some(27.0);
        run.live_workers = Some(1);
        run.workers = vec![WorkerView {
            worker_id: 7,
            name: name.into(),
            host: host.into(),
            cores: 2,
            version: "0.1.0".into(),
            results: 40,
            conflicts: 0,
            jobs_leased: 8,
            last_seen_seconds_ago: 1.0,
            untrusted: false,
            credential: "shared".into(),
            device: "cpu (2 threads)".into(),
            counted_per_second: 1.5,
            trust: "trusted".into(),
            lease_size: 64,
        }];
        PageStatus {
            eta_text: run.eta_text(),
            run,
            state_file: "/data/run <17>.db".into(),
            held_jobs: vec![3, 9],
            failed_jobs: vec![],
            requeue_held: Some(
                "nqueens-coordinator requeue --state '/data/run <17>.db' --held".into(),
            ),
            requeue_failed: None,
            history: vec![],
            sample_seconds: 10.0,
            rows_error: None,
        }
    }

    #[test]
    fn escapes_what_could_be_markup() {
        assert_eq!(
            escape_html(r#"<a href="x">Tom & 'Jerry'</a>"#),
            "&lt;a href=&quot;x&quot;&gt;Tom &amp; &#39;Jerry&#39;&lt;/a&gt;"
        );
        assert_eq!(escape_html("plain-name_01"), "plain-name_01");
    }

    #[test]
    fn worker_names_and_hosts_are_escaped_in_the_page() {
        let evil = "<script>alert(1)</script><img src=x onerror=alert(2)>";
        let page = render_page(&status_with_worker(evil, "h\"ost<b>"));
        assert!(!page.contains("<img"), "{page}");
        assert!(!page.contains("alert(1)</script>"), "{page}");
        assert_eq!(page.matches("<script>").count(), 1, "only the page's own script");
        assert!(page
            .contains("&lt;script&gt;alert(1)&lt;/script&gt;&lt;img src=x onerror=alert(2)&gt;"));
        assert!(page.contains("h&quot;ost&lt;b&gt;"));
        // The state file (in the requeue command) is escaped too.
        assert!(
            page.contains("requeue --state &#39;/data/run &lt;17&gt;.db&#39; --held"),
            "{page}"
        );
    }

    #[test]
    fn the_page_is_filled_in_and_self_contained() {
        let page = render_page(&status_with_worker("alpha", "node1"));
        assert!(!page.contains("{{"), "every placeholder is filled");
        assert!(page.contains("N=<span id=\"n\">17</span>"));
        assert!(page.contains("<b id=\"done\">40</b> / <b id=\"total\">100</b>"));
        assert!(page.contains("<td>alpha</td><td>node1</td>"));
        assert!(page.contains("2 held (results kept disagreeing): 3, 9"));
        for external in ["http://", "https://", "//cdn", "@import", "url(", "src=\""] {
            assert!(!page.contains(external), "no external asset ({external})");
        }
        assert!(page.len() < 16 * 1024, "the page is small: {} bytes", page.len());
    }
}
