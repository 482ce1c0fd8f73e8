//! `nqueens-loadgen`: the coordinator's load benchmark.
//!
//! Starts a real coordinator process (the `nqueens-coordinator` binary next to this one) on a fresh
//! state file, then drives it with many fake workers over loopback gRPC, each a host of its own:
//! its own connection from its own loopback address (`--addresses`, 1 = every worker behind one
//! NAT address), optionally its own per-host token (`--tokens`). The fake workers do not search:
//! the counts of every job are computed up front, so they answer as fast as the coordinator can
//! lease and commit, and the run still ends on the exact totals. `--restart-after F` SIGKILLs the
//! coordinator once a fraction F of the jobs is acknowledged, checks that every acknowledged
//! answer is in the state file, restarts it, and measures how long the workers take to be seated
//! again. The coordinator is killed on every exit path of the tool.

use anyhow::{bail, Context, Result};
use clap::Parser;
use nqueens_core::{job_list, JobCounts, SplitParams, Tally};
use nqueens_tools::coordinator_proc::{Coordinator, Usage};
use nqueens_tools::fleet::{fake_worker, source_address, stored_pairs, FleetCounters, Target};
use nqueens_tools::probe::LatencyProbe;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

#[derive(Parser, Debug)]
#[command(about = "Load benchmark: many fake workers (hosts) against a real coordinator")]
struct Args {
    /// Board size of the run.
    #[arg(long, default_value_t = 16)]
    n: u32,
    /// Jobs in the run (split target).
    #[arg(long, default_value_t = 100_000)]
    target_jobs: u64,
    /// Fake workers (each its own gRPC connection).
    #[arg(long, default_value_t = 32)]
    workers: usize,
    /// Loopback source addresses the workers are spread over (each one a host; 1 = all behind
    /// one NAT address) [default: one per worker].
    #[arg(long)]
    addresses: Option<usize>,
    /// Per-host tokens the addresses are spread over (0 = no token at all).
    #[arg(long, default_value_t = 0)]
    tokens: usize,
    /// Slots each fake worker declares.
    #[arg(long, default_value_t = 64)]
    slots: u32,
    /// SIGKILL the coordinator once this fraction of the jobs is acknowledged, check that no
    /// acknowledged answer is lost, and restart it.
    #[arg(long)]
    restart_after: Option<f64>,
    /// Fail unless every worker is seated (registered, a lease call answered) within this many
    /// seconds of the start, and again of the restart.
    #[arg(long, default_value_t = 60.0)]
    seat_limit: f64,
    /// The coordinator's lease period: after a SIGKILL, leases granted whose answer never
    /// reached their worker run out only after it.
    #[arg(long, default_value_t = 60)]
    lease_seconds: u64,
    /// Directory for the state file (default: a temporary directory).
    #[arg(long)]
    dir: Option<std::path::PathBuf>,
}

#[tokio::main]
async fn main() -> Result<()> {
    let args = Args::parse();
    let addresses = args.addresses.unwrap_or(args.workers).clamp(1, 1 << 20);
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
    nqueens_tools::coordinator_proc::raise_nofile();

    let tmp = tempfile::tempdir()?;
    let dir = args.dir.clone().unwrap_or_else(|| tmp.path().to_owned());
    let state = dir.join(format!("loadgen{}.db", args.n));
    for suffix in ["", "-wal", "-shm", ".result.json"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", state.display()));
    }
    let port = free_port()?;
    let http_port = free_port()?;
    let serve_args = serve_args(&args, &state, port, http_port, addresses);
    let tokens = make_tokens(&serve_args, &state, args.tokens).await?;

    let mut coordinator = Coordinator::spawn(&serve_args)?;
    nqueens_tools::connect(&format!("http://127.0.0.1:{port}"), Duration::from_secs(120)).await?;
    let counters = Arc::new(FleetCounters::default());
    counters.keep_pairs.store(args.restart_after.is_some(), Ordering::Relaxed);
    let target = Target { port, counts: Arc::new(counts), slots: args.slots };
    let started = Instant::now();
    let mut tasks = Vec::with_capacity(args.workers);
    for i in 0..args.workers {
        let source = source_address(i, addresses);
        let token = (!tokens.is_empty()).then(|| tokens[(i % addresses) % tokens.len()].clone());
        let (target, counters) = (target.clone(), counters.clone());
        tasks.push(tokio::spawn(fake_worker(i, source, token, target, counters)));
    }
    let probe = LatencyProbe::start(port, http_port);
    let seating = wait_seated(&counters, args.workers, started, args.seat_limit, false).await;
    let (registered_s, seated_s) = seating?;
    eprintln!(
        "seated {} workers in {seated_s:.2}s (all registered in {registered_s:.2}s)",
        args.workers
    );

    let mut usage = Usage::default();
    let mut storms = vec![(started, started + Duration::from_secs_f64(seated_s))];
    let mut restart = None;
    if let Some(fraction) = args.restart_after {
        let at = (fraction * list.jobs.len() as f64) as u64;
        let watch = Restart { at, counters: &counters, state: &state, serve_args: &serve_args };
        let (killed_at, reseated_s) =
            watch.kill_and_restart(&args, &mut coordinator, &mut usage).await?;
        storms.push((killed_at, killed_at + Duration::from_secs_f64(reseated_s)));
        restart = Some(reseated_s);
    }

    for t in tasks {
        t.await??;
    }
    let elapsed = started.elapsed().as_secs_f64();
    let mut latencies = probe.stop().await;
    for (from, to) in storms {
        latencies.storm(from, to);
    }
    let (status, out) = coordinator.wait_output().await?;
    usage.add(status.usage);
    report(&args, addresses, list.jobs.len(), &counters, elapsed, registered_s, seated_s);
    println!(
        "coordinator: peak RSS {:.0} MiB, CPU {:.1} s (user+system{}), exit {}",
        usage.max_rss_kib as f64 / 1024.0,
        usage.cpu_seconds,
        if restart.is_some() { ", both processes" } else { "" },
        status.code
    );
    println!("{latencies}");
    let record: serde_json::Value =
        serde_json::from_str(out.trim()).with_context(|| format!("coordinator result {out:?}"))?;
    if record["total"].as_u64().map(u128::from) != Some(expected.total)
        || record["unique"].as_u64().map(u128::from) != Some(expected.unique)
    {
        bail!("wrong totals from the coordinator: {out}");
    }
    println!("totals exact: total {} unique {}", expected.total, expected.unique);
    Ok(())
}

/// The restart mode: what to watch, and what to start again.
struct Restart<'a> {
    /// Acknowledged answers before the SIGKILL.
    at: u64,
    counters: &'a Arc<FleetCounters>,
    state: &'a std::path::Path,
    serve_args: &'a [String],
}

impl Restart<'_> {
    /// SIGKILLs `coordinator` once `at` answers are acknowledged, fails unless every
    /// acknowledged answer is in the state file, starts it again and waits until every worker
    /// is seated again; returns when it killed, and the seconds from the kill to that.
    async fn kill_and_restart(
        &self,
        args: &Args,
        coordinator: &mut Coordinator,
        usage: &mut Usage,
    ) -> Result<(Instant, f64)> {
        let counters = self.counters;
        // Watched from a thread of its own: the runtime's threads are busy with the workers.
        let (at, watched) = (self.at, counters.clone());
        let reached = tokio::task::spawn_blocking(move || loop {
            if watched.acked.load(Ordering::Relaxed) >= at {
                return true;
            }
            if watched.complete.load(Ordering::Relaxed) {
                return false;
            }
            std::thread::sleep(Duration::from_millis(1));
        });
        if !reached.await? {
            bail!("the run completed before {at} answers were acknowledged");
        }
        counters.keep_pairs.store(false, Ordering::Relaxed);
        usage.add(coordinator.kill()?);
        let acked: Vec<(u64, u64)> = std::mem::take(&mut *counters.acked_pairs.lock().unwrap());
        let stored = stored_pairs(self.state)?;
        let lost = acked.iter().filter(|p| !stored.contains(p)).count();
        if lost > 0 {
            bail!("{lost} of {} acknowledged answers are not in the state file", acked.len());
        }
        println!("restart: SIGKILLed after {} acknowledged answers; none lost", acked.len());
        let killed_at = Instant::now();
        counters.generation.fetch_add(1, Ordering::Relaxed);
        *coordinator = Coordinator::spawn(self.serve_args)?;
        let reseat = wait_seated(counters, args.workers, killed_at, args.seat_limit, true).await;
        let (_, reseated_s) = reseat?;
        println!(
            "restart: all {} workers seated again {reseated_s:.2}s after the kill",
            args.workers
        );
        Ok((killed_at, reseated_s))
    }
}

/// Prints the run's figures.
fn report(
    args: &Args,
    addresses: usize,
    jobs: usize,
    counters: &FleetCounters,
    elapsed: f64,
    registered_s: f64,
    seated_s: f64,
) {
    let get = |c: &std::sync::atomic::AtomicU64| c.load(Ordering::Relaxed);
    let acked = get(&counters.acked);
    println!(
        "loadgen: {} fake workers from {} addresses ({} tokens), {} jobs of N={}",
        args.workers, addresses, args.tokens, jobs, args.n
    );
    println!("seating: all registered in {registered_s:.2}s, all seated in {seated_s:.2}s");
    println!(
        "throughput: {acked} durable results in {elapsed:.2}s = {:.0} results/s; {:.0} lease calls/s; {:.0} heartbeat calls/s",
        acked as f64 / elapsed,
        get(&counters.lease_calls) as f64 / elapsed,
        get(&counters.heartbeat_calls) as f64 / elapsed,
    );
    println!(
        "refusals: {} registrations refused, {} calls failed, {} registrations again",
        get(&counters.refusals),
        get(&counters.call_errors),
        get(&counters.reregistrations)
    );
}

/// Waits until all `workers` are seated (or, `again`, seated since the restart); the seconds
/// since `since` until all registered and until all seated.
async fn wait_seated(
    counters: &FleetCounters,
    workers: usize,
    since: Instant,
    limit: f64,
    again: bool,
) -> Result<(f64, f64)> {
    let mut registered_at = None;
    loop {
        let elapsed = since.elapsed().as_secs_f64();
        let registered = counters.registered.load(Ordering::Relaxed) as usize;
        if registered >= workers && registered_at.is_none() {
            registered_at = Some(elapsed);
        }
        let seated = if again { &counters.reseated } else { &counters.seated };
        let seated = seated.load(Ordering::Relaxed) as usize;
        if seated >= workers {
            return Ok((registered_at.unwrap_or(elapsed), elapsed));
        }
        if counters.complete.load(Ordering::Relaxed) {
            if again {
                // Nothing was measured: the restart came too late in the run.
                bail!("the run completed with only {seated} of {workers} workers seated again after the restart: give it more jobs (--n, --target-jobs)");
            }
            return Ok((registered_at.unwrap_or(elapsed), elapsed));
        }
        if elapsed > limit {
            bail!("only {seated} of {workers} workers seated after {limit}s ({registered} registered)");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn free_port() -> Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// The coordinator's `serve` arguments for this run.
fn serve_args(
    args: &Args,
    state: &std::path::Path,
    port: u16,
    http_port: u16,
    addresses: usize,
) -> Vec<String> {
    let mut v: Vec<String> = [
        "serve",
        "--n",
        &args.n.to_string(),
        "--target-jobs",
        &args.target_jobs.to_string(),
        "--verify-fraction",
        "0",
        "--exit-when-done",
        "--lease-seconds",
        &args.lease_seconds.to_string(),
        "--listen",
        &format!("127.0.0.1:{port}"),
        "--http-listen",
        &format!("127.0.0.1:{http_port}"),
        "--expected-workers",
        &args.workers.to_string(),
        // Every worker of an address may wait for its first call at once.
        "--grpc-max-conns-per-ip",
        &(args.workers / addresses + 64).to_string(),
        "--state",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    v.push(state.display().to_string());
    v
}

/// Makes `count` per-host tokens in the run's state file (created by a first short start of the
/// coordinator) and returns them.
async fn make_tokens(
    serve_args: &[String],
    state: &std::path::Path,
    count: usize,
) -> Result<Vec<String>> {
    if count == 0 {
        return Ok(Vec::new());
    }
    let mut create: Vec<String> = serve_args.to_vec();
    create.retain(|a| a != "--exit-when-done");
    let mut first = Coordinator::spawn(&create)?;
    let port = serve_args
        .iter()
        .skip_while(|a| *a != "--listen")
        .nth(1)
        .and_then(|l| l.rsplit(':').next())
        .context("--listen")?;
    nqueens_tools::connect(&format!("http://127.0.0.1:{port}"), Duration::from_secs(120)).await?;
    first.terminate().await?;
    let t = Instant::now();
    let tokens = (0..count)
        .map(|i| nqueens_store::add_credential(state, &format!("host-{i}")))
        .collect::<Result<Vec<_>, _>>()?;
    eprintln!("made {count} per-host tokens in {:.1}s", t.elapsed().as_secs_f64());
    Ok(tokens)
}
