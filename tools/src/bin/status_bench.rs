//! `nqueens-status-bench`: does polling `status` slow down leasing?
//!
//! Builds (or reuses) a cluster state file holding `--counted` counted results, written through
//! the real store (`Store::apply`, row checksums included) from the real counts of the first jobs,
//! starts a real coordinator (the `nqueens-coordinator` binary next to this one) on it, and
//! measures the latency of `Lease` calls from one client that leases and reports jobs: first
//! alone, then while `--pollers` clients call `Status` in a loop. Every status call sums and
//! checks all the counted rows, so this is the worst case of an operator's `watch status`.

use anyhow::{ensure, Context, Result};
use clap::Parser;
use nqueens_core::{job_list, Job, JobCounts, SplitParams};
use nqueens_proto as pb;
use nqueens_scheduler::Change;
use nqueens_store::{RunKind, RunPolicy, Store, WorkerRow};
use rayon::prelude::*;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio_stream::StreamExt;

#[derive(Parser, Debug)]
#[command(
    about = "Lease latency with and without concurrent status polling, on a large state file"
)]
struct Args {
    /// Board size of the run.
    #[arg(long, default_value_t = 19)]
    n: u32,
    /// Split target of the run: it must give more jobs than --counted.
    #[arg(long, default_value_t = 300_000)]
    target_jobs: u64,
    /// Counted results in the state file before the coordinator starts.
    #[arg(long, default_value_t = 500_000)]
    counted: u64,
    /// Concurrent status pollers in the second phase.
    #[arg(long, default_value_t = 6)]
    pollers: usize,
    /// Lease calls measured in each phase.
    #[arg(long, default_value_t = 1000)]
    leases: usize,
    /// Jobs asked for per lease call.
    #[arg(long, default_value_t = 4)]
    slots: u32,
    /// The state file: reused if it already holds the run with enough counted results.
    #[arg(long, default_value = "status-bench.db")]
    state: PathBuf,
}

/// Counted results committed per transaction while the state file is built.
const BATCH: usize = 50_000;

fn main() -> Result<()> {
    let args = Args::parse();
    let list = job_list(args.n, &SplitParams::with_target(args.target_jobs))?;
    let needed = args.counted + 2 * (args.leases as u64) * args.slots as u64;
    ensure!(
        list.jobs.len() as u64 >= needed,
        "N={} --target-jobs {} gives {} jobs; {} are needed ({} counted + the jobs leased)",
        args.n,
        args.target_jobs,
        list.jobs.len(),
        needed,
        args.counted
    );
    prepare_state(&args, &list)?;
    let jobs = Arc::new(list.jobs);
    tokio::runtime::Builder::new_multi_thread().enable_all().build()?.block_on(measure(&args, jobs))
}

/// Creates the state file with `args.counted` counted results, unless it already has them.
fn prepare_state(args: &Args, list: &nqueens_core::JobList) -> Result<()> {
    let started = Instant::now();
    let mut store = Store::open_or_create(
        &args.state,
        list,
        nqueens_proto::PROTOCOL_MAJOR,
        RunPolicy::default(),
        RunKind::Cluster,
    )
    .with_context(|| format!("opening {}", args.state.display()))?;
    let have = count(&args.state, "SELECT COUNT(*) FROM results WHERE counted=1")?;
    if have >= args.counted {
        eprintln!("reusing {}: {have} counted results", args.state.display());
        return Ok(());
    }
    ensure!(have == 0, "{} holds {have} counted results; remove it", args.state.display());
    eprintln!(
        "building {}: {} jobs of N={}, solving the first {} ...",
        args.state.display(),
        list.jobs.len(),
        args.n,
        args.counted
    );
    let jobs = &list.jobs[..args.counted as usize];
    let counts: Vec<JobCounts> = jobs.par_iter().map(|j| j.solve()).collect::<Result<_, _>>()?;
    eprintln!("solved in {:.1}s; committing", started.elapsed().as_secs_f64());
    let seed = WorkerRow {
        id: 1,
        name: "status-bench-seed".into(),
        host: "localhost".into(),
        slots: 1,
        version: env!("CARGO_PKG_VERSION").into(),
        credential: String::new(),
        secret_digest: Vec::new(),
        device: "cpu (1 threads)".into(),
    };
    for (i, chunk) in jobs.chunks(BATCH).enumerate() {
        let mut changes = Vec::with_capacity(2 * chunk.len());
        for job in chunk {
            changes.extend(Change::finished_on_one_answer(
                job.id,
                1.into(),
                counts[job.id.index()],
            ));
        }
        let workers = if i == 0 { vec![seed.clone()] } else { Vec::new() };
        store.apply(&changes, &workers)?;
    }
    eprintln!("state file ready in {:.1}s", started.elapsed().as_secs_f64());
    Ok(())
}

fn count(state: &Path, sql: &str) -> Result<u64> {
    let conn =
        rusqlite::Connection::open_with_flags(state, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)?;
    Ok(conn.query_row(sql, [], |r| r.get::<_, i64>(0))? as u64)
}

/// Latencies, sorted.
struct Latencies(Vec<Duration>);

impl Latencies {
    fn new(mut v: Vec<Duration>) -> Self {
        v.sort();
        Latencies(v)
    }
    fn at(&self, q: f64) -> f64 {
        let i = ((self.0.len() as f64 - 1.0) * q).round() as usize;
        self.0[i].as_secs_f64() * 1e3
    }
    fn line(&self) -> String {
        format!(
            "{} calls, p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
            self.0.len(),
            self.at(0.5),
            self.at(0.99),
            self.at(1.0)
        )
    }
}

async fn measure(args: &Args, jobs: Arc<Vec<Job>>) -> Result<()> {
    let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
    let bin = nqueens_tools::coordinator_binary()?;
    let mut coordinator = Command::new(&bin)
        .args(["serve", "--lease-seconds", "600", "--http-listen", "off", "--listen"])
        .arg(format!("127.0.0.1:{port}"))
        .arg("--state")
        .arg(&args.state)
        // The coordinator logs at RUST_LOG when set (its status calls' timings are at debug).
        .env("RUST_LOG", std::env::var("RUST_LOG").unwrap_or_else(|_| "warn".into()))
        .stdout(Stdio::null())
        .spawn()
        .with_context(|| format!("starting {}", bin.display()))?;
    let outcome = drive(args, port, jobs).await;
    unsafe {
        libc::kill(coordinator.id() as i32, libc::SIGTERM);
    }
    let status = coordinator.wait()?;
    outcome?;
    ensure!(status.success(), "coordinator exit: {status}");
    Ok(())
}

async fn drive(args: &Args, port: u16, jobs: Arc<Vec<Job>>) -> Result<()> {
    let url = format!("http://127.0.0.1:{port}");
    let started = Instant::now();
    let channel = nqueens_tools::connect(&url, Duration::from_secs(300)).await?;
    eprintln!("coordinator up in {:.1}s", started.elapsed().as_secs_f64());
    let mut client = pb::client(channel.clone(), None)?;

    // One status call first: it opens the reader and shows what a poll costs on its own.
    let t = Instant::now();
    let s = client.status(pb::StatusRequest::default()).await?.into_inner();
    ensure!(s.jobs_done >= args.counted, "only {} jobs done", s.jobs_done);
    println!(
        "state: {} jobs, {} done; one status call alone: {:.1} ms",
        s.jobs_total,
        s.jobs_done,
        t.elapsed().as_secs_f64() * 1e3
    );

    let test =
        pb::SelfTest { passed: true, n: 10, expected_total: 724, found_total: 724, seconds: 0.0 };
    let reg = client
        .register(pb::RegisterRequest {
            run: None,
            name: "status-bench".into(),
            host: "localhost".into(),
            slots: args.slots,
            version: env!("CARGO_PKG_VERSION").into(),
            self_test: Some(test),
            previous_worker_id: 0,
            previous_worker_secret: String::new(),
            device: String::new(),
        })
        .await?
        .into_inner();
    let run = reg.run.clone().context("register names no run")?;
    let (tx, rx) = tokio::sync::mpsc::channel(1024);
    let acks = client.results(tokio_stream::wrappers::ReceiverStream::new(rx)).await?.into_inner();

    let mut leaser = Leaser {
        client,
        channel,
        run,
        tx,
        acks,
        worker_id: reg.worker_id,
        secret: reg.worker_secret.clone(),
        slots: args.slots,
        jobs,
    };
    let (alone, wall, _, _) = leaser.phase(0, args.leases).await?;
    println!("lease alone:               {} ({:.1}s)", alone.line(), wall.as_secs_f64());
    let (busy, wall, polled, polls) = leaser.phase(args.pollers, args.leases).await?;
    println!(
        "lease with {} status pollers: {} ({:.1}s; {} status calls meanwhile)",
        args.pollers,
        busy.line(),
        wall.as_secs_f64(),
        polled
    );
    println!("status calls:              {}", polls.line());
    Ok(())
}

/// The leasing client: leases jobs and reports their real counts (solved between calls).
struct Leaser {
    client: pb::Client,
    channel: tonic::transport::Channel,
    run: pb::RunId,
    tx: tokio::sync::mpsc::Sender<pb::JobResult>,
    acks: tonic::Streaming<pb::ResultAck>,
    worker_id: u64,
    secret: String,
    slots: u32,
    jobs: Arc<Vec<Job>>,
}

impl Leaser {
    /// `leases` lease calls, each followed by its results, while `pollers` clients call `Status`
    /// in a loop. Returns the lease latencies, the wall time, the status calls made meanwhile and
    /// the status latencies.
    async fn phase(
        &mut self,
        pollers: usize,
        leases: usize,
    ) -> Result<(Latencies, Duration, u64, Latencies)> {
        let stop = Arc::new(AtomicBool::new(false));
        let polls = Arc::new(AtomicU64::new(0));
        let mut tasks = Vec::new();
        for _ in 0..pollers {
            let mut poller = pb::client(self.channel.clone(), None)?;
            let (stop, polls) = (stop.clone(), polls.clone());
            tasks.push(tokio::spawn(async move {
                let mut took = Vec::new();
                while !stop.load(Ordering::Relaxed) {
                    let t = Instant::now();
                    poller.status(pb::StatusRequest::default()).await?;
                    took.push(t.elapsed());
                    polls.fetch_add(1, Ordering::Relaxed);
                }
                anyhow::Ok(took)
            }));
        }
        if pollers > 0 {
            // Let the pollers get going before leasing starts.
            let t = Instant::now();
            while polls.load(Ordering::Relaxed) < pollers as u64
                && t.elapsed() < Duration::from_secs(60)
            {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
        let t = Instant::now();
        let polls_before = polls.load(Ordering::Relaxed);
        let mut took = Vec::with_capacity(leases);
        for _ in 0..leases {
            let call = Instant::now();
            let lease = self
                .client
                .lease(pb::LeaseRequest {
                    run: Some(self.run.clone()),
                    worker_id: self.worker_id,
                    free_slots: self.slots,
                    worker_secret: self.secret.clone(),
                })
                .await?
                .into_inner();
            took.push(call.elapsed());
            ensure!(!lease.jobs.is_empty(), "no job leased");
            let jobs = self.jobs.clone();
            let ids: Vec<u64> = lease.jobs.iter().map(|j| j.job_id).collect();
            let solved = tokio::task::spawn_blocking(move || {
                ids.iter().map(|&id| jobs[id as usize].solve()).collect::<Result<Vec<_>, _>>()
            })
            .await??;
            for (job, counts) in lease.jobs.iter().zip(solved) {
                self.tx
                    .send(pb::JobResult {
                        run: Some(self.run.clone()),
                        worker_id: self.worker_id,
                        lease_id: lease.lease_id,
                        job_id: job.job_id,
                        counts: Some(counts.into()),
                        seconds: 0.001,
                        error: String::new(),
                        worker_secret: self.secret.clone(),
                    })
                    .await?;
            }
            for _ in &lease.jobs {
                self.acks.next().await.context("ack stream ended")??;
            }
        }
        let wall = t.elapsed();
        let polled = polls.load(Ordering::Relaxed) - polls_before;
        stop.store(true, Ordering::Relaxed);
        let mut poll_took = Vec::new();
        for task in tasks {
            poll_took.extend(task.await??);
        }
        Ok((Latencies::new(took), wall, polled, Latencies::new(poll_took)))
    }
}
