//! In-process end to end: a coordinator and two workers on 127.0.0.1 ephemeral ports solve
//! N=12..15 exactly, over real gRPC and a real SQLite state file.

use nqueens_coordinator::{result_file, serve, ServeConfig};
use nqueens_tests::cluster::{
    assert_each_job_counted_once, assert_matches_reference, read_result_file,
};
use nqueens_worker::{WorkerConfig, WorkerExit};
use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_workers_solve_n12_to_n15_exactly() {
    for n in 12..=15u32 {
        let dir = tempfile::tempdir().unwrap();
        let state = dir.path().join(format!("run{n}.db"));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let metrics = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let metrics_addr = metrics.local_addr().unwrap();
        let config = ServeConfig {
            n: Some(n),
            state: state.clone(),
            lease_seconds: 10,
            // Enough verified jobs that both workers must cross-check some of each other's work.
            verify_fraction: 0.05,
            token: Some("sesame".into()),
            exit_when_done: true,
            ..ServeConfig::default()
        };
        let config = config.check().unwrap();
        let coordinator =
            tokio::spawn(serve(listener, Some(metrics), config, std::future::pending()));
        let workers: Vec<_> = ["alpha", "beta"]
            .into_iter()
            .map(|name| {
                let mut cfg = WorkerConfig::new(url.clone(), 1);
                cfg.token = Some("sesame".into());
                cfg.name = name.into();
                cfg.max_backoff = Duration::from_secs(1);
                tokio::spawn(nqueens_worker::run(cfg.check().unwrap(), std::future::pending()))
            })
            .collect();

        // Prometheus metrics are served while the run is on.
        let scrape = tokio::task::spawn_blocking(move || {
            use std::io::{Read, Write};
            let mut conn = std::net::TcpStream::connect(metrics_addr).unwrap();
            conn.write_all(b"GET /metrics HTTP/1.0\r\n\r\n").unwrap();
            let mut body = String::new();
            conn.read_to_string(&mut body).unwrap();
            body
        })
        .await
        .unwrap();
        assert!(scrape.starts_with("HTTP/1.0 200 OK"), "{scrape}");
        assert!(scrape.contains("nqueens_jobs{state=\"done\"}"), "{scrape}");
        assert!(scrape.contains("nqueens_results_total"), "{scrape}");

        let record = tokio::time::timeout(Duration::from_secs(180), coordinator)
            .await
            .unwrap_or_else(|_| panic!("N={n}: coordinator did not finish"))
            .unwrap()
            .unwrap()
            .expect("a complete run returns its result");
        assert_matches_reference(&record);
        assert_eq!(read_result_file(&result_file(&state)), record, "result file of N={n}");
        assert_each_job_counted_once(&state);
        for w in workers {
            let exit = tokio::time::timeout(Duration::from_secs(30), w)
                .await
                .expect("worker exits")
                .unwrap()
                .unwrap();
            assert_eq!(exit, WorkerExit::RunComplete);
        }
    }
}
