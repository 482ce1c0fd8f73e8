#!/usr/bin/env bash
# GPU check on a real card (written for an NVIDIA H200): our `solve N --gpu` against Yao & Li's
# CUDA solver (github.com/ygch/n_queens) at N=20, 21, 22 on the same card, both times and the
# ratio, in under 10 minutes. The card's machine needs the NVIDIA driver and the CUDA toolkit
# (nvcc), and nothing else: no Rust, no package registry, no network.
#
# Two steps:
#
#   deploy/gpu/check-h200.sh prepare        # here, on a build machine with the repository
#       builds the release binaries, strips them, and fills deploy/gpu/carry/ (git-ignored):
#         nqueens-coordinator              the stripped binary (OpenCL is loaded at run time)
#         ocl-icd-libopencl1_*.deb         the OpenCL ICD loader (`apt-get download`), unpacked
#                                          there if the machine has no libOpenCL.so.1
#         n_queens/                        Yao & Li's source, from a checkout given as
#                                          YAOLI_SRC=/path (default: git clone, if online)
#         check-h200.sh                    this script
#       and packs it as deploy/gpu/carry.tar.gz.
#
#   tar xzf carry.tar.gz && carry/check-h200.sh run    # there, on the card's machine
#
# `run` finds an OpenCL loader (the system's, or the carried .deb unpacked into a private
# directory) and an NVIDIA OpenCL driver: if no /etc/OpenCL/vendors/*.icd exists it looks for
# libnvidia-opencl.so.1 and writes a vendor file into a private directory named by
# OCL_ICD_VENDORS. It reports what it found, compiles Yao & Li's solver with nvcc for sm_90
# (configuration 3, 5 pre-placed rows: their README's best for one card up to N=22), then runs
# both solvers, each run under a time cap that keeps the whole under 10 minutes (a capped run
# prints "over Ns" instead of a time). Nothing is installed system-wide.
#
# NQ_CHECK_SIZES="12 13" replaces the board sizes (a dry run on a machine without the card).
#
# Goal (issue 20): N=22 within 60 s, and at least 2x Yao & Li at N=21 and N=22.
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"

prepare() {
    local repo carry
    repo="$(cd "$here/../.." && pwd)"
    carry="$here/carry"
    rm -rf "$carry" && mkdir -p "$carry"
    (cd "$repo" && cargo build --release -p nqueens-coordinator)
    cp "${CARGO_TARGET_DIR:-$repo/target}/release/nqueens-coordinator" "$carry/"
    strip "$carry/nqueens-coordinator"
    (cd "$carry" && apt-get download ocl-icd-libopencl1)
    if [[ -n "${YAOLI_SRC:-}" ]]; then
        cp -r "$YAOLI_SRC" "$carry/n_queens"
    else
        git clone -q --depth 1 https://github.com/ygch/n_queens "$carry/n_queens"
    fi
    rm -rf "$carry/n_queens/.git"
    cp "$here/check-h200.sh" "$carry/"
    tar czf "$here/carry.tar.gz" -C "$here" carry
    echo "packed $here/carry.tar.gz:"
    ls -l "$carry"
}

run() {
    local work deadline sizes="${NQ_CHECK_SIZES:-20 21 22}"
    work="$(mktemp -d /tmp/nq-gpu-check.XXXXXX)"
    deadline=$((SECONDS + 570))
    echo "== machine"
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || echo "nvidia-smi: not found"
    command -v nvcc >/dev/null && nvcc --version | tail -1 || echo "nvcc: not found"

    echo "== OpenCL loader"
    if ldconfig -p 2>/dev/null | grep -q 'libOpenCL\.so\.1'; then
        echo "system loader: $(ldconfig -p | grep 'libOpenCL\.so\.1' | head -1 | sed 's/.*=> //')"
    else
        local deb
        deb="$(ls "$here"/ocl-icd-libopencl1_*.deb 2>/dev/null | head -1 || true)"
        [[ -n "$deb" ]] || { echo "no libOpenCL.so.1 and no carried ocl-icd-libopencl1 .deb"; exit 1; }
        dpkg-deb -x "$deb" "$work/ocl"
        local lib
        lib="$(find "$work/ocl" -name 'libOpenCL.so.1*' | head -1)"
        # cl3 loads libOpenCL.so.1 by name, or the paths in OPENCL_DYLIB_PATH.
        export OPENCL_DYLIB_PATH="$lib"
        export LD_LIBRARY_PATH="$(dirname "$lib")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
        echo "carried loader unpacked: $lib"
    fi

    echo "== OpenCL driver"
    if compgen -G "/etc/OpenCL/vendors/*.icd" >/dev/null; then
        echo "vendor files: $(cat /etc/OpenCL/vendors/*.icd | tr '\n' ' ')"
    else
        local nv
        nv="$( (ldconfig -p 2>/dev/null | grep 'libnvidia-opencl\.so\.1' | head -1 | sed 's/.*=> //') || true)"
        if [[ -z "$nv" ]]; then
            nv="$(find /usr/lib /usr/lib64 /usr/local /lib /opt -name 'libnvidia-opencl.so.1*' 2>/dev/null | head -1 || true)"
        fi
        [[ -n "$nv" ]] || { echo "no /etc/OpenCL/vendors/*.icd and no libnvidia-opencl.so.1: the driver has no OpenCL"; exit 1; }
        mkdir -p "$work/vendors"
        echo "$nv" >"$work/vendors/nvidia.icd"
        export OCL_ICD_VENDORS="$work/vendors"
        echo "no vendor file: wrote $OCL_ICD_VENDORS/nvidia.icd -> $nv"
    fi

    echo "== build Yao & Li (nvcc sm_90, configuration 3)"
    local yl="$work/n_queens"
    cp -r "$here/n_queens" "$yl"
    (cd "$yl/src" && nvcc -gencode arch=compute_90,code=sm_90 -O3 -Xcompiler -fopenmp \
        -D_USE_CONFIG3_ n_queens_cuda.cu n_queens.cpp utils.cpp main.cpp -o n_queens -lcudart) \
        || { echo "Yao & Li did not build"; yl=""; }

    # timed CAP COMMAND...: prints the wall seconds of COMMAND, or "over CAP" if it is killed.
    timed() {
        local cap="$1" left=$((deadline - SECONDS)) start rc
        shift
        ((cap > left)) && cap=$left
        if ((cap < 5)); then echo "skipped"; return; fi
        start=$(date +%s.%N)
        set +e
        timeout "$cap" "$@" >"$work/last.out" 2>"$work/last.err"
        rc=$?
        set -e
        if ((rc == 124)); then echo "over ${cap}s"; return; fi
        if ((rc != 0)); then echo "failed($rc)"; tail -3 "$work/last.err" >&2; return; fi
        awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN { printf "%.2f", b - a }'
    }

    echo "== our solver"
    # Shows the device it uses on stderr.
    "$here/nqueens-coordinator" solve 8 --gpu --json || { echo "our GPU path does not start"; exit 1; }
    declare -A ours theirs
    for n in $sizes; do
        ours[$n]="$(timed 240 "$here/nqueens-coordinator" solve "$n" --gpu --json --no-progress)"
        echo "N=$n ours: ${ours[$n]} s  $(cat "$work/last.out")"
    done
    echo "== Yao & Li"
    for n in $sizes; do
        if [[ -n "$yl" ]]; then
            theirs[$n]="$(CUDA_VISIBLE_DEVICES=0 timed 300 "$yl/src/n_queens" "$n" 5)"
            echo "N=$n Yao & Li: ${theirs[$n]} s  $(grep -o 'result [0-9]*' "$work/last.out" || true)"
        else
            theirs[$n]="not built"
        fi
    done

    echo "== summary (seconds; ratio = Yao & Li / ours, above 1: ours faster)"
    printf '%3s %12s %12s %8s\n' N ours "Yao&Li" ratio
    for n in $sizes; do
        local ratio="-"
        if [[ "${ours[$n]}" =~ ^[0-9.]+$ && "${theirs[$n]}" =~ ^[0-9.]+$ ]]; then
            ratio="$(awk -v a="${theirs[$n]}" -v b="${ours[$n]}" 'BEGIN { printf "%.2f", a / b }')"
        fi
        printf '%3s %12s %12s %8s\n' "$n" "${ours[$n]}" "${theirs[$n]}" "$ratio"
    done
    rm -rf "$work"
}

case "${1:-run}" in
    prepare) prepare ;;
    run) run ;;
    *) echo "usage: $0 [prepare|run]" >&2; exit 2 ;;
esac
