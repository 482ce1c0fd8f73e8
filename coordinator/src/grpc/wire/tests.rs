use super::*;
use crate::snapshot::fleet::{Fleet, Group};
use crate::snapshot::{percent, LiveFigures, Progress, RunSnapshot, WorkerView};
use crate::status::{Origin, RowFigures, StatusView};
use nqueens_core::{SplitMix64, Tally};
use nqueens_proto::bounds::{MAX_NAME, MAX_SECRET, MAX_TEXT};
use nqueens_result::{PublishedCheck, RunResult};
use nqueens_store::Evidence;

fn record(total: u128, classes: (u128, u128, u128)) -> RunResult {
    RunResult {
        n: 29,
        total,
        unique: classes.0 + classes.1 + classes.2,
        count2: Some(classes.0),
        count4: Some(classes.1),
        count8: Some(classes.2),
        jobs: 3,
        seconds: 1.5,
        nodes: 12,
        evidence: None,
        export_sha256: Some("0123456789abcdef".repeat(4)),
        published: PublishedCheck::of(29, total, classes.0 + classes.1 + classes.2, None),
    }
}

/// A result past 2^64 crosses the wire exactly; one whose classes do not add up is refused.
#[test]
fn wide_results_round_trip_and_inconsistent_ones_are_refused() {
    let classes = (2, 1 << 60, (u128::from(u64::MAX) + 9) / 8 * 4);
    let total = 2 * classes.0 + 4 * classes.1 + 8 * classes.2;
    assert!(total > u128::from(u64::MAX));
    let r = record(total, classes);
    let wire = status::result_to_wire(&r);
    assert_ne!(wire.total_hi, 0);
    assert_eq!(status::result_from_wire(wire.clone()), Ok(r));
    let mut bad = wire.clone();
    bad.total_hi += 1;
    assert!(matches!(status::result_from_wire(bad), Err(WireError::Inconsistent(_))));
    let mut bad = wire;
    bad.export_sha256 = Some("0123\u{1b}[2J".into());
    assert!(matches!(status::result_from_wire(bad), Err(WireError::Inconsistent(_))));
}

/// A seeded draw of the values a live status report may hold: each optional figure left unset
/// about half the time, numbers from their edges as well as their whole range.
struct Draw(SplitMix64);

impl Draw {
    fn coin(&mut self) -> bool {
        self.0.next_u64() & 1 == 1
    }

    fn maybe<T>(&mut self, make: impl FnOnce(&mut Self) -> T) -> Option<T> {
        if self.coin() {
            Some(make(self))
        } else {
            None
        }
    }

    fn below(&mut self, bound: u64) -> u64 {
        self.0.below(bound)
    }

    fn u64(&mut self) -> u64 {
        match self.below(4) {
            0 => 0,
            1 => self.below(1_000),
            2 => u64::MAX - self.below(3),
            _ => self.0.next_u64(),
        }
    }

    fn u128(&mut self) -> u128 {
        match self.below(3) {
            0 => self.u64().into(),
            1 => u128::MAX - u128::from(self.below(3)),
            _ => (u128::from(self.0.next_u64()) << 64) | u128::from(self.0.next_u64()),
        }
    }

    /// Any finite number (NaN is not equal to itself): the edges, among them -1 (the old
    /// stand-in for "none"), and any bit pattern.
    fn f64(&mut self) -> f64 {
        const EDGES: [f64; 7] = [0.0, -1.0, 0.5, 1e-300, f64::MAX, f64::MIN, f64::MIN_POSITIVE];
        loop {
            let x = match self.below(3) {
                0 => EDGES[self.below(EDGES.len() as u64) as usize],
                1 => self.0.unit() * 1e6,
                _ => f64::from_bits(self.0.next_u64()),
            };
            if x.is_finite() {
                return x;
            }
        }
    }

    /// A short text of `alphabet`'s characters (within every bound of the contract).
    fn text(&mut self, alphabet: &[char]) -> String {
        let len = self.below(9);
        (0..len).map(|_| alphabet[self.below(alphabet.len() as u64) as usize]).collect()
    }

    /// Any short text, also one a name may not be: the status call passes it on as it is.
    fn any_text(&mut self) -> String {
        self.text(&['a', 'Z', '7', '-', ' ', 'é', '節', '🦀', '\n', '\u{202e}'])
    }

    fn evidence(&mut self) -> Evidence {
        Evidence {
            replication: self.below(256) as u8,
            jobs_independent: self.u64(),
            jobs_coordinator: self.u64(),
            jobs_one_party: self.u64(),
            rechecks_drawn: self.u64(),
            rechecks_passed: self.u64(),
            lie_escape_probability: self.f64(),
            wrong_jobs_bound: self.f64(),
        }
    }

    /// A result whose classes, where it has them, add up (the wire refuses others).
    fn result(&mut self) -> RunResult {
        let classes = self.maybe(|d| [0; 3].map(|_| u128::from(d.u64()) << d.below(60)));
        let (total, unique) = match classes {
            Some([c2, c4, c8]) => (2 * c2 + 4 * c4 + 8 * c8, c2 + c4 + c8),
            None => (self.u128(), self.u128()),
        };
        let hex = |d: &mut Self| -> String {
            (0..64).map(|_| char::from_digit(d.below(16) as u32, 16).unwrap()).collect()
        };
        let n = self.below(256) as u8;
        RunResult {
            published: PublishedCheck::of(n, total, unique, classes),
            n,
            total,
            unique,
            count2: classes.map(|c| c[0]),
            count4: classes.map(|c| c[1]),
            count8: classes.map(|c| c[2]),
            jobs: self.u64(),
            seconds: self.f64(),
            nodes: self.u64(),
            evidence: self.maybe(Self::evidence),
            export_sha256: self.maybe(hex),
        }
    }

    fn progress(&mut self) -> Progress {
        let (jobs_total, jobs_done) = (self.u64(), self.u64());
        Progress {
            n: self.below(1 << 32) as u32,
            fingerprint: self.text(&['n', '1', '7', '-', 'f', 'p']),
            jobs_total,
            jobs_pending: self.u64(),
            jobs_leased: self.u64(),
            jobs_done,
            jobs_held: self.u64(),
            jobs_failed: self.u64(),
            // Derived, not sent: the one rule, on both ends.
            percent_done: percent(jobs_done, jobs_total),
            results_per_second: self.maybe(Self::f64),
            eta_seconds: self.maybe(Self::f64),
            waiting_on_leases: self.u64(),
            conflicts: self.u64(),
            complete: self.coin(),
            result: self.maybe(Self::result),
        }
    }

    fn worker(&mut self) -> WorkerView {
        WorkerView {
            worker_id: self.u64(),
            name: self.any_text(),
            host: self.any_text(),
            slots: self.below(1 << 32) as u32,
            version: self.any_text(),
            results: self.u64(),
            conflicts: self.u64(),
            jobs_leased: self.u64(),
            last_seen_seconds_ago: self.f64(),
            untrusted: self.coin(),
            credential: self.any_text(),
            device: self.any_text(),
            results_per_second: self.f64(),
            trust: self.any_text(),
            lease_size: self.u64(),
        }
    }

    fn fleet(&mut self) -> Fleet {
        let groups = |d: &mut Self| -> Vec<Group> {
            (0..d.below(4))
                .map(|_| Group {
                    key: d.any_text(),
                    workers: d.u64(),
                    slots: d.u64(),
                    jobs_leased: d.u64(),
                    results: d.u64(),
                    results_per_second: d.f64(),
                })
                .collect()
        };
        Fleet {
            workers: self.u64(),
            by_state: groups(self),
            by_device: groups(self),
            by_version: groups(self),
            by_credential: groups(self),
            matching: self.u64(),
            offset: self.u64(),
            limit: self.u64(),
            filter: self.any_text(),
        }
    }

    fn snapshot(&mut self) -> RunSnapshot {
        let (taken_unix, progress) = (self.f64(), self.progress());
        let (quiet_seconds, untrusted_workers) = (self.f64(), self.u64());
        let live = LiveFigures {
            snapshot_seq: self.u64(),
            nodes_per_second: self.maybe(Self::f64),
            live_workers: self.maybe(Self::u64),
            disputed_jobs: self.maybe(Self::u64),
            lease_expiries: self.maybe(Self::u64),
            leases_expire_in_seconds: self.maybe(Self::f64),
            uptime_seconds: self.maybe(Self::f64),
            // The counters are on `/metrics`, not on the status call.
            counters: None,
        };
        // Every worker stays behind: the wire carries the view's page of them.
        let every = std::sync::Arc::from([]);
        RunSnapshot::new(taken_unix, progress, quiet_seconds, untrusted_workers, every, live)
    }

    /// What the committed rows of a live coordinator tell (its rows carry checksums).
    fn rows(&mut self) -> RowFigures {
        let tally = Tally {
            total: self.u128(),
            sym180: self.u128(),
            sym90: self.u128(),
            nodes: self.u64(),
            // Not on the wire, nor in the view.
            ..Tally::default()
        };
        RowFigures {
            tally,
            evidence: self.maybe(Self::evidence),
            bad_rows: self.u64(),
            checksums: true,
        }
    }

    /// A live coordinator's report, as read from `source` (where its file is, for the commands
    /// `status` suggests, is not on the wire).
    fn report(&mut self, source: &str) -> StatusView {
        let (run, rows) = (self.snapshot(), self.rows());
        let workers = (0..self.below(4)).map(|_| self.worker()).collect();
        let fleet = self.maybe(Self::fleet);
        StatusView::new(run, rows, fleet, workers, Origin::Coordinator(source))
    }
}

/// Generated reports per run of the round trip, from one fixed seed.
const CASES: usize = 2_000;
const SEED: u64 = 0x5354_4154_5553_0044;

/// The first of [`CASES`] generated reports that does not come back from the wire as it left,
/// its message changed by `mangle` on the way (`|_| {}`: the conversions alone), described.
fn first_loss(mangle: impl Fn(&mut pb::StatusResponse)) -> Option<String> {
    let mut draw = Draw(SplitMix64::new(SEED));
    let source = "http://coordinator:7447";
    (0..CASES).find_map(|case| {
        let sent = draw.report(source);
        let mut wire = sent.to_response();
        mangle(&mut wire);
        match StatusView::from_response(wire, source) {
            Ok(back) if back == sent => None,
            back => Some(format!("case {case}: sent {sent:#?}\ngot {back:#?}")),
        }
    })
}

/// Every live status report, whichever of its figures are unset, comes back from the wire
/// exactly as it left: what `status --connect` shows is what the coordinator published (the
/// counters aside, which are on `/metrics`).
#[test]
fn every_status_report_round_trips_exactly_unset_figures_too() {
    if let Some(loss) = first_loss(|_| {}) {
        panic!("{loss}");
    }
}

/// The round trip above sees each stand-in for "none" the wire once sent: with the old mapping
/// of any one of those figures put back (none sent as 0 and read as `Some(0)`, or sent as -1
/// and only values from 0 read back), it fails.
#[test]
fn the_round_trip_catches_each_old_stand_in_for_none() {
    type Mangle = fn(&mut pb::StatusResponse);
    let old: [(&str, Mangle); 8] = [
        ("results_per_second", |r| r.results_per_second = r.results_per_second.or(Some(0.0))),
        ("nodes_per_second", |r| r.nodes_per_second = r.nodes_per_second.or(Some(0.0))),
        ("live_workers", |r| r.live_workers = r.live_workers.or(Some(0))),
        ("disputed_jobs", |r| r.disputed_jobs = r.disputed_jobs.or(Some(0))),
        ("lease_expiries", |r| r.lease_expiries = r.lease_expiries.or(Some(0))),
        ("uptime_seconds", |r| r.uptime_seconds = r.uptime_seconds.or(Some(0.0))),
        ("eta_seconds", |r| r.eta_seconds = r.eta_seconds.filter(|s| *s >= 0.0)),
        ("leases_expire_in_seconds", |r| {
            r.leases_expire_in_seconds = r.leases_expire_in_seconds.filter(|s| *s >= 0.0)
        }),
    ];
    for (field, mangle) in old {
        assert!(first_loss(mangle).is_some(), "the old mapping of {field} went unseen");
    }
}

/// A status answer is checked against the contract's bounds as it is taken off the wire.
#[test]
fn a_status_answer_past_a_bound_is_refused() {
    let sent = Draw(SplitMix64::new(SEED)).report("x");
    let mut wire = sent.to_response();
    wire.workers.push(pb::WorkerInfo { name: "x".repeat(MAX_NAME + 1), ..Default::default() });
    let refused = StatusView::from_response(wire, "x").unwrap_err();
    assert!(matches!(refused, WireError::Invalid { field: "worker name", .. }), "{refused}");
    let asked =
        pb::StatusRequest { workers_filter: "x".repeat(MAX_NAME + 1), ..Default::default() };
    assert!(query_from_wire(&asked).is_err());
    let query = query_from_wire(&pb::StatusRequest { workers_limit: 5, ..Default::default() });
    assert_eq!(query.unwrap().limit, 5);
}

/// Registrations and results are checked against the contract's bounds in their conversions
/// (the only check of them): past a bound, each is refused naming the field.
#[test]
fn registrations_and_results_are_bounded_where_they_are_converted() {
    let register =
        |name: String| pb::RegisterRequest { name, version: "0.1.0".into(), ..Default::default() };
    let field = |e: WireError| match e {
        WireError::Invalid { field, .. } => field,
        e => panic!("{e}"),
    };
    let taken = RegisterCall::from_wire(register("x".repeat(MAX_NAME)), Credential::shared());
    assert_eq!(taken.unwrap().registration.name.len(), MAX_NAME);
    for name in ["x".repeat(MAX_NAME + 1), "evil\u{202e}fdp".into()] {
        let refused = RegisterCall::from_wire(register(name), Credential::shared());
        assert_eq!(refused.map(|_| ()).map_err(field), Err("name"));
    }
    let result = |error: String, worker_secret: String| pb::JobResult {
        error,
        worker_secret,
        ..Default::default()
    };
    let taken =
        ResultCall::from_wire(result("e".repeat(MAX_TEXT), "s".into()), Credential::shared());
    let cut = taken.unwrap().answer.delivery.finding;
    assert!(matches!(cut, Finding::SolverError(e) if e.len() == MAX_ERROR_TEXT + " [cut]".len()));
    for (msg, name) in [
        (result("e".repeat(MAX_TEXT + 1), String::new()), "error"),
        (result("e".into(), "s".repeat(MAX_SECRET + 1)), "worker_secret"),
    ] {
        let refused = ResultCall::from_wire(msg, Credential::shared());
        assert_eq!(refused.map(|_| ()).map_err(field), Err(name));
    }
    let lease =
        pb::LeaseRequest { worker_secret: "s".repeat(MAX_SECRET + 1), ..Default::default() };
    let refused = caller_from_wire(&lease, 1, &lease.worker_secret, Credential::shared());
    assert_eq!(refused.map(|_| ()).map_err(field), Err("worker_secret"));
}

/// Every count that the wire used to refuse unread (past the state file's 64-bit columns, or
/// symmetric counts above the solutions) now reaches the scheduler, which finds each one
/// implausible on a job of any weight and so untrusts its sender.
#[test]
fn counts_no_solver_gives_reach_the_scheduler_and_are_implausible() {
    let past = i64::MAX as u64 + 1;
    let honest = JobCounts { solutions: 10, sym180: 4, sym90: 2, nodes: 99 };
    let cases = [
        JobCounts { sym90: 5, ..honest },
        JobCounts { sym180: 11, ..honest },
        JobCounts { solutions: past, ..honest },
        JobCounts { sym180: past, ..honest },
        JobCounts { sym90: past, ..honest },
        JobCounts { nodes: past, ..honest },
        JobCounts { nodes: u64::MAX, ..honest },
        JobCounts { solutions: u64::MAX, sym180: u64::MAX, sym90: u64::MAX, nodes: u64::MAX },
    ];
    for counts in cases {
        let msg = pb::JobResult {
            counts: Some(counts.into()),
            worker_secret: "s".into(),
            ..Default::default()
        };
        let answer = ResultCall::from_wire(msg, Credential::shared()).unwrap().answer;
        assert!(
            matches!(answer.delivery.finding, Finding::Solved { counts: c, .. } if c == counts)
        );
        for weight in [2, 4, 8] {
            assert!(
                nqueens_scheduler::implausible(&counts, weight).is_some(),
                "{counts:?} of weight {weight}"
            );
        }
    }
}

#[test]
fn versions_are_strict_semver_to_the_pre_release_numbers() {
    for good in ["0.1.0", "1.22.333", "0.1.0-rc.1", "0.1.0-0", "0.1.0-01a", "1.0.0-x.7.z.92+b.01"] {
        assert!(is_strict_semver(good), "{good}");
    }
    for bad in ["0.1", "01.1.0", "0.1.0-01", "0.1.0-rc.007", "0.1.0-", "0.1.0-a..b", "0.1.0+"] {
        assert!(!is_strict_semver(bad), "{bad}");
    }
}
