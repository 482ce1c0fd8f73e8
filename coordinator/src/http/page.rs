//! The status page: one self-contained HTML document (inline CSS and script, no external asset),
//! rendered with the data of its first moment so that it reads right without script, then kept
//! current by its script polling `status.json`.
//!
//! Worker names and hosts are chosen by the workers: everything put into the page here goes
//! through [`escape_html`], and the script only ever sets text, never markup. Both show control,
//! format and separator characters (a state file written before they were refused may hold some)
//! as visible `\u{...}` escapes, so none can reorder or hide the text around it.

use super::view::PageView;
use crate::snapshot::fleet::Fleet;
use nqueens_result::hms;
use std::fmt::Write as _;

/// The page, with `{{name}}` where [`render_page`] fills in a value.
const TEMPLATE: &str = include_str!("page.html");

/// `text` with the characters that mean something in HTML (text or quoted attribute) escaped,
/// and those that would be hidden or reorder the text around them shown as `\u{...}`
/// (`nqueens_proto::bounds::shown`).
pub fn escape_html(text: &str) -> String {
    let text = nqueens_proto::bounds::shown(text);
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
fn fill(s: &PageView, key: &str) -> Fill {
    use Fill::{Markup, Text};
    let (run, p) = (&s.status.run, &s.status.run.progress);
    // A live view always has its fleet; an empty one stands in otherwise.
    let empty = Fleet::default();
    let fleet = s.status.fleet.as_ref().unwrap_or(&empty);
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
        "uptime" => Text(seconds(run.live.uptime_seconds)),
        "done" => Text(p.jobs_done.to_string()),
        "total" => Text(p.jobs_total.to_string()),
        "eta" => Text(s.eta_text.clone()),
        "pending" => Text(p.jobs_pending.to_string()),
        "leased" => Text(p.jobs_leased.to_string()),
        "held" => Text(p.jobs_held.to_string()),
        "failed" => Text(p.jobs_failed.to_string()),
        "rps" => Text(rate(p.results_per_second, 1)),
        "nps" => Text(rate(run.live.nodes_per_second, 0)),
        "live" => Text(run.live.live_workers.unwrap_or(0).to_string()),
        "conflicts" => Text(p.conflicts.to_string()),
        "disputed" => Text(run.live.disputed_jobs.unwrap_or(0).to_string()),
        "expiries" => Text(run.live.lease_expiries.unwrap_or(0).to_string()),
        "worker_count" => Text(fleet.workers.to_string()),
        "fleet" => Markup(fleet_tables(fleet)),
        "filter" => Text(fleet.filter.clone()),
        "worker_page" => Text(worker_page(fleet)),
        "paging" => Markup(paging(fleet)),
        "snapshot_seq" => Text(run.live.snapshot_seq.to_string()),
        "workers" => Markup(worker_rows(s)),
        "blocked" => Markup(blocked(s)),
        "result" => Markup(match &p.result {
            Some(r) => {
                let class = |c: Option<u128>| c.map_or("-".into(), |c| c.to_string());
                let evidence = r.evidence.as_ref().map_or(String::new(), |e| e.summary());
                format!(
                    "<h2>Result</h2><pre><div>N={} total {} unique {}</div>\
                     <div id=\"r_classes\">COUNT2 {} COUNT4 {} COUNT8 {}</div>\
                     <div>jobs {} {} s {} nodes</div>\
                     <div id=\"r_evidence\">rests on: {}</div>\
                     <div id=\"r_digest\">export_sha256 {}</div>\
                     <div id=\"r_published\">{}</div></pre>",
                    r.n,
                    r.total,
                    r.unique,
                    class(r.count2),
                    class(r.count4),
                    class(r.count8),
                    r.jobs,
                    r.seconds,
                    r.nodes,
                    escape_html(&evidence),
                    escape_html(r.export_sha256.as_deref().unwrap_or("-")),
                    escape_html(&r.published.summary)
                )
            }
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

/// The fleet by state, device, version and credential: a small table each.
fn fleet_tables(fleet: &Fleet) -> String {
    let mut out = String::from("<div class=\"fleet\">");
    let kinds = [
        ("state", &fleet.by_state),
        ("device", &fleet.by_device),
        ("version", &fleet.by_version),
        ("credential", &fleet.by_credential),
    ];
    for (kind, groups) in kinds {
        let _ = write!(
            out,
            "<table><tr><th>{kind}</th><th>workers</th><th>slots</th><th>leased</th><th>results/s</th></tr>"
        );
        for g in groups {
            let bad = matches!(g.key.as_str(), "untrusted" | "conflicts");
            let _ = write!(
                out,
                "<tr{}><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                if bad { " class=\"bad\"" } else { "" },
                escape_html(if g.key.is_empty() { "-" } else { &g.key }),
                g.workers,
                g.slots,
                g.jobs_leased,
                rate(Some(g.results_per_second), 1)
            );
        }
        out.push_str("</table>");
    }
    out.push_str("</div>");
    out
}

/// Which workers the table holds, in words.
fn worker_page(fleet: &Fleet) -> String {
    let matching = if fleet.filter.is_empty() { "" } else { " matching" };
    if fleet.matching == 0 {
        return format!("no worker{}", if fleet.filter.is_empty() { "" } else { " matches" });
    }
    let last = (fleet.offset + fleet.limit).min(fleet.matching);
    format!("workers {}–{last} of {}{matching}", fleet.offset + 1, fleet.matching)
}

/// The links to the previous and next page of workers (hidden where there is none); the page's
/// script sets them again with the page's whole query (its token too).
fn paging(fleet: &Fleet) -> String {
    let link = |id: &str, text: &str, offset: u64, show: bool| {
        let href = format!(
            "?workers_offset={offset}&workers_limit={}&workers_filter={}",
            fleet.limit,
            percent_encoded(&fleet.filter)
        );
        let hidden = if show { "" } else { " style=\"visibility:hidden\"" };
        format!("<a id=\"{id}\" href=\"{}\"{hidden}>{text}</a>", escape_html(&href))
    };
    let next = fleet.offset + fleet.limit;
    format!(
        "{} {}",
        link("wprev", "previous", fleet.offset.saturating_sub(fleet.limit), fleet.offset > 0),
        link("wnext", "next", next, next < fleet.matching)
    )
}

/// `text` for a query string: everything but letters, digits and `-._~` as `%XX`.
fn percent_encoded(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(b as char);
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
    out
}

fn worker_rows(s: &PageView) -> String {
    let mut out = String::new();
    for v in s.status.workers.iter() {
        let name = format!("{}{}", v.name, if v.untrusted { " (untrusted)" } else { "" });
        let _ = write!(
            out,
            "<tr{}><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{} ago</td><td>{}</td></tr>",
            if v.untrusted || v.conflicts > 0 { " class=\"bad\"" } else { "" },
            v.worker_id,
            escape_html(&name),
            escape_html(&v.host),
            v.slots,
            v.results,
            rate(Some(v.results_per_second), 2),
            v.jobs_leased,
            escape_html(&v.trust),
            v.lease_size,
            seconds(Some(v.last_seen_seconds_ago)),
            v.conflicts
        );
    }
    out
}

fn blocked(s: &PageView) -> String {
    let mut out = String::new();
    let lists = [
        (
            s.status.run.progress.jobs_held,
            &s.held_jobs,
            &s.requeue_held,
            "held (results kept disagreeing)",
        ),
        (
            s.status.run.progress.jobs_failed,
            &s.failed_jobs,
            &s.requeue_failed,
            "failed (solver errors)",
        ),
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
pub fn render_page(status: &PageView) -> String {
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
    use super::super::view::PageDetails;
    use super::*;
    use crate::snapshot::{Progress, RunName, RunSnapshot, WorkerView};
    use crate::status::{Origin, RowFigures, StatusView};
    use nqueens_scheduler::JobState::{Done, Held, Leased, Pending};
    use nqueens_scheduler::JobsByState;

    fn status_with_worker(name: &str, host: &str) -> PageView {
        let mut jobs = JobsByState::default();
        for (state, count) in [(Pending, 50), (Leased, 8), (Done, 40), (Held, 2)] {
            jobs.add(state, count);
        }
        let name_of_run = RunName { n: 17, fingerprint: "n17-abc-p1" };
        let mut run =
            RunSnapshot::with_progress(Progress::new(name_of_run, &jobs, Some(1.5), 1.0, 3, None));
        run.live.nodes_per_second = Some(2.0e9);
        run.live.uptime_seconds = Some(27.0);
        run.live.live_workers = Some(1);
        let workers: std::sync::Arc<[WorkerView]> = vec![WorkerView {
            worker_id: 7,
            name: name.into(),
            host: host.into(),
            slots: 2,
            version: "0.1.0".into(),
            results: 40,
            conflicts: 0,
            jobs_leased: 8,
            last_seen_seconds_ago: 1.0,
            untrusted: false,
            credential: "shared".into(),
            device: "cpu (2 threads)".into(),
            results_per_second: 1.5,
            trust: "trusted".into(),
            lease_size: 64,
        }]
        .into();
        let (fleet, _) = crate::snapshot::fleet::select(&workers, &Default::default());
        let rows = RowFigures::live_unread();
        let status = StatusView::new(run, rows, Some(fleet), workers, Origin::Coordinator(""));
        let details = PageDetails {
            state_file: "/data/run <17>.db".into(),
            blocked: nqueens_store::BlockedJobs { held: vec![3, 9], failed: vec![] },
            history: vec![],
            rows_error: None,
        };
        let page = PageView::new(status, details);
        let held = "nqueens-coordinator requeue --state '/data/run <17>.db' --held";
        assert_eq!((page.requeue_held.as_deref(), &page.requeue_failed), (Some(held), &None));
        page
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

    /// A name from an old state file with a right-to-left override, zero-width and separator
    /// characters shows them as escapes: none is in the page raw, and the page's script makes
    /// what it sets visible the same way.
    #[test]
    fn unshown_characters_in_names_are_made_visible_in_the_page() {
        let page = render_page(&status_with_worker("evil\u{202e}gpj.exe\u{200b}", "h\u{2028}x"));
        assert!(!page.chars().any(|c| nqueens_proto::bounds::is_unshown(c) && c != '\n'));
        assert!(
            page.contains(r"<td>evil\u{202e}gpj.exe\u{200b}</td><td>h\u{2028}x</td>"),
            "{page}"
        );
        assert!(page.contains(r"\p{Cc}\p{Cf}\p{Zl}\p{Zp}"), "the script escapes the same classes");
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

    /// A large fleet: the page holds the aggregate tables and one page of rows, with a link on.
    #[test]
    fn a_large_fleet_is_shown_in_aggregate_and_one_page_of_rows() {
        let mut status = status_with_worker("alpha", "node1");
        let one = status.status.workers[0].clone();
        let workers: Vec<WorkerView> = (1..=2_500)
            .map(|i| WorkerView { worker_id: i, name: format!("w{i}"), ..one.clone() })
            .collect();
        let query =
            crate::snapshot::fleet::WorkerQuery { offset: 100, limit: 100, filter: "w1 <".into() };
        let (fleet, page) = crate::snapshot::fleet::select(&workers, &query);
        assert_eq!(fleet.matching, 0);
        assert!(page.is_empty());
        let (fleet, page) = crate::snapshot::fleet::select(&workers, &Default::default());
        (status.status.fleet, status.status.workers) = (Some(fleet), page.into());
        let html = render_page(&status);
        assert_eq!(html.matches("<tr><td>").count() - 4, 100, "100 worker rows, 4 group rows");
        assert!(html.contains("<span id=\"wn\">2500</span>"), "{html}");
        assert!(html.contains("workers 1–100 of 2500"), "{html}");
        assert!(html.contains("<td>working</td><td>2500</td><td>5000</td>"), "{html}");
        assert!(
            html.contains("<a id=\"wnext\" href=\"?workers_offset=100&amp;workers_limit=100&amp;workers_filter=\">"),
            "{html}"
        );
        assert!(html.contains("<a id=\"wprev\" href=\"?workers_offset=0&amp;workers_limit=100&amp;workers_filter=\" style=\"visibility:hidden\">"));
        assert!(html.len() < 64 * 1024, "{} bytes", html.len());
        assert_eq!(percent_encoded("w1 <&é"), "w1%20%3C%26%C3%A9");
    }
}
