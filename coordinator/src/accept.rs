//! Accepting connections without spinning when the process runs out of file descriptors.
//!
//! `accept(2)` fails with EMFILE or ENFILE while the descriptor table is full, and keeps failing
//! at once for as long as it stays full (the waiting connection stays in the backlog, so the
//! listener stays readable). A loop that simply tries again burns a whole core and floods the log.
//! [`Incoming`] instead sleeps after a failed accept, 10 ms doubling up to 1 s, back to 10 ms after
//! the next success, and logs the failures at most once per [`ACCEPT_ERROR_LOG_EVERY`] with their
//! errno and how many there were. It serves both the gRPC server (as a [`Stream`] of connections)
//! and the metrics responder ([`Incoming::accept`]).

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{ready, Context, Poll};
use std::time::{Duration, Instant};
use tokio::net::{TcpListener, TcpStream};
use tokio::time::Sleep;
use tokio_stream::Stream;

/// The first pause after a failed accept.
pub const BACKOFF_MIN: Duration = Duration::from_millis(10);
/// The longest pause between two accepts that fail.
pub const BACKOFF_MAX: Duration = Duration::from_secs(1);
/// How often failed accepts are logged at most.
pub const ACCEPT_ERROR_LOG_EVERY: Duration = Duration::from_secs(10);

/// The pause to take after each failed accept: doubles from [`BACKOFF_MIN`] to [`BACKOFF_MAX`],
/// and starts over after a success.
#[derive(Debug, Clone)]
pub struct Backoff {
    next: Duration,
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff { next: BACKOFF_MIN }
    }
}

impl Backoff {
    /// The pause after one more failure.
    pub fn failed(&mut self) -> Duration {
        let pause = self.next;
        self.next = (self.next * 2).min(BACKOFF_MAX);
        pause
    }

    /// An accept succeeded: the next failure pauses [`BACKOFF_MIN`] again.
    pub fn succeeded(&mut self) {
        self.next = BACKOFF_MIN;
    }
}

/// Whether a failed accept concerns only the connection being accepted (it was reset or aborted
/// before it was taken): the next one may be accepted at once.
fn connection_error(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::ConnectionAborted
            | io::ErrorKind::ConnectionReset
            | io::ErrorKind::ConnectionRefused
            | io::ErrorKind::Interrupted
    )
}

/// Failed accepts since the last log line.
#[derive(Debug, Default)]
struct ErrorLog {
    last: Option<Instant>,
    unlogged: u64,
}

impl ErrorLog {
    fn note(&mut self, what: &'static str, e: &io::Error, pause: Duration) {
        self.unlogged += 1;
        if self.last.is_none_or(|t| t.elapsed() >= ACCEPT_ERROR_LOG_EVERY) {
            tracing::warn!(
                listener = what,
                error = %e,
                errno = e.raw_os_error().unwrap_or(0),
                failures = self.unlogged,
                pause_ms = pause.as_millis() as u64,
                "accepting a connection failed (out of file descriptors?); pausing before the next accept"
            );
            self.last = Some(Instant::now());
            self.unlogged = 0;
        }
    }
}

/// Something that may happen often, logged at most once per [`ACCEPT_ERROR_LOG_EVERY`] with how
/// many times it happened since the last line.
#[derive(Debug, Default)]
pub struct RateLimitedLog {
    last: Option<Instant>,
    unlogged: u64,
}

impl RateLimitedLog {
    /// Counts one more; calls `log` with the count when a line is due.
    pub fn note(&mut self, log: impl FnOnce(u64)) {
        self.unlogged += 1;
        if self.last.is_none_or(|t| t.elapsed() >= ACCEPT_ERROR_LOG_EVERY) {
            log(self.unlogged);
            self.last = Some(Instant::now());
            self.unlogged = 0;
        }
    }
}

/// The connections of a listener, accepted with a pause after each failure (see the module doc).
///
/// As a [`Stream`] it never yields an error and never ends: failures are logged and waited out.
pub struct Incoming {
    listener: TcpListener,
    what: &'static str,
    backoff: Backoff,
    log: ErrorLog,
    pause: Option<Pin<Box<Sleep>>>,
}

impl Incoming {
    /// Accepts on `listener`; `what` names it in the log ("grpc", "metrics").
    pub fn new(listener: TcpListener, what: &'static str) -> Self {
        Incoming {
            listener,
            what,
            backoff: Backoff::default(),
            log: ErrorLog::default(),
            pause: None,
        }
    }

    /// Polls for the next connection, pausing after failures.
    pub fn poll_accept(&mut self, cx: &mut Context<'_>) -> Poll<TcpStream> {
        loop {
            if let Some(pause) = &mut self.pause {
                ready!(pause.as_mut().poll(cx));
                self.pause = None;
            }
            match ready!(self.listener.poll_accept(cx)) {
                Ok((stream, _)) => {
                    self.backoff.succeeded();
                    // Replies are small frames: without this, Nagle's algorithm holds each one
                    // until the peer's delayed ACK (tens of milliseconds a round trip).
                    if let Err(e) = stream.set_nodelay(true) {
                        tracing::debug!(listener = self.what, error = %e, "TCP_NODELAY not set");
                    }
                    return Poll::Ready(stream);
                }
                Err(e) if connection_error(&e) => {
                    tracing::debug!(listener = self.what, error = %e, "a connection went before it was accepted");
                }
                Err(e) => {
                    let pause = self.backoff.failed();
                    self.log.note(self.what, &e, pause);
                    self.pause = Some(Box::pin(tokio::time::sleep(pause)));
                }
            }
        }
    }

    /// The next connection.
    pub async fn accept(&mut self) -> TcpStream {
        std::future::poll_fn(|cx| self.poll_accept(cx)).await
    }
}

impl Stream for Incoming {
    type Item = io::Result<TcpStream>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.get_mut().poll_accept(cx).map(|stream| Some(Ok(stream)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pause_doubles_to_its_bound_and_starts_over_after_a_success() {
        let mut b = Backoff::default();
        let pauses: Vec<u64> = (0..9).map(|_| b.failed().as_millis() as u64).collect();
        assert_eq!(pauses, [10, 20, 40, 80, 160, 320, 640, 1000, 1000]);
        b.succeeded();
        assert_eq!(b.failed(), BACKOFF_MIN);
    }
}
