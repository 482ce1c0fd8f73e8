//! `nqueens-loadgen`: the coordinator's load benchmark.
//!
//! Starts a real coordinator process (the `nqueens-coordinator` binary next to this one) on a fresh
//! state file, then drives it with many fake workers over loopback gRPC. The fake workers do not
//! search: the counts of every job are computed up front, so they answer as fast as the coordinator
//! can lease and commit, and the run still ends on the exact totals. Prints durable (acknowledged)
//! results per second.

use anyhow::{bail, Context, Result};
use clap::Parser;
use nqueens_core::{job_list, JobCounts, SplitParams, Tally};
use nqueens_proto as pb;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio_stream::StreamExt;

#[derive(Parser, Debug)]
#[command(about = "Load benchmark: many fake workers against a real coordinator over loopback")]
struct Args {
    /// Board size of the run.
    #[arg(long, default_value_t = 16)]
    n: u32,
    /// Jobs in the run (split target).
    #[arg(long, default_value_t = 100_000)]
    target_jobs: u64,
    /// Fake workers (each one gRPC connection).
    #[arg(long, default_value_t = 32)]
    workers: usize,
    /// Slots each fake worker claims per lease request.
    #[arg(long, default_value_t = 64)]
    slots: u32,
    /// Directory for the state file (default: a temporary directory).
    #[arg(long)]
    dir: Option<std::path::PathBuf>,
}

#[tokio::main]
async fn main() -> Result<()> {
    let args = Args::parse();
    let params = SplitParams::with_target(args.target_jobs);
    let list = job_list(args.n, &params)?;
    eprintln!("precomputing counts of {} jobs of N={} ...", list.jobs.len(), args.n);
    let t = Instant::now();
    let counts: Vec<JobCounts> = {
        use rayon::prelude::*;
        list.jobs.par_iter().map(|j| j.solve()).collect::<Result<_, _>>()?
    };
    let mut tally = Tally::new(args.n)?;
    for (job, c) in list.jobs.iter().zip(&counts) {
        tally.add(job.weight, c)?;
    }
    let expected = tally.totals()?;
    eprintln!("precomputed in {:.1}s: total {}", t.elapsed().as_secs_f64(), expected.total);

    let tmp = tempfile::tempdir()?;
    let dir = args.dir.clone().unwrap_or_else(|| tmp.path().to_owned());
    let state = dir.join(format!("loadgen{}.db", args.n));
    let _ = std::fs::remove_file(&state);
    let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
    let coordinator_bin = nqueens_tools::coordinator_binary()?;
    let mut coordinator = Command::new(&coordinator_bin)
        .args([
            "serve",
            "--n",
            &args.n.to_string(),
            "--target-jobs",
            &args.target_jobs.to_string(),
            "--verify-fraction",
            "0",
            "--exit-when-done",
        ])
        .args([
            "--lease-seconds",
            "60",
            "--metrics-listen",
            "off",
            "--listen",
            &format!("127.0.0.1:{port}"),
            "--state",
        ])
        .arg(&state)
        .env("RUST_LOG", "warn")
        .stdout(Stdio::piped())
        .spawn()
        .with_context(|| format!("starting {}", coordinator_bin.display()))?;
    let url = format!("http://127.0.0.1:{port}");
    let channel = nqueens_tools::connect(&url, Duration::from_secs(60)).await?;

    let counts = Arc::new(counts);
    let acked = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let mut tasks = Vec::new();
    for i in 0..args.workers {
        let (channel, counts, acked) = (channel.clone(), counts.clone(), acked.clone());
        let slots = args.slots;
        tasks
            .push(tokio::spawn(async move { fake_worker(i, channel, counts, acked, slots).await }));
    }
    for t in tasks {
        t.await??;
    }
    let elapsed = started.elapsed().as_secs_f64();
    let n_acked = acked.load(Ordering::Relaxed);
    let status = coordinator.wait()?;
    let mut out = String::new();
    if let Some(mut stdout) = coordinator.stdout.take() {
        use std::io::Read;
        stdout.read_to_string(&mut out)?;
    }
    println!(
        "loadgen: {} durable results in {:.2}s = {:.0} results/s ({} fake workers, {} jobs, N={})",
        n_acked,
        elapsed,
        n_acked as f64 / elapsed,
        args.workers,
        list.jobs.len(),
        args.n
    );
    println!("coordinator exit: {status}; result: {}", out.trim());
    let record: serde_json::Value =
        serde_json::from_str(out.trim()).context("coordinator result line")?;
    if record["total"].as_u64().map(u128::from) != Some(expected.total)
        || record["unique"].as_u64().map(u128::from) != Some(expected.unique)
    {
        bail!("wrong totals from the coordinator: {out}");
    }
    println!("totals exact: total {} unique {}", expected.total, expected.unique);
    Ok(())
}

async fn fake_worker(
    i: usize,
    channel: tonic::transport::Channel,
    counts: Arc<Vec<JobCounts>>,
    acked: Arc<AtomicU64>,
    slots: u32,
) -> Result<()> {
    let mut client = pb::client(channel, None)?;
    let test =
        pb::SelfTest { passed: true, n: 10, expected_total: 724, found_total: 724, seconds: 0.0 };
    let reg = client
        .register(pb::RegisterRequest {
            run: None,
            name: format!("fake-{i}"),
            host: "loadgen".into(),
            slots,
            version: env!("CARGO_PKG_VERSION").into(),
            self_test: Some(test),
            previous_worker_id: 0,
            previous_worker_secret: String::new(),
            device: String::new(),
        })
        .await?
        .into_inner();
    let run = reg.run.unwrap_or_default();
    let (tx, rx) = tokio::sync::mpsc::channel(8192);
    let mut acks =
        client.results(tokio_stream::wrappers::ReceiverStream::new(rx)).await?.into_inner();
    loop {
        let lease = client
            .lease(pb::LeaseRequest {
                run: Some(run.clone()),
                worker_id: reg.worker_id,
                free_slots: slots,
                worker_secret: reg.worker_secret.clone(),
            })
            .await?
            .into_inner();
        if lease.run_complete {
            return Ok(());
        }
        if lease.jobs.is_empty() {
            tokio::time::sleep(Duration::from_millis(lease.retry_after_ms.max(10) as u64)).await;
            continue;
        }
        for job in &lease.jobs {
            let c = counts[job.job_id as usize];
            let result = pb::JobResult {
                run: Some(run.clone()),
                worker_id: reg.worker_id,
                lease_id: lease.lease_id,
                job_id: job.job_id,
                counts: Some(c.into()),
                seconds: 0.0001,
                error: String::new(),
                worker_secret: reg.worker_secret.clone(),
            };
            tx.send(result).await?;
        }
        for _ in 0..lease.jobs.len() {
            let ack = acks.next().await.context("ack stream ended")??;
            acked.fetch_add(1, Ordering::Relaxed);
            if ack.run_complete {
                return Ok(());
            }
        }
    }
}
