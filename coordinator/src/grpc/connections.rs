//! Limits on the gRPC port's connections, below tonic: how many it holds and which give way
//! (`admission.rs`), how long a new one may take to say anything, to make its first
//! authenticated call, and how long an established one may stay silent.
//!
//! [`GuardedIncoming`] wraps the accept loop ([`Incoming`], which backs off when descriptors run
//! out). Each connection it yields is a [`Guarded`] socket that:
//!
//! - has a place in the port's [`Admission`]: refused at once when its address holds
//!   [`GrpcLimits::max_per_ip`] connections that have not authenticated, or when every place is
//!   authenticated; pushing out a connection that has not authenticated when the port is full;
//! - must deliver its first [`HANDSHAKE_BYTES`] bytes (the HTTP/2 client preface is 24 bytes, a TLS
//!   ClientHello more) within [`GrpcLimits::handshake_timeout`] of the accept, else its reads fail
//!   and tonic drops it (with TLS, tonic's own handshake timeout bounds the rest of the handshake);
//! - must make an authenticated call within [`GrpcLimits::auth_timeout`] of the accept, else its
//!   reads fail (checked at every read, so a client that keeps talking without authenticating is
//!   closed too);
//! - after that, fails its reads once nothing at all has arrived for [`GrpcLimits::idle_timeout`].
//!   The server pings every connection every [`GrpcLimits::keepalive_interval`] (HTTP/2 keepalive,
//!   closed when unanswered within [`GrpcLimits::keepalive_timeout`]), and a live client answers,
//!   so only a peer that has gone away or never speaks HTTP/2 reaches the idle timeout.
//!
//! TCP keepalive is set on every accepted socket too, so a peer that vanished without a FIN is
//! found by the kernel as well.
//!
//! So a client that speaks HTTP/2 and answers pings but never makes an authenticated call holds
//! its connection for [`GrpcLimits::auth_timeout`] at most, and less when newer connections need
//! the room; a worker's connection, once it registered, is kept between its calls.

use super::admission::{Admission, Connection, Refused, Ticket};
use crate::accept::{Incoming, RateLimitedLog};
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{ready, Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::time::{Instant, Sleep};
use tokio_stream::Stream;
use tokio_util::sync::WaitForCancellationFutureOwned;
use tonic::transport::server::Connected;

/// Bytes a new connection must send within the handshake timeout: the length of the HTTP/2 client
/// preface (`PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n`); a TLS ClientHello is longer.
pub const HANDSHAKE_BYTES: u64 = 24;

/// The gRPC port's connection limits (see the module doc).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GrpcLimits {
    /// Connections not yet authenticated that one IP address may hold at once
    /// (`--grpc-max-conns-per-ip`).
    pub max_per_ip: usize,
    /// Connections the port holds at once; `None`: as many as the descriptor limit leaves room
    /// for (see `fd_limit.rs`).
    pub max_connections: Option<usize>,
    /// Time from the accept to the first [`HANDSHAKE_BYTES`] bytes, and for the whole TLS
    /// handshake (`--grpc-handshake-seconds`).
    pub handshake_timeout: Duration,
    /// Time from the accept to the first authenticated call (`--grpc-auth-seconds`).
    pub auth_timeout: Duration,
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
            max_connections: None,
            handshake_timeout: Duration::from_secs(10),
            auth_timeout: Duration::from_secs(10),
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

/// An accepted gRPC connection under [`GrpcLimits`] (see the module doc).
pub struct Guarded {
    inner: TcpStream,
    ticket: Ticket,
    remote: Option<std::net::SocketAddr>,
    /// Resolves when the connection is pushed out for a newer one.
    pushed_out: Pin<Box<WaitForCancellationFutureOwned>>,
    /// When the reads fail unless something arrives (checked lazily: see `poll_read`).
    deadline: Pin<Box<Sleep>>,
    accepted: Instant,
    bytes_read: u64,
    last_read: Instant,
    limits: GrpcLimits,
}

impl Guarded {
    /// The error that ends the connection now, if one does: pushed out, or past a deadline.
    fn ended(&self, now: Instant) -> Option<io::Error> {
        let what = if self.ticket.is_pushed_out() {
            "pushed out for a newer connection: the port is full and this one made no authenticated call"
        } else if !self.ticket.is_authenticated() && now >= self.accepted + self.limits.auth_timeout
        {
            "no authenticated call within the authentication timeout"
        } else if self.bytes_read < HANDSHAKE_BYTES {
            if now < self.accepted + self.limits.handshake_timeout {
                return None;
            }
            "no handshake within the handshake timeout"
        } else if now >= self.last_read + self.limits.idle_timeout {
            "nothing received within the idle timeout"
        } else {
            return None;
        };
        Some(io::Error::new(io::ErrorKind::TimedOut, what))
    }

    /// The next moment [`Guarded::ended`] may change its mind without a read.
    fn next_check(&self) -> Instant {
        let due = if self.bytes_read < HANDSHAKE_BYTES {
            self.accepted + self.limits.handshake_timeout
        } else {
            self.last_read + self.limits.idle_timeout
        };
        if self.ticket.is_authenticated() {
            due
        } else {
            due.min(self.accepted + self.limits.auth_timeout)
        }
    }
}

impl AsyncRead for Guarded {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        // Checked before every read: a client that talks without authenticating is not spared.
        if !this.ticket.is_authenticated() || this.ticket.is_pushed_out() {
            if let Some(e) = this.ended(Instant::now()) {
                return Poll::Ready(Err(e));
            }
        }
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
            Poll::Pending => {
                if this.pushed_out.as_mut().poll(cx).is_ready() {
                    return Poll::Ready(Err(this.ended(Instant::now()).expect("pushed out")));
                }
                loop {
                    // The deadline is moved only when it passes (not on every read).
                    ready!(this.deadline.as_mut().poll(cx));
                    let now = Instant::now();
                    if let Some(e) = this.ended(now) {
                        return Poll::Ready(Err(e));
                    }
                    let next = this.next_check();
                    this.deadline.as_mut().reset(next);
                }
            }
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

/// Every request on the connection carries its [`Connection`]: its peer, and the mark its first
/// authenticated call sets (see `admission.rs`).
impl Connected for Guarded {
    type ConnectInfo = Connection;

    fn connect_info(&self) -> Connection {
        self.ticket.connection(self.remote)
    }
}

/// The gRPC listener's connections, each [`Guarded`]; as a [`Stream`] it never yields an error
/// and never ends.
pub struct GuardedIncoming {
    incoming: Incoming,
    limits: GrpcLimits,
    admission: std::sync::Arc<Admission>,
    refused_per_ip: RateLimitedLog,
    refused_full: RateLimitedLog,
}

impl GuardedIncoming {
    /// The connections accepted by `incoming`, under `limits`.
    pub fn new(incoming: Incoming, limits: GrpcLimits) -> Self {
        let max = limits
            .max_connections
            .unwrap_or_else(|| crate::fd_limit::grpc_connections(crate::fd_limit::soft_limit()));
        GuardedIncoming {
            incoming,
            limits,
            admission: Admission::new(max, limits.max_per_ip),
            refused_per_ip: Default::default(),
            refused_full: Default::default(),
        }
    }

    /// The port's connections and their caps.
    pub fn admission(&self) -> &std::sync::Arc<Admission> {
        &self.admission
    }

    fn guard(&mut self, stream: TcpStream) -> Option<Guarded> {
        let remote = stream.peer_addr().ok()?;
        let ip = remote.ip().to_canonical();
        let ticket = match self.admission.admit(ip) {
            Ok(ticket) => ticket,
            Err(why) => {
                self.log_refusal(why, ip);
                return None;
            }
        };
        let keepalive = socket2::TcpKeepalive::new()
            .with_time(self.limits.keepalive_interval)
            .with_interval(self.limits.keepalive_interval);
        if let Err(e) = socket2::SockRef::from(&stream).set_tcp_keepalive(&keepalive) {
            tracing::debug!(error = %e, "cannot set TCP keepalive on a gRPC connection");
        }
        let now = Instant::now();
        let first_check = now + self.limits.handshake_timeout.min(self.limits.auth_timeout);
        Some(Guarded {
            inner: stream,
            pushed_out: Box::pin(ticket.pushed_out()),
            ticket,
            remote: Some(remote),
            deadline: Box::pin(tokio::time::sleep_until(first_check)),
            accepted: now,
            bytes_read: 0,
            last_read: now,
            limits: self.limits,
        })
    }

    fn log_refusal(&mut self, why: Refused, ip: std::net::IpAddr) {
        let cap_per_ip = self.limits.max_per_ip;
        let cap = self.admission.max_connections();
        match why {
            Refused::PerAddress => self.refused_per_ip.note(|refused| {
                tracing::warn!(
                    peer = %ip,
                    cap = cap_per_ip,
                    refused,
                    "gRPC connection closed: its address already holds as many not yet authenticated as --grpc-max-conns-per-ip allows"
                )
            }),
            Refused::Full => self.refused_full.note(|refused| {
                tracing::warn!(
                    peer = %ip,
                    cap,
                    refused,
                    "gRPC connection closed: every connection the descriptor limit leaves room for is held by an authenticated client (raise `ulimit -n`; see docs/deploy.md)"
                )
            }),
        }
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

    /// Echoes every guarded connection back, and marks it authenticated when it receives an
    /// `A` (as the service does after an authenticated call); returns the address.
    async fn echo(limits: GrpcLimits) -> std::net::SocketAddr {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let mut incoming = GuardedIncoming::new(Incoming::new(listener, "test"), limits);
        tokio::spawn(async move {
            while let Some(Ok(mut conn)) = incoming.next().await {
                let mark = conn.connect_info().mark();
                tokio::spawn(async move {
                    let mut buf = [0u8; 64];
                    loop {
                        match conn.read(&mut buf).await {
                            Ok(0) | Err(_) => return,
                            Ok(k) => {
                                if buf[..k].contains(&b'A') {
                                    mark.authenticated();
                                }
                                conn.write_all(&buf[..k]).await.unwrap()
                            }
                        }
                    }
                });
            }
        });
        addr
    }

    /// Connects and sends a whole handshake's worth of `byte`, read back.
    async fn handshaken(addr: std::net::SocketAddr, byte: u8) -> TcpStream {
        let mut c = TcpStream::connect(addr).await.unwrap();
        c.write_all(&[byte; 24]).await.unwrap();
        let mut buf = [0u8; 24];
        c.read_exact(&mut buf).await.unwrap();
        c
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

    /// Whether `conn` is still open: it echoes a byte within a second.
    async fn still_open(conn: &mut TcpStream) -> bool {
        let mut buf = [0u8; 1];
        conn.write_all(b"y").await.is_ok()
            && tokio::time::timeout(Duration::from_secs(1), conn.read_exact(&mut buf))
                .await
                .is_ok_and(|r| r.is_ok())
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
        let mut conn = handshaken(addr, b'A').await;
        // Talking every 200 ms for well past both timeouts keeps it open.
        for _ in 0..8 {
            tokio::time::sleep(Duration::from_millis(200)).await;
            assert!(still_open(&mut conn).await);
        }
        // Silent past the idle timeout: closed.
        let took = closed_after(&mut conn).await;
        assert!(took >= Duration::from_millis(500) && took < Duration::from_secs(2), "{took:?}");
    }

    /// A connection that never authenticates is closed at the authentication deadline, even
    /// while it keeps talking; one that authenticated is kept past it.
    #[tokio::test]
    async fn a_connection_that_makes_no_authenticated_call_is_closed_at_its_deadline() {
        let addr = echo(GrpcLimits {
            auth_timeout: Duration::from_millis(800),
            idle_timeout: Duration::from_secs(30),
            ..limits(8)
        })
        .await;
        let t = std::time::Instant::now();
        let mut chatty = handshaken(addr, b'x').await;
        let mut worker = handshaken(addr, b'A').await;
        while t.elapsed() < Duration::from_millis(600) {
            assert!(still_open(&mut chatty).await, "closed before its deadline");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let closed = async {
            loop {
                if !still_open(&mut chatty).await {
                    return t.elapsed();
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        };
        let took = tokio::time::timeout(Duration::from_secs(3), closed).await.expect("closed");
        assert!(took >= Duration::from_millis(700), "{took:?}");
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert!(still_open(&mut worker).await, "the authenticated connection was closed");
    }

    #[tokio::test]
    async fn one_address_holds_at_most_its_cap_of_waiting_connections() {
        let addr = echo(GrpcLimits { max_per_ip: 3, ..GrpcLimits::default() }).await;
        let mut held = Vec::new();
        for _ in 0..3 {
            held.push(handshaken(addr, b'x').await);
        }
        let mut fourth = TcpStream::connect(addr).await.unwrap();
        let took = closed_after(&mut fourth).await;
        assert!(took < Duration::from_secs(1), "closed at once: {took:?}");
        // One closed: room for one more; one authenticated: room for another.
        drop(held.pop());
        tokio::time::sleep(Duration::from_millis(100)).await;
        let mut again = handshaken(addr, b'z').await;
        assert!(still_open(&mut again).await);
        assert!(still_open(&mut held[0]).await);
        held[0].write_all(b"A").await.unwrap();
        let mut buf = [0u8; 1];
        held[0].read_exact(&mut buf).await.unwrap();
        let mut after_auth = handshaken(addr, b'w').await;
        assert!(still_open(&mut after_auth).await);
    }

    /// With every place taken, a newcomer pushes out the oldest connection that has not
    /// authenticated, never an authenticated one.
    #[tokio::test]
    async fn a_full_port_pushes_out_a_waiting_connection_for_a_newcomer() {
        let addr = echo(GrpcLimits { max_connections: Some(3), ..GrpcLimits::default() }).await;
        let mut worker = handshaken(addr, b'A').await;
        let mut old = handshaken(addr, b'x').await;
        let mut newer = handshaken(addr, b'x').await;
        let mut newcomer = handshaken(addr, b'x').await;
        let took = closed_after(&mut old).await;
        assert!(took < Duration::from_secs(1), "pushed out at once: {took:?}");
        for conn in [&mut worker, &mut newer, &mut newcomer] {
            assert!(still_open(conn).await);
        }
    }
}
