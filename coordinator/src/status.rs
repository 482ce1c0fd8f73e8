//! What `status` prints: a [`StatusView`] of the run's [`RunSnapshot`] (the engine's latest,
//! asked of a live coordinator, or one built offline from a state file) with the partial totals
//! summed from the committed rows, as text or as one JSON object.

use crate::snapshot::fleet::{self, Fleet, Group, WorkerQuery};
use crate::snapshot::RunSnapshot;
use nqueens_core::Tally;
use nqueens_proto::bounds::shown;
use nqueens_store::{BlockedJobs, Evidence, Store, StoreError};
use parking_lot::Mutex;
use serde::Serialize;
use std::fmt::{self, Write as _};
use std::path::{Path, PathBuf};

/// Read-only connections to the state file: one sums committed rows for the status call, one
/// lists the held and failed jobs for the page (so that the page never waits seconds behind a
/// sum over a million rows), and the engine thread (which alone writes, and answers leases and
/// results) does neither.
pub struct StatusReader {
    path: PathBuf,
    sums_store: Mutex<Option<Store>>,
    lists_store: Mutex<Option<Store>>,
    /// When the sums may be read again, and the sums as last read (see
    /// [`StatusReader::keep_sums_current`]).
    recent: Mutex<Option<(std::time::Instant, Sums)>>,
}

/// How old the sums a live status call shows may be before they are read again: summing checks
/// every result row's checksum, which takes time in proportion to the run's jobs (a third of a
/// second for 180,000 on a 2-vCPU VM), so it is done at most this often however often status is
/// asked, never while a caller waits but for the first time, and not at all while the file does
/// not change (a finished run).
pub const SUMS_MAX_AGE: std::time::Duration = std::time::Duration::from_secs(5);

/// The most of one core that summing for status may take: a read that took `t` is not made
/// again before `t / SUMS_SHARE` (a run of millions of jobs takes seconds to sum, and polling
/// status must not take a core from the engine).
pub const SUMS_SHARE: f64 = 0.1;

/// When sums that took `took` to read, read at `read_at`, may be read again.
fn next_sums_read(read_at: std::time::Instant, took: std::time::Duration) -> std::time::Instant {
    read_at + SUMS_MAX_AGE.max(took.div_f64(SUMS_SHARE))
}

/// What [`StatusReader::sums`] found in the committed rows.
#[derive(Debug, Clone)]
pub struct Sums {
    pub tally: Tally,
    /// Result rows whose checksum fails: damaged or edited, never counted.
    pub bad_rows: u64,
    /// What the counted answers rest on so far.
    pub evidence: Evidence,
}

impl StatusReader {
    /// A reader of the state file at `path`, opened on first use.
    pub fn new(path: PathBuf) -> Self {
        StatusReader {
            path,
            sums_store: Mutex::new(None),
            lists_store: Mutex::new(None),
            recent: Mutex::new(None),
        }
    }

    /// Keeps the sums current off every caller, in a thread named `status-sums`: reads them now,
    /// then again whenever they are due and the file changed since the last read (SQLite's
    /// `data_version`), so that a status call never shows sums older than their due time plus
    /// half a second, and a finished run is not summed again. The thread ends with the last
    /// holder of the reader.
    pub fn keep_sums_current(self: &std::sync::Arc<Self>) {
        let weak = std::sync::Arc::downgrade(self);
        let refresh = move || {
            let mut version = None;
            while let Some(reader) = weak.upgrade() {
                let due = reader.recent.lock().as_ref().map(|(due, _)| *due);
                if due.is_none_or(|d| std::time::Instant::now() >= d) {
                    let now = reader.with_store(&reader.sums_store, |s| s.data_version());
                    let first = version.is_none();
                    let read = match now {
                        Ok(v) if due.is_some() && Some(v) == version => Ok(()),
                        Ok(v) => {
                            version = Some(v);
                            reader.read_sums().map(drop)
                        }
                        Err(e) => Err(e),
                    };
                    // The page's connection is opened once, with the first read, off every
                    // caller; the lists themselves are read when the page asks.
                    let warm = |_| if first { reader.blocked(0).map(drop) } else { Ok(()) };
                    if let Err(e) = read.and_then(warm) {
                        tracing::warn!(error = %e, "status: cannot read the state file");
                    }
                }
                drop(reader);
                std::thread::sleep(std::time::Duration::from_millis(500));
            }
        };
        if let Err(e) = std::thread::Builder::new().name("status-sums".into()).spawn(refresh) {
            tracing::warn!(error = %e, "status: cannot start the thread that sums the rows");
        }
    }

    /// Reads the sums now and keeps them with their due time. Blocking.
    pub fn read_sums(&self) -> Result<Sums, StoreError> {
        let started = std::time::Instant::now();
        let sums = self.sums()?;
        *self.recent.lock() = Some((next_sums_read(started, started.elapsed()), sums.clone()));
        Ok(sums)
    }

    /// The sums as last read, or, before the first read, that read: the one in flight (which
    /// holds the connection) or one made now. Blocking only before the first read.
    pub fn first_sums(&self) -> Result<Sums, StoreError> {
        if let Some(sums) = self.cached_sums() {
            return Ok(sums);
        }
        drop(self.sums_store.lock());
        match self.cached_sums() {
            Some(sums) => Ok(sums),
            None => self.read_sums(),
        }
    }

    /// The sums as last read, without blocking (`None` before the first read).
    pub fn cached_sums(&self) -> Option<Sums> {
        self.recent.lock().as_ref().map(|(_, sums)| sums.clone())
    }

    /// Runs `read` on the connection in `store`, opening it first if need be. Blocking.
    fn with_store<T>(
        &self,
        store: &Mutex<Option<Store>>,
        read: impl FnOnce(&Store) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        let mut guard = store.lock();
        let store = match &mut *guard {
            Some(store) => store,
            // The engine's writer checked the file when it opened it.
            empty => empty.insert(Store::open_beside_writer(&self.path)?),
        };
        read(store)
    }

    /// The weighted sums of the counted rows, and what they rest on. Blocking.
    pub fn sums(&self) -> Result<Sums, StoreError> {
        self.with_store(&self.sums_store, |store| {
            let (tally, bad_rows, evidence) = store.tally_and_evidence()?;
            Ok(Sums { tally, bad_rows, evidence })
        })
    }

    /// The first `limit` held and failed jobs, for the status page. Blocking.
    pub fn blocked(&self, limit: usize) -> Result<BlockedJobs, StoreError> {
        self.with_store(&self.lists_store, |store| store.blocked_jobs(limit))
    }
}

/// Where a status was read: a state file on disk, or a live coordinator at a URL. Written as the
/// path or the URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// Read offline from the state file at this path.
    StateFile(PathBuf),
    /// Asked of the live coordinator at this URL.
    Coordinator(String),
}

impl Source {
    /// The state file, when the status was read from one.
    pub fn state_file(&self) -> Option<&Path> {
        match self {
            Source::StateFile(path) => Some(path),
            Source::Coordinator(_) => None,
        }
    }
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Source::StateFile(path) => write!(f, "{}", path.display()),
            Source::Coordinator(url) => f.write_str(url),
        }
    }
}

impl Serialize for Source {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

/// A run's status as `status` shows it, live or from a state file: the run's [`RunSnapshot`] and
/// the partial totals of its committed rows.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StatusView {
    /// The run at the moment shown.
    #[serde(flatten)]
    pub run: RunSnapshot,
    /// Where this status was read.
    pub source: Source,
    /// Sum of weight x solutions over the committed results (128-bit: a JSON integer, exact).
    pub partial_total: u128,
    /// Sum of weight x sym180 over the committed results: solutions fixed by a 180-degree turn.
    pub partial_sym180: u128,
    /// Sum of weight x sym90 over the committed results: solutions fixed by a 90-degree turn.
    pub partial_sym90: u128,
    /// Search nodes of the committed results (not weighted).
    pub nodes: u64,
    /// What the counted answers rest on so far (the result's own once complete).
    pub evidence: Option<Evidence>,
    /// Every worker in aggregate, when `run.workers` is a page of them (see [`fleet`]).
    pub fleet: Option<Fleet>,
}

/// What `status` prints: the [`StatusView`], and what the rows themselves tell: result rows whose
/// checksum fails (`bad_rows`; never counted) and whether the rows carry checksums at all
/// (`checksums`; false for a schema 1 file not yet opened for writing). Read offline from a state
/// file ([`StatusReport::read`]) or asked of a live coordinator, whose status reader checks every
/// row as it sums them.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StatusReport {
    /// The run's status.
    #[serde(flatten)]
    pub view: StatusView,
    /// Result rows whose checksum fails: never counted.
    pub bad_rows: u64,
    /// Whether the rows carry checksums (false for a schema 1 file not yet opened for writing).
    pub checksums: bool,
}

impl StatusReport {
    /// `status --state`: reads the state file at `path`, listing the workers `query` asks for.
    pub fn read(path: &Path, query: &WorkerQuery) -> Result<StatusReport, StoreError> {
        let store = Store::open_to_show(path)?;
        let (summary, evidence) = store.summary_and_evidence()?;
        let mut view = StatusView::offline(&store, &summary, path)?;
        view.evidence = Some(evidence);
        view.show_workers(&fleet::FleetIndex::new(view.run.workers.clone()), query);
        Ok(StatusReport { bad_rows: summary.bad_rows, checksums: store.has_checksums(), view })
    }

    /// One JSON object: the view's fields, `bad_rows` and `checksums`.
    pub fn json(&self) -> String {
        serde_json::to_string(self).expect("status serializes")
    }

    /// The human-readable report.
    pub fn text(&self) -> String {
        let mut o = self.view.text();
        let file = self.view.state_file_word();
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
        o
    }
}

impl StatusView {
    /// Offline, from the committed rows (and their `summary`) of the state file at `path`.
    fn offline(
        store: &Store,
        s: &nqueens_store::Summary,
        path: &Path,
    ) -> Result<StatusView, StoreError> {
        Ok(StatusView {
            run: RunSnapshot::from_store(store, s)?,
            source: Source::StateFile(path.to_owned()),
            partial_total: s.tally.total,
            partial_sym180: s.tally.sym180,
            partial_sym90: s.tally.sym90,
            nodes: s.tally.nodes,
            evidence: None,
            fleet: None,
        })
    }

    /// Keeps of the workers the page `query` asks for, and the fleet in aggregate beside them;
    /// `index` is of this view's workers.
    pub fn show_workers(&mut self, index: &fleet::FleetIndex, query: &WorkerQuery) {
        let (fleet, page) = index.select(query);
        self.run.workers = page.into();
        self.fleet = Some(fleet);
    }

    /// The state file as one shell word for the commands `status` suggests, or `<FILE>` when
    /// the status came from a live coordinator (whose file is on its own host).
    fn state_file_word(&self) -> String {
        self.source.state_file().map_or("<FILE>".into(), |p| shell_word(&p.display().to_string()))
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
                let shown_to = f.offset + self.run.workers.len() as u64;
                let _ = writeln!(
                    o,
                    "  listed {}-{} of {}{filter}, those needing attention first (untrusted, in conflicts, the slowest); --workers-offset, --workers-limit and --workers-filter pick others",
                    (f.offset + 1).min(shown_to),
                    shown_to,
                    f.matching,
                );
            }
            Some(_) => {}
            None if self.run.workers.is_empty() => {}
            None => {
                let _ = writeln!(o, "workers  {}", self.run.workers.len());
            }
        }
        for w in self.run.workers.iter() {
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
                        w.counted_per_second,
                        shown(&w.trust),
                        w.lease_size
                    )
                },
                if w.untrusted { "  UNTRUSTED" } else { "" }
            );
        }
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
            self.run.lease_expiries.map_or(String::new(), |e| format!(", {e} lease expiries"))
        );
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
            }
            None => {
                let _ = writeln!(o, "result   not complete yet");
            }
        }
        o
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
    use crate::snapshot::{eta, Eta, Progress, RunName};
    use nqueens_scheduler::state::{JobState, JobsByState};

    /// Synthetic counted rows (valid per-job counts, valid checksums) whose weighted sum passes
    /// 2^64: `status --state --json` writes every digit (the store's own test checks the sums).
    #[test]
    fn sums_past_u64_are_written_exactly() {
        use nqueens_core::{job_list, JobCounts, SplitParams};
        use nqueens_scheduler::state::ResultKind;
        use nqueens_scheduler::Change;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("wide.db");
        let list = job_list(9, &SplitParams::default()).unwrap();
        let mut store = Store::open_or_create(
            &path,
            &list,
            nqueens_proto::PROTOCOL_MAJOR,
            nqueens_store::RunPolicy::default(),
            nqueens_store::RunKind::Local,
        )
        .unwrap();
        let base = 1u64 << 61;
        // Per weight, counts that keep the symmetry identities of the weighted sums.
        let counts_of = |weight: u8, id: u64| match weight {
            8 => JobCounts { solutions: base + id, sym180: 0, sym90: 0, nodes: 1 },
            4 => JobCounts { solutions: base + 2 * id, sym180: 2, sym90: 0, nodes: 1 },
            _ => JobCounts { solutions: base + 4 * id + 8, sym180: 4, sym90: 2, nodes: 1 },
        };
        let mut total = 0u128;
        let mut changes = Vec::new();
        for job in &list.jobs {
            let counts = counts_of(job.weight, job.id.get());
            total += u128::from(job.weight) * u128::from(counts.solutions);
            changes.push(Change::Result {
                job_id: job.id,
                worker_id: 1.into(),
                credential: nqueens_scheduler::SHARED_CREDENTIAL,
                lease_id: 1.into(),
                counts,
                seconds: 0.0,
                counted: true,
                kind: ResultKind::First,
            });
            changes.push(Change::JobState {
                job_id: job.id,
                state: JobState::Done,
                lease_id: None,
                worker_id: None,
                errors: 0,
                conflicts: 0,
            });
        }
        store.apply(&changes, &[]).unwrap();
        assert!(total > u128::from(u64::MAX) * 2, "the rows must add up past 2^64: {total}");
        let classes = store.final_tally(&store.tally().unwrap()).exact().unwrap().classes;
        drop(store);

        let status = StatusReport::read(&path, &WorkerQuery::default()).unwrap();
        assert_eq!(status.view.partial_total, total);
        let json = status.json();
        assert!(json.contains(&format!("\"partial_total\":{total},")), "{json}");
        let record = status.view.run.progress.result.as_ref().expect("complete");
        assert_eq!((record.total, record.count8), (total, Some(classes.unwrap().count8)));
        assert!(json.contains(&format!("\"total\":{total},")), "{json}");
    }

    #[test]
    fn eta_at_the_measured_rate() {
        // 100 jobs left at 10 jobs/s, 50 of them pending: 10 s.
        assert_eq!(eta(100, 50, 50, Some(10.0), 0.5), Eta::In(10.0));
        // Jobs still pending: the rate holds even after a quiet spell.
        assert_eq!(eta(100, 1, 99, Some(10.0), 60.0), Eta::In(10.0));
        assert_eq!(eta(0, 0, 0, Some(10.0), 60.0), Eta::In(0.0));
        assert_eq!(eta(0, 0, 0, None, 0.0), Eta::In(0.0));
    }

    #[test]
    fn eta_unknown_without_a_rate() {
        assert_eq!(eta(100, 100, 0, None, 5.0), Eta::Unknown);
        assert_eq!(eta(100, 60, 40, Some(0.0), 5.0), Eta::Unknown);
    }

    #[test]
    fn eta_waits_on_leases_when_nothing_arrives() {
        // The last 2 jobs are leased to a worker that is gone: at 10 jobs/s they were due after
        // 0.2 s, 30 s have passed. Not "00:00:00.200": waiting on 2 leases.
        let e = eta(2, 0, 2, Some(10.0), 30.0);
        assert_eq!(e, Eta::WaitingOnLeases(2));
        assert_eq!(e.seconds(), None);
        assert_eq!(e.waiting_on(), 2);
        // Right after a restart: no rate yet, every job left is leased (a stored lease).
        assert_eq!(eta(5, 0, 5, None, 1.0), Eta::WaitingOnLeases(5));
        // All leased but results still arriving in time: the rate holds.
        assert_eq!(eta(20, 0, 20, Some(10.0), 0.5), Eta::In(2.0));
        // A held job is not leased: the run is blocked, not waiting on leases.
        assert_eq!(eta(3, 0, 2, Some(10.0), 30.0), Eta::In(0.3));
    }

    /// `run` as a live coordinator's status shows it, with nothing summed yet.
    fn live_view(run: RunSnapshot) -> StatusView {
        StatusView {
            run,
            source: Source::Coordinator("http://x:7447".into()),
            partial_total: 0,
            partial_sym180: 0,
            partial_sym90: 0,
            nodes: 0,
            evidence: None,
            fleet: None,
        }
    }

    #[test]
    fn eta_text_names_the_leases() {
        let mut jobs = JobsByState::default();
        jobs.add(JobState::Leased, 2);
        jobs.add(JobState::Done, 8);
        let name = RunName { n: 12, fingerprint: "f" };
        let mut run =
            RunSnapshot::with_progress(Progress::new(name, &jobs, Some(10.0), 30.0, 0, None));
        run.leases_expire_in_seconds = Some(42.4);
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

    /// Names from an old state file with bidirectional, zero-width or line-breaking characters
    /// are printed with each one made visible, on the worker's own line.
    #[test]
    fn worker_strings_are_never_printed_raw() {
        let jobs = JobsByState::default();
        let name = RunName { n: 12, fingerprint: "f" };
        let mut run = RunSnapshot::with_progress(Progress::new(name, &jobs, None, 0.0, 0, None));
        run.workers = std::sync::Arc::from([crate::snapshot::WorkerView {
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
            counted_per_second: 0.0,
            trust: "probation".into(),
            lease_size: 1,
        }]);
        let v = live_view(run);
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
        run.workers = (1..=250)
            .map(|i| crate::snapshot::WorkerView {
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
                counted_per_second: i as f64,
                trust: "trusted".into(),
                lease_size: 4,
            })
            .collect();
        let mut v = live_view(run);
        let index = fleet::FleetIndex::new(v.run.workers.clone());
        v.show_workers(&index, &WorkerQuery::new(0, 20, ""));
        let text = v.text();
        assert!(text.contains("workers  250 by state: untrusted 1, working 249"), "{text}");
        assert!(text.contains("by credential: site-a 125, site\\u{202e}b 125"), "{text}");
        assert!(text.contains("listed 1-20 of 250,"), "{text}");
        let rows: Vec<&str> = text.lines().filter(|l| l.starts_with("  #")).collect();
        assert_eq!(rows.len(), 20, "{text}");
        assert!(rows[0].starts_with("  #200 "), "the untrusted one first: {text}");
        v.run.workers = index.workers().clone();
        v.show_workers(&index, &WorkerQuery::new(5, 10, "site-a"));
        let text = v.text();
        assert!(text.contains("listed 6-15 of 125 matching \"site-a\""), "{text}");
    }

    /// A quick sum is read again after 5 s; one that took seconds only after ten times as long,
    /// so that summing never takes more than a tenth of a core.
    #[test]
    fn sums_that_take_long_are_read_again_less_often() {
        let at = std::time::Instant::now();
        let after = |took: f64| {
            (super::next_sums_read(at, std::time::Duration::from_secs_f64(took)) - at).as_secs_f64()
        };
        assert_eq!(after(0.3), 5.0);
        assert!((after(2.0) - 20.0).abs() < 1e-9);
    }
}
