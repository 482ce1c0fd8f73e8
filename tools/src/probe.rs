//! How fast the coordinator's status views answer under load: `/status.json`, `/metrics`, the
//! page and the gRPC `Status` call (what `status --connect` makes), each asked every half second
//! while the load runs, one at a time, timed from the request to the last byte. Answers given
//! while workers storm in (the seating, and again after a restart) are reported apart from those
//! of the seated fleet.

use nqueens_proto as pb;
use std::fmt;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::watch;

/// The views asked, in order.
const VIEWS: [&str; 4] = ["/status.json", "/metrics", "/", "grpc Status"];

/// The latencies measured per view (when each was asked, and its seconds), and failures.
#[derive(Debug, Default)]
pub struct Latencies {
    samples: [Vec<(Instant, f64)>; 4],
    bytes: [usize; 4],
    failures: usize,
    /// The most workers a gRPC `Status` answer listed, and the most it counted in its fleet.
    listed: usize,
    counted: u64,
    /// When workers stormed in: answers asked then are reported apart.
    storms: Vec<(Instant, Instant)>,
}

impl Latencies {
    /// Marks `from..to` as a storm of arriving workers.
    pub fn storm(&mut self, from: Instant, to: Instant) {
        self.storms.push((from, to));
    }

    /// The seconds of view `i` asked outside (`in_storm` false) or inside the storms, sorted.
    fn sorted(&self, i: usize, in_storm: bool) -> Vec<f64> {
        let stormy = |at: &Instant| self.storms.iter().any(|(a, b)| (a..=b).contains(&at));
        let mut s: Vec<f64> =
            self.samples[i].iter().filter(|(at, _)| stormy(at) == in_storm).map(|x| x.1).collect();
        s.sort_by(f64::total_cmp);
        s
    }
}

impl fmt::Display for Latencies {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ms = |s: f64| format!("{:.0}", s * 1e3);
        write!(f, "status latency, seated (median / p95 / max, answers):")?;
        for (i, view) in VIEWS.iter().enumerate() {
            let s = self.sorted(i, false);
            let kib = self.bytes[i] as f64 / 1024.0;
            match s.len() {
                0 => write!(f, " {view} -;")?,
                n => write!(
                    f,
                    " {view} {}/{}/{} ms ({n}, {kib:.0} KiB);",
                    ms(s[n / 2]),
                    ms(s[(n * 95).div_ceil(100) - 1]),
                    ms(s[n - 1])
                )?,
            }
        }
        write!(
            f,
            " {} failed\nstatus latency while workers storm in (median / max, answers):",
            self.failures
        )?;
        for (i, view) in VIEWS.iter().enumerate() {
            let s = self.sorted(i, true);
            match s.len() {
                0 => write!(f, " {view} -;")?,
                n => write!(f, " {view} {}/{} ms ({n});", ms(s[n / 2]), ms(s[n - 1]))?,
            }
        }
        write!(
            f,
            "\ngRPC Status listed at most {} workers (a page), counting up to {} in its fleet",
            self.listed, self.counted
        )
    }
}

/// The running probe: a thread of its own with its own runtime, so that the answers are not
/// timed behind the load tool's thousands of fake workers on theirs.
pub struct LatencyProbe {
    stop: watch::Sender<bool>,
    thread: std::thread::JoinHandle<Latencies>,
}

impl LatencyProbe {
    /// Starts asking the coordinator on gRPC `port` and HTTP `http_port`.
    pub fn start(port: u16, http_port: u16) -> LatencyProbe {
        let (stop, stopped) = watch::channel(false);
        let thread = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build();
            runtime.map_or_else(
                |_| Latencies::default(),
                |r| r.block_on(ask(port, http_port, stopped)),
            )
        });
        LatencyProbe { stop, thread }
    }

    /// Stops asking; what was measured.
    pub async fn stop(self) -> Latencies {
        let _ = self.stop.send(true);
        let thread = self.thread;
        tokio::task::spawn_blocking(move || thread.join().unwrap_or_default())
            .await
            .unwrap_or_default()
    }
}

/// Asks every view in turn, every half second, until `stopped`.
async fn ask(port: u16, http_port: u16, mut stopped: watch::Receiver<bool>) -> Latencies {
    let mut out = Latencies::default();
    let channel = crate::fleet::channel_from(port, std::net::Ipv4Addr::LOCALHOST);
    let mut client = channel.ok().and_then(|c| pb::client(c, None).ok());
    while !*stopped.borrow() {
        for (i, view) in VIEWS.iter().enumerate() {
            let t = Instant::now();
            let got = match (i, client.as_mut()) {
                (3, Some(client)) => grpc_status(client).await.map(|answer| {
                    out.listed = out.listed.max(answer.listed);
                    out.counted = out.counted.max(answer.counted);
                    answer.bytes
                }),
                (3, None) => None,
                _ => http_get(http_port, view).await,
            };
            match got {
                Some(bytes) => {
                    out.samples[i].push((t, t.elapsed().as_secs_f64()));
                    out.bytes[i] = out.bytes[i].max(bytes);
                }
                None => out.failures += 1,
            }
        }
        let _ = tokio::time::timeout(Duration::from_millis(500), stopped.changed()).await;
    }
    out
}

/// A gRPC status answer: its size, the workers it listed and those its fleet counted.
struct StatusAnswer {
    bytes: usize,
    listed: usize,
    counted: u64,
}

/// The gRPC status answer (the default page of workers, as `status --connect` asks), if it came.
async fn grpc_status(client: &mut pb::Client) -> Option<StatusAnswer> {
    use prost::Message;
    let call = client.status(pb::StatusRequest::default());
    let reply = tokio::time::timeout(Duration::from_secs(10), call).await.ok()?.ok()?.into_inner();
    let counted = reply.fleet.as_ref().map_or(0, |f| f.workers);
    Some(StatusAnswer { bytes: reply.encoded_len(), listed: reply.workers.len(), counted })
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
