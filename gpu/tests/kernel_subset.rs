//! The kernel stays in the C subset that CUDA C++ shares: under a prelude like the one its header
//! gives for NVRTC (here with host stand-ins for the CUDA built-ins), a C++ compiler accepts it
//! without a warning. Skipped, with a message, where no `c++` is installed.

use std::process::Command;

/// `nqueens_gpu::CUDA_PRELUDE`, with host stand-ins for `__global__`, `__shared__`,
/// `threadIdx`, `__popc`, `atomicAdd`, `uint4`/`uint2` and their constructors.
const HOST_PRELUDE: &str = concat!(
    include_str!("fake_cuda/host_prelude.h"),
    r#"
#define NQ_KERNEL extern "C" void
#define NQ_GLOBAL
#define NQ_LOCAL static
#define NQ_LANE 0u
#define NQ_GID 0u
#define NQ_ATOMIC_INC(p) ((*(p))++)
#define NQ_PRELUDE_DONE
#define NQ_MAXL 16u
#define NQ_WG 64u
"#
);

#[test]
fn the_kernel_compiles_as_cpp_under_a_cuda_like_prelude() {
    if Command::new("c++").arg("--version").output().is_err() {
        eprintln!("\n!!!!! SKIPPED: no c++ compiler to check the kernel's C subset !!!!!\n");
        return;
    }
    let dir = std::env::temp_dir().join(format!("nq-kernel-subset-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("kernel.cpp");
    std::fs::write(&file, format!("{HOST_PRELUDE}\n{}", nqueens_gpu::KERNEL_SOURCE)).unwrap();
    for lookahead in [0, 1, 2] {
        let mut cmd = Command::new("c++");
        cmd.args(["-std=c++17", "-Wall", "-Wextra", "-Werror", "-fsyntax-only"]);
        cmd.arg(format!("-DNQ_LOOKAHEAD_ROWS={lookahead}"));
        let out = cmd.arg(&file).output().unwrap();
        assert!(
            out.status.success(),
            "c++ refused the kernel (lookahead rows {lookahead}):\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}
