//! The kernel compiles as CUDA C++ under NVRTC, for Ampere (sm_80) and Hopper (sm_90), with
//! `CUDA_PRELUDE`: no errors, no register spills, no stack frame, and few enough registers that
//! register use never limits how many lanes a multiprocessor runs (shared memory does first).
//!
//! NVRTC is `NQ_NVRTC_LIB` (a path) if set, else `libnvrtc.so.13` or `libnvrtc.so.12` on the
//! loader's path; `.ci/run` fetches it from PyPI (`nvidia-cuda-nvrtc-cu12`, no GPU needed). Under
//! `CI=true` a missing NVRTC fails the test; elsewhere it is skipped with a message.

use libloading::{Library, Symbol};
use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::ptr;

type Program = *mut c_void;

fn open_nvrtc() -> Option<Library> {
    let names: Vec<String> = match std::env::var("NQ_NVRTC_LIB") {
        Ok(path) if !path.is_empty() => vec![path],
        _ => vec!["libnvrtc.so.13".into(), "libnvrtc.so.12".into(), "libnvrtc.so".into()],
    };
    // SAFETY: NVRTC's initialisers have no preconditions.
    names.iter().find_map(|n| unsafe { Library::new(n) }.ok())
}

/// What NVRTC said of one build: its return code and log (ptxas' report included).
struct Build {
    code: c_int,
    log: String,
}

fn compile(lib: &Library, options: &[String]) -> Build {
    type Create = unsafe extern "C" fn(
        *mut Program,
        *const c_char,
        *const c_char,
        c_int,
        *const *const c_char,
        *const *const c_char,
    ) -> c_int;
    type Compile = unsafe extern "C" fn(Program, c_int, *const *const c_char) -> c_int;
    type LogSize = unsafe extern "C" fn(Program, *mut usize) -> c_int;
    type Log = unsafe extern "C" fn(Program, *mut c_char) -> c_int;
    type Destroy = unsafe extern "C" fn(*mut Program) -> c_int;
    let source =
        CString::new(format!("{}{}", nqueens_gpu::CUDA_PRELUDE, nqueens_gpu::KERNEL_SOURCE))
            .unwrap();
    let options: Vec<CString> = options.iter().map(|o| CString::new(o.as_str()).unwrap()).collect();
    let option_ptrs: Vec<*const c_char> = options.iter().map(|o| o.as_ptr()).collect();
    // SAFETY: the signatures are NVRTC's (nvrtc.h); every pointer passed lives through the calls,
    // and the log buffer has the size NVRTC asked for.
    unsafe {
        let create: Symbol<Create> = lib.get(b"nvrtcCreateProgram\0").unwrap();
        let compile: Symbol<Compile> = lib.get(b"nvrtcCompileProgram\0").unwrap();
        let log_size: Symbol<LogSize> = lib.get(b"nvrtcGetProgramLogSize\0").unwrap();
        let get_log: Symbol<Log> = lib.get(b"nvrtcGetProgramLog\0").unwrap();
        let destroy: Symbol<Destroy> = lib.get(b"nvrtcDestroyProgram\0").unwrap();
        let mut program: Program = ptr::null_mut();
        let name = c"kernel.cu";
        assert_eq!(
            create(&mut program, source.as_ptr(), name.as_ptr(), 0, ptr::null(), ptr::null()),
            0
        );
        let code = compile(program, option_ptrs.len() as c_int, option_ptrs.as_ptr());
        let mut size = 0usize;
        assert_eq!(log_size(program, &mut size), 0);
        let mut log = vec![0 as c_char; size.max(1)];
        assert_eq!(get_log(program, log.as_mut_ptr()), 0);
        destroy(&mut program);
        Build { code, log: CStr::from_ptr(log.as_ptr()).to_string_lossy().into_owned() }
    }
}

/// The figure just before `phrase` in ptxas' report ("Used 40 registers" for "registers").
fn figure_before(log: &str, phrase: &str) -> Option<u64> {
    let at = log.find(phrase)?;
    log[..at].split_whitespace().last()?.parse().ok()
}

#[test]
fn the_kernel_compiles_under_nvrtc_without_spills() {
    let Some(lib) = open_nvrtc() else {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "CI=true and no NVRTC: set NQ_NVRTC_LIB to libnvrtc.so (.ci/run fetches it from PyPI)"
        );
        eprintln!("\n!!!!! SKIPPED: no NVRTC (libnvrtc.so.12/13 or NQ_NVRTC_LIB) !!!!!\n");
        return;
    };
    for arch in ["sm_80", "sm_90"] {
        for (maxl, wg) in [(16, 64), (24, 64), (16, 128), (20, 32)] {
            for lookahead in [0, 1, 2] {
                let mut options = vec![
                    format!("--gpu-architecture={arch}"),
                    format!("-DNQ_MAXL={maxl}u"),
                    format!("-DNQ_WG={wg}u"),
                    "--ptxas-options=-v".to_owned(),
                ];
                options.push(format!("-DNQ_LOOKAHEAD_ROWS={lookahead}"));
                let build = compile(&lib, &options);
                let what =
                    format!("{arch}, NQ_MAXL {maxl}, NQ_WG {wg}, lookahead rows {lookahead}");
                assert_eq!(build.code, 0, "NVRTC refused the kernel ({what}):\n{}", build.log);
                assert_eq!(
                    figure_before(&build.log, "bytes spill stores"),
                    Some(0),
                    "{what}:\n{}",
                    build.log
                );
                assert_eq!(
                    figure_before(&build.log, "bytes stack frame"),
                    Some(0),
                    "{what}:\n{}",
                    build.log
                );
                let registers = figure_before(&build.log, "registers").expect("ptxas' report");
                // 64 registers let a multiprocessor run 1,024 lanes: shared memory (24 bytes a
                // level and lane) holds fewer than that already.
                assert!(registers <= 64, "{what}: {registers} registers:\n{}", build.log);
                let shared = figure_before(&build.log, "bytes smem").expect("ptxas' report");
                assert_eq!(shared, 24 * maxl * wg, "{what}: shared memory:\n{}", build.log);
                eprintln!("{what}: {registers} registers, {shared} bytes shared");
            }
        }
    }
}
