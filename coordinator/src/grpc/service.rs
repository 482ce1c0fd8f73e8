//! The gRPC face of the coordinator: checks that each request names this run, converts it to the
//! engine's domain types (through [`super::wire`]), forwards it to the engine and answers with
//! protocol messages carrying typed failure reasons. A call the engine took (or a status call
//! under the shared token) marks its connection authenticated (see `admission.rs`).

use super::admission::{peer_addr, ConnectionMark};
use super::auth::{revoked, Credentials};
use super::wire::{
    caller_from_wire, query_from_wire, rejected_ack, result_ack, RegisterCall, ResultCall,
};
use crate::engine::{
    Caller, Command, EngineHandle, Granted, JobAnswer, Refusal, Registered, Reply,
};
use crate::metrics::Metrics;
use crate::secrets::Credential;
use crate::status::StatusCache;
use nqueens_core::Job;
use nqueens_proto as pb;
use nqueens_proto::{status_with_reason, CheckBounds, Reason};
use nqueens_scheduler::{JobId, LeaseId, Verdict, WorkerId};
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use tokio::sync::{oneshot, watch};
use tokio_stream::wrappers::ReceiverStream;
use tokio_stream::{Stream, StreamExt};
use tonic::{Code, Request, Response, Status, Streaming};

pub struct CoordinatorService {
    pub engine: EngineHandle,
    pub run: pb::RunId,
    /// The run's job list, to send leased jobs by id.
    pub jobs: Arc<Vec<Job>>,
    /// What `status` shows: the run as the engine last published it, and the committed rows'
    /// sums, read off the engine thread.
    pub status: Arc<StatusCache>,
    pub lease_seconds: u32,
    pub heartbeat_seconds: u32,
    /// Flips to true when the coordinator starts shutting down; open result streams end then.
    pub stopping: watch::Receiver<bool>,
    pub metrics: Arc<Metrics>,
    /// The credentials in force: every message of a result stream is checked against them.
    pub credentials: Arc<Credentials>,
}

/// Why a request naming `named` does not belong to the run `ours`, if it does not.
fn run_mismatch(ours: &pb::RunId, named: Option<&pb::RunId>) -> Option<String> {
    match named {
        Some(r) if r.n == ours.n && r.fingerprint == ours.fingerprint => None,
        Some(r) => Some(format!(
            "this coordinator runs N={} fingerprint {}, the request names N={} fingerprint {}",
            ours.n, ours.fingerprint, r.n, r.fingerprint
        )),
        None => Some("the request does not name a run".into()),
    }
}

fn invalid(e: nqueens_proto::WireError) -> Status {
    status_with_reason(Code::InvalidArgument, Reason::InvalidRequest, e.to_string())
}

fn shutting_down() -> Status {
    status_with_reason(Code::Unavailable, Reason::ShuttingDown, "the coordinator is shutting down")
}

/// Most results of one stream read together and sent to the engine as one command.
const MAX_RESULTS_READ: usize = 256;

/// `first` and every further result already received on `inbound` (up to
/// [`MAX_RESULTS_READ`]), without waiting; and whether the stream ended (or broke) meanwhile.
fn ready_after(
    first: pb::JobResult,
    inbound: &mut Streaming<pb::JobResult>,
) -> (Vec<pb::JobResult>, bool) {
    let mut messages = vec![first];
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    while messages.len() < MAX_RESULTS_READ {
        match Pin::new(&mut *inbound).poll_next(&mut cx) {
            std::task::Poll::Ready(Some(Ok(msg))) => messages.push(msg),
            std::task::Poll::Ready(Some(Err(e))) => {
                tracing::debug!(error = %e, "result stream broke");
                return (messages, true);
            }
            std::task::Poll::Ready(None) => return (messages, true),
            std::task::Poll::Pending => break,
        }
    }
    (messages, false)
}

/// Where a result stream's answers go once sent to the engine: each with the receiver of its
/// verdict, to be acknowledged after its commit.
type Committing =
    tokio::sync::mpsc::UnboundedSender<(JobAnswer, oneshot::Receiver<Reply<Verdict>>)>;

/// Starts a result stream's acknowledger: acks leave on `acks` in the order the answers reached
/// the engine, which is the order it commits and answers them in (one task per stream, woken
/// once per commit, not once per answer). An answer the engine took marks the connection
/// authenticated.
fn spawn_acks(
    mark: ConnectionMark,
    acks: tokio::sync::mpsc::Sender<Result<pb::ResultAck, Status>>,
) -> Committing {
    let (committing, mut committed) =
        tokio::sync::mpsc::unbounded_channel::<(JobAnswer, oneshot::Receiver<Reply<Verdict>>)>();
    tokio::spawn(async move {
        while let Some((result, rx)) = committed.recv().await {
            let ack = match rx.await {
                Ok(reply) => {
                    if reply.outcome.is_ok() {
                        mark.authenticated();
                    }
                    Ok(result_ack(&result, reply))
                }
                Err(_) => Err(shutting_down()),
            };
            if acks.send(ack).await.is_err() {
                break;
            }
        }
    });
    committing
}

/// Nothing more is read from a result stream: its token was revoked, or nobody reads its acks.
struct StreamEnds;

/// One worker's result stream: checks each answer before the engine sees it.
struct ResultStream {
    credential: Credential,
    engine: EngineHandle,
    run: pb::RunId,
    metrics: Arc<Metrics>,
    credentials: Arc<Credentials>,
    out: tokio::sync::mpsc::Sender<Result<pb::ResultAck, Status>>,
}

impl ResultStream {
    /// Reads the stream's results until it ends or breaks, the coordinator stops, or nothing
    /// more is taken on it; the results read together go to the engine together (one wake-up).
    async fn read(
        self,
        mut inbound: Streaming<pb::JobResult>,
        mut stopping: watch::Receiver<bool>,
        committing: Committing,
    ) {
        loop {
            let next = tokio::select! {
                msg = inbound.next() => msg,
                _ = stopping.wait_for(|s| *s) => break,
            };
            let (messages, ended) = match next {
                Some(Ok(msg)) => ready_after(msg, &mut inbound),
                Some(Err(e)) => {
                    tracing::debug!(error = %e, "result stream broke");
                    break;
                }
                None => break,
            };
            let mut answers = Vec::with_capacity(messages.len());
            for msg in messages {
                match self.admit(msg).await {
                    Ok(Some(answer)) => answers.push(answer),
                    Ok(None) => {}
                    Err(StreamEnds) => return,
                }
            }
            if !answers.is_empty() && !self.to_engine(answers, &committing).await {
                break;
            }
            if ended {
                break;
            }
        }
    }

    /// `msg` as an answer for the engine, or None where it was refused here (its rejection is
    /// acknowledged at once).
    async fn admit(&self, msg: pb::JobResult) -> Result<Option<JobAnswer>, StreamEnds> {
        // A token revoked since the stream opened ends it: nothing more is taken on it.
        if !self.credentials.in_force(&self.credential) {
            self.metrics.auth_failures.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(credential = %self.credential.name, job = msg.job_id, "result on a stream whose token was revoked: stream ended");
            let _ = self.out.send(Err(revoked())).await;
            return Err(StreamEnds);
        }
        let ids = (msg.job_id, msg.lease_id);
        let refused = match ResultCall::from_wire(msg, self.credential.clone()) {
            Err(e) => {
                tracing::warn!(job = ids.0, error = %e, "malformed result rejected");
                rejected_ack(ids, Reason::InvalidRequest, e.to_string())
            }
            Ok(call) => match run_mismatch(&self.run, call.run.as_ref()) {
                None => return Ok(Some(call.answer)),
                Some(why) => {
                    tracing::warn!(job = ids.0, %why, "result for another run rejected");
                    rejected_ack(ids, Reason::WrongRun, why)
                }
            },
        };
        self.metrics.results_rejected.fetch_add(1, Ordering::Relaxed);
        match self.out.send(Ok(refused)).await {
            Ok(()) => Ok(None),
            Err(_) => Err(StreamEnds),
        }
    }

    /// Sends `answers` to the engine; each one's acknowledgement follows its commit (on
    /// `committing`). The next results are read meanwhile, so a worker can keep many in flight.
    /// False once the engine or the ack task is gone.
    async fn to_engine(&self, answers: Vec<JobAnswer>, committing: &Committing) -> bool {
        let mut sent = Vec::with_capacity(answers.len());
        let mut waiting = Vec::with_capacity(answers.len());
        for answer in answers {
            let (tx, rx) = oneshot::channel();
            waiting.push((answer.clone(), rx));
            sent.push((answer, tx));
        }
        if !self.engine.send(Command::Results { answers: sent }) {
            let _ = self.out.send(Err(shutting_down())).await;
            return false;
        }
        waiting.into_iter().all(|pair| committing.send(pair).is_ok())
    }
}

impl CoordinatorService {
    /// Every request names the run it belongs to; anything else is refused with WRONG_RUN.
    fn check_run(&self, named: Option<&pb::RunId>) -> Result<(), Status> {
        match run_mismatch(&self.run, named) {
            None => Ok(()),
            Some(message) if named.is_none() => {
                Err(status_with_reason(Code::InvalidArgument, Reason::InvalidRequest, message))
            }
            Some(message) => {
                Err(status_with_reason(Code::FailedPrecondition, Reason::WrongRun, message))
            }
        }
    }

    /// The caller of a request naming `worker_id` with `secret`, under the request's credential
    /// (the request's bounds checked by its conversion, [`caller_from_wire`]).
    fn caller<T: CheckBounds>(
        request: &Request<T>,
        worker_id: u64,
        secret: &str,
    ) -> Result<Caller, Status> {
        caller_from_wire(request.get_ref(), worker_id, secret, credential_of(request))
            .map_err(invalid)
    }

    async fn ask<T>(&self, make: impl FnOnce(oneshot::Sender<T>) -> Command) -> Result<T, Status> {
        let rx = self.engine.ask(make).ok_or_else(shutting_down)?;
        rx.await.map_err(|_| shutting_down())
    }
}

/// The credential a request was made under, as [`TokenCheck`] found it (open where none was
/// attached, as in a service built without the check).
fn credential_of<T>(request: &Request<T>) -> Credential {
    request.extensions().get::<Credential>().cloned().unwrap_or_else(Credential::open)
}

/// Refusals of calls that name a worker, as gRPC statuses.
fn refused(refusal: Refusal, worker_id: u64) -> Status {
    status_with_reason(refusal.code(), refusal.reason(), refusal.message(WorkerId::new(worker_id)))
}

type AckStream = Pin<Box<dyn Stream<Item = Result<pb::ResultAck, Status>> + Send + 'static>>;

#[tonic::async_trait]
impl pb::coordinator_server::Coordinator for CoordinatorService {
    async fn register(
        &self,
        request: Request<pb::RegisterRequest>,
    ) -> Result<Response<pb::RegisterResponse>, Status> {
        let credential = credential_of(&request);
        let peer = peer_addr(&request).map(|a| a.ip().to_canonical());
        let mark = ConnectionMark::of(&request);
        // Converted first (its bounds checked): nothing below reads, logs or keeps a field past
        // its bound.
        let call = RegisterCall::from_wire(request.into_inner(), credential).map_err(invalid)?;
        if call.run.is_some() {
            self.check_run(call.run.as_ref())?;
        }
        let mut worker = call.registration;
        let major = worker.version.split('.').next().unwrap_or("");
        let ours = env!("CARGO_PKG_VERSION").split('.').next().unwrap_or("");
        if major != ours {
            return Err(status_with_reason(
                Code::FailedPrecondition,
                Reason::VersionMismatch,
                format!(
                    "worker version {} is incompatible with coordinator version {}",
                    worker.version,
                    env!("CARGO_PKG_VERSION")
                ),
            ));
        }
        if !call.self_test.as_ref().is_some_and(|t| t.passed) {
            return Err(status_with_reason(
                Code::FailedPrecondition,
                Reason::SelfTestFailed,
                format!("the worker's solver self-test failed: {:?}", call.self_test),
            ));
        }
        worker.peer = peer;
        let reply = self.ask(|reply| Command::Register { worker, reply }).await?;
        // A registration names no worker yet: its one refusal (too many) names none.
        let Registered { worker_id, secret } = reply.outcome.map_err(|r| refused(r, 0))?;
        mark.authenticated();
        Ok(Response::new(pb::RegisterResponse {
            run: Some(self.run.clone()),
            worker_id: worker_id.get(),
            lease_seconds: self.lease_seconds,
            heartbeat_seconds: self.heartbeat_seconds,
            run_complete: reply.run_complete,
            worker_secret: secret,
        }))
    }

    async fn lease(
        &self,
        request: Request<pb::LeaseRequest>,
    ) -> Result<Response<pb::LeaseResponse>, Status> {
        let caller =
            Self::caller(&request, request.get_ref().worker_id, &request.get_ref().worker_secret)?;
        let mark = ConnectionMark::of(&request);
        let req = request.into_inner();
        self.check_run(req.run.as_ref())?;
        if *self.stopping.borrow() {
            return Err(shutting_down());
        }
        let reply =
            self.ask(|reply| Command::Lease { caller, free_slots: req.free_slots, reply }).await?;
        let run_complete = reply.run_complete;
        let Granted { lease_id, job_ids } = reply.outcome.map_err(|r| refused(r, req.worker_id))?;
        mark.authenticated();
        let retry_after_ms = if job_ids.is_empty() && !run_complete { 500 } else { 0 };
        let jobs = job_ids.iter().map(|&id| pb::JobSpec::from(&self.jobs[id.get() as usize]));
        Ok(Response::new(pb::LeaseResponse {
            lease_id: lease_id.get(),
            jobs: jobs.collect(),
            lease_seconds: self.lease_seconds,
            retry_after_ms,
            run_complete,
        }))
    }

    async fn heartbeat(
        &self,
        request: Request<pb::HeartbeatRequest>,
    ) -> Result<Response<pb::HeartbeatResponse>, Status> {
        let caller =
            Self::caller(&request, request.get_ref().worker_id, &request.get_ref().worker_secret)?;
        let mark = ConnectionMark::of(&request);
        let req = request.into_inner();
        self.check_run(req.run.as_ref())?;
        let reply = self
            .ask(|reply| Command::Heartbeat {
                caller,
                lease_ids: req.lease_ids.into_iter().map(LeaseId::new).collect(),
                reply,
            })
            .await?;
        let lost = reply.outcome.map_err(|r| refused(r, req.worker_id))?;
        mark.authenticated();
        Ok(Response::new(pb::HeartbeatResponse {
            lost_lease_ids: lost.into_iter().map(LeaseId::get).collect(),
            run_complete: reply.run_complete,
        }))
    }

    type ResultsStream = AckStream;

    async fn results(
        &self,
        request: Request<Streaming<pb::JobResult>>,
    ) -> Result<Response<Self::ResultsStream>, Status> {
        let credential = credential_of(&request);
        let mark = ConnectionMark::of(&request);
        let inbound = request.into_inner();
        let (out_tx, out_rx) = tokio::sync::mpsc::channel::<Result<pb::ResultAck, Status>>(1024);
        let committing = spawn_acks(mark, out_tx.clone());
        let stream = ResultStream {
            credential,
            engine: self.engine.clone(),
            run: self.run.clone(),
            metrics: self.metrics.clone(),
            credentials: self.credentials.clone(),
            out: out_tx,
        };
        tokio::spawn(stream.read(inbound, self.stopping.clone(), committing));
        Ok(Response::new(Box::pin(ReceiverStream::new(out_rx)) as AckStream))
    }

    async fn release(
        &self,
        request: Request<pb::ReleaseRequest>,
    ) -> Result<Response<pb::ReleaseResponse>, Status> {
        let caller =
            Self::caller(&request, request.get_ref().worker_id, &request.get_ref().worker_secret)?;
        let mark = ConnectionMark::of(&request);
        let req = request.into_inner();
        self.check_run(req.run.as_ref())?;
        let released = self
            .ask(|reply| Command::Release {
                caller,
                lease_id: LeaseId::new(req.lease_id),
                job_ids: req.job_ids.into_iter().map(JobId::new).collect(),
                reply,
            })
            .await?
            .outcome
            .map_err(|r| refused(r, req.worker_id))?;
        mark.authenticated();
        Ok(Response::new(pb::ReleaseResponse { released }))
    }

    /// Answered under the shared token, or without any on a run that takes no token; never
    /// under a per-host token, which is a worker's credential (the same rule as the HTTP port's,
    /// see `docs/threat-model.md`, "Ports").
    async fn status(
        &self,
        request: Request<pb::StatusRequest>,
    ) -> Result<Response<pb::StatusResponse>, Status> {
        if credential_of(&request).is_per_host() {
            return Err(status_with_reason(
                Code::PermissionDenied,
                Reason::BadToken,
                "per-host tokens are for workers: the status call needs the shared --token (or read `status --state FILE` on the coordinator's host)",
            ));
        }
        ConnectionMark::of(&request).authenticated();
        let query = query_from_wire(request.get_ref()).map_err(invalid)?;
        // The engine's latest snapshot, a page of its workers (10,000 rows are no answer to
        // read) and the partial totals of the committed rows as the status cache last read them.
        let view =
            self.status.view(&query).await.map_err(|e| Status::internal(format!("status: {e}")))?;
        Ok(Response::new(view.to_response()))
    }
}
