//! The CUDA backend's host code run for real without a card: NVRTC (real) compiles the kernel for
//! Hopper, and a CPU stand-in for the driver (`fake_cuda/libcuda.cpp`, built here with `c++` and
//! found first through `LD_LIBRARY_PATH` in a child process) loads it, holds the buffers and runs
//! the same kernel source lane after lane. Every job of N = 4..12 (and 15, with items resumed
//! across dispatches) must equal `Job::solve`, and the fault paths must give CUDA's errors and no
//! count.
//!
//! What this cannot show is the NVIDIA driver itself: that runs on a card only
//! (deploy/gpu/check-h200.sh). Needs NVRTC (as kernel_nvrtc.rs: under `CI=true` its absence
//! fails the test) and `c++` (skipped without).

use nqueens_core::{job_list, SplitParams};
use nqueens_gpu::{DeviceSelector, Fault, GpuError, GpuOptions, GpuSolver};
use std::path::{Path, PathBuf};
use std::process::Command;

fn nvrtc_present() -> bool {
    let names: Vec<String> = match std::env::var("NQ_NVRTC_LIB") {
        Ok(path) if !path.is_empty() => vec![path],
        _ => vec!["libnvrtc.so.13".into(), "libnvrtc.so.12".into()],
    };
    // SAFETY: NVRTC's initialisers have no preconditions.
    names.iter().any(|n| unsafe { libloading::Library::new(n) }.is_ok())
}

/// Builds the stand-in driver as `dir/libcuda.so.1`.
fn build_fake_driver(dir: &Path) {
    let here = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let kernel = here.join("src/kernel.cl");
    let out = Command::new("c++")
        .args(["-std=c++17", "-O2", "-shared", "-fPIC", "-w"])
        .arg(format!("-DKERNEL=\"{}\"", kernel.display()))
        .arg("-o")
        .arg(dir.join("libcuda.so.1"))
        .arg(here.join("tests/fake_cuda/libcuda.cpp"))
        .output()
        .expect("running c++");
    assert!(out.status.success(), "c++: {}", String::from_utf8_lossy(&out.stderr));
}

/// Runs `child` (a test of this file) with the stand-in driver and no OpenCL platform; its stdout.
fn run_child(dir: &Path, child: &str, envs: &[(&str, &str)]) -> String {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args(["--exact", child, "--ignored", "--nocapture"])
        .env("LD_LIBRARY_PATH", dir)
        .env("OCL_ICD_VENDORS", "/nonexistent/opencl-vendors");
    for (k, v) in envs {
        cmd.env(k, v);
    }
    let out = cmd.output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "child {child}: {}\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

#[test]
fn the_cuda_backend_counts_exactly_through_a_stand_in_driver() {
    if !nvrtc_present() {
        assert!(std::env::var("CI").as_deref() != Ok("true"), "CI=true and no NVRTC");
        eprintln!("\n!!!!! SKIPPED: no NVRTC (NQ_NVRTC_LIB) for the CUDA backend test !!!!!\n");
        return;
    }
    if Command::new("c++").arg("--version").output().is_err() {
        eprintln!("\n!!!!! SKIPPED: no c++ to build the stand-in CUDA driver !!!!!\n");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    build_fake_driver(dir.path());
    let stdout = run_child(dir.path(), "child_counts_through_cuda", &[]);
    assert!(stdout.contains("CHILD-CUDA-EXACT"), "{stdout}");
    let stdout =
        run_child(dir.path(), "child_cuda_launch_fails", &[("NQ_FAKE_CUDA_FAIL", "launch")]);
    assert!(stdout.contains("CHILD-CUDA-DEVICE-LOST"), "{stdout}");
}

fn check(gpu: &mut GpuSolver, n: u32, params: &SplitParams) {
    let list = job_list(n, params).unwrap();
    let got = gpu.solve_jobs(&list.jobs).unwrap();
    for (job, counts) in list.jobs.iter().zip(&got) {
        let want = job.solve().unwrap();
        assert!(counts.same_answer(&want), "N={n} job {}: CUDA {counts:?}, CPU {want:?}", job.id);
    }
}

/// In the child: `gpu` finds no OpenCL platform and takes the (stand-in) CUDA device.
#[test]
#[ignore = "run by the_cuda_backend_counts_exactly_through_a_stand_in_driver in a child process"]
fn child_counts_through_cuda() {
    let mut gpu = GpuSolver::new(DeviceSelector::GpuOnly).unwrap();
    let device = gpu.device().to_string();
    assert!(device.contains("CPU stand-in") && device.contains("CUDA"), "{device}");
    for n in 4..=12 {
        check(&mut gpu, n, &SplitParams::default());
    }
    check(&mut gpu, 11, &SplitParams::with_target(4000));

    // One chunk a dispatch: items stop and resume many times.
    let options = GpuOptions { target_items: Some(64), max_chunks: 1, ..GpuOptions::default() };
    let mut gpu = GpuSolver::with_options(DeviceSelector::Cuda(0), options).unwrap();
    check(&mut gpu, 15, &SplitParams::default());
    let stats = gpu.last_stats();
    assert!(stats.dispatches > stats.batches && stats.resumed > 0, "{stats:?}");

    // A read past a buffer's end, refused by the backend's own check: no count.
    let options = GpuOptions { fault: Some(Fault::MidBatch), ..GpuOptions::default() };
    let mut gpu = GpuSolver::with_options(DeviceSelector::Cuda(0), options).unwrap();
    let list = job_list(10, &SplitParams::default()).unwrap();
    match gpu.solve_jobs(&list.jobs) {
        Err(e @ GpuError::Runtime { api: "CUDA", code: 1, .. }) => {
            assert!(e.to_string().contains("CUDA error 1"), "{e}")
        }
        other => panic!("expected CUDA's invalid value, got {other:?}"),
    }
    println!("CHILD-CUDA-EXACT");
}

/// In the child: every launch fails as a crashed kernel does.
#[test]
#[ignore = "run by the_cuda_backend_counts_exactly_through_a_stand_in_driver in a child process"]
fn child_cuda_launch_fails() {
    let mut gpu = GpuSolver::new(DeviceSelector::Cuda(0)).unwrap();
    let list = job_list(9, &SplitParams::default()).unwrap();
    match gpu.solve_jobs(&list.jobs) {
        Err(e @ GpuError::DeviceLost { api: "CUDA", code: 700, .. }) => {
            assert!(e.is_device_fatal(), "{e}");
            println!("CHILD-CUDA-DEVICE-LOST: {e}");
        }
        other => panic!("expected a lost device, got {other:?}"),
    }
}
