//! Helpers for the cluster tests: free ports, child processes that die with the test, waiting,
//! and checks of a result or state file against the reference table.

use crate::{binary, known_counts};
use nqueens_result::RunResult;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A TCP port that was free a moment ago on 127.0.0.1.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// A child process killed (SIGKILL) when dropped, with its stderr in a log file.
pub struct Proc {
    pub child: Child,
    pub log: PathBuf,
    pub what: String,
}

impl Proc {
    pub fn spawn(name: &str, args: &[String], log: PathBuf) -> Proc {
        Proc::spawn_with(name, args, log, |_| {})
    }

    /// Like [`Proc::spawn`], with `configure` applied to the command first (limits, environment).
    pub fn spawn_with(
        name: &str,
        args: &[String],
        log: PathBuf,
        configure: impl FnOnce(&mut Command),
    ) -> Proc {
        let file = std::fs::File::create(&log).unwrap();
        let mut command = Command::new(binary(name));
        command.args(args).env("RUST_LOG", "info").env_remove("NQ_TOKEN").env_remove("NQ_CONNECT");
        // After the defaults, so that a test may set RUST_LOG or a token of its own.
        configure(&mut command);
        let child = command
            .stdout(Stdio::piped())
            .stderr(file)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {name}: {e}"));
        Proc { child, log, what: format!("{name} {}", args.join(" ")) }
    }
    pub fn signal(&self, sig: i32) {
        unsafe {
            libc::kill(self.child.id() as i32, sig);
        }
    }
    pub fn sigkill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
    /// Waits for the exit, panicking (with the log) after `timeout`.
    pub fn wait_exit(&mut self, timeout: Duration) -> std::process::ExitStatus {
        let start = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            if start.elapsed() > timeout {
                panic!("{} did not exit within {timeout:?}; log:\n{}", self.what, self.log_text());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Runs `nqueens-coordinator` with `args` to its end (for the short subcommands).
pub fn coordinator_output<S: AsRef<std::ffi::OsStr>>(
    args: impl IntoIterator<Item = S>,
) -> std::process::Output {
    Command::new(binary("nqueens-coordinator"))
        .args(args)
        .output()
        .expect("run nqueens-coordinator")
}

/// Polls `cond` every 50 ms until it holds, panicking with `what` after `timeout`.
pub fn wait_until(timeout: Duration, what: &str, mut cond: impl FnMut() -> bool) {
    let start = Instant::now();
    while !cond() {
        if start.elapsed() > timeout {
            panic!("timed out after {timeout:?} waiting for {what}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Asserts a result record against the reference table.
pub fn assert_matches_reference(record: &RunResult) {
    let known = known_counts();
    let k = &known[&record.n];
    assert_eq!(record.total, k.total, "Total of N={}", record.n);
    assert_eq!(record.unique, k.unique, "Unique of N={}", record.n);
    assert_eq!(record.count2, k.count2, "COUNT2 of N={}", record.n);
    assert_eq!(record.count4, k.count4, "COUNT4 of N={}", record.n);
    assert_eq!(record.count8, k.count8, "COUNT8 of N={}", record.n);
}

/// Reads and checks a run's result file.
pub fn read_result_file(path: &Path) -> RunResult {
    let text = std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("result file {}: {e}", path.display()));
    assert_eq!(text.lines().count(), 1, "one JSON line in {}", path.display());
    serde_json::from_str(text.trim()).unwrap()
}

/// Every job of the state file has exactly one counted result (none lost, none counted twice).
pub fn assert_each_job_counted_once(state: &Path) {
    let conn =
        rusqlite::Connection::open_with_flags(state, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
            .unwrap();
    let jobs: i64 = conn.query_row("SELECT COUNT(*) FROM jobs", [], |r| r.get(0)).unwrap();
    let counted_jobs: i64 = conn
        .query_row("SELECT COUNT(DISTINCT job_id) FROM results WHERE counted=1", [], |r| r.get(0))
        .unwrap();
    let counted_rows: i64 =
        conn.query_row("SELECT COUNT(*) FROM results WHERE counted=1", [], |r| r.get(0)).unwrap();
    assert_eq!(counted_jobs, jobs, "every job has a counted result");
    assert_eq!(counted_rows, jobs, "no job is counted twice");
}

/// Number of counted results committed in a state file.
pub fn committed_results(state: &Path) -> i64 {
    query_count(state, "SELECT COUNT(*) FROM results WHERE counted=1")
}

/// A `SELECT COUNT(*) ...` on a state file; 0 while the file or table does not exist yet.
pub fn query_count(state: &Path, sql: &str) -> i64 {
    let Ok(conn) =
        rusqlite::Connection::open_with_flags(state, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
    else {
        return 0;
    };
    conn.query_row(sql, [], |r| r.get(0)).unwrap_or(0)
}

/// Ids of the jobs with a counted result.
pub fn counted_job_ids(state: &Path) -> std::collections::BTreeSet<i64> {
    let conn =
        rusqlite::Connection::open_with_flags(state, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
            .unwrap();
    let mut q = conn.prepare("SELECT job_id FROM results WHERE counted=1").unwrap();
    q.query_map([], |r| r.get::<_, i64>(0)).unwrap().map(|r| r.unwrap()).collect()
}

/// Runs `nqueens-coordinator solve ARGS` to its end.
pub fn solve(args: &[&str]) -> std::process::Output {
    coordinator_output(std::iter::once("solve").chain(args.iter().copied()))
}

/// What `healthcheck` says of the coordinator on `port`: SERVING, NOT SERVING or UNREACHABLE.
pub fn health(port: u16) -> String {
    let out = coordinator_output(["healthcheck", "--connect", &format!("http://127.0.0.1:{port}")]);
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// Sets resource limit `resource` (soft and hard) to `value` in the child that `command` starts,
/// between fork and exec: the test process's own limits stay as they are.
pub fn limit(command: &mut Command, resource: libc::__rlimit_resource_t, value: u64) {
    use std::os::unix::process::CommandExt;
    // SAFETY: setrlimit is async-signal-safe; nothing else runs in the child before exec.
    unsafe {
        command.pre_exec(move || {
            let rl = libc::rlimit { rlim_cur: value, rlim_max: value };
            match libc::setrlimit(resource, &rl) {
                0 => Ok(()),
                _ => Err(std::io::Error::last_os_error()),
            }
        });
    }
}

/// Opens up to `count` idle connections to `addr`, stopping at the first that fails (a full
/// backlog). Reads on them time out after 50 ms.
pub fn connect_many(addr: std::net::SocketAddr, count: usize) -> Vec<std::net::TcpStream> {
    let mut held = Vec::new();
    for _ in 0..count {
        let Ok(s) = std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(1)) else {
            break;
        };
        s.set_read_timeout(Some(Duration::from_millis(50))).unwrap();
        held.push(s);
    }
    held
}
