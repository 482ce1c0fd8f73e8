//! The coordinator's HTTP port: Prometheus metrics, a live status page and the JSON it polls.
//!
//! | path           | answer                                                        |
//! |----------------|---------------------------------------------------------------|
//! | `/metrics`     | the Prometheus text exposition ([`Metrics::render`])          |
//! | `/`            | the status page ([`page`]), one self-contained HTML document  |
//! | `/status.json` | the page's data ([`PageStatus`]), polled by the page          |
//!
//! Anything else is 404, a method other than GET or HEAD 405. A tiny hand-written HTTP/1.0
//! responder: one request per connection, read up to [`MAX_REQUEST`] bytes within
//! [`READ_TIMEOUT`], answered within [`WRITE_TIMEOUT`], at most [`MAX_CONNECTIONS`] at once (more
//! are closed at once). Nothing here talks to the engine: the counters are atomics it publishes
//! and the rows are read on the blocking pool through a read-only connection, so neither a slow
//! client nor many of them can hold up leases and results.

mod history;
mod page;
mod snapshot;

pub use history::{sample_every, History, RatePoint, Rates, Sample, HISTORY_SAMPLES, SAMPLE_EVERY};
pub use page::{escape_html, render_page};
pub use snapshot::{shell_word, PageStatus, PageWorker, RunInfo, StatusSource};

use crate::metrics::Metrics;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;

/// The longest request head read; a longer one is answered 431.
pub const MAX_REQUEST: usize = 8 * 1024;

/// How long a client has to send its request head.
pub const READ_TIMEOUT: Duration = Duration::from_secs(5);

/// How long a client has to take the whole answer.
pub const WRITE_TIMEOUT: Duration = Duration::from_secs(10);

/// Connections served at once; more are closed without an answer.
pub const MAX_CONNECTIONS: usize = 64;

/// What the HTTP port serves from.
pub struct HttpState {
    /// The counters rendered on `/metrics`.
    pub metrics: Arc<Metrics>,
    /// The data of the page and of `/status.json`.
    pub status: StatusSource,
}

/// Where a request goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    /// `/metrics`: the Prometheus text.
    Metrics,
    /// `/` (or `/index.html`): the status page.
    Page,
    /// `/status.json`: the page's data.
    StatusJson,
    /// Any other path: 404.
    NotFound,
    /// A method other than GET or HEAD: 405.
    MethodNotAllowed,
    /// Not an HTTP/1 request line: 400.
    BadRequest,
    /// No end of the request head within [`MAX_REQUEST`] bytes: 431.
    TooLarge,
}

/// The route of a request head (`GET /path HTTP/1.1` and headers); `head` is whatever was read,
/// `complete` whether its blank line was seen. Also says whether it is a HEAD request.
pub fn route(head: &[u8], complete: bool) -> (Route, bool) {
    let line_end = head.iter().position(|&b| b == b'\n');
    let Some(line_end) = line_end else {
        let route = if head.len() >= MAX_REQUEST { Route::TooLarge } else { Route::BadRequest };
        return (route, false);
    };
    if !complete && head.len() >= MAX_REQUEST {
        return (Route::TooLarge, false);
    }
    let Ok(line) = std::str::from_utf8(&head[..line_end]) else {
        return (Route::BadRequest, false);
    };
    let mut parts = line.trim_end().split(' ');
    let (Some(method), Some(target), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return (Route::BadRequest, false);
    };
    if !version.starts_with("HTTP/1.") {
        return (Route::BadRequest, false);
    }
    let head_only = method == "HEAD";
    if method != "GET" && !head_only {
        return (Route::MethodNotAllowed, false);
    }
    let path = target.split(['?', '#']).next().unwrap_or_default();
    let route = match path {
        "/metrics" => Route::Metrics,
        "/" | "/index.html" => Route::Page,
        "/status.json" => Route::StatusJson,
        _ => Route::NotFound,
    };
    (route, head_only)
}

/// An answer: status line, content type and body.
struct Answer {
    status: &'static str,
    content_type: &'static str,
    body: Vec<u8>,
}

impl Answer {
    fn text(status: &'static str, body: &str) -> Answer {
        Answer { status, content_type: "text/plain; charset=utf-8", body: body.as_bytes().to_vec() }
    }
}

async fn answer(state: &HttpState, route: Route) -> Answer {
    match route {
        Route::Metrics => Answer {
            status: "200 OK",
            content_type: "text/plain; version=0.0.4",
            body: state.metrics.render().into_bytes(),
        },
        Route::Page => Answer {
            status: "200 OK",
            content_type: "text/html; charset=utf-8",
            body: render_page(&state.status.snapshot().await).into_bytes(),
        },
        Route::StatusJson => Answer {
            status: "200 OK",
            content_type: "application/json",
            body: serde_json::to_vec(&state.status.snapshot().await).expect("status serializes"),
        },
        Route::NotFound => Answer::text(
            "404 Not Found",
            "not found: try / (status page), /status.json or /metrics\n",
        ),
        Route::MethodNotAllowed => Answer::text("405 Method Not Allowed", "only GET and HEAD\n"),
        Route::BadRequest => Answer::text("400 Bad Request", "bad request\n"),
        Route::TooLarge => {
            Answer::text("431 Request Header Fields Too Large", "request too large\n")
        }
    }
}

/// Reads a request head: until its blank line, [`MAX_REQUEST`] bytes, the end of the stream or
/// [`READ_TIMEOUT`], whichever comes first. Says whether the blank line was seen.
async fn read_head(socket: &mut TcpStream) -> (Vec<u8>, bool) {
    let mut head = Vec::with_capacity(1024);
    let mut buf = [0u8; 1024];
    let read = async {
        loop {
            let room = MAX_REQUEST - head.len();
            match socket.read(&mut buf[..room.min(1024)]).await {
                Ok(0) | Err(_) => return false,
                Ok(k) => head.extend_from_slice(&buf[..k]),
            }
            if head.windows(4).any(|w| w == b"\r\n\r\n") || head.windows(2).any(|w| w == b"\n\n") {
                return true;
            }
            if head.len() >= MAX_REQUEST {
                return false;
            }
        }
    };
    let complete = tokio::time::timeout(READ_TIMEOUT, read).await.unwrap_or(false);
    (head, complete)
}

async fn serve_connection(mut socket: TcpStream, state: Arc<HttpState>) {
    let (head, complete) = read_head(&mut socket).await;
    if head.is_empty() {
        return;
    }
    let (route, head_only) = route(&head, complete);
    let answer = answer(&state, route).await;
    let mut out = format!(
        "HTTP/1.0 {}\r\nContent-Type: {}\r\nContent-Length: {}\r\nCache-Control: no-store\r\nX-Content-Type-Options: nosniff\r\n",
        answer.status,
        answer.content_type,
        answer.body.len()
    );
    if route == Route::Page {
        // Nothing but the page itself: no script, style, font or image from anywhere else.
        out.push_str("Content-Security-Policy: default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; connect-src 'self'; img-src 'self'; frame-ancestors 'none'\r\n");
    }
    out.push_str("Connection: close\r\n\r\n");
    let mut bytes = out.into_bytes();
    if !head_only {
        bytes.extend_from_slice(&answer.body);
    }
    let write = async {
        socket.write_all(&bytes).await?;
        socket.shutdown().await
    };
    if tokio::time::timeout(WRITE_TIMEOUT, write).await.is_err() {
        tracing::debug!("http client too slow to take its answer; dropped");
    }
}

/// Serves the HTTP port on `listener` until the task is dropped.
pub async fn serve_http(listener: TcpListener, state: Arc<HttpState>) {
    let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    // Backs off when descriptors run out instead of spinning (see `accept.rs`).
    let mut incoming = crate::accept::Incoming::new(listener, "http");
    loop {
        let socket = incoming.accept().await;
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            tracing::debug!(peer = ?socket.peer_addr().ok(), "too many http connections; closed");
            continue;
        };
        let state = state.clone();
        tokio::spawn(async move {
            serve_connection(socket, state).await;
            drop(slot);
        });
    }
}

#[cfg(test)]
mod tests;
