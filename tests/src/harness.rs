//! The one way an end-to-end test starts coordinator and worker processes.
//!
//! A test takes a [`RunDir`] (its temporary directory, the state file in it and a free port),
//! builds a coordinator from it ([`RunDir::coordinator`], or [`spawn_coordinator`] for the common
//! case), and starts workers from the running [`Coordinator`] or the `RunDir`. The handles know
//! their state file, log and port, and offer the waits and checks the tests repeat: the
//! coordinator listening or serving, a clean stop, a run that ends exact against the reference
//! table.

use crate::cluster::{
    assert_each_job_counted_once, assert_matches_reference, free_port, health, limit,
    read_result_file, wait_until, Proc,
};
use std::ops::{Deref, DerefMut};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// How long the harness waits for a coordinator to listen, serve or finish: the longest wait any
/// test had before, so that none waits less on a loaded machine.
pub const LONG: Duration = Duration::from_secs(300);

/// What the coordinator logs once its gRPC port accepts connections.
pub const LISTENING: &str = "coordinator listening";

/// A test's own temporary directory (removed when dropped), with the state file and the port its
/// coordinators use unless told otherwise.
pub struct RunDir {
    dir: tempfile::TempDir,
    port: u16,
}

impl RunDir {
    /// A new empty directory and a port that was free a moment ago.
    #[allow(clippy::new_without_default)] // each call makes a directory: not a default value
    pub fn new() -> RunDir {
        RunDir { dir: tempfile::tempdir().unwrap(), port: free_port() }
    }
    pub fn path(&self) -> &Path {
        self.dir.path()
    }
    /// The coordinators' state file: `run.db` in the directory.
    pub fn state(&self) -> PathBuf {
        self.path().join("run.db")
    }
    pub fn port(&self) -> u16 {
        self.port
    }
    /// A coordinator of board `n` on this directory's state file and port.
    pub fn coordinator(&self, n: u32) -> CoordinatorBuilder {
        CoordinatorBuilder::new(self.path(), n).port(self.port)
    }
    /// A worker named `name` for the coordinator on this directory's port.
    pub fn worker(&self, name: &str) -> WorkerBuilder {
        WorkerBuilder::new(self.path(), self.port, name)
    }
}

/// Starts `serve` for board `n` on the state file `dir/run.db` and `port`, with `extra` flags,
/// its stderr in `dir/log`: the short form of [`CoordinatorBuilder`] for the common case.
pub fn spawn_coordinator(dir: &Path, n: u32, port: u16, extra: &[&str], log: &str) -> Coordinator {
    CoordinatorBuilder::new(dir, n).port(port).args(extra).log(log).start()
}

/// The command line and surroundings of a `serve` process, started by [`CoordinatorBuilder::start`].
/// It can be cloned to start the same run again (a restart with another log).
#[derive(Clone, Debug)]
pub struct CoordinatorBuilder {
    n: u32,
    dir: PathBuf,
    state: PathBuf,
    port: u16,
    /// The value of `--http-listen`; `None` leaves the flag out (the coordinator's default).
    http_listen: Option<String>,
    http_port: Option<u16>,
    args: Vec<String>,
    log: String,
    limits: Vec<(libc::__rlimit_resource_t, u64)>,
}

impl CoordinatorBuilder {
    /// Board `n`, state file `dir/run.db`, a free port, no HTTP port, stderr in
    /// `dir/coordinator.log`.
    pub fn new(dir: &Path, n: u32) -> CoordinatorBuilder {
        CoordinatorBuilder {
            n,
            dir: dir.to_owned(),
            state: dir.join("run.db"),
            port: free_port(),
            http_listen: Some("off".into()),
            http_port: None,
            args: Vec::new(),
            log: "coordinator.log".into(),
            limits: Vec::new(),
        }
    }
    /// Another state file than `run.db` in the directory.
    pub fn state(mut self, state: impl Into<PathBuf>) -> Self {
        self.state = state.into();
        self
    }
    pub fn port(mut self, port: u16) -> Self {
        self.port = port;
        self
    }
    /// The HTTP port (status page, metrics) on 127.0.0.1:`port`.
    pub fn http_port(self, port: u16) -> Self {
        self.http_on(&format!("127.0.0.1:{port}"), port)
    }
    /// The HTTP port on every address (where it requires the token), reached on 127.0.0.1.
    pub fn http_port_on_all_addresses(self, port: u16) -> Self {
        self.http_on(&format!("0.0.0.0:{port}"), port)
    }
    fn http_on(mut self, listen: &str, port: u16) -> Self {
        self.http_listen = Some(listen.into());
        self.http_port = Some(port);
        self
    }
    /// No `--http-listen` flag: the coordinator's own default.
    pub fn default_http_listen(mut self) -> Self {
        self.http_listen = None;
        self
    }
    pub fn token(self, token: &str) -> Self {
        self.args(&["--token", token])
    }
    pub fn exit_when_done(self) -> Self {
        self.args(&["--exit-when-done"])
    }
    pub fn lease_seconds(self, seconds: u64) -> Self {
        self.args(&["--lease-seconds", &seconds.to_string()])
    }
    pub fn verify_fraction(self, fraction: &str) -> Self {
        self.args(&["--verify-fraction", fraction])
    }
    pub fn recheck_fraction(self, fraction: &str) -> Self {
        self.args(&["--recheck-fraction", fraction])
    }
    /// More flags, after those given so far.
    pub fn args(mut self, extra: &[&str]) -> Self {
        self.args.extend(extra.iter().map(|s| s.to_string()));
        self
    }
    /// The log's file name in the directory.
    pub fn log(mut self, name: &str) -> Self {
        self.log = name.into();
        self
    }
    /// Resource limit `resource` set to `value` in the coordinator process only.
    pub fn limit(mut self, resource: libc::__rlimit_resource_t, value: u64) -> Self {
        self.limits.push((resource, value));
        self
    }
    /// The full `serve` command line.
    pub fn serve_args(&self) -> Vec<String> {
        let mut args: Vec<String> = vec!["serve".into(), "--n".into(), self.n.to_string()];
        args.extend(["--state".into(), self.state.display().to_string()]);
        args.extend(["--listen".into(), format!("127.0.0.1:{}", self.port)]);
        if let Some(listen) = &self.http_listen {
            args.extend(["--http-listen".into(), listen.clone()]);
        }
        args.extend(self.args.iter().cloned());
        args
    }
    /// Starts the process; it is killed when the handle is dropped.
    pub fn start(&self) -> Coordinator {
        let limits = self.limits.clone();
        let proc = Proc::spawn_with(
            "nqueens-coordinator",
            &self.serve_args(),
            self.dir.join(&self.log),
            |command| {
                for (resource, value) in limits {
                    limit(command, resource, value);
                }
            },
        );
        Coordinator {
            proc,
            dir: self.dir.clone(),
            state: self.state.clone(),
            port: self.port,
            http_port: self.http_port,
        }
    }
}

/// A running coordinator: its process (a [`Proc`], which it dereferences to), state file and
/// ports.
pub struct Coordinator {
    proc: Proc,
    pub dir: PathBuf,
    pub state: PathBuf,
    pub port: u16,
    /// The HTTP port, where the builder gave one.
    pub http_port: Option<u16>,
}

impl Deref for Coordinator {
    type Target = Proc;
    fn deref(&self) -> &Proc {
        &self.proc
    }
}

impl DerefMut for Coordinator {
    fn deref_mut(&mut self) -> &mut Proc {
        &mut self.proc
    }
}

impl Coordinator {
    /// The HTTP port; panics where the builder gave none.
    pub fn http(&self) -> u16 {
        self.http_port.expect("the coordinator was started without an HTTP port")
    }
    /// Whether the log says the coordinator listens.
    pub fn is_listening(&self) -> bool {
        self.log_text().contains(LISTENING)
    }
    /// Blocks until the log says the coordinator listens.
    pub fn wait_listening(&self) {
        wait_until(LONG, LISTENING, || self.is_listening());
    }
    /// [`Coordinator::wait_listening`], off the async runtime.
    pub async fn listening(&self) {
        let log = self.log.clone();
        tokio::task::spawn_blocking(move || {
            let listening =
                || std::fs::read_to_string(&log).unwrap_or_default().contains(LISTENING);
            wait_until(LONG, LISTENING, listening)
        })
        .await
        .unwrap();
    }
    /// Blocks until `healthcheck` says SERVING.
    pub fn wait_serving(&self) {
        let port = self.port;
        wait_until(LONG, "the coordinator to serve", || health(port) == "SERVING");
    }
    /// [`Coordinator::wait_serving`], off the async runtime.
    pub async fn serving(&self) {
        let port = self.port;
        tokio::task::spawn_blocking(move || {
            wait_until(LONG, "the coordinator to serve", || health(port) == "SERVING")
        })
        .await
        .unwrap();
    }
    /// Stops the coordinator with SIGTERM and asserts a clean exit within `within`.
    pub fn stop_within(&mut self, within: Duration) {
        self.signal(libc::SIGTERM);
        let status = self.wait_exit(within);
        assert!(status.success(), "{status}\n{}", self.log_text());
    }
    /// Waits until the coordinator exits, and asserts that it exited 0 with a result that matches
    /// the reference table, every job counted exactly once.
    pub fn wait_exact(mut self) {
        let status = self.wait_exit(LONG);
        assert!(status.success(), "coordinator: {status}\n{}", self.log_text());
        self.assert_exact();
    }
    /// [`Coordinator::wait_exact`], off the async runtime.
    pub async fn finishes_exact(self) {
        tokio::task::spawn_blocking(move || self.wait_exact()).await.unwrap();
    }
    /// The result file matches the reference table and every job is counted exactly once.
    pub fn assert_exact(&self) {
        assert_matches_reference(&read_result_file(&nqueens_coordinator::result_file(&self.state)));
        assert_each_job_counted_once(&self.state);
    }
    /// Waits until the coordinator listens, adds a per-host token named after each of `names` to
    /// its run, and gives the live run 3 s to take them in force: the tokens, in order.
    pub async fn tokens_in_force<const K: usize>(&self, names: [&str; K]) -> [String; K] {
        self.listening().await;
        let tokens = names.map(|name| token_add(&self.state, name));
        tokio::time::sleep(Duration::from_secs(3)).await;
        tokens
    }
    /// A worker named `name` for this coordinator, logging into its directory.
    pub fn worker(&self, name: &str) -> WorkerBuilder {
        WorkerBuilder::new(&self.dir, self.port, name)
    }
}

/// The command line of an `nqueens-worker` process: one thread, a 1 s backoff limit, its stderr
/// in `dir/NAME.log`.
pub struct WorkerBuilder {
    dir: PathBuf,
    port: u16,
    name: String,
    threads: usize,
    args: Vec<String>,
    log: String,
}

impl WorkerBuilder {
    pub fn new(dir: &Path, port: u16, name: &str) -> WorkerBuilder {
        WorkerBuilder {
            dir: dir.to_owned(),
            port,
            name: name.into(),
            threads: 1,
            args: Vec::new(),
            log: format!("{name}.log"),
        }
    }
    pub fn threads(mut self, threads: usize) -> Self {
        self.threads = threads;
        self
    }
    pub fn token(self, token: &str) -> Self {
        self.args(&["--token", token])
    }
    pub fn args(mut self, extra: &[&str]) -> Self {
        self.args.extend(extra.iter().map(|s| s.to_string()));
        self
    }
    /// The log's file name in the directory.
    pub fn log(mut self, name: &str) -> Self {
        self.log = name.into();
        self
    }
    /// Starts the worker; it is killed when the handle is dropped.
    pub fn start(self) -> Proc {
        self.start_with(|_| {})
    }
    /// Like [`WorkerBuilder::start`], with `configure` applied to the command (its environment).
    pub fn start_with(self, configure: impl FnOnce(&mut std::process::Command)) -> Proc {
        let mut args: Vec<String> =
            vec!["--connect".into(), format!("http://127.0.0.1:{}", self.port)];
        args.extend(["--threads".into(), self.threads.to_string(), "--name".into(), self.name]);
        args.extend(["--max-backoff-seconds".into(), "1".into()]);
        args.extend(self.args);
        Proc::spawn_with("nqueens-worker", &args, self.dir.join(&self.log), configure)
    }
}

/// `token add NAME` on the run in `state` (live or not): the new per-host token.
pub fn token_add(state: &Path, name: &str) -> String {
    let out = crate::cluster::coordinator_output([
        "token".as_ref(),
        "add".as_ref(),
        name.as_ref(),
        "--state".as_ref(),
        state.as_os_str(),
    ]);
    assert!(out.status.success(), "token add: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}

/// A worker named `name` with `token` for the coordinator on `port`, its log `dir/NAME.log`.
pub fn spawn_worker(dir: &Path, port: u16, name: &str, token: &str) -> Proc {
    WorkerBuilder::new(dir, port, name).token(token).start()
}
