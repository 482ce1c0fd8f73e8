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
#         check-cpu.sh                     every solver build the machine's CPU runs, timed
#                                          side by side (`carry/check-cpu.sh`, a few minutes)
#       and packs it as deploy/gpu/carry.tar.gz.
#
#   tar xzf carry.tar.gz && carry/check-h200.sh run    # there, on the card's machine
#
# `run` finds an OpenCL loader (the system's, or the carried .deb unpacked into a private
# directory) and an NVIDIA OpenCL driver: if no /etc/OpenCL/vendors/*.icd exists it looks for
# libnvidia-opencl.so.1 and writes a vendor file into a private directory named by
# OCL_ICD_VENDORS. For the CUDA path it finds the toolkit's NVRTC (NQ_NVRTC_LIB). It reports what
# it found, tries our solver through OpenCL (`--gpu 0`) and CUDA (`--gpu cuda`), times the
# smallest size with each working API, with no look-ahead, one row of it (the default) and two,
# and runs the larger sizes with the fastest. Then it compiles Yao & Li's solver with nvcc for sm_90 (configuration 3, 5
# pre-placed rows: their README's best for one card up to N=22) and runs it. Each run has a time
# cap that keeps the whole under 10 minutes (a capped run prints "over Ns" instead of a time).
# Nothing is installed system-wide.
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
    (cd "$repo" && cargo build --release -p nqueens-cli)
    cp "${CARGO_TARGET_DIR:-$repo/target}/release/nqueens-coordinator" "$carry/"
    strip "$carry/nqueens-coordinator"
    (cd "$carry" && apt-get download ocl-icd-libopencl1)
    if [[ -n "${YAOLI_SRC:-}" ]]; then
        cp -r "$YAOLI_SRC" "$carry/n_queens"
    else
        git clone -q --depth 1 https://github.com/ygch/n_queens "$carry/n_queens"
    fi
    rm -rf "$carry/n_queens/.git"
    cp "$here/check-h200.sh" "$here/check-cpu.sh" "$carry/"
    tar czf "$here/carry.tar.gz" -C "$here" carry
    echo "packed $here/carry.tar.gz:"
    ls -l "$carry"
}

run() {
    local work deadline sizes="${NQ_CHECK_SIZES:-20 21 22}"
    work="$(mktemp -d /tmp/nq-gpu-check.XXXXXX)"
    deadline=$((SECONDS + 570))
    echo "== machine"
    if command -v nvidia-smi >/dev/null; then
        nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
    else
        echo "nvidia-smi: not found"
    fi
    if command -v nvcc >/dev/null; then nvcc --version | tail -1; else echo "nvcc: not found"; fi

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

    # run_setting API:LOOKAHEAD:GROUPS N [CAP]: `timed` of our `solve N` with that setting.
    run_setting() {
        local way la groups
        IFS=: read -r way la groups <<<"$1"
        (
            export NQ_GPU_LOOKAHEAD="$la"
            [[ "$groups" == - ]] || export NQ_GPU_GROUPS="$groups"
            timed "${3:-90}" "$here/nqueens-coordinator" solve "$2" --gpu "$way" --json --no-progress
        )
    }

    echo "== NVRTC (for the CUDA path)"
    if [[ -z "${NQ_NVRTC_LIB:-}" ]]; then
        local nvrtc
        nvrtc="$( (ldconfig -p 2>/dev/null | grep -o '/[^ ]*libnvrtc\.so\.[0-9.]*$' | sort -V | tail -1) || true)"
        if [[ -z "$nvrtc" ]]; then
            nvrtc="$(find /usr/local /usr/lib /usr/lib64 /opt -name 'libnvrtc.so.1[0-9]*' 2>/dev/null \
                | grep -v builtins | sort -V | tail -1 || true)"
        fi
        [[ -n "$nvrtc" ]] && export NQ_NVRTC_LIB="$nvrtc"
    fi
    echo "NQ_NVRTC_LIB=${NQ_NVRTC_LIB:-none found}"

    echo "== our solver: which API works (solve 12), then settings at N=${sizes%% *}"
    # OpenCL device 0 (the card, where the NVIDIA platform is the only one) and CUDA device 0.
    local ways=() way best="" best_s=""
    for way in 0 cuda; do
        if "$here/nqueens-coordinator" solve 12 --gpu "$way" --json --no-progress \
            >"$work/probe.out" 2>"$work/probe.err"; then
            echo "--gpu $way: $(grep -m1 '^GPU' "$work/probe.err" || true)"
            ways+=("$way")
            # The same without the look-ahead and with two rows of it: every kernel built (and
            # cached) before the timing.
            for la in 0 2; do
                NQ_GPU_LOOKAHEAD=$la "$here/nqueens-coordinator" solve 12 --gpu "$way" --json --no-progress \
                    >/dev/null 2>&1 || true
            done
        else
            echo "--gpu $way: does not work: $(tail -2 "$work/probe.err" | tr '\n' ' ')"
        fi
    done
    ((${#ways[@]} > 0)) || { echo "our GPU path does not start"; exit 1; }
    # Settings (API, look-ahead, groups per multiprocessor; "-" keeps the default) timed on the
    # smallest size; the fastest runs the larger sizes. By default a dispatch has as many groups
    # as a multiprocessor holds at once (CUDA's occupancy calculator; for NVIDIA's OpenCL, from the
    # compute capability); 16 (more than that: a second, part-empty wave) is timed beside it.
    local first="${sizes%% *}" t setting settings=()
    for way in "${ways[@]}"; do
        settings+=("$way:1:-" "$way:0:-" "$way:2:-")
        settings+=("$way:1:16")
    done
    for setting in "${settings[@]}"; do
        IFS=: read -r way la groups <<<"$setting"
        t="$(run_setting "$setting" "$first")"
        echo "N=$first --gpu $way lookahead=$la groups=$groups: $t s  $(cat "$work/last.out")"
        grep -m1 'kernel steps' "$work/last.err" || true
        if [[ "$t" =~ ^[0-9.]+$ ]] && { [[ -z "$best_s" ]] || awk -v a="$t" -v b="$best_s" 'BEGIN { exit !(a < b) }'; }; then
            best="$setting" best_s="$t"
        fi
    done
    [[ -n "$best" ]] || { echo "no setting finished N=$first"; exit 1; }
    echo "fastest: $best (API:lookahead:groups)"
    declare -A ours theirs
    ours[$first]="$best_s"
    for n in $sizes; do
        [[ "$n" == "$first" ]] && continue
        ours[$n]="$(run_setting "$best" "$n" 240)"
        echo "N=$n ours: ${ours[$n]} s  $(cat "$work/last.out")"
        grep -m1 'kernel steps' "$work/last.err" || true
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
