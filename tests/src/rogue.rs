//! A client that speaks the coordinator's protocol by hand, as an attacker holding a token would:
//! no worker behind it, every request written by the test.

use nqueens_core::JobCounts;
use nqueens_proto as pb;
use nqueens_proto::Reason;
use std::time::Duration;
use tokio_stream::StreamExt;

/// A gRPC client of the coordinator on 127.0.0.1:`port`, sending `token`; retries for up to a
/// minute while the coordinator starts.
pub async fn connect(port: u16, token: Option<&str>) -> pb::Client {
    let url = format!("http://127.0.0.1:{port}");
    for _ in 0..600 {
        if let Ok(ch) = pb::connect_channel(&url, None).await {
            return pb::client(ch, token).unwrap();
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("coordinator at {url} never came up");
}

/// A gRPC client of the coordinator on 127.0.0.1:`port` whose connection comes from the
/// loopback address `source` (say 127.0.0.2): another host, as the coordinator sees it.
pub async fn connect_from(
    port: u16,
    source: std::net::Ipv4Addr,
    token: Option<&str>,
) -> pb::Client {
    let endpoint = tonic::transport::Endpoint::from_shared(format!("http://127.0.0.1:{port}"))
        .unwrap()
        .connect_timeout(Duration::from_secs(5));
    let connector = tower::service_fn(move |_uri: tonic::transport::Uri| async move {
        let socket = tokio::net::TcpSocket::new_v4()?;
        socket.bind((source, 0).into())?;
        let stream = socket.connect(([127, 0, 0, 1], port).into()).await?;
        Ok::<_, std::io::Error>(hyper_util::rt::TokioIo::new(stream))
    });
    let channel = endpoint.connect_with_connector(connector).await.unwrap();
    pb::client(channel, token).unwrap()
}

/// A gRPC client of the coordinator on 127.0.0.1:`port`, sending `token`, and the number of
/// connections it has opened so far: a call after the coordinator closed its connection opens
/// another (tonic's channel reconnects by itself), which is how a test sees a close.
pub async fn connect_counting(
    port: u16,
    token: Option<&str>,
) -> (pb::Client, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let opened = std::sync::Arc::new(AtomicUsize::new(0));
    let endpoint = tonic::transport::Endpoint::from_shared(format!("http://127.0.0.1:{port}"))
        .unwrap()
        .connect_timeout(Duration::from_secs(5));
    let counter = opened.clone();
    let connector = tower::service_fn(move |_uri: tonic::transport::Uri| {
        counter.fetch_add(1, Ordering::SeqCst);
        async move {
            let stream = tokio::net::TcpStream::connect(("127.0.0.1", port)).await?;
            Ok::<_, std::io::Error>(hyper_util::rt::TokioIo::new(stream))
        }
    });
    let channel = endpoint.connect_with_connector(connector).await.unwrap();
    (pb::client(channel, token).unwrap(), opened)
}

/// The typed reason the coordinator put in a refusal's details.
pub fn reason(status: &tonic::Status) -> Reason {
    Reason::try_from(
        pb::status_reason(status).expect("a typed reason in the status details").reason,
    )
    .unwrap()
}

/// The outcome the coordinator gave one result.
pub fn outcome(ack: &pb::ResultAck) -> pb::Outcome {
    pb::Outcome::try_from(ack.outcome).unwrap()
}

/// A self-test report that claims to have passed without running anything (N=10, 724 found).
pub fn claimed_self_test() -> pb::SelfTest {
    pb::SelfTest { passed: true, n: 10, expected_total: 724, found_total: 724, seconds: 0.0 }
}

/// A registered hand-written client: its connection, run and credentials.
pub struct Rogue {
    pub client: pb::Client,
    pub run: pb::RunId,
    pub id: u64,
    pub secret: String,
}

impl Rogue {
    /// Connects with `token` and registers with `request`.
    pub async fn register_with(port: u16, token: &str, request: pb::RegisterRequest) -> Rogue {
        let mut client = connect(port, Some(token)).await;
        let reply = client.register(request).await.unwrap().into_inner();
        Rogue { client, run: reply.run.unwrap(), id: reply.worker_id, secret: reply.worker_secret }
    }

    /// One lease call for up to `slots` jobs; panics if it is refused.
    pub async fn lease(&mut self, slots: u32) -> pb::LeaseResponse {
        self.try_lease(slots).await.unwrap()
    }

    pub async fn try_lease(&mut self, slots: u32) -> Result<pb::LeaseResponse, tonic::Status> {
        self.client
            .lease(pb::LeaseRequest {
                run: Some(self.run.clone()),
                worker_id: self.id,
                free_slots: slots,
                worker_secret: self.secret.clone(),
            })
            .await
            .map(|r| r.into_inner())
    }

    /// Gives back `job_ids` of lease `lease_id` unsolved; panics if it is refused.
    pub async fn release(&mut self, lease_id: u64, job_ids: Vec<u64>) {
        self.client
            .release(pb::ReleaseRequest {
                run: Some(self.run.clone()),
                worker_id: self.id,
                lease_id,
                job_ids,
                worker_secret: self.secret.clone(),
            })
            .await
            .unwrap();
    }

    pub async fn heartbeat(
        &mut self,
        lease_ids: Vec<u64>,
    ) -> Result<pb::HeartbeatResponse, tonic::Status> {
        let request = pb::HeartbeatRequest {
            run: Some(self.run.clone()),
            worker_id: self.id,
            lease_ids,
            worker_secret: self.secret.clone(),
        };
        self.client.heartbeat(request).await.map(|r| r.into_inner())
    }

    /// A result of `job_id` under `lease_id`: `counts`, or an error report when `None`.
    pub fn result(
        &self,
        lease_id: u64,
        job_id: u64,
        counts: Option<JobCounts>,
        seconds: f64,
    ) -> pb::JobResult {
        pb::JobResult {
            run: Some(self.run.clone()),
            worker_id: self.id,
            lease_id,
            job_id,
            counts: counts.map(Into::into),
            seconds,
            error: if counts.is_none() { "solver exploded".into() } else { String::new() },
            worker_secret: self.secret.clone(),
        }
    }

    /// Sends `results` on one stream and returns their acknowledgements.
    pub async fn send(&mut self, results: Vec<pb::JobResult>) -> Vec<pb::ResultAck> {
        let sent = results.len();
        let mut acks = self.client.results(tokio_stream::iter(results)).await.unwrap().into_inner();
        let mut got = Vec::new();
        while got.len() < sent {
            match tokio::time::timeout(Duration::from_secs(60), acks.next()).await {
                Ok(Some(Ok(ack))) => got.push(ack),
                other => panic!("ack stream ended early: {other:?}"),
            }
        }
        got
    }
}
