#!/usr/bin/env python3
"""The GPU kernel's step loop, counted from the compiled code (docs/gpu.md, "The step against
Yao & Li's" and "Dead states tested deeper"): no card needed.

    tools/scripts/kernel-sass.py [--arch sm_90] [--maxl 16] [--wg 64] [--lookahead 0 1 2]

For each look-ahead depth it compiles gpu/src/kernel.cl under gpu/src/lib.rs's CUDA_PRELUDE with
NVRTC (NQ_NVRTC_LIB, else libnvrtc.so.12 on the loader's path; `.ci/run` caches one from PyPI's
nvidia-cuda-nvrtc-cu12), disassembles the cubin with `cuobjdump -sass` (PyPI's
nvidia-cuda-cuobjdump and nvidia-cuda-nvdisasm: unpack both wheels and put their bin/ on PATH),
and prints ptxas' registers and every loop of the kernel (a backward branch and its target) with
its instructions, shared-memory loads and stores and population counts. The step loop is the one
with two POPCs and shared-memory loads (38 instructions at one row of look-ahead, sm_90).
"""
import argparse
import ctypes
import os
import re
import subprocess
import sys
import tempfile

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")


def source():
    lib_rs = open(os.path.join(ROOT, "gpu/src/lib.rs")).read()
    prelude = re.search(r'pub const CUDA_PRELUDE: &str = r#"(.*?)"#;', lib_rs, re.S)
    if not prelude:
        sys.exit("CUDA_PRELUDE not found in gpu/src/lib.rs")
    return prelude.group(1) + open(os.path.join(ROOT, "gpu/src/kernel.cl")).read()


def compile_cubin(nvrtc, options):
    """The cubin and ptxas' log of one NVRTC build (exits with the log on failure)."""
    program = ctypes.c_void_p()
    rc = nvrtc.nvrtcCreateProgram(ctypes.byref(program), source().encode(), b"kernel.cu", 0, None, None)
    if rc != 0:
        sys.exit(f"nvrtcCreateProgram: {rc}")
    opts = [o.encode() for o in options]
    rc = nvrtc.nvrtcCompileProgram(program, len(opts), (ctypes.c_char_p * len(opts))(*opts))
    size = ctypes.c_size_t()
    nvrtc.nvrtcGetProgramLogSize(program, ctypes.byref(size))
    log = ctypes.create_string_buffer(max(size.value, 1))
    nvrtc.nvrtcGetProgramLog(program, log)
    log = log.value.decode(errors="replace")
    if rc != 0:
        sys.exit(f"NVRTC refused the kernel ({' '.join(options)}):\n{log}")
    nvrtc.nvrtcGetCUBINSize(program, ctypes.byref(size))
    cubin = ctypes.create_string_buffer(size.value)
    if nvrtc.nvrtcGetCUBIN(program, cubin) != 0:
        sys.exit("nvrtcGetCUBIN failed")
    nvrtc.nvrtcDestroyProgram(ctypes.byref(program))
    return cubin.raw, log


def loops(sass):
    """Every loop: (start, end, instructions, LDS, STS, POPC)."""
    code = []
    for line in sass.splitlines():
        m = re.match(r"\s*/\*([0-9a-f]{4,})\*/\s+(.*?);", line)
        if m:
            code.append((int(m.group(1), 16), m.group(2).strip()))
    found = []
    for addr, text in code:
        m = re.search(r"\bBRA (?:!?U?P\d, )?0x([0-9a-f]+)", text)
        if m and int(m.group(1), 16) < addr:
            start = int(m.group(1), 16)
            body = [t for a, t in code if start <= a <= addr]
            count = lambda pattern: sum(1 for t in body if re.search(pattern, t))
            found.append((start, addr, len(body), count(r"\bLDS"), count(r"\bSTS"), count(r"\bPOPC")))
    return found


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--arch", default="sm_90")
    parser.add_argument("--maxl", type=int, default=16)
    parser.add_argument("--wg", type=int, default=64)
    parser.add_argument("--lookahead", type=int, nargs="+", default=[0, 1, 2])
    args = parser.parse_args()
    nvrtc = ctypes.CDLL(os.environ.get("NQ_NVRTC_LIB") or "libnvrtc.so.12")
    for rows in args.lookahead:
        options = [f"--gpu-architecture={args.arch}", f"-DNQ_MAXL={args.maxl}u",
                   f"-DNQ_WG={args.wg}u", f"-DNQ_LOOKAHEAD_ROWS={rows}", "--ptxas-options=-v"]
        cubin, log = compile_cubin(nvrtc, options)
        with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
            f.write(cubin)
            f.flush()
            sass = subprocess.run(["cuobjdump", "-sass", f.name], capture_output=True, text=True)
        if sass.returncode != 0 or "cuobjdump fatal" in sass.stdout + sass.stderr:
            sys.exit(f"cuobjdump -sass failed (nvdisasm on PATH?):\n{sass.stdout}{sass.stderr}")
        registers = re.search(r"Used (\d+) registers", log)
        print(f"look-ahead rows {rows} ({args.arch}, NQ_MAXL {args.maxl}, NQ_WG {args.wg}): "
              f"{registers.group(1) if registers else '?'} registers")
        for start, end, size, lds, sts, popc in loops(sass.stdout):
            step = "  <- the step loop" if popc == 2 and lds > 0 and size < 100 else ""
            print(f"  loop {start:#06x}-{end:#06x}: {size} instructions, {lds} LDS, {sts} STS, "
                  f"{popc} POPC{step}")


if __name__ == "__main__":
    main()
