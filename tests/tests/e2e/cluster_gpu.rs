//! Mixed clusters: a GPU worker (pocl's CPU device in CI) beside a CPU worker ends exact with both
//! counting results; a GPU whose device fails mid-batch hands its jobs to the CPU and the run still
//! ends exact; a GPU worker with the wrong-count fault switch is caught like any other worker.
//!
//! Without an OpenCL device these tests fail under `CI=true` and are skipped loudly elsewhere.

use nqueens_coordinator::result_file;
use nqueens_tests::cluster::*;
use nqueens_tests::harness::{CoordinatorBuilder, RunDir};
use std::path::Path;
use std::time::Duration;

const LONG: Duration = Duration::from_secs(300);

/// Whether an OpenCL device is there; panics under CI if not.
fn have_device() -> bool {
    match nqueens_gpu::list_devices() {
        Ok(devices) if !devices.is_empty() => true,
        outcome => {
            let why = match outcome {
                Err(e) => e.to_string(),
                Ok(_) => "no device".into(),
            };
            if std::env::var("CI").is_ok_and(|v| v == "true" || v == "1") {
                panic!("CI=true and no OpenCL device ({why}): CI must install pocl-opencl-icd");
            }
            eprintln!("\n!!!!! SKIPPED: no OpenCL device ({why}); install pocl-opencl-icd !!!!!\n");
            false
        }
    }
}

/// Counted results of the worker named `name`.
fn counted_by(state: &Path, name: &str) -> i64 {
    query_count(
        state,
        &format!(
            "SELECT COUNT(*) FROM results WHERE counted=1 AND worker_id IN \
             (SELECT id FROM workers WHERE name='{name}')"
        ),
    )
}

/// Runs N=`n` with CPU workers named `cpus` and one GPU worker `gpu` (with `gpu_env` set);
/// returns the state file path (in `dir`), the GPU worker's log and the coordinator's log.
fn mixed_run(
    dir: &Path,
    n: u32,
    cpus: &[&str],
    serve_extra: &[&str],
    gpu_env: &[(&str, &str)],
) -> (std::path::PathBuf, String, String) {
    let state = dir.join(format!("run{n}.db"));
    let serve = CoordinatorBuilder::new(dir, n).state(&state).exit_when_done();
    let mut coordinator = serve.args(serve_extra).start();
    // `--threads` given: one CPU thread beside the device; few slots so that both workers get jobs.
    let gpu = coordinator.worker("gpu").args(&["--gpu", "0", "--gpu-slots", "4"]);
    let mut gpu = gpu.start_with(|c| {
        c.env("NQ_GPU_ITEMS", "4096");
        for (k, v) in gpu_env {
            c.env(k, v);
        }
    });
    // The GPU worker registers first: its self-tests take a second or more on pocl, and a CPU
    // worker started beside it could finish a small run before it asks for a job.
    let started = std::time::Instant::now();
    while !gpu.log_text().contains("registered with the coordinator") {
        assert!(started.elapsed() < LONG, "the GPU worker never registered:\n{}", gpu.log_text());
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut cpu: Vec<Proc> = cpus.iter().map(|name| coordinator.worker(name).start()).collect();
    let status = coordinator.wait_exit(LONG);
    assert!(status.success(), "coordinator: {status}\n{}", coordinator.log_text());
    for w in &mut cpu {
        w.wait_exit(Duration::from_secs(30));
    }
    gpu.wait_exit(Duration::from_secs(30));
    let log = gpu.log_text();
    assert!(log.contains("GPU self-test passed"), "GPU worker log:\n{log}");
    assert!(log.contains("solving on the GPU"), "GPU worker log:\n{log}");
    assert_matches_reference(&read_result_file(&result_file(&state)));
    assert_each_job_counted_once(&state);
    (state, log, coordinator.log_text())
}

#[test]
fn a_gpu_worker_and_a_cpu_worker_end_exact_each_counting() {
    if !have_device() {
        return;
    }
    let dir = RunDir::new();
    let (state, log, _) = mixed_run(dir.path(), 14, &["cpu"], &[], &[]);
    assert!(!log.contains("GPU fault"), "GPU worker log:\n{log}");
    assert!(counted_by(&state, "gpu") > 0, "the GPU worker counted nothing:\n{log}");
    assert!(counted_by(&state, "cpu") > 0, "the CPU worker counted nothing");
}

#[test]
fn a_device_failing_mid_batch_hands_its_jobs_to_the_cpu_and_the_run_ends_exact() {
    if !have_device() {
        return;
    }
    let dir = RunDir::new();
    let (state, log, _) = mixed_run(dir.path(), 13, &["cpu"], &[], &[("NQ_GPU_FAULT", "midbatch")]);
    assert!(log.contains("FAULT INJECTION"), "the fault was not switched on:\n{log}");
    assert!(log.contains("GPU fault"), "the fault is not logged:\n{log}");
    // Its jobs were solved again on its CPU: the worker keeps counting, none of it from the device.
    assert!(counted_by(&state, "gpu") > 0, "GPU worker log:\n{log}");
}

#[test]
fn a_gpu_worker_with_wrong_counts_is_caught_like_any_other() {
    if !have_device() {
        return;
    }
    let dir = RunDir::new();
    // Two honest workers, as in faulty_worker.rs: a conflict between two answers needs a third.
    // Wrong on one job in five: on a loaded machine the GPU worker (pocl, slow batches) may give
    // only a few dozen answers before the CPU workers finish N=15, and a rarer fault could miss
    // all of them (the run then ends exact with nothing to catch).
    let (state, log, coordinator) = mixed_run(
        dir.path(),
        15,
        &["cpu", "cpu-b"],
        &["--verify-fraction", "0.5"],
        &[("NQ_FAULT_WRONG_ONE_IN", "5")],
    );
    assert!(log.contains("FAULT INJECTION"), "the fault was not switched on:\n{log}");
    let by_gpu = query_count(
        &state,
        "SELECT COUNT(*) FROM untrusted_workers WHERE worker_id IN (SELECT id FROM workers WHERE name='gpu')",
    );
    let answered = query_count(
        &state,
        "SELECT COUNT(*) FROM results WHERE worker_id IN (SELECT id FROM workers WHERE name='gpu')",
    );
    assert_eq!(
        by_gpu, 1,
        "the GPU worker is not untrusted ({answered} answers of its stored):\n{coordinator}"
    );
    assert_eq!(counted_by(&state, "gpu"), 0, "a faulty GPU answer is still counted");
}

/// `solve N --gpu` as a user runs it: exact against the reference table, with the device and its
/// figures on stderr; with `--state`, every job is committed to the checkpoint as its batch ends,
/// and the answer is summed from those rows.
#[test]
fn solve_on_the_gpu_is_exact_and_checkpoints_every_job() {
    if !have_device() {
        return;
    }
    let table = nqueens_tests::known_counts();
    let out = solve(&["16", "--gpu", "--json", "--no-progress"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["total"].as_u64().map(u128::from), Some(table[&16].total), "{v}");
    assert_eq!(v["unique"].as_u64().map(u128::from), Some(table[&16].unique), "{v}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("GPU: #") && stderr.contains("kernel steps/s"), "{stderr}");

    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("solve13.db");
    let state_arg = state.to_str().unwrap();
    let out = solve(&["13", "--gpu", "--json", "--no-progress", "--state", state_arg]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["total"].as_u64().map(u128::from), Some(table[&13].total), "{v}");
    assert_eq!(committed_results(&state), v["jobs"].as_i64().unwrap(), "{v}");
}

/// A lone GPU worker with many slots (as one box with one card runs it): once the coordinator's
/// checks have trusted it, its leases follow what the device finished in about a lease period,
/// far past the 64 jobs a lease once held, and the run ends exact. The sizes are read from the
/// worker's debug log (`lease received ... jobs=K`).
#[test]
fn a_lone_gpu_workers_leases_grow_to_what_the_device_finishes() {
    if !have_device() {
        return;
    }
    let dir = RunDir::new();
    let state = dir.state();
    let mut coordinator = dir.coordinator(17).exit_when_done().lease_seconds(10).start();
    let gpu = coordinator.worker("gpu").args(&["--gpu", "0", "--gpu-slots", "1024"]);
    let mut gpu = gpu.start_with(|c| {
        c.env("RUST_LOG", "info,nqueens_worker=debug");
    });
    let status = coordinator.wait_exit(Duration::from_secs(600));
    assert!(status.success(), "coordinator: {status}\n{}", coordinator.log_text());
    gpu.wait_exit(Duration::from_secs(30));
    assert_matches_reference(&read_result_file(&result_file(&state)));
    assert_each_job_counted_once(&state);
    let log = gpu.log_text();
    let sizes: Vec<usize> = log
        .lines()
        .filter(|l| l.contains("lease received"))
        .filter_map(|l| l.split(" jobs=").nth(1)?.split_whitespace().next()?.parse().ok())
        .collect();
    let largest = sizes.iter().copied().max().unwrap_or(0);
    eprintln!("lease sizes of the lone GPU worker: {sizes:?}");
    assert!(largest >= 256, "the largest lease held {largest} jobs: {sizes:?}\n{log}");
}
