//! What `status` prints of a [`StatusView`]: its text (or one JSON object), apart from the live
//! reader that builds the view (`cache.rs`).

use super::StatusView;
use crate::snapshot::fleet::Group;
use nqueens_proto::bounds::shown;
use std::fmt::Write as _;

impl StatusView {
    /// The state file as one shell word for the commands `status` suggests, or `<FILE>` when
    /// the status came from a live coordinator (whose file is on its own host).
    fn state_file_word(&self) -> String {
        self.state_file.as_ref().map_or("<FILE>".into(), |p| shell_word(&p.display().to_string()))
    }

    /// The workers' lines: the fleet in aggregate, which of them are listed, and their rows.
    fn workers_text(&self, o: &mut String) {
        match &self.fleet {
            Some(f) if f.workers > 0 => {
                let _ =
                    writeln!(o, "workers  {} by state: {}", f.workers, groups_text(&f.by_state));
                let kinds = [
                    ("device", &f.by_device),
                    ("version", &f.by_version),
                    ("credential", &f.by_credential),
                ];
                for (kind, groups) in kinds {
                    let _ = writeln!(o, "  by {kind}: {}", groups_text(groups));
                }
                let filter = if f.filter.is_empty() {
                    String::new()
                } else {
                    format!(" matching {:?}", shown(&f.filter))
                };
                let shown_to = f.offset + self.workers.len() as u64;
                let _ = writeln!(
                    o,
                    "  listed {}-{} of {}{filter}, those needing attention first (untrusted, in conflicts, the slowest); --workers-offset, --workers-limit and --workers-filter pick others",
                    (f.offset + 1).min(shown_to),
                    shown_to,
                    f.matching,
                );
            }
            Some(_) => {}
            None if self.workers.is_empty() => {}
            None => {
                let _ = writeln!(o, "workers  {}", self.workers.len());
            }
        }
        for w in self.workers.iter() {
            let _ = writeln!(
                o,
                "  #{:<4} {:<20} {:<20} {:>3} slots  {:>8} results  {:>5} leased  {} conflicts  seen {:.0}s ago  token {}{}{}",
                w.worker_id,
                shown(&w.name),
                shown(&w.host),
                w.slots,
                w.results,
                w.jobs_leased,
                w.conflicts,
                w.last_seen_seconds_ago,
                shown(&w.credential),
                if w.device.is_empty() {
                    String::new()
                } else {
                    format!(
                        "  on {} at {:.1} results/s, {}, leases of {}",
                        shown(&w.device),
                        w.results_per_second,
                        shown(&w.trust),
                        w.lease_size
                    )
                },
                if w.untrusted { "  UNTRUSTED" } else { "" }
            );
        }
    }

    /// One JSON object: every field of the view.
    pub fn json(&self) -> String {
        serde_json::to_string(self).expect("status serializes")
    }

    /// The human-readable report. Strings workers chose are shown with every control, format or
    /// separator character made visible (`nqueens_proto::bounds::shown`): a state file written
    /// before they were refused may hold some.
    pub fn text(&self) -> String {
        let p = &self.run.progress;
        let mut o = String::new();
        let _ = writeln!(
            o,
            "run      N={} fingerprint {} ({})",
            p.n,
            shown(&p.fingerprint),
            self.source
        );
        let _ = writeln!(
            o,
            "jobs     {}/{} done ({:.2}%), {} pending, {} leased, {} held, {} failed",
            p.jobs_done,
            p.jobs_total,
            p.percent_done,
            p.jobs_pending,
            p.jobs_leased,
            p.jobs_held,
            p.jobs_failed
        );
        let rate = p.results_per_second.map_or("-".into(), |r| format!("{r:.1} jobs/s"));
        let eta = self.run.eta_text();
        let _ = writeln!(o, "rate     {rate}, ETA {eta}");
        let _ = writeln!(
            o,
            "partial  total {} (sym180 {}, sym90 {}), {} nodes",
            self.partial_total, self.partial_sym180, self.partial_sym90, self.nodes
        );
        let _ = writeln!(
            o,
            "problems {} conflicts, {} untrusted workers{}",
            p.conflicts,
            self.run.untrusted_workers,
            self.run.live.lease_expiries.map_or(String::new(), |e| format!(", {e} lease expiries"))
        );
        if let Some(d) = self.run.live.disputed_jobs.filter(|d| *d > 0) {
            let _ = writeln!(
                o,
                "disputed {d} jobs: answers of different parties disagree; each waits for the answer of a credential that has not given one (or the coordinator's ruling, where it rules disputes): with no such credential in the run it stalls"
            );
        }
        if p.jobs_held + p.jobs_failed > 0 {
            let file = self.state_file_word();
            let _ = writeln!(
                o,
                "blocked  the run cannot complete while jobs are held or failed: once the cause is found, stop the coordinator and run `nqueens-coordinator requeue --state {file}`"
            );
        }
        self.workers_text(&mut o);
        if let Some(e) =
            p.result.as_ref().and_then(|r| r.evidence.as_ref()).or(self.evidence.as_ref())
        {
            let _ = writeln!(o, "evidence {}", e.summary());
        }
        match &p.result {
            Some(r) => {
                let _ = writeln!(o, "RESULT   {}", r.json_line());
                let _ = writeln!(o, "checked  {}", r.published.summary);
            }
            None => {
                let _ = writeln!(o, "result   not complete yet");
            }
        }
        self.rows_text(&mut o);
        o
    }

    /// What the rows themselves tell: whether they carry checksums, and those that fail theirs.
    fn rows_text(&self, o: &mut String) {
        let file = self.state_file_word();
        let _ = if !self.checksums {
            writeln!(o, "rows     no checksums (schema 1 file; the next `serve` or `solve --state` on it adds them)")
        } else if self.bad_rows > 0 {
            writeln!(
                o,
                "rows     {} bad_rows: result rows fail their checksum (damaged or edited); they are not counted and their jobs are solved again; `verify --state {file}` lists them",
                self.bad_rows
            )
        } else {
            writeln!(o, "rows     0 bad_rows (every result row's checksum holds)")
        };
    }
}

/// Groups as `key count` pairs; keys are workers' words, made visible (`(none)` when empty).
fn groups_text(groups: &[Group]) -> String {
    let key =
        |g: &Group| if g.key.is_empty() { "(none)".into() } else { shown(&g.key).into_owned() };
    groups.iter().map(|g| format!("{} {}", key(g), g.workers)).collect::<Vec<_>>().join(", ")
}

/// `word` as one shell word: unchanged when it is plain, otherwise in single quotes.
pub fn shell_word(word: &str) -> String {
    let plain = !word.is_empty()
        && word.chars().all(|c| c.is_ascii_alphanumeric() || "/._-+:,=@%".contains(c));
    if plain {
        word.to_owned()
    } else {
        format!("'{}'", word.replace('\'', r"'\''"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::snapshot::fleet::{FleetIndex, WorkerQuery};
    use crate::snapshot::{Progress, RunName, RunSnapshot, WorkerView};
    use crate::status::{Origin, RowFigures};
    use nqueens_scheduler::state::{JobState, JobsByState};
    use std::sync::Arc;

    #[test]
    fn state_paths_are_quoted_for_the_shell() {
        assert_eq!(shell_word("/var/lib/nq/run-18.db"), "/var/lib/nq/run-18.db");
        assert_eq!(shell_word("/data/my run.db"), "'/data/my run.db'");
        assert_eq!(shell_word("/x/it's;rm -rf"), r"'/x/it'\''s;rm -rf'");
        assert_eq!(shell_word(""), "''");
    }

    /// `run` as a live coordinator's status shows it, with nothing summed yet.
    fn live_view(run: RunSnapshot) -> StatusView {
        let origin = Origin::Coordinator("http://x:7447");
        StatusView::new(run, RowFigures::live_unread(), None, Arc::from([]), origin)
    }

    #[test]
    fn eta_text_names_the_leases() {
        let mut jobs = JobsByState::default();
        jobs.add(JobState::Leased, 2);
        jobs.add(JobState::Done, 8);
        let name = RunName { n: 12, fingerprint: "f" };
        let mut run =
            RunSnapshot::with_progress(Progress::new(name, &jobs, Some(10.0), 30.0, 0, None));
        run.live.leases_expire_in_seconds = Some(42.4);
        let mut v = live_view(run);
        assert_eq!(v.run.progress.waiting_on_leases, 2);
        assert_eq!(v.run.progress.percent_done, 80.0);
        let text = v.text();
        assert!(text.contains("ETA unknown: waiting on 2 leases (expire in 42s"), "{text}");
        assert!(!text.contains("00:00:"), "{text}");
        v.run.progress = Progress::new(name, &jobs, Some(10.0), 0.1, 0, None);
        assert_eq!(v.run.progress.eta_seconds, Some(0.2));
        assert!(v.text().contains("ETA 00:00:00.200"), "{}", v.text());
    }

    /// Jobs whose answers disagree and that nothing settles yet are said, never left as
    /// "pending".
    #[test]
    fn disputed_jobs_are_said() {
        let mut jobs = JobsByState::default();
        jobs.add(JobState::Pending, 3);
        let name = RunName { n: 12, fingerprint: "f" };
        let mut run = RunSnapshot::with_progress(Progress::new(name, &jobs, None, 0.0, 0, None));
        assert!(!live_view(run.clone()).text().contains("disputed"));
        run.live.disputed_jobs = Some(2);
        let text = live_view(run).text();
        assert!(text.contains("disputed 2 jobs: answers of different parties disagree"), "{text}");
    }

    /// Names from an old state file with bidirectional, zero-width or line-breaking characters
    /// are printed with each one made visible, on the worker's own line.
    #[test]
    fn worker_strings_are_never_printed_raw() {
        let jobs = JobsByState::default();
        let name = RunName { n: 12, fingerprint: "f" };
        let run = RunSnapshot::with_progress(Progress::new(name, &jobs, None, 0.0, 0, None));
        let mut v = live_view(run);
        v.workers = Arc::from([WorkerView {
            worker_id: 3,
            name: "evil\u{202e}gpj.exe".into(),
            host: "h\u{2028}forged line".into(),
            slots: 1,
            version: "0.1.0".into(),
            results: 0,
            conflicts: 0,
            jobs_leased: 0,
            last_seen_seconds_ago: 1.0,
            untrusted: false,
            credential: "c\u{200b}".into(),
            device: "gpu\u{feff}\u{2066}".into(),
            results_per_second: 0.0,
            trust: "probation".into(),
            lease_size: 1,
        }]);
        let text = v.text();
        assert!(
            !text.chars().any(|c| nqueens_proto::bounds::is_unshown(c) && c != '\n'),
            "{text:?}"
        );
        for visible in
            [r"evil\u{202e}gpj.exe", r"h\u{2028}forged line", r"c\u{200b}", r"gpu\u{feff}\u{2066}"]
        {
            assert!(text.contains(visible), "{visible} in {text}");
        }
        assert_eq!(text.lines().filter(|l| l.contains("#3")).count(), 1, "{text}");
    }

    /// With a fleet, the text counts every worker by state, device, version and credential,
    /// says which are listed, and lists that page alone; workers' words stay visible-only.
    #[test]
    fn a_fleet_is_counted_whole_and_listed_a_page_at_a_time() {
        let jobs = JobsByState::default();
        let name = RunName { n: 12, fingerprint: "f" };
        let mut run = RunSnapshot::with_progress(Progress::new(name, &jobs, None, 0.0, 0, None));
        run.all_workers = (1..=250)
            .map(|i| WorkerView {
                worker_id: i,
                name: format!("w{i}"),
                host: format!("h{i}"),
                slots: 2,
                version: "0.1.0".into(),
                results: i,
                conflicts: 0,
                jobs_leased: 1,
                last_seen_seconds_ago: 1.0,
                untrusted: i == 200,
                credential: if i % 2 == 0 { "site-a".into() } else { "site\u{202e}b".into() },
                device: "cpu".into(),
                results_per_second: i as f64,
                trust: "trusted".into(),
                lease_size: 4,
            })
            .collect();
        let index = FleetIndex::new(run.all_workers.clone());
        let mut v = live_view(run);
        let list = |v: &mut StatusView, query: WorkerQuery| {
            let (fleet, page) = index.select(&query);
            (v.workers, v.fleet) = (page.into(), Some(fleet));
        };
        list(&mut v, WorkerQuery::new(0, 20, ""));
        let text = v.text();
        assert!(text.contains("workers  250 by state: untrusted 1, working 249"), "{text}");
        assert!(text.contains("by credential: site-a 125, site\\u{202e}b 125"), "{text}");
        assert!(text.contains("listed 1-20 of 250,"), "{text}");
        let rows: Vec<&str> = text.lines().filter(|l| l.starts_with("  #")).collect();
        assert_eq!(rows.len(), 20, "{text}");
        assert!(rows[0].starts_with("  #200 "), "the untrusted one first: {text}");
        list(&mut v, WorkerQuery::new(5, 10, "site-a"));
        let text = v.text();
        assert!(text.contains("listed 6-15 of 125 matching \"site-a\""), "{text}");
    }
}
