//! The GPU solver against the CPU solver, job by job, on whatever OpenCL device is found (pocl's
//! CPU device in CI), and its fault paths.
//!
//! Without an OpenCL platform these tests fail under `CI=true` (CI installs pocl, so a missing
//! platform there is a broken setup, never a reason to skip) and are skipped loudly elsewhere.

use nqueens_core::{job_list, Job, JobCounts, SplitParams, Tally};
use nqueens_gpu::{DeviceKind, DeviceSelector, Fault, GpuError, GpuOptions, GpuSolver};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Command;
use std::time::Instant;

/// A solver on the default device, or `None` (after a loud message) outside CI without OpenCL.
fn solver_with(options: GpuOptions) -> Option<GpuSolver> {
    match GpuSolver::with_options(DeviceSelector::Auto, options) {
        Ok(s) => Some(s),
        Err(e @ (GpuError::NoPlatform { .. } | GpuError::NoDevice { .. })) => {
            if std::env::var("CI").is_ok_and(|v| v == "true" || v == "1") {
                panic!("CI=true and no OpenCL device: {e}. CI must install pocl-opencl-icd.");
            }
            eprintln!("\n!!!!! SKIPPED: no OpenCL device ({e}); install pocl-opencl-icd !!!!!\n");
            None
        }
        Err(e) => panic!("opening the GPU solver: {e}"),
    }
}

fn solver() -> Option<GpuSolver> {
    solver_with(GpuOptions::default())
}

/// n -> (total, unique) from `reference/known-counts.tsv`.
fn known() -> BTreeMap<u32, (u128, u128)> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../reference/known-counts.tsv");
    let text = std::fs::read_to_string(&path).expect("reading reference/known-counts.tsv");
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.starts_with("n\t") && !l.trim().is_empty())
        .map(|l| {
            let f: Vec<&str> = l.split('\t').collect();
            (f[0].parse().unwrap(), (f[1].parse().unwrap(), f[2].parse().unwrap()))
        })
        .collect()
}

/// Every job of the list through the GPU equals `Job::solve`; the tally equals the known counts.
fn check_list(gpu: &mut GpuSolver, n: u32, params: &SplitParams) -> (usize, f64) {
    let list = job_list(n, params).unwrap();
    let started = Instant::now();
    let got = gpu.solve_jobs(&list.jobs).unwrap();
    let seconds = started.elapsed().as_secs_f64();
    assert_eq!(got.len(), list.jobs.len());
    let mut tally = Tally::new(n).unwrap();
    for (job, counts) in list.jobs.iter().zip(&got) {
        let want = job.solve().unwrap();
        assert!(counts.same_answer(&want), "N={n} job {}: GPU {counts:?}, CPU {want:?}", job.id);
        tally.add(job.weight, counts).unwrap();
    }
    let totals = tally.totals().unwrap();
    let (total, unique) = known()[&n];
    assert_eq!((totals.total, totals.unique), (total, unique), "N={n} totals");
    (list.jobs.len(), seconds)
}

#[test]
fn every_job_of_n4_to_16_matches_the_cpu_solver() {
    let Some(mut gpu) = solver() else { return };
    eprintln!("device: {}", gpu.device());
    for n in 4..=16 {
        let (jobs, seconds) = check_list(&mut gpu, n, &SplitParams::default());
        eprintln!("N={n}: {jobs} jobs on the device in {seconds:.3} s ({:?})", gpu.last_stats());
    }
}

#[test]
fn job_lists_with_prefixes_match_the_cpu_solver() {
    let Some(mut gpu) = solver() else { return };
    for (n, target) in [(6, 100), (8, 1_000), (10, 10_000), (12, 100_000), (14, 1_000_000)] {
        let list = job_list(n, &SplitParams::with_target(target)).unwrap();
        assert!(list.depth >= 2, "N={n} target {target}: jobs should carry prefixes");
        check_list(&mut gpu, n, &SplitParams::with_target(target));
    }
}

/// Each look-ahead depth counts every job exactly, and each deeper one takes fewer steps (it
/// prunes dead children before they are pushed); the two-row one reads no row data past the last
/// row (jobs of N = 5-14, whose last rows are all reached).
#[test]
fn every_lookahead_depth_counts_exactly_and_a_deeper_one_steps_less() {
    let mut steps = Vec::new();
    for lookahead_rows in 0..=2 {
        let Some(mut gpu) = solver_with(GpuOptions { lookahead_rows, ..GpuOptions::default() })
        else {
            return;
        };
        for n in 5..=13 {
            check_list(&mut gpu, n, &SplitParams::default());
        }
        check_list(&mut gpu, 14, &SplitParams::default());
        steps.push(gpu.last_stats().steps);
    }
    eprintln!("N=14 kernel steps with 0, 1, 2 rows of look-ahead: {steps:?}");
    assert!(steps[0] > steps[1] && steps[1] > steps[2], "{steps:?}");
}

#[test]
fn resumed_items_count_the_same() {
    // Tiny batches and the shortest dispatches: many items stop and resume across dispatches.
    let options = GpuOptions {
        target_items: Some(64),
        max_items: Some(256),
        dispatch_ms: 1,
        max_chunks: 1,
        ..GpuOptions::default()
    };
    let Some(mut gpu) = solver_with(options) else { return };
    check_list(&mut gpu, 15, &SplitParams::default());
    let stats = gpu.last_stats();
    assert!(
        stats.batches > 1 && stats.dispatches > stats.batches && stats.resumed > 0,
        "{stats:?}"
    );
}

#[test]
fn an_invalid_job_is_refused_before_anything_runs() {
    let Some(mut gpu) = solver() else { return };
    let mut job: Job = job_list(8, &SplitParams::default()).unwrap().jobs[0].clone();
    job.prefix = vec![0; 40];
    assert!(matches!(gpu.solve_jobs(&[job]), Err(GpuError::Job(_))));
    assert_eq!(gpu.solve_jobs(&[]).unwrap(), Vec::<JobCounts>::new());
}

#[test]
fn a_kernel_that_fails_to_build_is_a_clear_error() {
    let options = GpuOptions { fault: Some(Fault::Build), ..GpuOptions::default() };
    // Opening a device is checked by the other tests; here only the build may fail.
    if solver().is_none() {
        return;
    }
    match GpuSolver::with_options(DeviceSelector::Auto, options) {
        Err(GpuError::BuildFailed { log, device }) => {
            assert!(log.contains("fault injected"), "build log of {device}: {log}");
        }
        Err(e) => panic!("expected a build failure, got {e}"),
        Ok(_) => panic!("expected a build failure, the kernel built"),
    }
}

#[test]
fn a_device_error_mid_batch_gives_no_count() {
    let options = GpuOptions { fault: Some(Fault::MidBatch), ..GpuOptions::default() };
    let Some(mut gpu) = solver_with(options) else { return };
    let list = job_list(12, &SplitParams::default()).unwrap();
    match gpu.solve_jobs(&list.jobs) {
        Err(e @ (GpuError::Runtime { .. } | GpuError::DeviceLost { .. })) => {
            let text = e.to_string();
            assert!(text.contains("OpenCL error"), "{text}");
        }
        Err(e) => panic!("expected a device error, got {e}"),
        Ok(counts) => panic!("a faulty batch yielded {} counts", counts.len()),
    }
}

#[test]
fn a_missing_device_index_is_a_clear_error() {
    if solver().is_none() {
        return;
    }
    match GpuSolver::new(DeviceSelector::Index(999)) {
        Err(GpuError::NoDevice { reason }) => assert!(reason.contains("#999"), "{reason}"),
        Err(e) => panic!("expected NoDevice, got {e}"),
        Ok(_) => panic!("device #999 exists?"),
    }
}

#[test]
fn gpu_only_never_takes_a_cpu_device() {
    if solver().is_none() {
        return;
    }
    let devices = nqueens_gpu::list_devices().unwrap();
    let has_gpu =
        devices.iter().any(|d| matches!(d.kind, DeviceKind::Gpu | DeviceKind::Accelerator));
    match GpuSolver::new(DeviceSelector::GpuOnly) {
        Ok(s) => assert!(has_gpu && s.device().kind != DeviceKind::Cpu, "{}", s.device()),
        Err(GpuError::NoDevice { reason }) => assert!(!has_gpu, "{reason}"),
        Err(e) => panic!("expected a GPU or NoDevice, got {e}"),
    }
}

/// Run in a child process by `no_platform_is_a_clear_error`, with no OpenCL platform visible.
#[test]
#[ignore = "run by no_platform_is_a_clear_error in a child process"]
fn child_without_platform() {
    match GpuSolver::new(DeviceSelector::Auto) {
        Err(e @ GpuError::NoPlatform { .. }) => println!("CHILD-NO-PLATFORM: {e}"),
        Err(e) => panic!("expected NoPlatform, got {e}"),
        Ok(s) => panic!("expected NoPlatform, opened {}", s.device()),
    }
}

#[test]
fn no_platform_is_a_clear_error() {
    // The ICD loader reads its vendor files from OCL_ICD_VENDORS: an empty place means no platform.
    let out = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "child_without_platform", "--ignored", "--nocapture"])
        .env("OCL_ICD_VENDORS", "/nonexistent/opencl-vendors")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success()
            && stdout.contains("CHILD-NO-PLATFORM: no GPU platform")
            && stdout.contains("OpenCL"),
        "child: {}\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn cuda_without_a_driver_is_a_clear_error() {
    // Where a CUDA driver is installed (a card's machine) the device may open: nothing to check.
    match GpuSolver::new(DeviceSelector::Cuda(0)) {
        Err(GpuError::NoPlatform { reason }) => assert!(reason.contains("libcuda"), "{reason}"),
        Err(e @ GpuError::NoDevice { .. }) => assert!(e.to_string().contains("CUDA"), "{e}"),
        Err(e) => panic!("expected no CUDA platform or device, got {e}"),
        Ok(s) => eprintln!("a CUDA device is here: {}", s.device()),
    }
}
