//! `serve`: opens or resumes a run and serves it over gRPC until it is told to stop (or, with
//! `exit_when_done`, until the run is complete).
//!
//! Takes already-bound listeners and a shutdown future, so tests can bind 127.0.0.1:0 and stop the
//! coordinator at will, exactly like the binary does on SIGTERM/Ctrl-C.

use crate::accept::Incoming;
use crate::engine::{Command, Engine, EngineConfig, EngineError, StartError};
use crate::grpc::auth::{Credentials, TokenCheck};
use crate::grpc::connections::{GrpcLimits, GuardedIncoming};
use crate::grpc::service::CoordinatorService;
use crate::http::{serve_http, HttpAccess, HttpState};
use crate::metrics::Metrics;
use crate::snapshot::RunSnapshot;
use crate::status::StatusCache;
use nqueens_proto as pb;
use nqueens_result::RunResult;
use nqueens_store::StoreError;
use open::{open_run, OpenedRun};
use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use thiserror::Error;
use tokio::net::TcpListener;
use tokio::sync::watch;

mod open;

/// How long a coordinator whose engine failed keeps answering NOT_SERVING before it exits, so
/// that health probes see why it is going away.
pub const NOT_SERVING_LINGER: Duration = Duration::from_secs(2);

/// How long a finished coordinator keeps answering before `exit_when_done` returns, so that polling
/// workers hear that the run is complete.
pub const EXIT_LINGER: Duration = Duration::from_secs(3);

/// The settings of `serve`.
#[derive(Debug, Clone)]
pub struct ServeConfig {
    /// Board size; may be omitted when resuming an existing state file.
    pub n: Option<u32>,
    /// The state file: opened and resumed if it exists, created otherwise.
    pub state: PathBuf,
    /// About how many jobs to split a new run into (`None`: the default for its N); when given
    /// for an existing run, it must match the stored split.
    pub target_jobs: Option<u64>,
    /// Seconds a lease lasts unless its worker renews it by heartbeat (at least 2).
    pub lease_seconds: u32,
    /// Fraction (0 to 1) of a new run's jobs that must be solved by two agreeing workers.
    pub verify_fraction: f64,
    /// The shared secret (`--token`) that workers, and readers of the HTTP port, send.
    pub token: Option<String>,
    /// Return once the run is complete (after [`EXIT_LINGER`]) instead of serving on.
    pub exit_when_done: bool,
    /// PEM certificate chain and private key: serve TLS when given.
    pub tls: Option<(Vec<u8>, Vec<u8>)>,
    /// Serve a non-loopback address without a token (anyone who can reach the port can then
    /// register a worker and report results).
    pub insecure: bool,
    /// Check workers against known answers (see `spot_checks.rs` and `Scheduler::lease_checked`).
    pub spot_checks: bool,
    /// The coordinator solves jobs itself to check workers (its referee, N <= 22): newcomers'
    /// answers, re-checks, disputes, jobs trusted workers failed. Off: all of that waits for
    /// other credentials.
    pub coordinator_checks: bool,
    /// The fraction of answers that would count on one credential's word drawn for a secret
    /// re-check: each drawn one waits for another party's (or the coordinator's) answer.
    pub recheck_fraction: f64,
    /// How many independent answers every job of a new run needs: 1, or 2 for a record run
    /// (two credentials, or the coordinator and one credential). Fixed when the run is made:
    /// `None` takes the stored run's, and a different value for an existing run is refused.
    pub replication: Option<u8>,
    /// Serve the HTTP port (metrics, status page) without the token even off loopback; its
    /// viewers then see the state file's name only.
    pub public_status: bool,
    /// Limits on the gRPC port's connections.
    pub grpc_limits: GrpcLimits,
    /// The workers the run expects at once: a warning at start when the descriptor limit leaves
    /// room for fewer connections (see `fd_limit.rs`).
    pub expected_workers: usize,
}

impl Default for ServeConfig {
    fn default() -> Self {
        ServeConfig {
            n: None,
            state: PathBuf::from("nqueens.db"),
            target_jobs: None,
            lease_seconds: 60,
            verify_fraction: 0.01,
            token: None,
            exit_when_done: false,
            tls: None,
            insecure: false,
            spot_checks: true,
            coordinator_checks: true,
            recheck_fraction: 0.01,
            replication: None,
            public_status: false,
            grpc_limits: GrpcLimits::default(),
            expected_workers: crate::fd_limit::DEFAULT_EXPECTED_WORKERS,
        }
    }
}

/// The largest `--target-jobs` accepted (by `serve` and `solve`): 2^21, the default split's own
/// maximum (for N >= 26). The job list lands on the
/// count nearest the target (on a log scale) that a whole number of pre-placed rows gives, so a
/// run can hold a few times this many jobs, and every job costs the coordinator about 300 bytes
/// for the whole run (the job, its scheduler entry, its share of the page cache). Max RSS of
/// `serve --n N --target-jobs T` once the run is created and listening (`/usr/bin/time -v`):
///
/// | N  | --target-jobs     | jobs      | max RSS  |
/// |----|-------------------|-----------|----------|
/// | 18 | (default, 2^13)   | 5,728     | 14 MiB   |
/// | 18 | 100,000           | 60,702    | 30 MiB   |
/// | 18 | 1,000,000         | 493,492   | 155 MiB  |
/// | 17 | 2^20              | 1,698,257 | 472 MiB  |
/// | 21 | 2^20              | 1,766,132 | 521 MiB  |
/// | 18 | 2^21              | 3,187,947 | 865 MiB  |
///
/// At 2^21 the largest list measured needs 865 MiB before the first lease: that is as far as a
/// coordinator should be asked to go (a given 2^23 would need several GiB).
pub const MAX_TARGET_JOBS: u64 = 1 << 21;

/// Checks a `--target-jobs` against [`MAX_TARGET_JOBS`].
pub fn check_target_jobs(target: Option<u64>) -> Result<(), ServeConfigError> {
    match target {
        Some(given) if given > MAX_TARGET_JOBS => {
            Err(ServeConfigError::TargetJobs { given, cap: MAX_TARGET_JOBS })
        }
        _ => Ok(()),
    }
}

/// Why `serve` refused to start or stopped. Causes are chained as sources, not repeated.
#[derive(Debug, Error)]
pub enum ServeError {
    /// Opening, creating or reading the state file failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// A new run without `n`; the path is the state file.
    #[error("no board size: give --n for a new run ({0} holds no run yet)")]
    NoBoardSize(PathBuf),
    /// `n` differs from the board size of the run in the state file.
    #[error("--n {given} does not match the state file, which holds a run of N={stored}")]
    OtherN {
        /// The board size given.
        given: u32,
        /// The board size of the stored run.
        stored: u8,
    },
    /// `target_jobs` differs from the split of the run in the state file.
    #[error(
        "--target-jobs {given:?} does not match the state file, which was split with {stored:?}"
    )]
    OtherSplit {
        /// The target job count given.
        given: Option<u64>,
        /// The target job count the stored run was split with.
        stored: Option<u64>,
    },
    /// `replication` differs from the run's, fixed when it was made.
    #[error("--replication {given} does not match the state file, whose run was made with replication {stored} (fixed at creation)")]
    OtherReplication {
        /// The replication given.
        given: u8,
        /// The stored run's replication.
        stored: u8,
    },
    /// A setting that cannot work.
    #[error(transparent)]
    Config(#[from] ServeConfigError),
    /// The gRPC server failed.
    #[error("gRPC server")]
    Transport(#[from] tonic::transport::Error),
    /// The engine could not commit to the state file, and stopped.
    #[error("the engine stopped: it could not commit")]
    Engine(#[source] StoreError),
    /// The run is complete in the state file but its result file could not be written; a
    /// restart on the same state file writes it.
    #[error("the run is complete but its result file {} cannot be written (a restart on the same state file writes it)", path.display())]
    ResultFile {
        /// The result file.
        path: PathBuf,
        /// The last try's error.
        #[source]
        source: std::io::Error,
    },
    /// The engine thread panicked.
    #[error("the engine thread panicked")]
    EnginePanicked,
    /// A thread the coordinator starts could not be started (the process's or the system's
    /// thread limit): `serve` stops rather than run without it, whichever thread it is.
    #[error("cannot start the coordinator's {name} thread")]
    Thread {
        /// The thread's name.
        name: &'static str,
        /// What the system said.
        #[source]
        source: std::io::Error,
    },
    /// The run's admin directory (for `token add|revoke` on the live run) cannot be used.
    #[error("the admin directory for token changes")]
    Admin(#[from] crate::admin::AdminError),
}

impl From<StartError> for ServeError {
    fn from(e: StartError) -> Self {
        match e {
            StartError::Store(e) => ServeError::Store(e),
            StartError::Thread { name, source } => ServeError::Thread { name, source },
        }
    }
}

/// A setting of [`ServeConfig`] that cannot work, found before anything is opened or logged.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum ServeConfigError {
    /// `verify_fraction` is outside 0 to 1; the value given.
    #[error("--verify-fraction {0} must be between 0 and 1")]
    VerifyFraction(f64),
    /// `replication` is neither 1 nor 2; the value given.
    #[error("--replication {0} must be 1 (a trusted party's answer counts alone, re-checked at random) or 2 (every job needs two independent answers: a record run)")]
    Replication(u8),
    /// `lease_seconds` is below 2; the value given.
    #[error("--lease-seconds {0} must be at least 2")]
    LeaseSeconds(u32),
    /// `target_jobs` is above [`MAX_TARGET_JOBS`].
    #[error("--target-jobs {given} is above the cap of {cap}: a run that finely split needs more coordinator memory than a run should take (give at most {cap})")]
    TargetJobs {
        /// The target job count given.
        given: u64,
        /// The most allowed (jobs).
        cap: u64,
    },
    /// No token, not `insecure`, and a non-loopback gRPC address (the one given).
    #[error("refusing to serve {0} without a token: anyone who can reach it could report results; set --token (NQ_TOKEN) to a long random secret, add per-host tokens (`token add NAME --state FILE`), listen on a loopback address, or pass --insecure (NQ_INSECURE=true) on a network you trust")]
    NoToken(std::net::SocketAddr),
    /// No token, not `public_status`, and a non-loopback HTTP address (the one given).
    #[error("refusing to serve the status page and metrics on {0} to anyone: set --token (NQ_TOKEN) (then readers send `Authorization: Bearer TOKEN`), listen on a loopback --http-listen, pass --public-status (NQ_PUBLIC_STATUS=true) to show them to anyone who can reach the port, or --http-listen off")]
    NoHttpToken(std::net::SocketAddr),
    /// `grpc_limits.max_per_ip` is 0.
    #[error("--grpc-max-conns-per-ip must be at least 1")]
    MaxConnsPerIp,
}

impl ServeConfig {
    /// Checks that the coordinator may listen on `addr`: a token is needed off loopback.
    pub fn validate_listen(&self, addr: std::net::SocketAddr) -> Result<(), ServeConfigError> {
        if self.token.is_none() && !self.insecure && !addr.ip().is_loopback() {
            return Err(ServeConfigError::NoToken(addr));
        }
        Ok(())
    }

    /// Checks that the HTTP port (metrics, status page) may listen on `addr`: off loopback it
    /// needs the token (which its readers then send) or `public_status`.
    pub fn validate_http(&self, addr: std::net::SocketAddr) -> Result<(), ServeConfigError> {
        if self.token.is_none() && !self.public_status && !addr.ip().is_loopback() {
            return Err(ServeConfigError::NoHttpToken(addr));
        }
        Ok(())
    }

    /// Checks the settings that do not depend on the state file or the addresses, once: what
    /// passes is what [`serve`] runs.
    pub fn check(self) -> Result<CheckedServeConfig, ServeConfigError> {
        if !(0.0..=1.0).contains(&self.verify_fraction) {
            return Err(ServeConfigError::VerifyFraction(self.verify_fraction));
        }
        if let Some(r) = self.replication.filter(|r| !(1..=2).contains(r)) {
            return Err(ServeConfigError::Replication(r));
        }
        if self.lease_seconds < 2 {
            return Err(ServeConfigError::LeaseSeconds(self.lease_seconds));
        }
        if self.grpc_limits.max_per_ip == 0 {
            return Err(ServeConfigError::MaxConnsPerIp);
        }
        check_target_jobs(self.target_jobs)?;
        Ok(CheckedServeConfig(self))
    }
}

/// A [`ServeConfig`] whose settings [`ServeConfig::check`] passed: what [`serve`] takes, so that
/// the binary checks them before it binds a port and nothing checks them again.
#[derive(Debug, Clone)]
pub struct CheckedServeConfig(ServeConfig);

impl std::ops::Deref for CheckedServeConfig {
    type Target = ServeConfig;

    fn deref(&self) -> &ServeConfig {
        &self.0
    }
}

/// The HTTP port (`--http-listen`) when none is given: port [`DEFAULT_HTTP_PORT`] on the
/// same loopback address as a loopback gRPC address `grpc` (so a first run on 127.0.0.1 needs no
/// token for either port), else on every address (0.0.0.0), where it then needs the token.
pub fn default_http_listen(grpc: std::net::SocketAddr) -> std::net::SocketAddr {
    let ip = if grpc.ip().is_loopback() { grpc.ip() } else { [0, 0, 0, 0].into() };
    std::net::SocketAddr::new(ip, DEFAULT_HTTP_PORT)
}

/// The most bytes of headers one gRPC request may carry (the token among them, see
/// `grpc/auth.rs`).
pub const MAX_HEADERS: u32 = 16 * 1024;

/// The HTTP port's default port number.
pub const DEFAULT_HTTP_PORT: u16 = 9447;

/// The result file of a state file: `<state>.result.json`.
pub fn result_file(state: &Path) -> PathBuf {
    let mut name = state.as_os_str().to_owned();
    name.push(".result.json");
    PathBuf::from(name)
}

/// Serves the run in `config.state` on `listener` (and the HTTP port, `--http-listen`: metrics
/// and the status page, on `http_listener`) until `shutdown` resolves or, with `exit_when_done`,
/// the run is complete. Everything received before the stop is committed. Returns the result
/// once the run is complete.
pub async fn serve(
    listener: TcpListener,
    http_listener: Option<TcpListener>,
    config: CheckedServeConfig,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<Option<RunResult>, ServeError> {
    use tracing::Instrument;
    let span = tracing::info_span!("run", state = %config.state.display());
    serve_inner(listener, http_listener, config, shutdown).instrument(span).await
}

async fn serve_inner(
    listener: TcpListener,
    http_listener: Option<TcpListener>,
    config: CheckedServeConfig,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<Option<RunResult>, ServeError> {
    // Off loopback the HTTP port needs the token or `public_status`; the gRPC port's rule (which
    // per-host tokens in the state file meet too) is checked by `open_run`.
    if let Some(addr) = http_listener.as_ref().and_then(|l| l.local_addr().ok()) {
        config.validate_http(addr)?;
    }
    let opened = open_run(&config, listener.local_addr().ok())?;
    tracing::info!(
        n = opened.run.n,
        jobs = opened.jobs.len(),
        fingerprint = %opened.run.fingerprint,
        listen = ?listener.local_addr().ok(),
        http = ?http_listener.as_ref().and_then(|l| l.local_addr().ok()),
        "run opened; coordinator listening"
    );
    let (running, engine_ended) = start_engine(&config, opened)?;
    let http_tasks = http_listener.map(|l| start_http(&config, &running, l));
    let admin_stop = Arc::new(AtomicBool::new(false));
    // `token add|revoke` beside this run reach it here (see `admin.rs`).
    let admin = crate::admin::spawn(
        crate::admin::prepare_dir(&config.state)?,
        running.engine.clone(),
        running.credentials.clone(),
        admin_stop.clone(),
    )
    .map_err(|source| ServeError::Thread { name: "nq-admin", source })?;
    let served = serve_grpc(&config, &running, listener, shutdown, engine_ended).await;

    // Everything already queued is committed before the engine ends.
    let Running { engine, engine_thread, snapshots, .. } = running;
    engine.send(Command::Shutdown);
    drop(engine);
    let joined = tokio::task::spawn_blocking(move || engine_thread.join()).await;
    if let Some(task) = http_tasks {
        task.abort();
    }
    admin_stop.store(true, Ordering::SeqCst);
    let _ = tokio::task::spawn_blocking(move || admin.join()).await;
    match joined {
        Ok(Ok(Ok(()))) => {}
        Ok(Ok(Err(EngineError::Store(e)))) => return Err(ServeError::Engine(e)),
        Ok(Ok(Err(EngineError::ResultFile { path, source }))) => {
            return Err(ServeError::ResultFile { path, source })
        }
        _ => return Err(ServeError::EnginePanicked),
    }
    served?;
    let record = snapshots.borrow().progress.result.clone();
    Ok(record)
}

/// Identities one credential may hold that have not delivered an answer yet, for a run that
/// expects `expected_workers` (all of them may arrive at once under one credential, and again
/// after a restart): twice that, and never under 64.
pub fn max_unproven(expected_workers: usize) -> usize {
    expected_workers.saturating_mul(2).max(64)
}

/// A run whose engine is started: what the ports serve from.
struct Running {
    engine: crate::engine::EngineHandle,
    /// The run as the engine last published it: what every status view shows, and (its
    /// result) the signal of the run's end.
    snapshots: watch::Receiver<Arc<RunSnapshot>>,
    engine_thread: std::thread::JoinHandle<Result<(), EngineError>>,
    metrics: Arc<Metrics>,
    jobs: Arc<Vec<nqueens_core::Job>>,
    run: pb::RunId,
    credentials: Arc<Credentials>,
    /// What every status reader shows (gRPC `Status`, the page, `/status.json`, `/metrics`).
    status: Arc<StatusCache>,
    heartbeat_seconds: u32,
}

/// Resolves when the engine thread ends (early only when it cannot commit).
type EngineEnded = tokio::sync::oneshot::Receiver<()>;

/// Step two: the engine on the opened run, and the spot checks' known answers (a thread that
/// ends on its own within seconds).
fn start_engine(
    config: &ServeConfig,
    opened: OpenedRun,
) -> Result<(Running, EngineEnded), ServeError> {
    let OpenedRun { store, jobs, run, credentials } = opened;
    let metrics = Arc::new(Metrics::default());
    let heartbeat_seconds = (config.lease_seconds / 3).max(1);
    let jobs = Arc::new(jobs);
    let engine_config = EngineConfig {
        result_file: result_file(&config.state),
        lease_duration: Duration::from_secs(config.lease_seconds as u64),
        heartbeat: Duration::from_secs(heartbeat_seconds as u64),
        spot_checks: config.spot_checks,
        jobs: Some(jobs.clone()),
        coordinator_checks: config.coordinator_checks,
        recheck_fraction: config.recheck_fraction,
        max_unproven: max_unproven(config.expected_workers),
    };
    let started = Engine::start(store, metrics.clone(), engine_config)?;
    let engine = started.handle;
    if config.spot_checks {
        drop(
            crate::spot_checks::spawn(jobs.clone(), engine.clone())
                .map_err(|source| ServeError::Thread { name: "nq-reference", source })?,
        );
    }
    // Its thread opens its connection and reads the rows now, off every caller: the first status
    // call finds them ready.
    let status = StatusCache::start(config.state.clone(), started.snapshots.clone())
        .map_err(|source| ServeError::Thread { name: "nq-status", source })?;
    let running = Running {
        engine,
        snapshots: started.snapshots,
        engine_thread: started.thread,
        metrics,
        jobs,
        run,
        credentials,
        status,
        heartbeat_seconds,
    };
    Ok((running, started.ended))
}

/// Step three, the HTTP port: metrics, the status page and `/status.json`.
fn start_http(
    config: &ServeConfig,
    running: &Running,
    listener: TcpListener,
) -> tokio::task::JoinHandle<()> {
    let status = running.status.clone();
    // An address not known to be loopback gets the token if there is one.
    let addr = listener.local_addr().unwrap_or_else(|_| ([0; 4], 0).into());
    let access = HttpAccess::new(config.token.as_deref(), config.public_status, addr);
    tracing::info!(token_required = access.token_required, "http port: metrics and status page");
    let state = Arc::new(HttpState { status, access });
    tokio::spawn(serve_http(listener, state))
}

/// Step three, the gRPC port, served until the caller's signal, the run's end (with
/// `exit_when_done`) or the engine's failure.
async fn serve_grpc(
    config: &ServeConfig,
    running: &Running,
    listener: TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
    engine_ended: EngineEnded,
) -> Result<(), ServeError> {
    let (stopping_tx, stopping_rx) = watch::channel(false);
    let service = CoordinatorService {
        engine: running.engine.clone(),
        run: running.run.clone(),
        jobs: running.jobs.clone(),
        status: running.status.clone(),
        lease_seconds: config.lease_seconds,
        heartbeat_seconds: running.heartbeat_seconds,
        stopping: stopping_rx.clone(),
        metrics: running.metrics.clone(),
        credentials: running.credentials.clone(),
    };
    let (health_reporter, health_service) = tonic_health::server::health_reporter();
    for name in ["", "nqueens.v1.Coordinator"] {
        health_reporter.set_service_status(name, tonic_health::ServingStatus::Serving).await;
    }
    // HTTP/2 keepalive: every connection is pinged, and closed when a ping goes unanswered.
    let limits = config.grpc_limits.consistent();
    let mut builder = tonic::transport::Server::builder()
        .http2_max_header_list_size(Some(MAX_HEADERS))
        .http2_keepalive_interval(Some(limits.keepalive_interval))
        .http2_keepalive_timeout(Some(limits.keepalive_timeout));
    if let Some((cert, key)) = &config.tls {
        let identity = tonic::transport::Identity::from_pem(cert, key);
        let tls = tonic::transport::ServerTlsConfig::new()
            .identity(identity)
            .timeout(limits.handshake_timeout);
        builder = builder.tls_config(tls)?;
    }
    let interceptor = TokenCheck::new(running.credentials.clone(), running.metrics.clone());
    // No request is decoded past MAX_REQUEST bytes; each field's bound is checked by the service.
    let coordinator = pb::coordinator_server::CoordinatorServer::new(service)
        .max_decoding_message_size(pb::bounds::MAX_REQUEST);
    let router = builder.add_service(health_service).add_service(
        tonic::service::interceptor::InterceptedService::new(coordinator, interceptor),
    );
    let ends = Ends { shutdown, engine_ended, exit_when_done: config.exit_when_done };
    let stop = stop_signal(ends, running, stopping_tx, health_reporter);
    let mut stopped = stopping_rx;
    // Accepts pause (rather than spin) while the process is out of file descriptors; each
    // connection is held to the limits of `grpc/connections.rs` (the caps, the handshake,
    // authentication and idle timeouts); TLS, when configured, is layered on them by the router.
    let incoming = GuardedIncoming::new(Incoming::new(listener, "grpc"), limits);
    let max_connections = incoming.admission().max_connections();
    crate::fd_limit::report(
        crate::fd_limit::soft_limit(),
        max_connections,
        config.expected_workers,
    );
    let server = router.serve_with_incoming_shutdown(incoming, stop);
    // Streams that do not end on their own get a few seconds after the stop before being cut.
    tokio::select! {
        r = server => r.map_err(ServeError::from),
        _ = async { let _ = stopped.wait_for(|s| *s).await; tokio::time::sleep(Duration::from_secs(5)).await; } => Ok(()),
    }
}

/// The three ways a coordinator's serving ends.
struct Ends<S> {
    /// The caller's signal (SIGTERM, Ctrl-C, a test's stop).
    shutdown: S,
    /// The engine thread's end.
    engine_ended: EngineEnded,
    /// Whether the run's completion ends it too.
    exit_when_done: bool,
}

/// What stops the gRPC port: the caller's signal, the run's end when asked to exit then, or the
/// engine's failure (reported NOT_SERVING first, so that probes see why the process goes away).
fn stop_signal<S: Future<Output = ()> + Send + 'static>(
    ends: Ends<S>,
    running: &Running,
    stopping_tx: watch::Sender<bool>,
    health_reporter: tonic_health::server::HealthReporter,
) -> impl Future<Output = ()> + Send + 'static {
    let mut complete = running.snapshots.clone();
    let Ends { shutdown, engine_ended, exit_when_done } = ends;
    async move {
        let done = async {
            if exit_when_done {
                let _ = complete.wait_for(|s| s.progress.result.is_some()).await;
                tokio::time::sleep(EXIT_LINGER).await;
            } else {
                std::future::pending::<()>().await;
            }
        };
        tokio::select! {
            _ = shutdown => tracing::info!("shutdown requested: no new calls; committing what arrived"),
            _ = done => tracing::info!("run complete: exiting as asked (--exit-when-done)"),
            _ = engine_ended => {
                // The engine only ends early when it cannot commit. Nothing uncommitted was
                // acknowledged; say so to the probes, then stop so that a supervisor restarts
                // the coordinator instead of leaving a process that answers and does nothing.
                tracing::error!("the engine stopped (it could not commit); reporting NOT_SERVING and exiting");
                for service in ["", "nqueens.v1.Coordinator"] {
                    health_reporter.set_service_status(service, tonic_health::ServingStatus::NotServing).await;
                }
                tokio::time::sleep(NOT_SERVING_LINGER).await;
            }
        }
        let _ = stopping_tx.send(true);
        health_reporter.set_service_status("", tonic_health::ServingStatus::NotServing).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The HTTP port follows a loopback gRPC address, so a first run on loopback starts without a
    /// token; off loopback it listens everywhere (and then needs the token).
    #[test]
    fn the_http_port_defaults_to_the_grpc_addresss_loopback() {
        let http = |grpc: &str| default_http_listen(grpc.parse().unwrap()).to_string();
        assert_eq!(http("127.0.0.1:7447"), "127.0.0.1:9447");
        assert_eq!(http("[::1]:7447"), "[::1]:9447");
        assert_eq!(http("0.0.0.0:7447"), "0.0.0.0:9447");
        assert_eq!(http("10.1.2.3:7447"), "0.0.0.0:9447");
        let config = ServeConfig::default();
        let first = default_http_listen("127.0.0.1:7447".parse().unwrap());
        assert_eq!(config.validate_http(first), Ok(()));
        assert!(config.validate_http(default_http_listen("10.1.2.3:1".parse().unwrap())).is_err());
    }
}
