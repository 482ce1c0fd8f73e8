//! The HTTP port over a real socket, on a real (small) state file.

use super::*;
use crate::snapshot::RunSnapshot;
use parking_lot::Mutex;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

#[test]
fn requests_are_routed_by_method_and_path() {
    let r = |method: Method, path: &str| route(&method, path);
    assert_eq!(r(Method::GET, "/metrics"), Route::Metrics);
    assert_eq!(r(Method::GET, "/"), Route::Page);
    assert_eq!(r(Method::GET, "/index.html"), Route::Page);
    assert_eq!(r(Method::HEAD, "/status.json"), Route::StatusJson);
    assert_eq!(r(Method::GET, "/nope"), Route::NotFound);
    assert_eq!(r(Method::GET, "/metrics/../x"), Route::NotFound);
    assert_eq!(r(Method::POST, "/metrics"), Route::MethodNotAllowed);
    assert_eq!(r(Method::DELETE, "/nope"), Route::MethodNotAllowed);
}

#[test]
fn the_token_is_required_off_loopback_unless_public() {
    let any: SocketAddr = "0.0.0.0:9447".parse().unwrap();
    let local: SocketAddr = "127.0.0.1:9447".parse().unwrap();
    let local6: SocketAddr = "[::1]:9447".parse().unwrap();
    assert!(HttpAccess::new(Some("t"), false, any).token_required);
    assert!(!HttpAccess::new(Some("t"), true, any).token_required);
    assert!(!HttpAccess::new(Some("t"), false, local).token_required);
    assert!(!HttpAccess::new(Some("t"), false, local6).token_required);
    assert!(!HttpAccess::new(None, true, any).token_required);

    let headers = |auth: Option<&str>| {
        let mut h = HeaderMap::new();
        if let Some(a) = auth {
            h.insert(header::AUTHORIZATION, HeaderValue::from_str(a).unwrap());
        }
        h
    };
    let required = HttpAccess::new(Some("s3cret"), false, any);
    let check = |access: &HttpAccess, auth: Option<&str>, query: Option<&str>| {
        access.check(&headers(auth), query)
    };
    assert_eq!(check(&required, Some("Bearer s3cret"), None), Some(Viewer::Authenticated));
    assert_eq!(check(&required, Some("bearer s3cret"), None), Some(Viewer::Authenticated));
    assert_eq!(check(&required, None, Some("a=1&token=s3cret")), Some(Viewer::Authenticated));
    for (auth, query) in [
        (None, None),
        (Some("Bearer s3cre"), None),
        (Some("Bearer s3cret2"), None),
        (Some("s3cret"), None),
        (Some("Basic s3cret"), None),
        (None, Some("token=nope")),
        (None, Some("tok=s3cret")),
        // A wrong header is not saved by a right query.
        (Some("Bearer nope"), Some("token=s3cret")),
    ] {
        assert_eq!(check(&required, auth, query), None, "{auth:?} {query:?}");
    }
    // Where none is required, no token is an anonymous viewer, and a wrong one still refused.
    let open = HttpAccess::new(Some("s3cret"), true, any);
    assert_eq!(check(&open, None, None), Some(Viewer::Anonymous));
    assert_eq!(check(&open, Some("Bearer nope"), None), None);
    assert_eq!(check(&open, Some("Bearer s3cret"), None), Some(Viewer::Authenticated));
    let tokenless = HttpAccess::new(None, true, any);
    assert_eq!(check(&tokenless, Some("Bearer x"), None), Some(Viewer::Anonymous));
}

/// A coordinator's HTTP port on 127.0.0.1 for a fresh N=8 state file, open to anyone.
async fn port(dir: &std::path::Path) -> std::net::SocketAddr {
    port_with(dir, HttpAccess::default()).await
}

/// A coordinator's HTTP port on 127.0.0.1 for a fresh N=8 state file, under `access`, showing
/// the file's snapshot as read offline.
async fn port_with(dir: &std::path::Path, access: HttpAccess) -> std::net::SocketAddr {
    let path = dir.join("page.db");
    let snapshot = Arc::new(RunSnapshot::of_fresh_run_file(&path));
    // A receiver keeps the last value its sender sent, after the sender is gone too.
    let (_, snapshots) = tokio::sync::watch::channel(snapshot);
    let status = StatusCache::start(path, snapshots).unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let state = HttpState { status, access };
    tokio::spawn(serve_http(listener, Arc::new(state)));
    addr
}

/// Sends `request` and reads the answer to its end: (status line, headers, body).
async fn fetch(addr: std::net::SocketAddr, request: &[u8]) -> (String, String, String) {
    let mut conn = TcpStream::connect(addr).await.unwrap();
    conn.write_all(request).await.unwrap();
    let mut answer = String::new();
    tokio::time::timeout(Duration::from_secs(10), conn.read_to_string(&mut answer))
        .await
        .expect("answered in time")
        .unwrap();
    let (head, body) = answer.split_once("\r\n\r\n").expect("a head and a body");
    let (status, headers) = head.split_once("\r\n").unwrap_or((head, ""));
    // The status without the version (hyper answers HTTP/1.1, or 1.0 to a 1.0 request); the
    // headers lowercase (hyper writes them so), one per line.
    let status = status.split_once(' ').map_or(status, |(_, s)| s);
    (status.to_owned(), headers.to_ascii_lowercase(), body.to_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_page_json_and_errors_over_a_socket() {
    let dir = tempfile::tempdir().unwrap();
    let addr = port(dir.path()).await;

    // A client that connects and says nothing does not hold up the others.
    let mut idle = TcpStream::connect(addr).await.unwrap();

    let (status, headers, body) = fetch(addr, b"GET /metrics HTTP/1.0\r\n\r\n").await;
    assert_eq!(status, "200 OK");
    assert!(headers.contains("content-type: text/plain; version=0.0.4"), "{headers}");
    assert!(body.contains("# TYPE nqueens_jobs gauge\n"), "{body}");
    assert!(body.contains("nqueens_jobs{state=\"done\"} 0\n"), "{body}");
    assert!(headers.contains(&format!("content-length: {}", body.len())), "{headers}");

    let (status, headers, body) = fetch(addr, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").await;
    assert_eq!(status, "200 OK");
    assert!(headers.contains("content-type: text/html; charset=utf-8"), "{headers}");
    assert!(headers.contains("content-security-policy: default-src 'none'"), "{headers}");
    assert!(body.starts_with("<!doctype html>"), "{body}");
    assert!(body.contains("N=<span id=\"n\">8</span>"), "{body}");
    assert!(body.trim_end().ends_with("</html>"));

    let (status, headers, body) = fetch(addr, b"GET /status.json HTTP/1.1\r\n\r\n").await;
    assert_eq!(status, "200 OK");
    assert!(headers.contains("content-type: application/json"), "{headers}");
    let json: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(json["n"], 8);
    assert_eq!(json["jobs_total"], json["jobs_pending"]);
    assert_eq!(json["jobs_done"], 0);
    assert_eq!(json["complete"], false);
    assert!(json["workers"].as_array().unwrap().is_empty());
    assert!(json["history"].is_array());
    // No token presented: the state file's name only, never its path.
    assert_eq!(json["state_file"], "page.db", "{json}");
    assert_eq!(json["requeue_held"], serde_json::Value::Null);
    assert_eq!(json["rows_error"], serde_json::Value::Null, "{json}");
    for key in [
        "results_per_second",
        "nodes_per_second",
        "eta_seconds",
        "held_jobs",
        "result",
        "snapshot_seq",
    ] {
        assert!(json.get(key).is_some(), "{key} in {json}");
    }

    let (status, headers, body) = fetch(addr, b"HEAD /status.json HTTP/1.1\r\n\r\n").await;
    assert_eq!(status, "200 OK");
    assert!(body.is_empty() && headers.contains("content-length: "), "{headers}");

    let (status, _, body) = fetch(addr, b"GET /favicon.ico HTTP/1.1\r\n\r\n").await;
    assert_eq!(status, "404 Not Found");
    assert!(body.contains("not found"));
    let (status, _, _) = fetch(addr, b"DELETE / HTTP/1.1\r\n\r\n").await;
    assert_eq!(status, "405 Method Not Allowed");
    let (status, _, _) = fetch(addr, b"nonsense\r\n\r\n").await;
    assert_eq!(status, "400 Bad Request");
    let mut huge = b"GET / HTTP/1.1\r\nX-Fill: ".to_vec();
    huge.resize(MAX_REQUEST, b'a');
    let (status, _, _) = fetch(addr, &huge).await;
    assert_eq!(status, "431 Request Header Fields Too Large");

    // The silent client is cut off after the read timeout, with nothing sent back.
    let mut rest = Vec::new();
    let read =
        tokio::time::timeout(READ_TIMEOUT + Duration::from_secs(5), idle.read_to_end(&mut rest));
    assert!(read.await.is_ok(), "the idle connection is closed");
    assert!(rest.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn off_loopback_the_token_is_required_and_shows_the_path() {
    let dir = tempfile::tempdir().unwrap();
    let any: SocketAddr = "0.0.0.0:9447".parse().unwrap();
    let addr = port_with(dir.path(), HttpAccess::new(Some("s3cret"), false, any)).await;

    for path in ["/metrics", "/", "/status.json"] {
        let request = format!("GET {path} HTTP/1.1\r\nHost: x\r\n\r\n");
        let (status, headers, body) = fetch(addr, request.as_bytes()).await;
        assert_eq!(status, "401 Unauthorized", "{path}");
        assert!(headers.contains("www-authenticate: bearer"), "{headers}");
        assert!(!body.contains("page.db") && !body.contains("nqueens_"), "{body}");
        let wrong = format!("GET {path} HTTP/1.1\r\nAuthorization: Bearer s3cre\r\n\r\n");
        assert_eq!(fetch(addr, wrong.as_bytes()).await.0, "401 Unauthorized", "{path}");
    }
    let (status, _, body) =
        fetch(addr, b"GET /metrics HTTP/1.1\r\nAuthorization: Bearer s3cret\r\n\r\n").await;
    assert_eq!(status, "200 OK");
    assert!(body.contains("# TYPE nqueens_jobs gauge\n"), "{body}");
    // With the token, the state file's absolute path (what `requeue --state` needs).
    let (status, _, body) =
        fetch(addr, b"GET /status.json HTTP/1.1\r\nAuthorization: Bearer s3cret\r\n\r\n").await;
    assert_eq!(status, "200 OK");
    let json: serde_json::Value = serde_json::from_str(&body).unwrap();
    let path = json["state_file"].as_str().unwrap();
    assert!(path.starts_with('/') && path.ends_with("/page.db"), "{json}");
    // A browser: the page's address carries the token, which its script sends along.
    let (status, headers, body) = fetch(addr, b"GET /?token=s3cret HTTP/1.1\r\n\r\n").await;
    assert_eq!(status, "200 OK");
    assert!(headers.contains("referrer-policy: no-referrer"), "{headers}");
    assert!(body.contains("Authorization: 'Bearer ' + token"), "{body}");
    // Unknown paths and methods give nothing away either way.
    assert_eq!(fetch(addr, b"GET /x HTTP/1.1\r\n\r\n").await.0, "404 Not Found");
}

/// Slowloris: `count` connections that each send part of a request head, then a byte now and
/// then, never its end.
async fn slowloris(addr: SocketAddr, count: usize) -> Vec<tokio::task::JoinHandle<()>> {
    let mut tasks = Vec::new();
    for _ in 0..count {
        let Ok(mut conn) = TcpStream::connect(addr).await else { break };
        tasks.push(tokio::spawn(async move {
            if conn.write_all(b"GET / HTTP/1.1\r\nHost: x\r\nX-Slow: ").await.is_err() {
                return;
            }
            loop {
                tokio::time::sleep(Duration::from_millis(500)).await;
                if conn.write_all(b"a").await.is_err() {
                    return;
                }
            }
        }));
    }
    tasks
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slowloris_clients_hold_up_no_honest_one() {
    let dir = tempfile::tempdir().unwrap();
    let addr = port(dir.path()).await;
    // Three times as many as the port serves at once.
    let attackers = slowloris(addr, 3 * MAX_CONNECTIONS).await;
    assert_eq!(attackers.len(), 3 * MAX_CONNECTIONS);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut slowest = Duration::ZERO;
    for _ in 0..20 {
        let t = std::time::Instant::now();
        let (status, _, _) = fetch(addr, b"GET /status.json HTTP/1.1\r\n\r\n").await;
        assert_eq!(status, "200 OK");
        slowest = slowest.max(t.elapsed());
        // More slowloris connections keep coming while the honest ones ask.
        drop(slowloris(addr, 8).await);
    }
    eprintln!("slowest of 20 honest requests among slowloris clients: {slowest:?}");
    assert!(slowest < Duration::from_secs(1), "{slowest:?}");
    for a in attackers {
        a.abort();
    }
}

/// A full port pushes out a connection still reading its head from the address holding the
/// most, so a reader alone on its address outlasts a flood from several; requests without the
/// token take at most their share of the slots being answered.
#[test]
fn a_full_port_pushes_out_the_flood_and_keeps_slots_for_the_token() {
    let slots = Arc::new(Mutex::new(Slots::default()));
    let ip = |last: u8| IpAddr::from([127, 0, 0, last]);
    let (mut reader, mut reader_out) = Slots::take(&slots, ip(1)).unwrap();
    let mut flood = Vec::new();
    for k in 0..3 * MAX_CONNECTIONS {
        flood.push(Slots::take(&slots, ip(2 + (k % 4) as u8)).unwrap());
    }
    assert!(reader_out.try_recv().is_err(), "the lone reader was pushed out");
    let pushed = flood.iter_mut().map(|(_, out)| out.try_recv().is_ok()).filter(|&p| p).count();
    assert_eq!(pushed, 3 * MAX_CONNECTIONS - (MAX_CONNECTIONS - 1));
    assert!(reader.answering(false));
    drop(flood);
    // Requests without the token: answered up to their share, then 503; with it, always.
    let mut answered = Vec::new();
    for k in 0..MAX_ANSWERING_WITHOUT_TOKEN {
        let (mut slot, _) = Slots::take(&slots, ip(2 + (k % 4) as u8)).unwrap();
        assert!(slot.answering(true), "request {k} without the token");
        answered.push(slot);
    }
    let (mut one_more, _) = Slots::take(&slots, ip(9)).unwrap();
    assert!(!one_more.answering(true), "past the share of requests without the token");
    let (mut with_token, _) = Slots::take(&slots, ip(9)).unwrap();
    assert!(with_token.answering(false));
    drop(answered);
    let (mut later, _) = Slots::take(&slots, ip(9)).unwrap();
    assert!(later.answering(true), "room again once they are answered");
}
