//! The gRPC face of the coordinator: checks that each request names this run, forwards it to the
//! engine and turns the engine's answers into protocol messages with typed failure reasons.

use crate::engine::{Command, EngineHandle, RegisterReply};
use crate::metrics::Metrics;
use nqueens_proto as pb;
use nqueens_proto::{status_with_reason, Reason};
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
    pub lease_seconds: u32,
    pub heartbeat_seconds: u32,
    /// Flips to true when the coordinator starts shutting down; open result streams end then.
    pub stopping: watch::Receiver<bool>,
    pub metrics: Arc<Metrics>,
}

fn shutting_down() -> Status {
    status_with_reason(Code::Unavailable, Reason::ShuttingDown, "the coordinator is shutting down")
}

impl CoordinatorService {
    /// Every request names the run it belongs to; anything else is refused with WRONG_RUN.
    fn check_run(&self, run: &Option<pb::RunId>) -> Result<(), Status> {
        match run {
            Some(r) if r.n == self.run.n && r.fingerprint == self.run.fingerprint => Ok(()),
            Some(r) => Err(status_with_reason(
                Code::FailedPrecondition,
                Reason::WrongRun,
                format!("this coordinator runs N={} fingerprint {}, the request names N={} fingerprint {}", self.run.n, self.run.fingerprint, r.n, r.fingerprint),
            )),
            None => Err(status_with_reason(Code::InvalidArgument, Reason::InvalidRequest, "the request does not name a run")),
        }
    }

    async fn ask<T>(&self, make: impl FnOnce(oneshot::Sender<T>) -> Command) -> Result<T, Status> {
        let (tx, rx) = oneshot::channel();
        if !self.engine.send(make(tx)) {
            return Err(shutting_down());
        }
        rx.await.map_err(|_| shutting_down())
    }
}

/// The shared-secret check applied to every call of the coordinator service.
pub fn token_interceptor(
    token: Option<String>,
    metrics: Arc<Metrics>,
) -> impl Fn(Request<()>) -> Result<Request<()>, Status> + Clone {
    let expected = token.map(|t| format!("Bearer {t}"));
    move |req: Request<()>| {
        let Some(expected) = &expected else { return Ok(req) };
        let given = req.metadata().get(pb::AUTH_HEADER).and_then(|v| v.to_str().ok());
        // Compare without an early exit so timing does not reveal how much of the token matched.
        let ok = given.is_some_and(|g| {
            g.len() == expected.len()
                && g.bytes().zip(expected.bytes()).fold(0u8, |acc, (a, b)| acc | (a ^ b)) == 0
        });
        if ok {
            Ok(req)
        } else {
            metrics.auth_failures.fetch_add(1, Ordering::Relaxed);
            Err(status_with_reason(
                Code::Unauthenticated,
                Reason::BadToken,
                "missing or wrong token (set --token / NQ_TOKEN to the coordinator's)",
            ))
        }
    }
}

type AckStream = Pin<Box<dyn Stream<Item = Result<pb::ResultAck, Status>> + Send + 'static>>;

#[tonic::async_trait]
impl pb::coordinator_server::Coordinator for CoordinatorService {
    async fn register(
        &self,
        request: Request<pb::RegisterRequest>,
    ) -> Result<Response<pb::RegisterResponse>, Status> {
        let req = request.into_inner();
        if req.run.is_some() {
            self.check_run(&req.run)?;
        }
        let major = req.version.split('.').next().unwrap_or("");
        let ours = env!("CARGO_PKG_VERSION").split('.').next().unwrap_or("");
        if major != ours {
            return Err(status_with_reason(
                Code::FailedPrecondition,
                Reason::VersionMismatch,
                format!(
                    "worker version {} is incompatible with coordinator version {}",
                    req.version,
                    env!("CARGO_PKG_VERSION")
                ),
            ));
        }
        if !req.self_test.as_ref().is_some_and(|t| t.passed) {
            return Err(status_with_reason(
                Code::FailedPrecondition,
                Reason::SelfTestFailed,
                format!("the worker's solver self-test failed: {:?}", req.self_test),
            ));
        }
        let reply = self.ask(|reply| Command::Register { req, reply }).await?;
        match reply {
            RegisterReply::Ok { worker_id, complete } => Ok(Response::new(pb::RegisterResponse {
                run: Some(self.run.clone()),
                worker_id,
                lease_seconds: self.lease_seconds,
                heartbeat_seconds: self.heartbeat_seconds,
                run_complete: complete,
            })),
            RegisterReply::UnknownWorker => Err(status_with_reason(
                Code::NotFound,
                Reason::UnknownWorker,
                "previous worker id is not known to this run",
            )),
        }
    }

    async fn lease(
        &self,
        request: Request<pb::LeaseRequest>,
    ) -> Result<Response<pb::LeaseResponse>, Status> {
        let req = request.into_inner();
        self.check_run(&req.run)?;
        if *self.stopping.borrow() {
            return Err(shutting_down());
        }
        let reply = self
            .ask(|reply| Command::Lease {
                worker_id: req.worker_id,
                free_slots: req.free_slots,
                reply,
            })
            .await?;
        if reply.unknown_worker {
            return Err(status_with_reason(
                Code::NotFound,
                Reason::UnknownWorker,
                format!("worker {} is not registered (register again)", req.worker_id),
            ));
        }
        if reply.untrusted_worker {
            return Err(status_with_reason(
                Code::PermissionDenied,
                Reason::UntrustedWorker,
                format!(
                    "worker {} disagreed with a settled verification and gets no more work",
                    req.worker_id
                ),
            ));
        }
        let retry_after_ms = if reply.jobs.is_empty() && !reply.complete { 500 } else { 0 };
        Ok(Response::new(pb::LeaseResponse {
            lease_id: reply.lease_id,
            jobs: reply.jobs,
            lease_seconds: self.lease_seconds,
            retry_after_ms,
            run_complete: reply.complete,
        }))
    }

    async fn heartbeat(
        &self,
        request: Request<pb::HeartbeatRequest>,
    ) -> Result<Response<pb::HeartbeatResponse>, Status> {
        let req = request.into_inner();
        self.check_run(&req.run)?;
        let (lost, complete) = self
            .ask(|reply| Command::Heartbeat {
                worker_id: req.worker_id,
                lease_ids: req.lease_ids,
                reply,
            })
            .await?;
        Ok(Response::new(pb::HeartbeatResponse { lost_lease_ids: lost, run_complete: complete }))
    }

    type ResultsStream = AckStream;

    async fn results(
        &self,
        request: Request<Streaming<pb::JobResult>>,
    ) -> Result<Response<Self::ResultsStream>, Status> {
        let mut inbound = request.into_inner();
        let (out_tx, out_rx) = tokio::sync::mpsc::channel::<Result<pb::ResultAck, Status>>(1024);
        let engine = self.engine.clone();
        let run = self.run.clone();
        let mut stopping = self.stopping.clone();
        let metrics = self.metrics.clone();
        tokio::spawn(async move {
            loop {
                let next = tokio::select! {
                    msg = inbound.next() => msg,
                    _ = stopping.wait_for(|s| *s) => break,
                };
                let msg = match next {
                    Some(Ok(msg)) => msg,
                    Some(Err(e)) => {
                        tracing::debug!(error = %e, "result stream broke");
                        break;
                    }
                    None => break,
                };
                let right_run = msg
                    .run
                    .as_ref()
                    .is_some_and(|r| r.n == run.n && r.fingerprint == run.fingerprint);
                if !right_run {
                    metrics.results_rejected.fetch_add(1, Ordering::Relaxed);
                    let named = msg
                        .run
                        .as_ref()
                        .map(|r| format!("N={} fingerprint {}", r.n, r.fingerprint))
                        .unwrap_or_else(|| "no run".into());
                    tracing::warn!(job = msg.job_id, %named, "result for another run rejected");
                    let ack = pb::ResultAck {
                        job_id: msg.job_id,
                        lease_id: msg.lease_id,
                        outcome: pb::Outcome::Rejected as i32,
                        reason: Reason::WrongRun as i32,
                        message: format!(
                            "result names {named}, this coordinator runs N={} fingerprint {}",
                            run.n, run.fingerprint
                        ),
                        run_complete: false,
                    };
                    if out_tx.send(Ok(ack)).await.is_err() {
                        break;
                    }
                    continue;
                }
                let (tx, rx) = oneshot::channel();
                if !engine.send(Command::Result { msg, reply: tx }) {
                    let _ = out_tx.send(Err(shutting_down())).await;
                    break;
                }
                // The ack goes out when the engine has committed the result; the next result is
                // read meanwhile, so a worker can keep many in flight.
                let out = out_tx.clone();
                tokio::spawn(async move {
                    match rx.await {
                        Ok(ack) => {
                            let _ = out.send(Ok(ack)).await;
                        }
                        Err(_) => {
                            let _ = out.send(Err(shutting_down())).await;
                        }
                    }
                });
            }
        });
        Ok(Response::new(Box::pin(ReceiverStream::new(out_rx)) as AckStream))
    }

    async fn release(
        &self,
        request: Request<pb::ReleaseRequest>,
    ) -> Result<Response<pb::ReleaseResponse>, Status> {
        let req = request.into_inner();
        self.check_run(&req.run)?;
        let released = self
            .ask(|reply| Command::Release {
                worker_id: req.worker_id,
                lease_id: req.lease_id,
                job_ids: req.job_ids,
                reply,
            })
            .await?;
        Ok(Response::new(pb::ReleaseResponse { released }))
    }

    async fn status(
        &self,
        _request: Request<pb::StatusRequest>,
    ) -> Result<Response<pb::StatusResponse>, Status> {
        let status = self.ask(|reply| Command::Status { reply }).await?;
        status.map(Response::new).map_err(|e| Status::internal(format!("status: {e}")))
    }
}
