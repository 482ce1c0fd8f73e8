//! Connections to the coordinator: the reconnect loop, and one session's pieces (connect,
//! register, result stream, acknowledgements, heartbeats, leases), each in its own function so
//! each can fail, be read and be logged on its own.
//!
//! Deadlines: connecting (TCP, TLS and HTTP/2 handshakes together) gets [`CONNECT_TIMEOUT`], every
//! unary call and the opening of the result stream [`CALL_TIMEOUT`], so a coordinator that accepts
//! the connection but never answers ends the session instead of hanging the worker.
//!
//! The wire ends here: leased `JobSpec`s become `core::Job`s with typed ids for the lanes, and
//! their answers become `JobResult`s under the current identity only as they enter the stream.
//! The worker's state is changed only through [`State`]'s methods; the run's end and a fatal
//! refusal are values ([`Ended`]) that the reconnect loop alone acts on.

use crate::config::WorkerConfig;
use crate::error::{SessionError, WorkerError};
use crate::lanes::Lanes;
use crate::state::{Identity, State};
use crate::work::{Finished, JobId, LeaseId};
use nqueens_core::Job;
use nqueens_proto as pb;
use nqueens_proto::{CheckBounds, Reason};
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

/// What the sessions need of the worker: its settings, what it registers as, the owner of its
/// state, and the lanes it feeds.
pub(crate) struct Worker {
    pub config: WorkerConfig,
    /// What solves, as registered ("cpu avx2 (8 threads)": the solver build, which tells a slow
    /// host; or the GPU's name).
    pub device: String,
    /// Lease slots declared to the coordinator (which sizes leases by them): the CPU threads, or
    /// with a GPU its slots plus the CPU threads that solve beside it.
    pub slots: usize,
    pub state: Arc<State>,
    pub lanes: Lanes,
}

/// How a session ended without a connection error: the worker's run is over.
pub(crate) enum Ended {
    /// The coordinator reported the run complete.
    RunComplete,
    /// The coordinator refused this worker for a reason that reconnecting cannot fix.
    Refused { reason: Reason, message: String },
}

/// Keeps the worker connected until the run is complete (`Ok`) or the coordinator refuses it for
/// good: each session ends on the first failure, and the next starts after a growing backoff.
pub(crate) async fn connect_loop(worker: &Worker, test: pb::SelfTest) -> Result<(), WorkerError> {
    // A worker started beside its coordinator may try before the coordinator listens: the first
    // retries come soon, and back off from there.
    let mut backoff = Duration::from_millis(25);
    loop {
        let started = Instant::now();
        let ended = session(worker, &test).await;
        worker.state.disconnected();
        // 0 until the first registration.
        let worker_id = worker.state.identity().map_or(0, |me| me.worker_id);
        match ended {
            Ok(Ended::RunComplete) => {
                tracing::info!(worker_id, "the coordinator reports the run complete; exiting");
                return Ok(());
            }
            Ok(Ended::Refused { reason, message }) => {
                return Err(WorkerError::Refused { reason, message })
            }
            Err(e) => {
                if let Some((reason, message)) = fatal_refusal(&e) {
                    return Err(WorkerError::Refused { reason, message });
                }
                tracing::warn!(worker_id, why = e.why(), error = %e.chain(), retry_in = ?backoff, "connection to the coordinator lost");
            }
        }
        if started.elapsed() > HEALTHY_SESSION {
            backoff = Duration::from_millis(200);
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(worker.config.max_backoff);
    }
}

/// One connection: register, open the result stream and re-send what is unacknowledged, then
/// lease, heartbeat and read acknowledgements until something fails or the run ends. All that
/// follows the registration is logged in a span carrying the worker id.
async fn session(worker: &Worker, test: &pb::SelfTest) -> Result<Ended, SessionError> {
    let mut client = connect(&worker.config).await?;
    let registered = register(&mut client, worker, test).await?;
    let run = registered.run.clone().unwrap_or_default();
    let me = Identity {
        n: run.n,
        fingerprint: run.fingerprint.clone(),
        worker_id: registered.worker_id,
        secret: registered.worker_secret.clone(),
    };
    let span = tracing::info_span!("session", worker_id = me.worker_id, n = run.n);
    async move {
        tracing::info!(fingerprint = %run.fingerprint, "registered with the coordinator");
        worker.state.registered(me.clone());
        if registered.run_complete {
            return Ok(Ended::RunComplete);
        }
        let acks = open_result_stream(&mut client, &worker.state, &me).await?;
        let heartbeat_every = Duration::from_secs(registered.heartbeat_seconds.max(1) as u64);
        tokio::select! {
            r = read_acks(&worker.state, acks) => r,
            r = heartbeats(&worker.state, client.clone(), &me, heartbeat_every) => r,
            r = lease_loop(worker, client, &me) => r,
        }
    }
    .instrument(span)
    .await
}

/// The run a registration names, as sent.
fn run_id(me: &Identity) -> pb::RunId {
    pb::RunId { n: me.n, fingerprint: me.fingerprint.clone() }
}

/// Opens a channel to the coordinator and wraps it in a client that sends the token, within
/// [`CONNECT_TIMEOUT`].
pub(crate) async fn connect(config: &WorkerConfig) -> Result<pb::Client, SessionError> {
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
    let previous = worker.state.identity();
    let mut request = pb::RegisterRequest {
        run: previous.as_ref().map(run_id),
        name: worker.config.name.clone(),
        host: crate::config::host_name(),
        slots: worker.slots.try_into().unwrap_or(u32::MAX),
        version: env!("CARGO_PKG_VERSION").to_owned(),
        self_test: Some(*test),
        previous_worker_id: previous.as_ref().map_or(0, |me| me.worker_id),
        previous_worker_secret: previous.map(|me| me.secret).unwrap_or_default(),
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

/// An answer as sent on the result stream, under the identity `me`.
fn to_wire(finished: Finished, me: &Identity) -> pb::JobResult {
    let (counts, seconds, error) = match finished.answer {
        Ok((counts, seconds)) => (Some(counts.into()), seconds, String::new()),
        Err(e) => (None, 0.0, e),
    };
    pb::JobResult {
        run: Some(run_id(me)),
        worker_id: me.worker_id,
        lease_id: finished.lease.get(),
        job_id: finished.id.get(),
        counts,
        seconds,
        error,
        worker_secret: me.secret.clone(),
    }
}

/// Opens the result stream, makes it where new answers go, and re-sends every answer not yet
/// acknowledged: answers outlive connections. Returns the stream of acknowledgements.
async fn open_result_stream(
    client: &mut pb::Client,
    state: &State,
    me: &Identity,
) -> Result<tonic::Streaming<pb::ResultAck>, SessionError> {
    let (stream_tx, stream_rx) = mpsc::channel::<Finished>(4096);
    let sent_as = me.clone();
    let results = ReceiverStream::new(stream_rx).map(move |f| to_wire(f, &sent_as));
    // A deadline on the request would end the whole stream, so only the opening is timed.
    let acks = tokio::time::timeout(CALL_TIMEOUT, client.results(results))
        .await
        .map_err(|_| SessionError::Call {
            call: "results",
            source: tonic::Status::deadline_exceeded("no answer to the result stream's opening"),
        })?
        .map_err(|source| SessionError::Call { call: "results", source })?
        .into_inner();
    let pending = state.connected(stream_tx.clone());
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

/// Reads acknowledgements: an acknowledged answer is committed and forgotten. Ends the session
/// on a refusal that reconnecting cannot fix, or the run's end.
async fn read_acks(
    state: &State,
    mut acks: tonic::Streaming<pb::ResultAck>,
) -> Result<Ended, SessionError> {
    while let Some(ack) = acks.next().await {
        let ack = ack.map_err(|source| SessionError::Call { call: "results", source })?;
        ack.check_bounds().map_err(|source| SessionError::Answer { call: "results", source })?;
        let outcome = pb::Outcome::try_from(ack.outcome).unwrap_or(pb::Outcome::Unspecified);
        if outcome == pb::Outcome::Rejected {
            let reason = Reason::try_from(ack.reason).unwrap_or(Reason::Unspecified);
            tracing::error!(job = ack.job_id, lease = ack.lease_id, ?reason, message = %ack.message, "result rejected by the coordinator");
            if is_fatal(reason) {
                return Ok(Ended::Refused { reason, message: ack.message });
            }
        } else if outcome == pb::Outcome::Conflict {
            tracing::warn!(job = ack.job_id, "coordinator recorded a conflict for this result");
        }
        state.acknowledged(JobId::new(ack.job_id), LeaseId::new(ack.lease_id));
        if ack.run_complete {
            return Ok(Ended::RunComplete);
        }
    }
    Err(SessionError::StreamClosed)
}

/// Tells the coordinator every `every` which leases this worker still holds, so they do not
/// expire however long their jobs take; learns of leases already lost and of the run's end.
async fn heartbeats(
    state: &State,
    mut client: pb::Client,
    me: &Identity,
    every: Duration,
) -> Result<Ended, SessionError> {
    loop {
        tokio::time::sleep(every).await;
        let request = pb::HeartbeatRequest {
            run: Some(run_id(me)),
            worker_id: me.worker_id,
            lease_ids: state.held_leases().into_iter().map(LeaseId::get).collect(),
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
            return Ok(Ended::RunComplete);
        }
    }
}

/// Keeps the lanes fed, one lease ahead: asks for more jobs while no more than a slot's worth
/// plus half the last lease is queued, so the next lease arrives before the lanes run dry, and
/// hands each lease to the lanes. An empty answer while work is queued waits for that work to run
/// low (or the coordinator's retry time) rather than idling the lanes. Stops asking once the
/// worker is stopping.
async fn lease_loop(
    worker: &Worker,
    mut client: pb::Client,
    me: &Identity,
) -> Result<Ended, SessionError> {
    let (state, slots) = (&worker.state, worker.slots);
    let mut ahead = 0;
    loop {
        if state.stopping() {
            std::future::pending::<()>().await;
        }
        if !state.wait_for_room(slots + ahead, Duration::from_secs(1)).await {
            continue;
        }
        state.flush();
        let request = pb::LeaseRequest {
            run: Some(run_id(me)),
            worker_id: me.worker_id,
            free_slots: slots.try_into().unwrap_or(u32::MAX),
            worker_secret: me.secret.clone(),
        };
        let reply = client
            .lease(with_deadline(request))
            .await
            .map_err(|source| SessionError::Call { call: "lease", source })?
            .into_inner();
        reply.check_bounds().map_err(|source| SessionError::Answer { call: "lease", source })?;
        if reply.run_complete {
            return Ok(Ended::RunComplete);
        }
        if reply.jobs.is_empty() {
            let retry_after = Duration::from_millis(reply.retry_after_ms.clamp(50, 5000) as u64);
            if state.in_flight() > slots {
                // Work is queued: ask again when it runs low, not later.
                state.wait_for_room(slots, retry_after).await;
            } else {
                // The coordinator may still be committing this worker's last answers (its cap
                // on held jobs counts them until then): ask again once one is acknowledged.
                state.wait_for_ack(retry_after).await;
            }
            continue;
        }
        tracing::debug!(lease = reply.lease_id, jobs = reply.jobs.len(), "lease received");
        ahead = reply.jobs.len() / 2;
        hand_over(worker, LeaseId::new(reply.lease_id), &reply.jobs);
    }
}

/// A lease's specs as jobs for the lanes, recorded as held first. A spec that does not fit a job
/// is reported as that job's error, like a solver error.
fn hand_over(worker: &Worker, lease: LeaseId, specs: &[pb::JobSpec]) {
    worker.state.leased(lease, specs.iter().map(|spec| JobId::new(spec.job_id)));
    let jobs = specs.iter().map(|spec| {
        let job = Job::try_from(spec).map_err(|e| format!("malformed job spec: {e}"));
        (JobId::new(spec.job_id), job)
    });
    worker.lanes.start(lease, jobs);
}

/// Releases every lease of the worker `me` (lease id 0), including one granted by a lease call
/// that a stop interrupted before its answer arrived: the number of jobs released.
pub(crate) async fn release_all(config: &WorkerConfig, me: &Identity) -> Result<u32, SessionError> {
    let mut client = connect(config).await?;
    let request = pb::ReleaseRequest {
        run: Some(run_id(me)),
        worker_id: me.worker_id,
        lease_id: 0,
        job_ids: vec![],
        worker_secret: me.secret.clone(),
    };
    let reply = client
        .release(with_deadline(request))
        .await
        .map_err(|source| SessionError::Call { call: "release", source })?;
    Ok(reply.into_inner().released)
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
