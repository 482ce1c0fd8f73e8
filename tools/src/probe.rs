//! How fast the coordinator's status views answer under load: `/status.json`, `/metrics`, the
//! page and the gRPC `Status` call (what `status --connect` makes), each asked every half second
//! while the load runs, one at a time, timed from the request to the last byte.

use nqueens_proto as pb;
use std::fmt;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::watch;

/// The views asked, in order.
const VIEWS: [&str; 4] = ["/status.json", "/metrics", "/", "grpc Status"];

/// The latencies measured per view, in seconds, and failures.
#[derive(Debug, Default)]
pub struct Latencies {
    samples: [Vec<f64>; 4],
    bytes: [usize; 4],
    failures: usize,
}

impl fmt::Display for Latencies {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "status latency (median / max over the run):")?;
        for (i, view) in VIEWS.iter().enumerate() {
            let mut s = self.samples[i].clone();
            s.sort_by(f64::total_cmp);
            if s.is_empty() {
                write!(f, " {view} -;")?;
                continue;
            }
            let (median, max) = (s[s.len() / 2], s[s.len() - 1]);
            let kib = self.bytes[i] as f64 / 1024.0;
            write!(f, " {view} {:.0}/{:.0} ms ({kib:.0} KiB);", median * 1e3, max * 1e3)?;
        }
        write!(f, " {} failed", self.failures)
    }
}

/// The running probe.
pub struct LatencyProbe {
    stop: watch::Sender<bool>,
    task: tokio::task::JoinHandle<Latencies>,
}

impl LatencyProbe {
    /// Starts asking the coordinator on gRPC `port` and HTTP `http_port`.
    pub fn start(port: u16, http_port: u16) -> LatencyProbe {
        let (stop, mut stopped) = watch::channel(false);
        let task = tokio::spawn(async move {
            let mut out = Latencies::default();
            let channel = crate::fleet::channel_from(port, std::net::Ipv4Addr::LOCALHOST);
            let mut client = channel.ok().and_then(|c| pb::client(c, None).ok());
            while !*stopped.borrow() {
                for (i, view) in VIEWS.iter().enumerate() {
                    let t = Instant::now();
                    let got = match (i, client.as_mut()) {
                        (3, Some(client)) => grpc_status(client).await,
                        (3, None) => None,
                        _ => http_get(http_port, view).await,
                    };
                    match got {
                        Some(bytes) => {
                            out.samples[i].push(t.elapsed().as_secs_f64());
                            out.bytes[i] = out.bytes[i].max(bytes);
                        }
                        None => out.failures += 1,
                    }
                }
                let _ = tokio::time::timeout(Duration::from_millis(500), stopped.changed()).await;
            }
            out
        });
        LatencyProbe { stop, task }
    }

    /// Stops asking; what was measured.
    pub async fn stop(self) -> Latencies {
        let _ = self.stop.send(true);
        self.task.await.unwrap_or_default()
    }
}

/// The size of the gRPC status answer, if it came.
async fn grpc_status(client: &mut pb::Client) -> Option<usize> {
    use prost::Message;
    let call = client.status(pb::StatusRequest {});
    let reply = tokio::time::timeout(Duration::from_secs(10), call).await.ok()?.ok()?;
    Some(reply.into_inner().encoded_len())
}

/// GET `path` over HTTP/1.1 from 127.0.0.1:`port`; the bytes read, if it answered 200.
async fn http_get(port: u16, path: &str) -> Option<usize> {
    let get = async {
        let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.ok()?;
        let request =
            format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n");
        stream.write_all(request.as_bytes()).await.ok()?;
        let mut body = Vec::new();
        stream.read_to_end(&mut body).await.ok()?;
        body.starts_with(b"HTTP/1.1 200").then_some(body.len())
    };
    tokio::time::timeout(Duration::from_secs(10), get).await.ok()?
}
