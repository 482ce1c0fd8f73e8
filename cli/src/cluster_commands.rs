//! The cluster subcommands of the binary: `serve`, `status`, `requeue` and `healthcheck`. Argument
//! parsing, signals and the tokio runtime live here; the work is in the coordinator library.

use anyhow::{bail, Context, Result};
use clap::Args;
use nqueens_coordinator::GrpcLimits;
use nqueens_coordinator::{default_http_listen, serve as serve_run, ServeConfig};
use nqueens_coordinator::{StatusView, WorkerQuery};
use nqueens_process::shutdown_signal;
use nqueens_proto as pb;
use nqueens_store::{Requeue, Requeued};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

#[derive(Args, Debug)]
pub struct ServeArgs {
    /// Board size. Required for a new run; when resuming it must match the state file (or be left
    /// out).
    #[arg(long, env = "NQ_N")]
    pub n: Option<u32>,
    /// SQLite state file: created if missing, resumed if present. The result goes to
    /// <FILE>.result.json.
    #[arg(long, env = "NQ_STATE", default_value = "nqueens.db")]
    pub state: PathBuf,
    /// gRPC listen address.
    #[arg(long, env = "NQ_LISTEN", default_value = "0.0.0.0:7447")]
    pub listen: String,
    /// HTTP listen address: Prometheus metrics on /metrics, the live status page on / (and the
    /// /status.json it polls); "off" disables it. Off loopback, readers must send the token
    /// (`Authorization: Bearer TOKEN`, or `?token=TOKEN` in the page's address) unless
    /// --public-status is given. [default: port 9447 on the loopback address of a loopback
    /// --listen (127.0.0.1:9447 or [::1]:9447), else 0.0.0.0:9447]
    /// (Its older names, `--metrics-listen` and NQ_METRICS_LISTEN, are still read.)
    #[arg(long = "http-listen", visible_alias = "metrics-listen", env = "NQ_HTTP_LISTEN")]
    pub http_listen: Option<String>,
    /// Serve metrics and the status page to anyone who can reach --http-listen, without the
    /// token (only on a network you trust; the page then shows the state file's name only).
    #[arg(long, env = "NQ_PUBLIC_STATUS", action = clap::ArgAction::SetTrue, value_parser = clap::builder::BoolishValueParser::new())]
    pub public_status: bool,
    /// gRPC connections that have not made an authenticated call yet that one IP address may
    /// hold at once; more are closed at once. Authenticated connections (registered workers,
    /// status readers with the token) are not capped per address: a NAT gateway may hold thousands.
    #[arg(long, env = "NQ_GRPC_MAX_CONNS_PER_IP", default_value_t = GrpcLimits::default().max_per_ip)]
    pub grpc_max_conns_per_ip: usize,
    /// Seconds a new gRPC connection has to make its first authenticated call (a worker's
    /// registration, a status call with the token); closed after this. Connections that have
    /// not authenticated also give way to newer ones when the port is full (its cap follows the
    /// descriptor limit, `ulimit -n`, less 128 kept for the process and the HTTP port).
    #[arg(long, env = "NQ_GRPC_AUTH_SECONDS", default_value_t = GrpcLimits::default().auth_timeout.as_secs())]
    pub grpc_auth_seconds: u64,
    /// Workers the run expects at once (each holds one gRPC connection): a warning at start
    /// when the descriptor limit (`ulimit -n`, raised to its hard limit at start) leaves room
    /// for fewer.
    #[arg(long, env = "NQ_EXPECTED_WORKERS", default_value_t = ServeConfig::default().expected_workers)]
    pub expected_workers: usize,
    /// Seconds a new gRPC connection has to start its handshake (HTTP/2 preface or TLS
    /// ClientHello) and to finish a TLS handshake; a silent one is closed after this.
    #[arg(long, env = "NQ_GRPC_HANDSHAKE_SECONDS", default_value_t = GrpcLimits::default().handshake_timeout.as_secs())]
    pub grpc_handshake_seconds: u64,
    /// Seconds a gRPC connection may send nothing at all (live clients answer the server's
    /// HTTP/2 pings every 20 s) before it is closed.
    #[arg(long, env = "NQ_GRPC_IDLE_SECONDS", default_value_t = GrpcLimits::default().idle_timeout.as_secs())]
    pub grpc_idle_seconds: u64,
    /// Shared secret every worker and status client must send. Required unless --listen is a
    /// loopback address or --insecure is given.
    #[arg(long, env = "NQ_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// Serve a non-loopback --listen address without a token (only on a network you trust).
    #[arg(long, env = "NQ_INSECURE", action = clap::ArgAction::SetTrue, value_parser = clap::builder::BoolishValueParser::new())]
    pub insecure: bool,
    /// Lease length: a worker silent for this long loses its jobs (heartbeats every third of it).
    #[arg(long, env = "NQ_LEASE_SECONDS", default_value_t = ServeConfig::default().lease_seconds)]
    pub lease_seconds: u32,
    /// Split into about this many jobs (default 2^(N-5), at most 2^21 = 2,097,152, also the
    /// largest accepted). Fixed at run creation.
    #[arg(long, env = "NQ_TARGET_JOBS")]
    pub target_jobs: Option<u64>,
    /// Fraction of jobs solved a second time by a different worker and compared. Fixed at creation.
    #[arg(long, env = "NQ_VERIFY_FRACTION", default_value_t = ServeConfig::default().verify_fraction)]
    pub verify_fraction: f64,
    /// No spot checks: the coordinator solves no known-answer jobs and mixes none into leases
    /// (saves about 0.5% of the work on a cluster you fully trust).
    #[arg(long, env = "NQ_NO_SPOT_CHECKS", action = clap::ArgAction::SetTrue, value_parser = clap::builder::BoolishValueParser::new())]
    pub no_spot_checks: bool,
    /// The coordinator solves no job itself to check workers: a newcomer's answers wait for
    /// another credential's, and so do disputes and re-checks (for a coordinator host too weak
    /// to re-solve a few jobs; above N=22 it never does).
    #[arg(long, env = "NQ_NO_COORDINATOR_CHECKS", action = clap::ArgAction::SetTrue, value_parser = clap::builder::BoolishValueParser::new())]
    pub no_coordinator_checks: bool,
    /// Fraction of the answers that would count on one credential's word (a trusted party
    /// alone, or identities of the shared token agreeing) drawn, in secret, for a re-check: a
    /// drawn answer counts only once another party (or the coordinator, N <= 22) gives the same,
    /// and the run does not end with one open. A party lying on L such answers goes unnoticed
    /// with probability (1 - fraction)^L.
    #[arg(long, env = "NQ_RECHECK_FRACTION", default_value_t = ServeConfig::default().recheck_fraction)]
    pub recheck_fraction: f64,
    /// Independent answers every job needs, fixed when the run is made: 1 (a trusted party's
    /// answer counts alone, re-checked at --recheck-fraction) or 2, a record run: a job counts
    /// only when two different credentials (per-host tokens; the shared token is one), or the
    /// coordinator and one credential, gave the same answer, whoever is trusted (about twice the
    /// CPU). [default: 1 for a new run, the stored run's when resuming]
    #[arg(long, env = "NQ_REPLICATION")]
    pub replication: Option<u8>,
    /// Exit 0 once the run is complete and the result file is written (env: true/false, 1/0,
    /// yes/no).
    #[arg(long, env = "NQ_EXIT_WHEN_DONE", action = clap::ArgAction::SetTrue, value_parser = clap::builder::BoolishValueParser::new())]
    pub exit_when_done: bool,
    /// PEM certificate chain: serve gRPC over TLS (with --tls-key).
    #[arg(long, env = "NQ_TLS_CERT", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// PEM private key of --tls-cert.
    #[arg(long, env = "NQ_TLS_KEY", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
}

#[derive(Args, Debug)]
pub struct StatusArgs {
    /// Coordinator URL, e.g. http://coord:7447.
    #[arg(long, env = "NQ_CONNECT", conflicts_with = "state", required_unless_present = "state")]
    pub connect: Option<String>,
    /// Read a state file offline instead (works while the coordinator is down).
    #[arg(long)]
    pub state: Option<PathBuf>,
    /// One JSON object instead of text.
    #[arg(long)]
    pub json: bool,
    /// Shared secret of the coordinator.
    #[arg(long, env = "NQ_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// PEM of the CA that signed the coordinator's certificate (for https:// URLs).
    #[arg(long, env = "NQ_TLS_CA")]
    pub tls_ca: Option<PathBuf>,
    /// Workers to list (the rest are counted by state, device, version and credential): those
    /// needing attention first (untrusted, in conflicts, the slowest). At most 1,000.
    #[arg(long, default_value_t = 20)]
    pub workers_limit: u32,
    /// Where the list of workers starts in that order.
    #[arg(long, default_value_t = 0)]
    pub workers_offset: u64,
    /// List only workers whose name, host, version, device or credential contains this (ignoring
    /// case), or whose state (untrusted, conflicts, working, idle) or id it is.
    #[arg(long, default_value = "")]
    pub workers_filter: String,
}

#[derive(Args, Debug)]
pub struct RequeueArgs {
    /// The run's state file. The coordinator must be stopped (the file is locked while it runs).
    #[arg(long, env = "NQ_STATE", default_value = "nqueens.db")]
    pub state: PathBuf,
    /// The held jobs (their results kept disagreeing). Without --held or --failed: both.
    #[arg(long)]
    pub held: bool,
    /// The failed jobs (workers kept reporting solver errors).
    #[arg(long)]
    pub failed: bool,
}

#[derive(Args, Debug)]
pub struct BackupArgs {
    /// The run's state file (read through a connection of its own; the coordinator may run).
    #[arg(long, env = "NQ_STATE", default_value = "nqueens.db")]
    pub state: PathBuf,
    /// The copy to make: a new file (an existing one is never overwritten).
    #[arg(long)]
    pub to: PathBuf,
}

#[derive(Args, Debug)]
pub struct HealthcheckArgs {
    /// Coordinator URL, e.g. http://127.0.0.1:7447.
    #[arg(long, env = "NQ_CONNECT", default_value = "http://127.0.0.1:7447")]
    pub connect: String,
    /// PEM of the CA that signed the coordinator's certificate (for https:// URLs).
    #[arg(long, env = "NQ_TLS_CA")]
    pub tls_ca: Option<PathBuf>,
}

fn runtime() -> Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .thread_name("nq-tokio")
        .enable_all()
        .build()
        .context("starting the tokio runtime")
}

impl ServeArgs {
    /// The one [`ServeConfig`] these arguments make (the files they name read); every default
    /// is [`ServeConfig::default`]'s.
    fn config(&self) -> Result<ServeConfig> {
        let tls = match (&self.tls_cert, &self.tls_key) {
            (Some(c), Some(k)) => Some((
                std::fs::read(c).with_context(|| format!("reading --tls-cert {}", c.display()))?,
                std::fs::read(k).with_context(|| format!("reading --tls-key {}", k.display()))?,
            )),
            _ => None,
        };
        Ok(ServeConfig {
            n: self.n,
            state: self.state.clone(),
            target_jobs: self.target_jobs,
            lease_seconds: self.lease_seconds,
            verify_fraction: self.verify_fraction,
            token: self.token.clone().filter(|t| !t.is_empty()),
            exit_when_done: self.exit_when_done,
            tls,
            insecure: self.insecure,
            spot_checks: !self.no_spot_checks,
            coordinator_checks: !self.no_coordinator_checks,
            recheck_fraction: self.recheck_fraction,
            replication: self.replication,
            public_status: self.public_status,
            expected_workers: self.expected_workers,
            grpc_limits: GrpcLimits {
                max_per_ip: self.grpc_max_conns_per_ip,
                handshake_timeout: Duration::from_secs(self.grpc_handshake_seconds.max(1)),
                auth_timeout: Duration::from_secs(self.grpc_auth_seconds.max(1)),
                idle_timeout: Duration::from_secs(self.grpc_idle_seconds.max(1)),
                ..GrpcLimits::default()
            },
        })
    }
}

pub fn serve(args: ServeArgs) -> Result<ExitCode> {
    // Settings first, checked once: nothing is bound, created or logged for a run that cannot
    // start.
    let config = args.config()?.check()?;
    // Each worker holds a descriptor: take all the hard limit allows (see `fd_limit.rs`).
    match nqueens_coordinator::fd_limit::raise_to_hard() {
        Ok((before, after)) if after > before => {
            tracing::info!(before, after, "descriptor limit raised to the hard limit")
        }
        Ok(_) => {}
        Err(e) => tracing::warn!(error = %e, "cannot raise the descriptor limit to the hard limit"),
    }
    runtime()?.block_on(async move {
        let shutdown = shutdown_signal();
        let listener = tokio::net::TcpListener::bind(&args.listen)
            .await
            .with_context(|| format!("binding --listen {}", args.listen))?;
        let http_listen = match http_listen(args.http_listen, |name| std::env::var(name).ok()) {
            Some(given) => given,
            None => default_http_listen(listener.local_addr()?).to_string(),
        };
        let http_listener = if http_listen == "off" {
            None
        } else {
            Some(
                tokio::net::TcpListener::bind(&http_listen)
                    .await
                    .with_context(|| format!("binding --http-listen {http_listen}"))?,
            )
        };
        let record = serve_run(listener, http_listener, config, shutdown).await?;
        if let Some(r) = &record {
            println!("{}", r.json_line());
            if let Some(why) = r.not_exact() {
                eprintln!("error: the run is complete but its result is not exact: {why}");
                return Ok(ExitCode::from(1));
            }
        }
        Ok(ExitCode::SUCCESS)
    })
}

/// The environment variable `--http-listen` had before it was named for the port it sets (it
/// serves the status page as well as metrics): still read, after `NQ_HTTP_LISTEN`.
const OLD_HTTP_LISTEN_ENV: &str = "NQ_METRICS_LISTEN";

/// The HTTP port's address: `given` (the flag or its alias, then `NQ_HTTP_LISTEN`), else the old
/// variable [`OLD_HTTP_LISTEN_ENV`] as `env` reads it; `None`: the default.
fn http_listen(given: Option<String>, env: impl Fn(&str) -> Option<String>) -> Option<String> {
    given.or_else(|| env(OLD_HTTP_LISTEN_ENV))
}

pub fn status(args: StatusArgs) -> Result<ExitCode> {
    let status = match (&args.state, &args.connect) {
        (Some(path), _) => {
            let query = WorkerQuery::new(
                args.workers_offset,
                args.workers_limit.into(),
                &args.workers_filter,
            );
            StatusView::read(path, &query)?
        }
        (None, Some(url)) => {
            let ca =
                args.tls_ca.as_ref().map(std::fs::read).transpose().context("reading --tls-ca")?;
            runtime()?.block_on(async {
                let channel = pb::connect_channel(url, ca.as_deref())
                    .await
                    .with_context(|| format!("connecting to {url}"))?;
                let mut client = pb::client(channel, args.token.as_deref())?;
                let response = client
                    .status(pb::StatusRequest {
                        workers_offset: args.workers_offset,
                        workers_limit: args.workers_limit,
                        workers_filter: args.workers_filter.clone(),
                    })
                    .await
                    .map_err(|s| anyhow::anyhow!("status call to {url} failed: {}", s.message()))?;
                anyhow::Ok(StatusView::from_response(response.into_inner(), url)?)
            })?
        }
        (None, None) => bail!("give --connect URL or --state FILE"),
    };
    if args.json {
        println!("{}", status.json());
    } else {
        print!("{}", status.text());
    }
    Ok(ExitCode::SUCCESS)
}

/// Held and failed jobs block a run's completion until an operator has looked at them (the
/// conflicts are in `status`) and gives them another attempt.
pub fn requeue(args: RequeueArgs) -> Result<ExitCode> {
    // Neither flag, or both: every blocked job.
    let which = match (args.held, args.failed) {
        (true, false) => Requeue::Held,
        (false, true) => Requeue::Failed,
        _ => Requeue::Both,
    };
    let mut store = nqueens_store::Store::open_existing_for_update(&args.state)?;
    let Requeued { held, failed } = store.requeue(which)?;
    if held + failed == 0 {
        println!("nothing to requeue in {}: no held or failed job", args.state.display());
    } else {
        println!(
            "requeued {held} held and {failed} failed job(s) in {}; `serve --state {}` solves them again",
            args.state.display(),
            args.state.display()
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// A consistent copy of a run, live or not (`nqueens_store::backup`).
pub fn backup(args: BackupArgs) -> Result<ExitCode> {
    let meta = nqueens_store::backup(&args.state, &args.to)
        .with_context(|| format!("backing up {} to {}", args.state.display(), args.to.display()))?;
    println!(
        "backed up {} (N={}, run {}) to {}",
        args.state.display(),
        meta.n,
        meta.fingerprint,
        args.to.display()
    );
    Ok(ExitCode::SUCCESS)
}

pub fn healthcheck(args: HealthcheckArgs) -> Result<ExitCode> {
    let ca = args.tls_ca.as_ref().map(std::fs::read).transpose().context("reading --tls-ca")?;
    runtime()?.block_on(async {
        let check = async {
            let channel = pb::connect_channel(&args.connect, ca.as_deref()).await?;
            let mut client = tonic_health::pb::health_client::HealthClient::new(channel);
            let response = client
                .check(tonic_health::pb::HealthCheckRequest { service: String::new() })
                .await?;
            anyhow::Ok(response.into_inner().status)
        };
        match tokio::time::timeout(Duration::from_secs(10), check).await {
            Ok(Ok(status))
                if status
                    == tonic_health::pb::health_check_response::ServingStatus::Serving as i32 =>
            {
                println!("SERVING");
                Ok(ExitCode::SUCCESS)
            }
            Ok(Ok(status)) => {
                println!("NOT SERVING (status {status})");
                Ok(ExitCode::from(1))
            }
            Ok(Err(e)) => {
                println!("UNREACHABLE: {e:#}");
                Ok(ExitCode::from(1))
            }
            Err(_) => {
                println!("UNREACHABLE: no answer within 10 s");
                Ok(ExitCode::from(1))
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Serve {
        #[command(flatten)]
        args: ServeArgs,
    }

    /// `--http-listen` as parsed from `flags`, with `NQ_METRICS_LISTEN` set to `old_env`.
    fn parsed(flags: &[&str], old_env: Option<&str>) -> Option<String> {
        let cli = Serve::try_parse_from([&["serve"], flags].concat()).unwrap();
        http_listen(cli.args.http_listen, |name| {
            assert_eq!(name, "NQ_METRICS_LISTEN");
            old_env.map(str::to_owned)
        })
    }

    /// The HTTP port has one name, `--http-listen` (`NQ_HTTP_LISTEN`); its old names still set it:
    /// the flag `--metrics-listen` and, when nothing newer is given, `NQ_METRICS_LISTEN`.
    #[test]
    fn the_http_ports_old_flag_and_variable_still_set_it() {
        // (The tests run without NQ_HTTP_LISTEN, so clap's own variable stays out of this.)
        assert!(std::env::var_os("NQ_HTTP_LISTEN").is_none());
        assert_eq!(parsed(&["--http-listen", "off"], None).as_deref(), Some("off"));
        assert_eq!(
            parsed(&["--metrics-listen", "127.0.0.1:1"], None).as_deref(),
            Some("127.0.0.1:1")
        );
        assert_eq!(parsed(&[], Some("127.0.0.1:2")).as_deref(), Some("127.0.0.1:2"));
        assert_eq!(parsed(&["--http-listen", "off"], Some("127.0.0.1:2")).as_deref(), Some("off"));
        assert_eq!(parsed(&[], None), None);
    }
}
