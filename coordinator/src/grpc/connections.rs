//! Limits on the gRPC port's connections, below tonic: how many one peer address may hold, how
//! long a new one may take to say anything, and how long an established one may stay silent.
//!
//! [`GuardedIncoming`] wraps the accept loop ([`Incoming`], which backs off when descriptors run
//! out). Each connection it yields is a [`Guarded`] socket that:
//!
//! - counts against its peer's IP address: one over [`GrpcLimits::max_per_ip`] is closed at once;
//! - must deliver its first [`HANDSHAKE_BYTES`] bytes (the HTTP/2 client preface is 24 bytes, a TLS
//!   ClientHello more) within [`GrpcLimits::handshake_timeout`] of the accept, else its reads fail
//!   and tonic drops it (with TLS, tonic's own handshake timeout bounds the rest of the handshake);
//! - after that, fails its reads once nothing at all has arrived for [`GrpcLimits::idle_timeout`].
//!   The server pings every connection every [`GrpcLimits::keepalive_interval`] (HTTP/2 keepalive,
//!   closed when unanswered within [`GrpcLimits::keepalive_timeout`]), and a live client answers,
//!   so only a peer that has gone away or never speaks HTTP/2 reaches the idle timeout.
//!
//! TCP keepalive is set on every accepted socket too, so a peer that vanished without a FIN is
//! found by the kernel as well.
//!
//! A client that speaks HTTP/2 and answers pings but never makes a call stays connected (a
//! worker's channel between calls looks just like it); the per-address cap bounds how many of
//! those one address can hold.

use crate::accept::Incoming;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::future::Future;
use std::io;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::time::{Instant, Sleep};
use tokio_stream::Stream;
use tonic::transport::server::{Connected, TcpConnectInfo};

/// Bytes a new connection must send within the handshake timeout: the length of the HTTP/2 client
/// preface (`PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n`); a TLS ClientHello is longer.
pub const HANDSHAKE_BYTES: u64 = 24;

/// The gRPC port's connection limits (see the module doc).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GrpcLimits {
    /// Connections one IP address may hold at once (`--grpc-max-conns-per-ip`).
    pub max_per_ip: usize,
    /// Time from the accept to the first [`HANDSHAKE_BYTES`] bytes, and for the whole TLS
    /// handshake (`--grpc-handshake-seconds`).
    pub handshake_timeout: Duration,
    /// Silence after which an established connection is closed (`--grpc-idle-seconds`).
    pub idle_timeout: Duration,
    /// HTTP/2 keepalive: the server pings every connection this often...
    pub keepalive_interval: Duration,
    /// ...and closes it when a ping is not answered within this long.
    pub keepalive_timeout: Duration,
}

impl Default for GrpcLimits {
    fn default() -> Self {
        GrpcLimits {
            max_per_ip: 256,
            handshake_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(90),
            keepalive_interval: Duration::from_secs(20),
            keepalive_timeout: Duration::from_secs(20),
        }
    }
}

impl GrpcLimits {
    /// These limits with the keepalive interval at most a third of the idle timeout, so that a
    /// live client, which answers every ping, is never taken for an idle one.
    pub fn consistent(self) -> GrpcLimits {
        GrpcLimits {
            keepalive_interval: self.keepalive_interval.min(self.idle_timeout / 3),
            ..self
        }
    }
}

/// Open connections per peer address.
#[derive(Debug, Default)]
struct PeerCounts(Mutex<HashMap<IpAddr, usize>>);

/// A connection's place in [`PeerCounts`], given back when dropped.
#[derive(Debug)]
struct PeerTicket {
    ip: IpAddr,
    counts: Arc<PeerCounts>,
}

impl PeerCounts {
    fn take(counts: &Arc<PeerCounts>, ip: IpAddr, max: usize) -> Option<PeerTicket> {
        let mut map = counts.0.lock();
        let held = map.entry(ip).or_default();
        if *held >= max {
            return None;
        }
        *held += 1;
        Some(PeerTicket { ip, counts: counts.clone() })
    }
}

impl Drop for PeerTicket {
    fn drop(&mut self) {
        let mut map = self.counts.0.lock();
        if let Some(held) = map.get_mut(&self.ip) {
            *held -= 1;
            if *held == 0 {
                map.remove(&self.ip);
            }
        }
    }
}

/// An accepted gRPC connection under [`GrpcLimits`] (see the module doc).
pub struct Guarded {
    inner: TcpStream,
    _ticket: PeerTicket,
    /// When the reads fail unless something arrives (checked lazily: see `poll_read`).
    deadline: Pin<Box<Sleep>>,
    bytes_read: u64,
    last_read: Instant,
    idle_timeout: Duration,
}

impl Guarded {
    fn timed_out(&self) -> io::Error {
        let what = if self.bytes_read < HANDSHAKE_BYTES {
            "no handshake within the handshake timeout"
        } else {
            "nothing received within the idle timeout"
        };
        io::Error::new(io::ErrorKind::TimedOut, what)
    }
}

impl AsyncRead for Guarded {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        match Pin::new(&mut this.inner).poll_read(cx, buf) {
            Poll::Ready(Ok(())) => {
                let got = (buf.filled().len() - before) as u64;
                if got > 0 {
                    this.bytes_read += got;
                    this.last_read = Instant::now();
                }
                Poll::Ready(Ok(()))
            }
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            Poll::Pending => loop {
                // The deadline is moved only when it passes (not on every read): before the
                // handshake it stays where the accept put it; after, it follows the last read.
                ready!(this.deadline.as_mut().poll(cx));
                if this.bytes_read < HANDSHAKE_BYTES {
                    return Poll::Ready(Err(this.timed_out()));
                }
                let due = this.last_read + this.idle_timeout;
                if due <= Instant::now() {
                    return Poll::Ready(Err(this.timed_out()));
                }
                this.deadline.as_mut().reset(due);
            },
        }
    }
}

impl AsyncWrite for Guarded {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

impl Connected for Guarded {
    type ConnectInfo = TcpConnectInfo;

    fn connect_info(&self) -> TcpConnectInfo {
        self.inner.connect_info()
    }
}

/// The gRPC listener's connections, each [`Guarded`]; as a [`Stream`] it never yields an error
/// and never ends.
pub struct GuardedIncoming {
    incoming: Incoming,
    limits: GrpcLimits,
    peers: Arc<PeerCounts>,
    refused: crate::accept::RateLimitedLog,
}

impl GuardedIncoming {
    /// The connections accepted by `incoming`, under `limits`.
    pub fn new(incoming: Incoming, limits: GrpcLimits) -> Self {
        GuardedIncoming { incoming, limits, peers: Default::default(), refused: Default::default() }
    }

    fn guard(&mut self, stream: TcpStream) -> Option<Guarded> {
        let ip = stream.peer_addr().ok()?.ip().to_canonical();
        let Some(ticket) = PeerCounts::take(&self.peers, ip, self.limits.max_per_ip) else {
            self.refused.note(|unlogged| {
                tracing::warn!(
                    peer = %ip,
                    cap = self.limits.max_per_ip,
                    refused = unlogged,
                    "gRPC connection closed: its address already holds as many as --grpc-max-conns-per-ip allows"
                )
            });
            return None;
        };
        let keepalive = socket2::TcpKeepalive::new()
            .with_time(self.limits.keepalive_interval)
            .with_interval(self.limits.keepalive_interval);
        if let Err(e) = socket2::SockRef::from(&stream).set_tcp_keepalive(&keepalive) {
            tracing::debug!(error = %e, "cannot set TCP keepalive on a gRPC connection");
        }
        let now = Instant::now();
        Some(Guarded {
            inner: stream,
            _ticket: ticket,
            deadline: Box::pin(tokio::time::sleep_until(now + self.limits.handshake_timeout)),
            bytes_read: 0,
            last_read: now,
            idle_timeout: self.limits.idle_timeout,
        })
    }
}

impl Stream for GuardedIncoming {
    type Item = io::Result<Guarded>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        loop {
            let stream = ready!(this.incoming.poll_accept(cx));
            if let Some(guarded) = this.guard(stream) {
                return Poll::Ready(Some(Ok(guarded)));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio_stream::StreamExt;

    fn limits(max_per_ip: usize) -> GrpcLimits {
        GrpcLimits {
            max_per_ip,
            handshake_timeout: Duration::from_millis(300),
            idle_timeout: Duration::from_millis(600),
            ..GrpcLimits::default()
        }
    }

    /// Echoes every guarded connection back; returns the address.
    async fn echo(limits: GrpcLimits) -> std::net::SocketAddr {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let mut incoming = GuardedIncoming::new(Incoming::new(listener, "test"), limits);
        tokio::spawn(async move {
            while let Some(Ok(mut conn)) = incoming.next().await {
                tokio::spawn(async move {
                    let mut buf = [0u8; 64];
                    loop {
                        match conn.read(&mut buf).await {
                            Ok(0) | Err(_) => return,
                            Ok(k) => conn.write_all(&buf[..k]).await.unwrap(),
                        }
                    }
                });
            }
        });
        addr
    }

    /// Waits for the server to close `conn` (reading whatever it echoes); how long it took.
    async fn closed_after(conn: &mut TcpStream) -> Duration {
        let t = std::time::Instant::now();
        let mut rest = Vec::new();
        tokio::time::timeout(Duration::from_secs(5), conn.read_to_end(&mut rest))
            .await
            .expect("closed by the server")
            .unwrap();
        t.elapsed()
    }

    #[tokio::test]
    async fn silent_connections_are_closed_after_the_handshake_timeout() {
        let addr = echo(limits(8)).await;
        let mut silent = TcpStream::connect(addr).await.unwrap();
        let took = closed_after(&mut silent).await;
        assert!(took >= Duration::from_millis(250) && took < Duration::from_secs(2), "{took:?}");
        // A few bytes, fewer than a preface, do not count as a handshake.
        let mut short = TcpStream::connect(addr).await.unwrap();
        short.write_all(b"PRI * ").await.unwrap();
        let took = closed_after(&mut short).await;
        assert!(took < Duration::from_secs(2), "{took:?}");
    }

    #[tokio::test]
    async fn talking_connections_stay_and_idle_ones_are_closed() {
        let addr = echo(limits(8)).await;
        let mut conn = TcpStream::connect(addr).await.unwrap();
        conn.write_all(&[b'x'; 24]).await.unwrap();
        let mut buf = [0u8; 24];
        conn.read_exact(&mut buf).await.unwrap();
        // Talking every 200 ms for well past both timeouts keeps it open.
        for _ in 0..8 {
            tokio::time::sleep(Duration::from_millis(200)).await;
            conn.write_all(b"y").await.unwrap();
            conn.read_exact(&mut buf[..1]).await.unwrap();
        }
        // Silent past the idle timeout: closed.
        let took = closed_after(&mut conn).await;
        assert!(took >= Duration::from_millis(500) && took < Duration::from_secs(2), "{took:?}");
    }

    #[tokio::test]
    async fn one_address_holds_at_most_its_cap() {
        let addr = echo(GrpcLimits { max_per_ip: 3, ..GrpcLimits::default() }).await;
        let mut held = Vec::new();
        for _ in 0..3 {
            let mut c = TcpStream::connect(addr).await.unwrap();
            c.write_all(&[b'x'; 24]).await.unwrap();
            let mut buf = [0u8; 24];
            c.read_exact(&mut buf).await.unwrap();
            held.push(c);
        }
        let mut fourth = TcpStream::connect(addr).await.unwrap();
        let took = closed_after(&mut fourth).await;
        assert!(took < Duration::from_secs(1), "closed at once: {took:?}");
        // One closed: room for one more.
        drop(held.pop());
        tokio::time::sleep(Duration::from_millis(100)).await;
        let mut again = TcpStream::connect(addr).await.unwrap();
        again.write_all(&[b'z'; 24]).await.unwrap();
        let mut buf = [0u8; 24];
        again.read_exact(&mut buf).await.unwrap();
        assert_eq!(buf, [b'z'; 24]);
    }
}
