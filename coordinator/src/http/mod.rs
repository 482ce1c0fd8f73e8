//! The coordinator's HTTP port: Prometheus metrics, a live status page and the JSON it polls.
//!
//! | path           | answer                                                        |
//! |----------------|---------------------------------------------------------------|
//! | `/metrics`     | the Prometheus text of the run's snapshot ([`metrics::render`]) |
//! | `/`            | the status page ([`page`]), one self-contained HTML document  |
//! | `/status.json` | the page's data ([`PageView`]), polled by the page            |
//!
//! Anything else is 404, a method other than GET or HEAD 405. HTTP/1 served by hyper: one request
//! per connection, its head at most [`MAX_REQUEST`] bytes (431 beyond; hyper answers a malformed
//! head 400) and complete within [`READ_TIMEOUT`] of the accept (else the connection is closed),
//! the whole exchange done within [`READ_TIMEOUT`] + [`WRITE_TIMEOUT`]. At most
//! [`MAX_CONNECTIONS`] at once (room the gRPC port leaves in the descriptor table, see
//! `fd_limit.rs`): when all are taken, a connection still waiting for its request head is closed
//! to make room, the oldest of the address holding the most such (`waiting.rs`), so slowloris
//! clients, which never finish a head, only ever push each other out, and a flood from many
//! addresses pushes out a reader alone on its address last. Only when all of them are being
//! answered is the new one closed. On a run with a token, requests without it are answered in at
//! most [`MAX_ANSWERING_WITHOUT_TOKEN`] slots at once (beyond, 503 at once): readers that take
//! their answers slowly cannot keep one with the token out.
//!
//! Who may read it is [`HttpAccess`]: the run's token (`Authorization: Bearer`, or `?token=`) off
//! loopback unless `--public-status`; without it the answer is 401 with `WWW-Authenticate: Bearer`.
//! A viewer without the token sees the state file's name only, never its absolute path.
//!
//! Nothing here talks to the engine or reads the state file: every answer is a view of the
//! [`StatusCache`] (the [`RunSnapshot`] the engine last published, and the held and failed jobs
//! its own thread read), so neither a slow client nor many of them can hold up leases and results.
//!
//! [`RunSnapshot`]: crate::snapshot::RunSnapshot

mod page;
mod token;
mod view;

pub use page::{escape_html, render_page};
pub use view::PageView;

use crate::metrics;
use crate::snapshot::fleet::WorkerQuery;
use crate::status::StatusCache;
use crate::waiting::Waiting;
use http_body_util::Full;
use hyper::body::Bytes;
use hyper::header::{self, HeaderMap, HeaderValue};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use parking_lot::Mutex;
use std::convert::Infallible;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;
use token::TokenDigest;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;

/// The longest request head read (request line and headers); a longer one is answered 431.
/// (hyper's smallest read buffer, 8 KiB.)
pub const MAX_REQUEST: usize = 8 * 1024;

/// How long a client has, from the accept, to send its whole request head.
pub const READ_TIMEOUT: Duration = Duration::from_secs(5);

/// How long a client has, after [`READ_TIMEOUT`], to take the whole answer.
pub const WRITE_TIMEOUT: Duration = Duration::from_secs(10);

/// Connections served at once (see the module doc for what happens to one more).
pub const MAX_CONNECTIONS: usize = 64;

/// Requests without the run's token (on a run that has one) answered at once; the other slots
/// are kept for readers with the token.
pub const MAX_ANSWERING_WITHOUT_TOKEN: usize = MAX_CONNECTIONS - 16;

/// The policy of the page: nothing but the page itself (no script, style, font or image from
/// anywhere else), never framed.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; connect-src 'self'; img-src 'self'; frame-ancestors 'none'";

/// What the HTTP port serves from.
pub struct HttpState {
    /// The data of every answer: the page, `/status.json` and `/metrics`.
    pub status: Arc<StatusCache>,
    /// Who may read it.
    pub access: HttpAccess,
}

/// Who may read the HTTP port.
#[derive(Debug, Clone, Default)]
pub struct HttpAccess {
    /// The run's token (`--token`), if it has one.
    pub token: Option<TokenDigest>,
    /// Whether a request without the token is refused with 401.
    pub token_required: bool,
}

/// Who is asking, once [`HttpAccess::check`] let the request through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Viewer {
    /// Presented the run's token: sees everything, the state file's absolute path included.
    Authenticated,
    /// Presented no token where none is required: sees the state file's name only.
    Anonymous,
}

impl HttpAccess {
    /// The access of an HTTP port bound to `addr`: the token is required off loopback, unless
    /// `public_status`. (Whether a port may be served at all is `ServeConfig::validate_http`.)
    pub fn new(token: Option<&str>, public_status: bool, addr: SocketAddr) -> HttpAccess {
        let token = token.map(TokenDigest::of);
        let token_required = token.is_some() && !public_status && !addr.ip().is_loopback();
        HttpAccess { token, token_required }
    }

    /// Who sent a request with these `headers` and `query`, or `None` to refuse it: a token
    /// given (as `Authorization: Bearer TOKEN` or as `token=TOKEN` in the query) must be the
    /// run's; none given is refused where one is required.
    pub fn check(&self, headers: &HeaderMap, query: Option<&str>) -> Option<Viewer> {
        let from_header = headers.get(header::AUTHORIZATION).map(|v| {
            let v = v.to_str().unwrap_or_default();
            match v.split_once(' ') {
                Some((scheme, token)) if scheme.eq_ignore_ascii_case("bearer") => token.trim(),
                _ => "",
            }
        });
        let from_query = || query?.split('&').find_map(|kv| kv.strip_prefix("token="));
        match (from_header.or_else(from_query), &self.token) {
            (Some(given), Some(token)) => token.matches(given).then_some(Viewer::Authenticated),
            // No token to check against: nothing to be proven.
            (Some(_), None) => Some(Viewer::Anonymous),
            (None, _) => (!self.token_required).then_some(Viewer::Anonymous),
        }
    }
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
}

/// The route of a request for `path` (without its query) by `method`.
pub fn route(method: &Method, path: &str) -> Route {
    if method != Method::GET && method != Method::HEAD {
        return Route::MethodNotAllowed;
    }
    match path {
        "/metrics" => Route::Metrics,
        "/" | "/index.html" => Route::Page,
        "/status.json" => Route::StatusJson,
        _ => Route::NotFound,
    }
}

fn text(status: StatusCode, body: &str) -> (StatusCode, &'static str, Vec<u8>) {
    (status, "text/plain; charset=utf-8", body.as_bytes().to_vec())
}

/// The answer to one request.
async fn answer(state: &HttpState, req: &Request<hyper::body::Incoming>) -> Response<Full<Bytes>> {
    let route = route(req.method(), req.uri().path());
    let viewer = match route {
        Route::NotFound | Route::MethodNotAllowed => Some(Viewer::Anonymous),
        _ => state.access.check(req.headers(), req.uri().query()),
    };
    let workers = WorkerQuery::from_query(req.uri().query());
    let (status, content_type, body) = match (route, viewer) {
        (_, None) => {
            tracing::debug!("http request refused: missing or wrong token");
            text(
                StatusCode::UNAUTHORIZED,
                "missing or wrong token: send `Authorization: Bearer TOKEN` (the coordinator's --token)\n",
            )
        }
        (Route::Metrics, Some(_)) => {
            // The view every reader gets, listing no worker: the series count them all.
            let none = WorkerQuery { limit: 0, ..WorkerQuery::default() };
            let text = metrics::render(&state.status.view_without_waiting(&none));
            (StatusCode::OK, "text/plain; version=0.0.4", text.into_bytes())
        }
        (Route::Page, Some(viewer)) => (
            StatusCode::OK,
            "text/html; charset=utf-8",
            render_page(&PageView::read(&state.status, &workers).await.for_viewer(viewer))
                .into_bytes(),
        ),
        (Route::StatusJson, Some(viewer)) => (
            StatusCode::OK,
            "application/json",
            serde_json::to_vec(&PageView::read(&state.status, &workers).await.for_viewer(viewer))
                .expect("status serializes"),
        ),
        (Route::NotFound, _) => text(
            StatusCode::NOT_FOUND,
            "not found: try / (status page), /status.json or /metrics\n",
        ),
        (Route::MethodNotAllowed, _) => text(StatusCode::METHOD_NOT_ALLOWED, "only GET and HEAD\n"),
    };
    let length = body.len();
    let body = if req.method() == Method::HEAD { Vec::new() } else { body };
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    headers.insert(header::CONTENT_LENGTH, HeaderValue::from(length));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    headers.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    // A page opened with `?token=` sends its address to no one.
    headers.insert(header::REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    if route == Route::Page && viewer.is_some() {
        headers.insert(
            header::CONTENT_SECURITY_POLICY,
            HeaderValue::from_static(CONTENT_SECURITY_POLICY),
        );
    }
    if status == StatusCode::UNAUTHORIZED {
        headers
            .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer realm=\"nqueens\""));
    }
    response
}

/// The connections being served: those still waiting for their request head (by address, oldest
/// first, each with the sender that closes it), how many are being answered, and how many of
/// those lack the run's token.
#[derive(Default)]
struct Slots {
    next_id: u64,
    reading: Waiting<oneshot::Sender<()>>,
    answering: usize,
    answering_without_token: usize,
}

/// A connection's place in [`Slots`], given back when dropped.
struct Slot {
    id: u64,
    ip: IpAddr,
    slots: Arc<Mutex<Slots>>,
    /// Once its head is in: whether it came without the run's token.
    answering: Option<bool>,
}

impl Slots {
    /// A place for one more connection from `ip`, with the receiver that says it was pushed out:
    /// when all [`MAX_CONNECTIONS`] are taken, one still waiting for its head is pushed out (the
    /// oldest of the address holding the most); `None` when all are being answered.
    fn take(slots: &Arc<Mutex<Slots>>, ip: IpAddr) -> Option<(Slot, oneshot::Receiver<()>)> {
        let mut s = slots.lock();
        if s.reading.len() + s.answering >= MAX_CONNECTIONS {
            let (_, _, oldest) = s.reading.pop_most_held()?;
            let _ = oldest.send(());
        }
        let (tx, rx) = oneshot::channel();
        let id = s.next_id;
        s.next_id += 1;
        s.reading.insert(ip, id, tx);
        Some((Slot { id, ip, slots: slots.clone(), answering: None }, rx))
    }
}

impl Slot {
    /// The request head is in (`without_token`: on a run with a token, it lacks it): the
    /// connection can no longer be pushed out. False when it lacks the token and requests
    /// without it already hold [`MAX_ANSWERING_WITHOUT_TOKEN`] slots: it is then answered 503.
    fn answering(&mut self, without_token: bool) -> bool {
        let mut s = self.slots.lock();
        if self.answering.is_some() || s.reading.remove(self.ip, self.id).is_none() {
            return true;
        }
        let room = !without_token || s.answering_without_token < MAX_ANSWERING_WITHOUT_TOKEN;
        s.answering += 1;
        s.answering_without_token += usize::from(without_token);
        self.answering = Some(without_token);
        room
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut s = self.slots.lock();
        match self.answering {
            Some(without_token) => {
                s.answering -= 1;
                s.answering_without_token -= usize::from(without_token);
            }
            None => {
                s.reading.remove(self.ip, self.id);
            }
        }
    }
}

/// The answer to a request without the token when their slots are all taken.
fn busy() -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from_static(
        b"busy: too many requests without the token at once; try again\n",
    )));
    *response.status_mut() = StatusCode::SERVICE_UNAVAILABLE;
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain; charset=utf-8"));
    headers.insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

async fn serve_connection(
    socket: TcpStream,
    state: Arc<HttpState>,
    slot: Slot,
    pushed_out: oneshot::Receiver<()>,
) {
    let slot = Arc::new(Mutex::new(slot));
    let service = hyper::service::service_fn({
        let slot = slot.clone();
        move |req: Request<hyper::body::Incoming>| {
            let with_token =
                state.access.check(req.headers(), req.uri().query()) == Some(Viewer::Authenticated);
            let without_token = state.access.token.is_some() && !with_token;
            let room = slot.lock().answering(without_token);
            let state = state.clone();
            async move {
                if !room {
                    return Ok::<_, Infallible>(busy());
                }
                Ok(answer(&state, &req).await)
            }
        }
    });
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(READ_TIMEOUT)
        .max_buf_size(MAX_REQUEST)
        .keep_alive(false);
    let connection = http.serve_connection(TokioIo::new(socket), service);
    tokio::select! {
        served = tokio::time::timeout(READ_TIMEOUT + WRITE_TIMEOUT, connection) => match served {
            Ok(Ok(())) => {}
            Ok(Err(e)) => tracing::debug!(error = %e, "http connection ended with an error"),
            Err(_) => tracing::debug!("http client too slow to take its answer; dropped"),
        },
        Ok(()) = pushed_out => tracing::debug!("http client without a request head pushed out by a newer one"),
    }
    drop(slot);
}

/// Serves the HTTP port on `listener` until the task is dropped.
pub async fn serve_http(listener: TcpListener, state: Arc<HttpState>) {
    let slots = Arc::new(Mutex::new(Slots::default()));
    // Backs off when descriptors run out instead of spinning (see `accept.rs`).
    let mut incoming = crate::accept::Incoming::new(listener, "http");
    loop {
        let socket = incoming.accept().await;
        let ip = socket.peer_addr().map_or(IpAddr::from([0, 0, 0, 0]), |a| a.ip().to_canonical());
        let Some((slot, pushed_out)) = Slots::take(&slots, ip) else {
            tracing::debug!(peer = ?socket.peer_addr().ok(), "too many http connections being answered; closed");
            continue;
        };
        tokio::spawn(serve_connection(socket, state.clone(), slot, pushed_out));
    }
}

#[cfg(test)]
mod tests;
