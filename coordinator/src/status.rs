//! What `status` prints: progress, rate, ETA, workers, partial totals and conflicts, either asked of
//! a live coordinator or read offline from a state file. One [`StatusView`] serves both, as text or
//! as one JSON object.

use crate::run_result::{hms, RunResult};
use crate::secrets::Credential;
use nqueens_core::Tally;
use nqueens_scheduler::state::{JobState, JobsByState};
use nqueens_store::{BlockedJobs, Store, StoreError, WorkerRecord};
use parking_lot::Mutex;
use serde::Serialize;
use std::fmt::{self, Write as _};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// One worker as `status` shows it.
#[derive(Debug, Clone, Serialize)]
pub struct WorkerView {
    /// Its id in the run.
    pub worker_id: u64,
    /// The name it registered with.
    pub name: String,
    /// The host it registered from.
    pub host: String,
    /// Its solver threads.
    pub cores: u32,
    /// Its version, as it registered.
    pub version: String,
    /// Its counted results (jobs).
    pub results: u64,
    /// Conflicts it was party to.
    pub conflicts: u64,
    /// Jobs leased to it now.
    pub jobs_leased: u64,
    /// Seconds since its last result (or its registration, if later).
    pub last_seen_seconds_ago: f64,
    /// It lost a settled verification (or reported too many solver errors): refused.
    pub untrusted: bool,
    /// The credential (token name) it registered with: `shared` for the `--token` secret.
    pub credential: String,
    /// What it solves on, as it registered (live coordinators only).
    pub device: String,
    /// Its counted results per second over the last lease period (live coordinators only).
    pub counted_per_second: f64,
    /// Its credential's standing: `probation`, `trusted` or `untrusted` (live coordinators only,
    /// else empty or `untrusted`).
    pub trust: String,
    /// Jobs its last lease call was sized for (live coordinators only).
    pub lease_size: u64,
}

impl From<WorkerRecord> for WorkerView {
    /// A worker as the state file records it; what only a live coordinator knows (device, rate)
    /// is left empty.
    fn from(r: WorkerRecord) -> Self {
        WorkerView {
            worker_id: r.row.id,
            name: r.row.name,
            host: r.row.host,
            cores: r.row.cores,
            version: r.row.version,
            results: r.results,
            conflicts: r.conflicts,
            jobs_leased: r.jobs_leased,
            last_seen_seconds_ago: r.last_seen_seconds_ago,
            untrusted: r.untrusted,
            credential: Credential::from_stored(&r.row.credential).name,
            device: String::new(),
            counted_per_second: 0.0,
            trust: if r.untrusted { "untrusted".into() } else { String::new() },
            lease_size: 0,
        }
    }
}

/// Every worker of the run in `store`, as its rows record them.
pub fn worker_views(store: &Store) -> Result<Vec<WorkerView>, StoreError> {
    Ok(store.workers()?.into_iter().map(WorkerView::from).collect())
}

/// A read-only connection to the state file that sums committed rows for the status call, so that
/// the engine thread (which alone writes, and answers leases and results) never does it.
pub struct StatusReader {
    path: PathBuf,
    store: Mutex<Option<Store>>,
}

/// What [`StatusReader::sums`] found in the committed rows.
pub struct Sums {
    pub tally: Tally,
    /// Result rows whose checksum fails: damaged or edited, never counted.
    pub bad_rows: u64,
    /// The run's result, once it is complete.
    pub result: Option<RunResult>,
}

impl StatusReader {
    /// A reader of the state file at `path`, opened on first use.
    pub fn new(path: PathBuf) -> Self {
        StatusReader { path, store: Mutex::new(None) }
    }

    /// The weighted sums of the counted rows, and with `complete` the final result. Blocking.
    pub fn sums(&self, complete: bool) -> Result<Sums, StoreError> {
        let mut guard = self.store.lock();
        let store = match &mut *guard {
            Some(store) => store,
            empty => empty.insert(Store::open_existing(&self.path)?),
        };
        let (tally, bad_rows) = store.tally_checked()?;
        let result = match complete {
            true => store
                .final_totals(&tally)?
                .map(|t| RunResult::new(&t, store.meta().job_count, store.age(), tally.nodes)),
            false => None,
        };
        Ok(Sums { tally, bad_rows, result })
    }

    /// The workers as their committed rows show them, the first `limit` held and failed jobs and
    /// the conflicts on record, for the status page. Blocking.
    pub fn rows(&self, limit: usize) -> Result<(Vec<WorkerView>, BlockedJobs), StoreError> {
        let mut guard = self.store.lock();
        let store = match &mut *guard {
            Some(store) => store,
            empty => empty.insert(Store::open_existing(&self.path)?),
        };
        Ok((worker_views(store)?, store.blocked_jobs(limit)?))
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

/// How far a run is: the one shape `status`, `status --json`, `/status.json` and the status page
/// all show (each adds its own details beside it, flattened into the same JSON object). Built by
/// [`Progress::new`] alone, so that the four never disagree on the ETA or on completion.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Progress {
    /// Board size.
    pub n: u32,
    /// The job list's fingerprint (16 hex digits): the run id.
    pub fingerprint: String,
    /// Jobs in the run.
    pub jobs_total: u64,
    /// Jobs waiting to be leased.
    pub jobs_pending: u64,
    /// Jobs leased to workers now.
    pub jobs_leased: u64,
    /// Jobs counted.
    pub jobs_done: u64,
    /// Jobs held after too many conflicts, until a person requeues them.
    pub jobs_held: u64,
    /// Jobs stopped after repeated solver errors, until a person requeues them.
    pub jobs_failed: u64,
    /// Percent of the jobs counted (100 for an empty run).
    pub percent_done: f64,
    /// Jobs counted per second: the rate behind the ETA.
    pub results_per_second: Option<f64>,
    /// Seconds left at that rate; `None` when unknown or waiting on leases.
    pub eta_seconds: Option<f64>,
    /// Every job left is leased and none has reported for longer than the rate predicts: the
    /// number of jobs the run waits on (0 otherwise). See [`eta`].
    pub waiting_on_leases: u64,
    /// Conflicting results on record.
    pub conflicts: u64,
    /// Every job is counted.
    pub complete: bool,
    /// The run's result, once complete and summed from the committed rows.
    pub result: Option<RunResult>,
}

/// The run a [`Progress`] is about: board size and run id.
#[derive(Debug, Clone, Copy)]
pub struct RunName<'a> {
    /// Board size.
    pub n: u32,
    /// The job list's fingerprint: the run id.
    pub fingerprint: &'a str,
}

impl Progress {
    /// The progress of run `run` with `jobs` in each state, counting `rate` jobs per second and
    /// nothing counted for `quiet` seconds (see [`eta`]).
    pub fn new(
        run: RunName<'_>,
        jobs: &JobsByState,
        rate: Option<f64>,
        quiet: f64,
        conflicts: u64,
        result: Option<RunResult>,
    ) -> Progress {
        let total = jobs.total();
        let done = jobs.get(JobState::Done);
        let pending = jobs.get(JobState::Pending);
        let leased = jobs.get(JobState::Leased);
        let estimate = eta(total - done, pending, leased, rate, quiet);
        Progress {
            n: run.n,
            fingerprint: run.fingerprint.to_owned(),
            jobs_total: total,
            jobs_pending: pending,
            jobs_leased: leased,
            jobs_done: done,
            jobs_held: jobs.get(JobState::Held),
            jobs_failed: jobs.get(JobState::Failed),
            percent_done: percent(done, total),
            results_per_second: rate,
            eta_seconds: estimate.seconds(),
            waiting_on_leases: estimate.waiting_on(),
            conflicts,
            complete: result.is_some() || (total > 0 && done == total),
            result,
        }
    }

    /// The ETA as words: `done`, a time, `waiting on K leases` (with `expiry`, when the
    /// leases' expiry is known), or `unknown`.
    pub fn eta_text(&self, expiry: Option<f64>) -> String {
        if self.complete {
            "done".into()
        } else if self.waiting_on_leases > 0 {
            let expiry = expiry.map_or(String::new(), |s| {
                format!(" (expire in {s:.0}s unless their workers report)")
            });
            format!("unknown: waiting on {} leases{expiry}", self.waiting_on_leases)
        } else {
            self.eta_seconds.map_or("unknown".into(), hms)
        }
    }
}

/// A run's status as `status` shows it, live or from a state file: its [`Progress`] and what
/// the rows and the engine add.
#[derive(Debug, Clone, Serialize)]
pub struct StatusView {
    /// How far the run is.
    #[serde(flatten)]
    pub progress: Progress,
    /// Where this status was read.
    pub source: Source,
    /// Workers refused after losing a verification (or too many solver errors).
    pub untrusted_workers: u64,
    /// Leases that expired since the coordinator started (live only; `None` offline).
    pub lease_expiries: Option<u64>,
    /// Seconds until the last current lease expires unless its worker renews it (live only).
    pub leases_expire_in_seconds: Option<f64>,
    /// Sum of weight x solutions over the committed results (128-bit: a JSON integer, exact).
    pub partial_total: u128,
    /// Sum of weight x sym180 over the committed results: solutions fixed by a 180-degree turn.
    pub partial_sym180: u128,
    /// Sum of weight x sym90 over the committed results: solutions fixed by a 90-degree turn.
    pub partial_sym90: u128,
    /// Search nodes of the committed results (not weighted).
    pub nodes: u64,
    /// Every worker of the run, by id.
    pub workers: Vec<WorkerView>,
    /// Seconds since the coordinator started (live status only).
    pub uptime_seconds: Option<f64>,
}

/// What `status` prints: the [`StatusView`], and what the rows themselves tell: result rows whose
/// checksum fails (`bad_rows`; never counted) and whether the rows carry checksums at all
/// (`checksums`; false for a schema 1 file not yet opened for writing). Read offline from a state
/// file ([`StatusReport::read`]) or asked of a live coordinator, whose status reader checks every
/// row as it sums them.
#[derive(Debug, Clone, Serialize)]
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
    /// `status --state`: reads the state file at `path`.
    pub fn read(path: &Path) -> Result<StatusReport, StoreError> {
        let store = Store::open_existing(path)?;
        let summary = store.summary()?;
        Ok(StatusReport {
            bad_rows: summary.bad_rows,
            checksums: store.has_checksums(),
            view: StatusView::from_store(&store, summary, path)?,
        })
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
    /// Offline, from the committed rows (and their `summary`) of a state file.
    fn from_store(
        store: &Store,
        s: nqueens_store::Summary,
        path: &Path,
    ) -> Result<StatusView, StoreError> {
        let meta = store.meta();
        let done = s.jobs.get(JobState::Done);
        // A finished run took until its last counted result, however long ago that was.
        let took = match s.last_result_unix {
            Some(last) => Duration::from_secs_f64((last - meta.created_unix).max(0.0)),
            None => store.age(),
        };
        let result = match done == meta.job_count {
            true => store
                .final_totals(&s.tally)?
                .map(|t| RunResult::new(&t, meta.job_count, took, s.tally.nodes)),
            false => None,
        };
        let rate = match (s.first_result_unix, s.last_result_unix) {
            (Some(a), Some(b)) if b > a => Some(done as f64 / (b - a)),
            _ => None,
        };
        let now_unix = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64());
        let quiet = match s.last_result_unix {
            Some(last) => (now_unix - last).max(0.0),
            None => store.age().as_secs_f64(),
        };
        let run = RunName { n: meta.n.into(), fingerprint: &meta.fingerprint };
        Ok(StatusView {
            progress: Progress::new(run, &s.jobs, rate, quiet, s.conflicts, result),
            source: Source::StateFile(path.to_owned()),
            untrusted_workers: s.untrusted_workers,
            lease_expiries: None,
            leases_expire_in_seconds: None,
            partial_total: s.tally.total,
            partial_sym180: s.tally.sym180,
            partial_sym90: s.tally.sym90,
            nodes: s.tally.nodes,
            workers: worker_views(store)?,
            uptime_seconds: None,
        })
    }

    /// The state file as one shell word for the commands `status` suggests, or `<FILE>` when
    /// the status came from a live coordinator (whose file is on its own host).
    fn state_file_word(&self) -> String {
        self.source
            .state_file()
            .map_or("<FILE>".into(), |p| crate::http::shell_word(&p.display().to_string()))
    }

    /// One JSON object: the progress flattened in, and the view's other fields.
    pub fn json(&self) -> String {
        serde_json::to_string(self).expect("status serializes")
    }

    /// The human-readable report.
    pub fn text(&self) -> String {
        let p = &self.progress;
        let mut o = String::new();
        let _ = writeln!(o, "run      N={} fingerprint {} ({})", p.n, p.fingerprint, self.source);
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
        let eta = p.eta_text(self.leases_expire_in_seconds);
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
            self.untrusted_workers,
            self.lease_expiries.map_or(String::new(), |e| format!(", {e} lease expiries"))
        );
        if p.jobs_held + p.jobs_failed > 0 {
            let file = self.state_file_word();
            let _ = writeln!(
                o,
                "blocked  the run cannot complete while jobs are held or failed: once the cause is found, stop the coordinator and run `nqueens-coordinator requeue --state {file}`"
            );
        }
        if !self.workers.is_empty() {
            let _ = writeln!(o, "workers  {}", self.workers.len());
            for w in &self.workers {
                let _ = writeln!(
                    o,
                    "  #{:<4} {:<20} {:<20} {:>3} cores  {:>8} results  {:>5} leased  {} conflicts  seen {:.0}s ago  token {}{}{}",
                    w.worker_id,
                    w.name,
                    w.host,
                    w.cores,
                    w.results,
                    w.jobs_leased,
                    w.conflicts,
                    w.last_seen_seconds_ago,
                    w.credential,
                    if w.device.is_empty() {
                        String::new()
                    } else {
                        format!(
                            "  on {} at {:.1} results/s, {}, leases of {}",
                            w.device, w.counted_per_second, w.trust, w.lease_size
                        )
                    },
                    if w.untrusted { "  UNTRUSTED" } else { "" }
                );
            }
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

/// What `status` can honestly say about the time a run has left.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Eta {
    /// Seconds left at the measured rate (0 once every job is done).
    In(f64),
    /// Every job left is leased, and none has reported for longer than the measured rate says
    /// they all should have taken: the run waits on these leases (a long job, or a worker that
    /// is gone and whose lease has to expire). The rate says nothing about when that ends.
    WaitingOnLeases(u64),
    /// No rate measured yet.
    Unknown,
}

impl Eta {
    pub fn seconds(self) -> Option<f64> {
        match self {
            Eta::In(s) => Some(s),
            Eta::WaitingOnLeases(_) | Eta::Unknown => None,
        }
    }

    pub fn waiting_on(self) -> u64 {
        match self {
            Eta::WaitingOnLeases(n) => n,
            Eta::In(_) | Eta::Unknown => 0,
        }
    }
}

/// The time left: `remaining` jobs (not done: pending, leased, held or failed), of which
/// `pending` wait for a worker and `leased` are out; `rate` the measured jobs per second; `quiet`
/// the seconds since the last counted result (or since the rate's start, if none yet).
pub fn eta(remaining: u64, pending: u64, leased: u64, rate: Option<f64>, quiet: f64) -> Eta {
    if remaining == 0 {
        return Eta::In(0.0);
    }
    let at_rate = rate.filter(|r| *r > 0.0).map(|r| remaining as f64 / r);
    let all_leased = pending == 0 && leased == remaining;
    match at_rate {
        Some(s) if !(all_leased && quiet > s) => Eta::In(s),
        _ if all_leased => Eta::WaitingOnLeases(leased),
        _ => Eta::Unknown,
    }
}

/// `done` as a percentage of `total` (100 for an empty run).
pub fn percent(done: u64, total: u64) -> f64 {
    if total == 0 {
        100.0
    } else {
        done as f64 * 100.0 / total as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
            0.0,
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
            let counts = counts_of(job.weight, job.id);
            total += u128::from(job.weight) * u128::from(counts.solutions);
            changes.push(Change::Result {
                job_id: job.id.into(),
                worker_id: 1.into(),
                lease_id: 1.into(),
                counts,
                seconds: 0.0,
                counted: true,
                kind: ResultKind::First,
            });
            changes.push(Change::JobState {
                job_id: job.id.into(),
                state: JobState::Done,
                lease_id: None,
                worker_id: None,
                errors: 0,
                conflicts: 0,
            });
        }
        store.apply(&changes, &[]).unwrap();
        assert!(total > u128::from(u64::MAX) * 2, "the rows must add up past 2^64: {total}");
        let classes = store.final_totals(&store.tally().unwrap()).unwrap().unwrap().classes;
        drop(store);

        let status = StatusReport::read(&path).unwrap();
        assert_eq!(status.view.partial_total, total);
        let json = status.json();
        assert!(json.contains(&format!("\"partial_total\":{total},")), "{json}");
        let record = status.view.progress.result.as_ref().expect("complete");
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

    #[test]
    fn eta_text_names_the_leases() {
        let mut jobs = JobsByState::default();
        jobs.add(JobState::Leased, 2);
        jobs.add(JobState::Done, 8);
        let run = RunName { n: 12, fingerprint: "f" };
        let mut v = StatusView {
            progress: Progress::new(run, &jobs, Some(10.0), 30.0, 0, None),
            source: Source::Coordinator("http://x:7447".into()),
            untrusted_workers: 0,
            lease_expiries: Some(0),
            leases_expire_in_seconds: Some(42.4),
            partial_total: 0,
            partial_sym180: 0,
            partial_sym90: 0,
            nodes: 0,
            workers: vec![],
            uptime_seconds: Some(1.0),
        };
        assert_eq!(v.progress.waiting_on_leases, 2);
        assert_eq!(v.progress.percent_done, 80.0);
        let text = v.text();
        assert!(text.contains("ETA unknown: waiting on 2 leases (expire in 42s"), "{text}");
        assert!(!text.contains("00:00:"), "{text}");
        v.progress = Progress::new(run, &jobs, Some(10.0), 0.1, 0, None);
        assert_eq!(v.progress.eta_seconds, Some(0.2));
        assert!(v.text().contains("ETA 00:00:00.200"), "{}", v.text());
    }
}
