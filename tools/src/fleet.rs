//! The load tool's fake workers: each one a host of its own (its own gRPC connection from its own
//! loopback source address, optionally its own per-host token) that registers, leases, answers
//! every job at once from counts computed up front, heartbeats its lease, keeps each answer until
//! it is acknowledged, and rides out refusals and a coordinator restart the way a real worker
//! does (register again as itself, send again what was not acknowledged).

use anyhow::{Context, Result};
use nqueens_core::JobCounts;
use nqueens_proto as pb;
use std::net::Ipv4Addr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio_stream::StreamExt;

/// What every fake worker counts into, read by the report.
#[derive(Default)]
pub struct FleetCounters {
    /// Workers registered at least once.
    pub registered: AtomicU64,
    /// Workers whose first lease call was answered.
    pub seated: AtomicU64,
    /// Registrations refused (any reason), and other calls that failed.
    pub refusals: AtomicU64,
    pub call_errors: AtomicU64,
    /// Answers acknowledged by the coordinator (durable).
    pub acked: AtomicU64,
    pub lease_calls: AtomicU64,
    pub heartbeat_calls: AtomicU64,
    /// Registrations after the first (a coordinator restart, an eviction).
    pub reregistrations: AtomicU64,
    /// Bumped by the tool when it restarts the coordinator; `reseated` counts the workers whose
    /// lease call was answered since.
    pub generation: AtomicU64,
    pub reseated: AtomicU64,
    /// Set once a worker heard that the run is complete.
    pub complete: AtomicBool,
    /// Every acknowledged (job, worker) pair, kept when asked (to check none is lost).
    pub acked_pairs: Mutex<Vec<(u64, u64)>>,
    pub keep_pairs: AtomicBool,
}

/// How the fake workers reach the coordinator.
#[derive(Clone)]
pub struct Target {
    pub port: u16,
    pub counts: Arc<Vec<JobCounts>>,
    pub slots: u32,
}

/// The loopback source address of host `index` of `addresses`: 127.0.0.1 when there is one (all
/// behind one NAT address), else 127.1.0.0 + index (each address a host).
pub fn source_address(index: usize, addresses: usize) -> Ipv4Addr {
    if addresses <= 1 {
        return Ipv4Addr::new(127, 0, 0, 1);
    }
    let a = (index % addresses) as u32;
    Ipv4Addr::new(127, 1 + (a >> 16) as u8, (a >> 8) as u8, a as u8)
}

/// A channel to 127.0.0.1:`port` whose connections come from `source`; tonic reconnects it by
/// itself after the coordinator restarts.
pub fn channel_from(port: u16, source: Ipv4Addr) -> Result<tonic::transport::Channel> {
    let endpoint = tonic::transport::Endpoint::from_shared(format!("http://127.0.0.1:{port}"))?
        .connect_timeout(Duration::from_secs(10))
        .timeout(Duration::from_secs(60));
    let connector = tower::service_fn(move |_uri: tonic::transport::Uri| async move {
        let socket = tokio::net::TcpSocket::new_v4()?;
        socket.bind((source, 0).into())?;
        let stream = socket.connect(([127, 0, 0, 1], port).into()).await?;
        // As a real worker's channel does (tonic's default): no Nagle delay on small calls.
        stream.set_nodelay(true)?;
        Ok::<_, std::io::Error>(hyper_util::rt::TokioIo::new(stream))
    });
    Ok(endpoint.connect_with_connector_lazy(connector))
}

/// One fake worker's identity with the coordinator.
struct Identity {
    run: pb::RunId,
    worker_id: u64,
    secret: String,
    heartbeat: Duration,
}

/// Runs fake worker `index` until the run is complete.
pub async fn fake_worker(
    index: usize,
    source: Ipv4Addr,
    token: Option<String>,
    target: Target,
    counters: Arc<FleetCounters>,
) -> Result<()> {
    let channel = channel_from(target.port, source)?;
    let mut client = pb::client(channel, token.as_deref())?;
    let mut identity: Option<Identity> = None;
    let mut seen = Seen { first: true, generation: 0 };
    let mut ever_registered = false;
    // Answers sent and not yet acknowledged: sent again after a reconnect.
    let mut unacked: Vec<(u64, u64)> = Vec::new();
    let mut backoff = Duration::from_millis(50);
    while !counters.complete.load(Ordering::Relaxed) {
        let me = match identity.take() {
            Some(me) => me,
            None => match register(&mut client, index, source, None, target.slots).await {
                Ok(me) => {
                    if !std::mem::replace(&mut ever_registered, true) {
                        counters.registered.fetch_add(1, Ordering::Relaxed);
                    } else {
                        counters.reregistrations.fetch_add(1, Ordering::Relaxed);
                    }
                    me
                }
                Err(_) => {
                    counters.refusals.fetch_add(1, Ordering::Relaxed);
                    back_off(&mut backoff).await;
                    continue;
                }
            },
        };
        match serve(&mut client, &me, &target, &counters, &mut unacked, &mut seen).await {
            Ok(()) => return Ok(()),
            Err(_) => counters.call_errors.fetch_add(1, Ordering::Relaxed),
        };
        // Register again as itself (same id and secret) until the coordinator answers: it may
        // be restarting.
        let previous = Some((me.worker_id, me.secret.clone()));
        while !counters.complete.load(Ordering::Relaxed) {
            back_off(&mut backoff).await;
            match register(&mut client, index, source, previous.clone(), target.slots).await {
                Ok(again) => {
                    counters.reregistrations.fetch_add(1, Ordering::Relaxed);
                    backoff = Duration::from_millis(50);
                    identity = Some(again);
                    break;
                }
                Err(status) if status.code() == tonic::Code::Unavailable => continue,
                Err(_) => {
                    counters.refusals.fetch_add(1, Ordering::Relaxed);
                    break;
                }
            }
        }
    }
    Ok(())
}

/// Waits before the next try: longer after each failure, up to 2 s.
async fn back_off(backoff: &mut Duration) {
    tokio::time::sleep(*backoff).await;
    *backoff = (*backoff * 2).min(Duration::from_secs(2));
}

async fn register(
    client: &mut pb::Client,
    index: usize,
    source: Ipv4Addr,
    previous: Option<(u64, String)>,
    slots: u32,
) -> Result<Identity, tonic::Status> {
    let test =
        pb::SelfTest { passed: true, n: 10, expected_total: 724, found_total: 724, seconds: 0.0 };
    let (previous_worker_id, previous_worker_secret) = previous.unwrap_or_default();
    let reg = client
        .register(pb::RegisterRequest {
            run: None,
            name: format!("fake-{index}"),
            host: source.to_string(),
            slots,
            version: env!("CARGO_PKG_VERSION").into(),
            self_test: Some(test),
            previous_worker_id,
            previous_worker_secret,
            device: "loadgen".into(),
        })
        .await?
        .into_inner();
    Ok(Identity {
        run: reg.run.unwrap_or_default(),
        worker_id: reg.worker_id,
        secret: reg.worker_secret,
        heartbeat: Duration::from_secs(reg.heartbeat_seconds.max(1) as u64),
    })
}

/// Which of the tool's counters a worker has been counted in.
struct Seen {
    first: bool,
    generation: u64,
}

/// Leases, answers and heartbeats as `me` until the run is complete; an error ends it (the
/// caller registers again and comes back).
async fn serve(
    client: &mut pb::Client,
    me: &Identity,
    target: &Target,
    counters: &FleetCounters,
    unacked: &mut Vec<(u64, u64)>,
    seen: &mut Seen,
) -> Result<(), tonic::Status> {
    let (tx, rx) = tokio::sync::mpsc::channel(8192);
    let mut acks =
        client.results(tokio_stream::wrappers::ReceiverStream::new(rx)).await?.into_inner();
    let answer = |lease_id: u64, job_id: u64| pb::JobResult {
        run: Some(me.run.clone()),
        worker_id: me.worker_id,
        lease_id,
        job_id,
        counts: Some(target.counts[job_id as usize].into()),
        seconds: 0.0001,
        error: String::new(),
        worker_secret: me.secret.clone(),
    };
    // What was sent before and never acknowledged goes again.
    let resend = std::mem::take(unacked);
    let mut last_beat = Instant::now();
    let mut held: Vec<u64> = Vec::new();
    for (lease_id, job_id) in resend {
        let _ = tx.send(answer(lease_id, job_id)).await;
        unacked.push((lease_id, job_id));
    }
    drain_acks(&mut acks, unacked, counters, me.worker_id).await?;
    loop {
        if counters.complete.load(Ordering::Relaxed) {
            return Ok(());
        }
        if last_beat.elapsed() >= me.heartbeat && !held.is_empty() {
            last_beat = Instant::now();
            counters.heartbeat_calls.fetch_add(1, Ordering::Relaxed);
            let beat = client
                .heartbeat(pb::HeartbeatRequest {
                    run: Some(me.run.clone()),
                    worker_id: me.worker_id,
                    lease_ids: held.clone(),
                    worker_secret: me.secret.clone(),
                })
                .await?
                .into_inner();
            held.retain(|id| !beat.lost_lease_ids.contains(id));
        }
        counters.lease_calls.fetch_add(1, Ordering::Relaxed);
        let lease = client
            .lease(pb::LeaseRequest {
                run: Some(me.run.clone()),
                worker_id: me.worker_id,
                free_slots: target.slots,
                worker_secret: me.secret.clone(),
            })
            .await?
            .into_inner();
        if std::mem::take(&mut seen.first) {
            counters.seated.fetch_add(1, Ordering::Relaxed);
        }
        let generation = counters.generation.load(Ordering::Relaxed);
        if seen.generation < generation {
            seen.generation = generation;
            counters.reseated.fetch_add(1, Ordering::Relaxed);
        }
        if lease.run_complete {
            counters.complete.store(true, Ordering::Relaxed);
            return Ok(());
        }
        if lease.jobs.is_empty() {
            let wait = Duration::from_millis(lease.retry_after_ms.clamp(10, 1000) as u64);
            tokio::time::sleep(wait).await;
            continue;
        }
        held = vec![lease.lease_id];
        for job in &lease.jobs {
            unacked.push((lease.lease_id, job.job_id));
            if tx.send(answer(lease.lease_id, job.job_id)).await.is_err() {
                return Err(tonic::Status::unavailable("result stream closed"));
            }
        }
        drain_acks(&mut acks, unacked, counters, me.worker_id).await?;
    }
}

/// Reads one acknowledgement per unacknowledged answer.
async fn drain_acks(
    acks: &mut tonic::Streaming<pb::ResultAck>,
    unacked: &mut Vec<(u64, u64)>,
    counters: &FleetCounters,
    worker_id: u64,
) -> Result<(), tonic::Status> {
    while !unacked.is_empty() {
        let ack = match acks.next().await {
            Some(ack) => ack?,
            None => return Err(tonic::Status::unavailable("ack stream ended")),
        };
        unacked.retain(|(l, j)| !(*l == ack.lease_id && *j == ack.job_id));
        counters.acked.fetch_add(1, Ordering::Relaxed);
        if counters.keep_pairs.load(Ordering::Relaxed) {
            counters.acked_pairs.lock().expect("pairs").push((ack.job_id, worker_id));
        }
        if ack.run_complete {
            counters.complete.store(true, Ordering::Relaxed);
            return Ok(());
        }
    }
    Ok(())
}

/// Every (job, worker) pair with a result row in the state file at `state` (read-only).
pub fn stored_pairs(state: &std::path::Path) -> Result<std::collections::HashSet<(u64, u64)>> {
    let conn =
        rusqlite::Connection::open_with_flags(state, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
            .with_context(|| format!("opening {}", state.display()))?;
    let mut q = conn.prepare("SELECT job_id, worker_id FROM results")?;
    let rows = q.query_map([], |r| Ok((r.get::<_, i64>(0)? as u64, r.get::<_, i64>(1)? as u64)))?;
    Ok(rows.collect::<Result<_, _>>()?)
}
