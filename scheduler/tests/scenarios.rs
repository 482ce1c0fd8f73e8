//! The scheduler's policy scenarios as data-driven scripts (`tests/testdata/*.txt`): each case
//! is a command to the scheduler with its arguments, a `----` line, and what the scheduler said:
//! its answer, then every durable change it decided, one a line (`+ ...`). The scripts read like
//! the rules they check; `REWRITE=1 cargo test -p nqueens-scheduler --test scenarios` rewrites
//! the expected text after a deliberate change of policy (read the diff before committing it).
//!
//! Commands (times are seconds on the scheduler's clock since the script started; `at=` moves
//! the clock forward, never back):
//!
//! | command | what it does | prints |
//! |---|---|---|
//! | `run jobs=N [verify=(..)] [weight=W] [probation=P] [replication=R] [recheck=F] [referee]
//! [spot=F] [hold=H] [lease=S] [seed=S]` | a new run of N jobs (job i costs i), no results | `ok` |
//! | `credential worker=W id=shared\|open\|NAME` | the credential W registers under (NAME: a
//! per-host token) | `ok` |
//! | `lease worker=W jobs=K [spot] [at=T]` | a lease of up to K jobs (with spot checks) | `lease L:
//! ids` or `none` |
//! | `result worker=W lease=L job=J counts=S[:S180:S90] [nodes=N] [at=T]` (`error` for a solver
//! error) | one answer | the verdict |
//! | `heartbeat worker=W leases=(..) [at=T]` | renews leases | the leases that hold nothing |
//! | `expire at=T` | expires overdue leases | how many |
//! | `release worker=W lease=L [jobs=(..)]` | gives jobs back (lease 0: all) | how many |
//! | `reference job=J counts=S [at=T]` | the coordinator's own answer | |
//! | `referee` | the jobs handed to the coordinator's referee now | ids |
//! | `referee-failed job=J` | the referee could not solve J | |
//! | `doubt job=J` | puts a done job in doubt | |
//! | `restart [seed=S]` | a new process: the scheduler rebuilt from the stored rows alone | |
//! | `show [jobs=(..)] [workers=(..)]` | where jobs and workers stand | |
//! | `requeue` | an operator's `requeue` of held and failed jobs, then a restart | |
//! | `cap worker=W`, `fair-share worker=W slots=S`, `lease-size worker=W slots=S`, `batch slots=S`,
//! `delivered worker=W` | lease sizing | a number |
//! | `rate` | the measured seconds per unit of cost estimate | a number or `none` |

mod common;

use common::Stored;
use datadriven::{walk, TestCase};
use nqueens_core::JobCounts;
use nqueens_scheduler::{
    Change, Delivery, Finding, JobId, JobState, LeaseId, Scheduler, SchedulerConfig, StoredJob,
    WorkerId, OPEN_CREDENTIAL, PER_HOST_CREDENTIALS, SHARED_CREDENTIAL,
};
use std::collections::HashMap;
use std::fmt::Write as _;
use std::time::{Duration, Instant};

/// One script's run: the scheduler, the rows it committed, and the clock.
struct Script {
    scheduler: Scheduler,
    config: SchedulerConfig,
    stored: Stored,
    credentials: HashMap<WorkerId, u64>,
    /// Per-host token names, numbered in order of appearance.
    hosts: Vec<String>,
    start: Instant,
    now: Instant,
}

impl Script {
    fn new(config: SchedulerConfig, jobs: Vec<StoredJob>) -> Self {
        let start = Instant::now();
        let stored = Stored::new(jobs);
        let scheduler =
            Scheduler::restore(config.clone(), stored.load(), vec![], HashMap::new(), [], start);
        Script {
            scheduler,
            config,
            stored,
            credentials: HashMap::new(),
            hosts: Vec::new(),
            start,
            now: start,
        }
    }

    /// Moves the clock to `at=` seconds, if given.
    fn at(&mut self, case: &TestCase) {
        if let Some(t) = opt::<f64>(case, "at") {
            let t = self.start + Duration::from_secs_f64(t);
            assert!(t >= self.now, "{}: the clock goes forward only", case.directive);
            self.now = t;
        }
    }

    /// Commits what the scheduler decided and prints it, one change a line.
    fn commit(&mut self, out: &mut String) {
        let changes = self.scheduler.take_changes();
        self.stored.apply(&changes);
        for change in &changes {
            writeln!(out, "+ {}", describe(change)).unwrap();
        }
        self.scheduler.check_invariants();
    }

    fn run(&mut self, case: &TestCase) -> String {
        self.at(case);
        let w = || WorkerId::new(arg(case, "worker"));
        let s = &mut self.scheduler;
        let mut out = match case.directive.as_str() {
            "credential" => self.credential(case),
            "forget" => {
                // As the engine forgets an idle identity: its credential entry goes, and after a
                // restart it is no registered worker.
                s.forget_worker(w());
                self.credentials.remove(&w());
                "ok\n".to_owned()
            }
            "lease" => {
                let spot = case.args.contains_key("spot");
                match s.lease_checked(w(), arg(case, "jobs"), spot, self.now) {
                    Some((lease, jobs)) => format!("lease {lease}: {}\n", ids(&jobs)),
                    None => "none\n".to_owned(),
                }
            }
            "result" => {
                let finding = if case.args.contains_key("error") {
                    Finding::SolverError("solver exploded".into())
                } else {
                    let seconds = opt(case, "seconds").unwrap_or(0.1);
                    Finding::Solved { counts: counts(case), seconds }
                };
                let (lease, job) = (LeaseId::new(arg(case, "lease")), JobId::new(arg(case, "job")));
                let delivery = Delivery { job_id: job, lease_id: lease, finding };
                format!("{:?}\n", s.result(w(), &delivery, self.now))
            }
            "heartbeat" => {
                let leases: Vec<LeaseId> = list(case, "leases").map(LeaseId::new).collect();
                format!("lost: {}\n", ids(&s.heartbeat(w(), &leases, self.now)))
            }
            "expire" => format!("expired {}\n", s.expire(self.now)),
            "release" => {
                let jobs: Vec<JobId> = list(case, "jobs").map(JobId::new).collect();
                let lease = LeaseId::new(arg(case, "lease"));
                format!("released {}\n", s.release(w(), lease, &jobs))
            }
            "reference" => {
                s.add_reference(JobId::new(arg(case, "job")), counts(case), self.now);
                String::new()
            }
            "referee" => format!("referee: {}\n", ids(&s.take_referee_jobs())),
            "referee-failed" => {
                s.coordinator_failed(JobId::new(arg(case, "job")));
                String::new()
            }
            "doubt" => {
                s.doubt(JobId::new(arg(case, "job")));
                String::new()
            }
            "requeue" => self.requeue(case),
            "restart" => {
                self.restart(opt(case, "seed"));
                String::new()
            }
            "show" => return self.show(case),
            "disputed" => format!("{} disputed\n", s.disputed_jobs()),
            "cap" => format!("{}\n", s.party_cap(w(), self.now)),
            "fair-share" => format!("{}\n", s.fair_share(w(), arg(case, "slots"), self.now)),
            "lease-size" => format!("{}\n", s.lease_size(w(), arg(case, "slots"), self.now)),
            "batch" => format!("{}\n", s.batch_size(arg(case, "slots"))),
            "delivered" => format!("{}\n", s.delivered_recently(w(), self.now)),
            "rate" => match s.seconds_per_estimate(self.now) {
                Some(rate) => format!("{rate:.4} s per unit of estimate\n"),
                None => "none\n".to_owned(),
            },
            other => panic!("unknown command {other}"),
        };
        self.commit(&mut out);
        if out.is_empty() {
            out.push_str("ok\n");
        }
        out
    }

    /// `credential worker=W id=shared|open|HOST`: the worker's credential, one per host name.
    fn credential(&mut self, case: &TestCase) -> String {
        let credential = match arg::<String>(case, "id").as_str() {
            "shared" => SHARED_CREDENTIAL,
            "open" => OPEN_CREDENTIAL,
            name => {
                let known = self.hosts.iter().position(|h| h == name);
                let index = known.unwrap_or_else(|| {
                    self.hosts.push(name.to_owned());
                    self.hosts.len() - 1
                });
                PER_HOST_CREDENTIALS + index as u64
            }
        };
        let w = WorkerId::new(arg(case, "worker"));
        self.credentials.insert(w, credential);
        self.scheduler.set_credential(w, credential);
        "ok\n".to_owned()
    }

    /// The operator's requeue: held and failed jobs pending again, then a restart.
    fn requeue(&mut self, case: &TestCase) -> String {
        for job in &mut self.stored.jobs {
            if matches!(job.state, JobState::Held | JobState::Failed) {
                job.state = JobState::Pending;
                job.lease = None;
            }
        }
        self.restart(opt(case, "seed"));
        String::new()
    }

    /// A new process: the scheduler rebuilt from the stored rows alone (`seed=` for its draws).
    fn restart(&mut self, seed: Option<u64>) {
        let mut config = self.config.clone();
        config.seed = seed.unwrap_or(config.seed);
        self.scheduler = Scheduler::restore(
            config,
            self.stored.load(),
            self.stored.leases.clone(),
            self.credentials.clone(),
            self.stored.untrusted.iter().copied(),
            self.now,
        );
    }

    /// Where the jobs (all, or `jobs=`) and workers (`workers=`) stand, and whether the run is
    /// complete.
    fn show(&self, case: &TestCase) -> String {
        let s = &self.scheduler;
        let mut out = String::new();
        let jobs: Vec<u64> = if case.args.contains_key("jobs") {
            list(case, "jobs").collect()
        } else {
            (0..s.total_jobs()).collect()
        };
        for id in jobs {
            let job = JobId::new(id);
            let stored = &self.stored.jobs[id as usize];
            write!(out, "job {id}: {}", s.state(job).unwrap()).unwrap();
            if let Some((by, c)) = s.counted(job) {
                write!(out, ", counted {} from {by}", show_counts(&c)).unwrap();
            }
            let opinions: Vec<String> = self
                .stored
                .results
                .get(&job)
                .into_iter()
                .flatten()
                .filter(|r| !r.counted)
                .map(|r| match r.worker.get() {
                    0 => format!("coordinator:{}", show_counts(&r.counts)),
                    w => format!("{w}:{}", show_counts(&r.counts)),
                })
                .collect();
            if !opinions.is_empty() {
                write!(out, ", other answers {}", opinions.join(" ")).unwrap();
            }
            if let Some(review) = stored.review.as_str() {
                write!(out, ", review {review}").unwrap();
            }
            if let Some(known) = s.known_answer(job) {
                write!(out, ", known {}", show_counts(&known)).unwrap();
            }
            out.push('\n');
        }
        for w in list(case, "workers").map(WorkerId::new) {
            writeln!(out, "worker {w}: {}", s.standing_of(w)).unwrap();
        }
        writeln!(out, "complete: {}", s.is_complete()).unwrap();
        out
    }
}

/// A new run from `run`'s arguments.
fn new_run(case: &TestCase) -> Script {
    let mut config = SchedulerConfig {
        lease_duration: Duration::from_secs(opt(case, "lease").unwrap_or(10)),
        probation_results: opt(case, "probation").unwrap_or(0),
        seed: opt(case, "seed").unwrap_or(7),
        recheck_fraction: opt(case, "recheck").unwrap_or(0.0),
        coordinator_checks: case.args.contains_key("referee"),
        replication: opt(case, "replication").unwrap_or(1),
        ..SchedulerConfig::default()
    };
    if let Some(rate) = opt(case, "spot") {
        config.spot_check_rate = rate;
    }
    if let Some(hold) = opt(case, "hold") {
        config.probation_hold = hold;
    }
    let verify: Vec<u64> = list(case, "verify").collect();
    let weight: u8 = opt(case, "weight").unwrap_or(8);
    let jobs = (0..arg::<u64>(case, "jobs"))
        .map(|i| StoredJob::new(JobId::new(i), i, weight, verify.contains(&i)))
        .collect();
    Script::new(config, jobs)
}

/// The required argument `key`.
fn arg<T: std::str::FromStr>(case: &TestCase, key: &str) -> T {
    opt(case, key).unwrap_or_else(|| panic!("{}: argument {key} missing", case.directive))
}

/// The argument `key`, if given.
fn opt<T: std::str::FromStr>(case: &TestCase, key: &str) -> Option<T> {
    let values = case.args.get(key)?;
    let value = values.first().unwrap_or_else(|| panic!("{key} has no value"));
    Some(value.parse().unwrap_or_else(|_| panic!("{key}={value} does not parse")))
}

/// The list argument `key` (`key=(1,2,3)` or `key=1`), empty if not given.
fn list<'a>(case: &'a TestCase, key: &str) -> impl Iterator<Item = u64> + 'a {
    case.args.get(key).into_iter().flatten().filter(|v| !v.is_empty()).map(|v| v.parse().unwrap())
}

/// `counts=S[:S180:S90]` and `nodes=N` (10 when not given).
fn counts(case: &TestCase) -> JobCounts {
    let text: String = arg(case, "counts");
    let mut parts = text.split(':').map(|p| p.parse::<u64>().unwrap());
    JobCounts {
        solutions: parts.next().unwrap(),
        sym180: parts.next().unwrap_or(0),
        sym90: parts.next().unwrap_or(0),
        nodes: opt(case, "nodes").unwrap_or(10),
    }
}

fn show_counts(c: &JobCounts) -> String {
    if c.sym180 == 0 && c.sym90 == 0 {
        c.solutions.to_string()
    } else {
        format!("{}:{}:{}", c.solutions, c.sym180, c.sym90)
    }
}

fn ids<T: std::fmt::Display>(ids: &[T]) -> String {
    if ids.is_empty() {
        return "none".to_owned();
    }
    ids.iter().map(|i| i.to_string()).collect::<Vec<_>>().join(",")
}

/// One change, as a line of the script.
fn describe(change: &Change) -> String {
    match change {
        Change::JobState { job_id, state, lease_id, worker_id, .. } => {
            match (lease_id, worker_id) {
                (Some(l), Some(w)) => format!("job {job_id} {state} (lease {l}, worker {w})"),
                _ => format!("job {job_id} {state}"),
            }
        }
        Change::Result { job_id, worker_id, counts, counted, kind, .. } => {
            let counted = if *counted { " counted" } else { "" };
            let kind = kind.as_str();
            format!("answer job {job_id} from {worker_id}: {} {kind}{counted}", show_counts(counts))
        }
        Change::Review { job_id, review } => {
            format!("review job {job_id}: {}", review.as_str().unwrap_or("none"))
        }
        Change::Uncount { job_id } => format!("uncount job {job_id}"),
        Change::Lease { lease_id, worker_id, job_ids } => {
            format!("lease {lease_id} to {worker_id}: {}", ids(job_ids))
        }
        Change::Conflict { job_id, worker_a, worker_b, .. } => {
            format!("conflict job {job_id}: {worker_a} against {worker_b}")
        }
        Change::Untrust { worker_id, job_id, requeued, .. } => {
            format!("untrust {worker_id} (on job {job_id}; {requeued} counted jobs again pending)")
        }
    }
}

#[test]
fn scenarios() {
    // The policy scripts are the files directly in testdata/ (its folders hold other tests' data,
    // such as the adversary model's kept cases).
    let mut scripts: Vec<std::path::PathBuf> = std::fs::read_dir("tests/testdata")
        .expect("tests/testdata")
        .map(|entry| entry.expect("a testdata entry").path())
        .filter(|path| path.extension().is_some_and(|e| e == "txt"))
        .collect();
    scripts.sort();
    assert!(!scripts.is_empty(), "no policy scripts in tests/testdata");
    for script in scripts {
        run_script(&script.to_string_lossy());
    }
}

fn run_script(path: &str) {
    walk(path, |file| {
        let mut script: Option<Script> = None;
        file.run(|case| {
            if case.directive == "run" {
                script = Some(new_run(case));
                return "ok\n".to_owned();
            }
            script.as_mut().expect("a script starts with `run`").run(case)
        });
    });
}
