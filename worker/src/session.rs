//! Connections to the coordinator: the reconnect loop, and one session's pieces (connect,
//! register, result stream, acknowledgements, heartbeats, leases), each in its own function so
//! each can fail, be read and be logged on its own.
//!
//! Deadlines: connecting (TCP, TLS and HTTP/2 handshakes together) gets [`CONNECT_TIMEOUT`], every
//! unary call and the opening of the result stream [`CALL_TIMEOUT`], so a coordinator that accepts
//! the connection but never answers ends the session instead of hanging the worker.

use crate::error::SessionError;
use crate::{FinishedTx, Worker, WorkerError, WorkerExit};
use nqueens_proto as pb;
use nqueens_proto::{CheckBounds, Reason};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tokio_stream::StreamExt;
use tracing::Instrument;

/// Longest wait for a connection to be usable: 10 s. The proto crate's TCP connect timeout (5 s)
/// does not cover the TLS and HTTP/2 handshakes, which a half-dead coordinator can stall.
pub(crate) const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Longest wait for the answer to one call: 15 s. Every call the coordinator serves is a quick
/// state change; one that takes longer is stuck, and reconnecting is the way out.
pub(crate) const CALL_TIMEOUT: Duration = Duration::from_secs(15);

/// A session that lasted this long counts as healthy: the next reconnect starts from the shortest
/// backoff again.
const HEALTHY_SESSION: Duration = Duration::from_secs(30);

/// Keeps the worker connected until the run is complete or the coordinator refuses it for good:
/// each session ends on the first failure, and the next starts after a growing backoff.
pub(crate) async fn connect_loop(
    worker: Arc<Worker>,
    finished: FinishedTx,
    test: pb::SelfTest,
) -> Result<WorkerExit, WorkerError> {
    let mut backoff = Duration::from_millis(200);
    loop {
        let started = Instant::now();
        let ended = session(&worker, &finished, &test).await;
        if let Some(e) = worker.fatal.lock().take() {
            return Err(e);
        }
        // 0 until the first registration.
        let worker_id = worker.shared.lock().worker_id;
        if worker.complete.load(Ordering::SeqCst) {
            tracing::info!(worker_id, "the coordinator reports the run complete; exiting");
            return Ok(WorkerExit::RunComplete);
        }
        match ended {
            Err(e) => {
                if let Some((reason, message)) = fatal_refusal(&e) {
                    return Err(WorkerError::Refused { reason, message });
                }
                tracing::warn!(worker_id, why = e.why(), error = %e.chain(), retry_in = ?backoff, "connection to the coordinator lost");
            }
            Ok(()) => tracing::warn!(worker_id, retry_in = ?backoff, "session ended"),
        }
        worker.shared.lock().stream = None;
        if started.elapsed() > HEALTHY_SESSION {
            backoff = Duration::from_millis(200);
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(worker.config.max_backoff);
    }
}

/// One connection: register, open the result stream and re-send what is unacknowledged, then
/// lease, heartbeat and read acknowledgements until something fails or the run is complete. All
/// that follows the registration is logged in a span carrying the worker id.
async fn session(
    worker: &Arc<Worker>,
    finished: &FinishedTx,
    test: &pb::SelfTest,
) -> Result<(), SessionError> {
    let mut client = connect(&worker.config).await?;
    let registered = register(&mut client, worker, test).await?;
    let run = registered.run.clone().unwrap_or_default();
    let worker_id = registered.worker_id;
    let me = Identity { worker_id, secret: registered.worker_secret.clone() };
    let span = tracing::info_span!("session", worker_id, n = run.n);
    async move {
        tracing::info!(fingerprint = %run.fingerprint, "registered with the coordinator");
        adopt_identity(worker, &run, &me);
        if registered.run_complete {
            worker.complete.store(true, Ordering::SeqCst);
            return Ok(());
        }
        let acks = open_result_stream(&mut client, worker).await?;
        let heartbeat_every = Duration::from_secs(registered.heartbeat_seconds.max(1) as u64);
        tokio::select! {
            r = read_acks(worker, acks) => r,
            r = heartbeats(worker, client.clone(), &run, &me, heartbeat_every) => r,
            r = lease_loop(worker, client, &run, &me, finished) => r,
        }
    }
    .instrument(span)
    .await
}

/// Opens a channel to the coordinator and wraps it in a client that sends the token, within
/// [`CONNECT_TIMEOUT`].
pub(crate) async fn connect(config: &crate::WorkerConfig) -> Result<pb::Client, SessionError> {
    let url = &config.connect;
    let channel =
        tokio::time::timeout(CONNECT_TIMEOUT, pb::connect_channel(url, config.tls_ca.as_deref()))
            .await
            .map_err(|_| SessionError::ConnectTimeout {
                url: url.clone(),
                waited: CONNECT_TIMEOUT,
            })?
            .map_err(|source| SessionError::Connect { url: url.clone(), source })?;
    pb::client(channel, config.token.as_deref())
        .map_err(|source| SessionError::Call { call: "client setup", source })
}

/// A unary call's request with the [`CALL_TIMEOUT`] deadline (sent as `grpc-timeout` and enforced
/// by the client's channel as well).
pub(crate) fn with_deadline<T>(message: T) -> tonic::Request<T> {
    let mut request = tonic::Request::new(message);
    request.set_timeout(CALL_TIMEOUT);
    request
}

/// Registers with the coordinator, under the previous identity if there is one, so results and
/// leases of an earlier session stay this worker's. A coordinator that no longer knows that
/// identity gets a plain registration instead.
async fn register(
    client: &mut pb::Client,
    worker: &Worker,
    test: &pb::SelfTest,
) -> Result<pb::RegisterResponse, SessionError> {
    let (known_run, previous, previous_secret) = {
        let s = worker.shared.lock();
        (s.run.clone(), s.worker_id, s.secret.clone())
    };
    let mut request = pb::RegisterRequest {
        run: known_run,
        name: worker.config.name.clone(),
        host: crate::config::host_name(),
        slots: worker.config.threads as u32,
        version: env!("CARGO_PKG_VERSION").to_owned(),
        self_test: Some(*test),
        previous_worker_id: previous,
        previous_worker_secret: previous_secret,
        device: worker.device.clone(),
    };
    let call = |source| SessionError::Call { call: "register", source };
    let reply = match client.register(with_deadline(request.clone())).await {
        Err(s) if reason_of(&s) == Some(Reason::UnknownWorker) => {
            request.previous_worker_id = 0;
            request.previous_worker_secret.clear();
            client.register(with_deadline(request)).await.map_err(call)?
        }
        other => other.map_err(call)?,
    };
    let reply = reply.into_inner();
    reply.check_bounds().map_err(|source| SessionError::Answer { call: "register", source })?;
    Ok(reply)
}

/// Who this worker is to the coordinator: its id and the secret that proves it.
struct Identity {
    worker_id: u64,
    secret: String,
}

/// Records the run and the identity this session registered as. A new id (the coordinator forgot
/// the old one) is written into the unacknowledged results, which name the old one.
fn adopt_identity(worker: &Worker, run: &pb::RunId, me: &Identity) {
    let mut s = worker.shared.lock();
    for r in s.unacked.values_mut() {
        r.worker_id = me.worker_id;
        r.worker_secret = me.secret.clone();
    }
    s.run = Some(run.clone());
    s.worker_id = me.worker_id;
    s.secret = me.secret.clone();
}

/// Opens the result stream, makes it where new results go, and re-sends every result not yet
/// acknowledged: results outlive connections. Returns the stream of acknowledgements.
async fn open_result_stream(
    client: &mut pb::Client,
    worker: &Worker,
) -> Result<tonic::Streaming<pb::ResultAck>, SessionError> {
    let (stream_tx, stream_rx) = mpsc::channel::<pb::JobResult>(4096);
    // A deadline on the request would end the whole stream, so only the opening is timed.
    let acks = tokio::time::timeout(CALL_TIMEOUT, client.results(ReceiverStream::new(stream_rx)))
        .await
        .map_err(|_| SessionError::Call {
            call: "results",
            source: tonic::Status::deadline_exceeded("no answer to the result stream's opening"),
        })?
        .map_err(|source| SessionError::Call { call: "results", source })?
        .into_inner();
    let pending: Vec<pb::JobResult> = {
        let mut s = worker.shared.lock();
        s.stream = Some(stream_tx.clone());
        s.unacked.values().cloned().collect()
    };
    if !pending.is_empty() {
        tracing::info!(results = pending.len(), "re-sending unacknowledged results");
    }
    for r in pending {
        if stream_tx.send(r).await.is_err() {
            return Err(SessionError::StreamClosed);
        }
    }
    Ok(acks)
}

/// Reads acknowledgements: an acknowledged result is committed and forgotten here. Ends the
/// session on a refusal that reconnecting cannot fix (kept in `worker.fatal`) or the run's end.
async fn read_acks(
    worker: &Worker,
    mut acks: tonic::Streaming<pb::ResultAck>,
) -> Result<(), SessionError> {
    while let Some(ack) = acks.next().await {
        let ack = ack.map_err(|source| SessionError::Call { call: "results", source })?;
        ack.check_bounds().map_err(|source| SessionError::Answer { call: "results", source })?;
        let outcome = pb::Outcome::try_from(ack.outcome).unwrap_or(pb::Outcome::Unspecified);
        if outcome == pb::Outcome::Rejected {
            let reason = Reason::try_from(ack.reason).unwrap_or(Reason::Unspecified);
            tracing::error!(job = ack.job_id, lease = ack.lease_id, ?reason, message = %ack.message, "result rejected by the coordinator");
            if is_fatal(reason) {
                *worker.fatal.lock() =
                    Some(WorkerError::Refused { reason, message: ack.message.clone() });
                return Ok(());
            }
        } else if outcome == pb::Outcome::Conflict {
            tracing::warn!(job = ack.job_id, "coordinator recorded a conflict for this result");
        }
        worker.shared.lock().unacked.remove(&(ack.job_id, ack.lease_id));
        if ack.run_complete {
            worker.complete.store(true, Ordering::SeqCst);
            return Ok(());
        }
    }
    Err(SessionError::StreamClosed)
}

/// Tells the coordinator every `every` which leases this worker still holds, so they do not
/// expire however long their jobs take; learns of leases already lost and of the run's end.
async fn heartbeats(
    worker: &Worker,
    mut client: pb::Client,
    run: &pb::RunId,
    me: &Identity,
    every: Duration,
) -> Result<(), SessionError> {
    loop {
        tokio::time::sleep(every).await;
        let lease_ids: Vec<u64> = worker.shared.lock().held.keys().copied().collect();
        let request = pb::HeartbeatRequest {
            run: Some(run.clone()),
            worker_id: me.worker_id,
            lease_ids,
            worker_secret: me.secret.clone(),
        };
        let reply = client
            .heartbeat(with_deadline(request))
            .await
            .map_err(|source| SessionError::Call { call: "heartbeat", source })?
            .into_inner();
        reply
            .check_bounds()
            .map_err(|source| SessionError::Answer { call: "heartbeat", source })?;
        if !reply.lost_lease_ids.is_empty() {
            tracing::warn!(leases = ?reply.lost_lease_ids, "leases lost (expired); results for them are still sent");
        }
        if reply.run_complete {
            worker.complete.store(true, Ordering::SeqCst);
            return Ok(());
        }
    }
}

/// Keeps the solver pool fed, one lease ahead: asks for more jobs while no more than a slot's
/// worth plus half the last lease is queued, so the next lease arrives before the pool runs dry,
/// and hands each lease to the pool. An empty answer while work is queued waits for that work to
/// run low (or the coordinator's retry time) rather than idling the pool. Stops asking once the
/// worker is stopping.
async fn lease_loop(
    worker: &Arc<Worker>,
    mut client: pb::Client,
    run: &pb::RunId,
    me: &Identity,
    finished: &FinishedTx,
) -> Result<(), SessionError> {
    let slots = worker.config.threads;
    let mut ahead = 0;
    loop {
        if worker.stopping.load(Ordering::SeqCst) {
            std::future::pending::<()>().await;
        }
        if !wait_for_room(worker, slots + ahead, Duration::from_secs(1)).await {
            continue;
        }
        let request = pb::LeaseRequest {
            run: Some(run.clone()),
            worker_id: me.worker_id,
            free_slots: slots as u32,
            worker_secret: me.secret.clone(),
        };
        let reply = client
            .lease(with_deadline(request))
            .await
            .map_err(|source| SessionError::Call { call: "lease", source })?
            .into_inner();
        reply.check_bounds().map_err(|source| SessionError::Answer { call: "lease", source })?;
        if reply.run_complete {
            worker.complete.store(true, Ordering::SeqCst);
            return Ok(());
        }
        if reply.jobs.is_empty() {
            let retry_after = Duration::from_millis(reply.retry_after_ms.clamp(50, 5000) as u64);
            if worker.in_flight.load(Ordering::SeqCst) > slots {
                // Work is queued: ask again when it runs low, not later.
                wait_for_room(worker, slots, retry_after).await;
            } else {
                tokio::time::sleep(retry_after).await;
            }
            continue;
        }
        tracing::debug!(lease = reply.lease_id, jobs = reply.jobs.len(), "lease received");
        ahead = reply.jobs.len() / 2;
        worker.start_batch(reply.lease_id, &reply.jobs, run, me.worker_id, finished);
    }
}

/// Waits (at most `patience`) until no more than `queued` jobs are in flight: whether they are.
async fn wait_for_room(worker: &Worker, queued: usize, patience: Duration) -> bool {
    let deadline = tokio::time::Instant::now() + patience;
    loop {
        let wait = worker.job_done.notified();
        if worker.in_flight.load(Ordering::SeqCst) <= queued {
            return true;
        }
        if tokio::time::timeout_at(deadline, wait).await.is_err() {
            return false;
        }
    }
}

/// The typed reason a coordinator's status carries, if any.
pub(crate) fn reason_of(status: &tonic::Status) -> Option<Reason> {
    pb::status_reason(status).and_then(|d| Reason::try_from(d.reason).ok())
}

/// The coordinator's refusal that ended a session, if no reconnect can fix it: one of
/// [`is_fatal`], or a registration refused as malformed (the worker's name, host or device past
/// the contract's bounds: the next registration would send them again).
fn fatal_refusal(e: &SessionError) -> Option<(Reason, String)> {
    let SessionError::Call { call, source } = e else { return None };
    let reason = reason_of(source)?;
    let malformed_registration = *call == "register" && reason == Reason::InvalidRequest;
    (is_fatal(reason) || malformed_registration).then(|| (reason, source.message().to_owned()))
}

/// Refusals that reconnecting cannot fix.
fn is_fatal(reason: Reason) -> bool {
    matches!(
        reason,
        Reason::BadToken
            | Reason::WrongRun
            | Reason::VersionMismatch
            | Reason::SelfTestFailed
            | Reason::UntrustedWorker
    )
}
