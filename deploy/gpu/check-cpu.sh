#!/usr/bin/env bash
# Every solver build that this machine's CPU runs, timed side by side: `solve N --threads 1` with
# NQ_SOLVER_BUILD set to each build in turn (avx512, avx2, bmi, portable), the builds alternating
# round by round, each count checked against the reference figure. Needs only the coordinator
# binary (no Rust, no network), so it runs on a card's machine from check-h200.sh's carry:
#
#   carry/check-cpu.sh [path/to/nqueens-coordinator]     # default: next to this script
#
# A build the CPU lacks is not run twice: NQ_SOLVER_BUILD only caps the build, and the one that
# counted is read back from `solve --json` ("build"). NQ_CHECK_SIZES (default "17 18") and
# NQ_CHECK_ROUNDS (default 2) change the work; each solve has a time cap (NQ_CHECK_CAP seconds,
# default 120), so that the default run stays within a few minutes on a recent core.
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
solver="${1:-$here/nqueens-coordinator}"
sizes="${NQ_CHECK_SIZES:-17 18}"
rounds="${NQ_CHECK_ROUNDS:-2}"
cap="${NQ_CHECK_CAP:-120}"
# Total solutions (reference/known-counts.tsv).
declare -A total=([14]=365596 [15]=2279184 [16]=14772512 [17]=95815104 [18]=666090624
    [19]=4968057848 [20]=39029188884)

echo "== CPU"
grep -m1 'model name' /proc/cpuinfo || true
flags="$(grep -m1 '^flags' /proc/cpuinfo || true)"
for f in avx512f avx512_vbmi2 avx512_vpopcntdq avx2 bmi2; do
    [[ " $flags " == *" $f "* ]] && echo -n "$f " || echo -n "(no $f) "
done
echo

# The distinct builds this CPU runs, widest first: each name, and the build it gives.
builds=()
for b in avx512 avx2 bmi portable; do
    got="$(NQ_SOLVER_BUILD=$b "$solver" solve 8 --json --no-progress | sed 's/.*"build":"\([a-z0-9]*\)".*/\1/')"
    [[ "$got" == "$b" ]] && builds+=("$b") || echo "build $b: not run here (gives $got)"
done
echo "builds: ${builds[*]}"

echo "== solve N --threads 1, builds alternating (seconds; ns per solution)"
for n in $sizes; do
    for round in $(seq 1 "$rounds"); do
        for b in "${builds[@]}"; do
            started=$(date +%s.%N)
            if line="$(NQ_SOLVER_BUILD=$b timeout "$cap" "$solver" solve "$n" --threads 1 --json --no-progress)"; then
                seconds="$(echo "$started $(date +%s.%N)" | awk '{printf "%.2f", $2 - $1}')"
                got="$(echo "$line" | sed 's/.*"total":\([0-9]*\).*/\1/')"
                want="${total[$n]:-?}"
                check=$([[ "$got" == "$want" ]] && echo exact || echo "WRONG (want $want)")
                ns="$(awk -v s="$seconds" -v t="$got" 'BEGIN { printf "%.1f", s * 1e9 / t }')"
                echo "N=$n round $round $b: $seconds s, $ns ns/solution, total $got $check"
            else
                echo "N=$n round $round $b: over ${cap} s"
            fi
        done
    done
done
