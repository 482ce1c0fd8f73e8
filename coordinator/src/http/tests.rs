//! The HTTP port over a real socket, on a real (small) state file.

use super::*;
use crate::service::StatusReader;
use crate::store::Store;
use nqueens_core::{job_list, SplitParams};
use parking_lot::Mutex;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

#[test]
fn requests_are_routed_by_method_and_path() {
    let r = |head: &str| route(head.as_bytes(), true);
    assert_eq!(r("GET /metrics HTTP/1.0\r\n\r\n"), (Route::Metrics, false));
    assert_eq!(r("GET / HTTP/1.1\r\nHost: x\r\n\r\n"), (Route::Page, false));
    assert_eq!(r("GET /?refresh=1 HTTP/1.1\r\n\r\n"), (Route::Page, false));
    assert_eq!(r("HEAD /status.json HTTP/1.1\r\n\r\n"), (Route::StatusJson, true));
    assert_eq!(r("GET /status.json?t=5 HTTP/1.1\r\n\r\n"), (Route::StatusJson, false));
    assert_eq!(r("GET /nope HTTP/1.1\r\n\r\n"), (Route::NotFound, false));
    assert_eq!(r("GET /metrics/../x HTTP/1.1\r\n\r\n"), (Route::NotFound, false));
    assert_eq!(r("POST /metrics HTTP/1.1\r\n\r\n"), (Route::MethodNotAllowed, false));
    assert_eq!(r("GET /\r\n\r\n"), (Route::BadRequest, false));
    assert_eq!(r("GET / SPDY/3\r\n\r\n"), (Route::BadRequest, false));
    assert_eq!(r("\u{1}\u{2}"), (Route::BadRequest, false));
    assert_eq!(route(&[b'A'; MAX_REQUEST], false), (Route::TooLarge, false));
    let mut long = b"GET / HTTP/1.1\r\nX: ".to_vec();
    long.resize(MAX_REQUEST, b'a');
    assert_eq!(route(&long, false), (Route::TooLarge, false));
}

/// A coordinator's HTTP port on 127.0.0.1 for a fresh N=8 state file.
async fn port(dir: &std::path::Path) -> (std::net::SocketAddr, Arc<Metrics>) {
    let path = dir.join("page.db");
    let list = job_list(8, &SplitParams::default()).unwrap();
    let store = Store::open_or_create(&path, &list, 0.0, "cluster").unwrap();
    let fingerprint = store.meta().fingerprint.clone();
    drop(store);
    let metrics = Arc::new(Metrics::default());
    metrics.jobs[0].store(list.jobs.len() as u64, std::sync::atomic::Ordering::Relaxed);
    let history = Arc::new(Mutex::new(History::new(HISTORY_SAMPLES)));
    history.lock().push(Sample::take(&metrics));
    let (_complete_tx, complete) = tokio::sync::watch::channel(None);
    let run =
        RunInfo { n: 8, fingerprint, jobs_total: list.jobs.len() as u64, state_file: path.clone() };
    let status = StatusSource::new(
        run,
        metrics.clone(),
        history,
        Arc::new(StatusReader::new(path)),
        complete,
    );
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(serve_http(listener, Arc::new(HttpState { metrics: metrics.clone(), status })));
    (addr, metrics)
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
    (status.to_owned(), headers.to_owned(), body.to_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_page_json_and_errors_over_a_socket() {
    let dir = tempfile::tempdir().unwrap();
    let (addr, _metrics) = port(dir.path()).await;

    // A client that connects and says nothing does not hold up the others.
    let mut idle = TcpStream::connect(addr).await.unwrap();

    let (status, headers, body) = fetch(addr, b"GET /metrics HTTP/1.0\r\n\r\n").await;
    assert_eq!(status, "HTTP/1.0 200 OK");
    assert!(headers.contains("Content-Type: text/plain; version=0.0.4"), "{headers}");
    assert!(body.contains("# TYPE nqueens_jobs gauge\n"), "{body}");
    assert!(body.contains("nqueens_jobs{state=\"done\"} 0\n"), "{body}");
    assert!(headers.contains(&format!("Content-Length: {}", body.len())), "{headers}");

    let (status, headers, body) = fetch(addr, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").await;
    assert_eq!(status, "HTTP/1.0 200 OK");
    assert!(headers.contains("Content-Type: text/html; charset=utf-8"), "{headers}");
    assert!(headers.contains("Content-Security-Policy: default-src 'none'"), "{headers}");
    assert!(body.starts_with("<!doctype html>"), "{body}");
    assert!(body.contains("N=<span id=\"n\">8</span>"), "{body}");
    assert!(body.trim_end().ends_with("</html>"));

    let (status, headers, body) = fetch(addr, b"GET /status.json HTTP/1.1\r\n\r\n").await;
    assert_eq!(status, "HTTP/1.0 200 OK");
    assert!(headers.contains("Content-Type: application/json"), "{headers}");
    let json: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(json["n"], 8);
    assert_eq!(json["jobs_total"], json["jobs_pending"]);
    assert_eq!(json["jobs_done"], 0);
    assert_eq!(json["complete"], false);
    assert!(json["workers"].as_array().unwrap().is_empty());
    assert!(json["history"].is_array());
    assert!(json["state_file"].as_str().unwrap().ends_with("page.db"));
    assert_eq!(json["requeue_held"], serde_json::Value::Null);
    assert_eq!(json["rows_error"], serde_json::Value::Null, "{json}");
    for key in ["results_per_second", "nodes_per_second", "eta_seconds", "held_jobs", "result"] {
        assert!(json.get(key).is_some(), "{key} in {json}");
    }

    let (status, headers, body) = fetch(addr, b"HEAD /status.json HTTP/1.1\r\n\r\n").await;
    assert_eq!(status, "HTTP/1.0 200 OK");
    assert!(body.is_empty() && headers.contains("Content-Length: "), "{headers}");

    let (status, _, body) = fetch(addr, b"GET /favicon.ico HTTP/1.1\r\n\r\n").await;
    assert_eq!(status, "HTTP/1.0 404 Not Found");
    assert!(body.contains("not found"));
    let (status, _, _) = fetch(addr, b"DELETE / HTTP/1.1\r\n\r\n").await;
    assert_eq!(status, "HTTP/1.0 405 Method Not Allowed");
    let (status, _, _) = fetch(addr, b"nonsense\r\n\r\n").await;
    assert_eq!(status, "HTTP/1.0 400 Bad Request");
    let mut huge = b"GET / HTTP/1.1\r\nX-Fill: ".to_vec();
    huge.resize(MAX_REQUEST, b'a');
    let (status, _, _) = fetch(addr, &huge).await;
    assert_eq!(status, "HTTP/1.0 431 Request Header Fields Too Large");

    // The silent client is cut off after the read timeout, with nothing sent back.
    let mut rest = Vec::new();
    let read =
        tokio::time::timeout(READ_TIMEOUT + Duration::from_secs(5), idle.read_to_end(&mut rest));
    assert!(read.await.is_ok(), "the idle connection is closed");
    assert!(rest.is_empty());
}
