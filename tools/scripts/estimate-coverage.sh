#!/usr/bin/env bash
# How often `estimate`'s 95% interval holds the truth: for each board N and seed, the projected
# Total's interval against the published count (reference/known-counts.tsv), and where a whole
# solve's CPU seconds are given (WHOLE_CPU="20=630.5"), the projected CPU interval against them.
#
#   tools/scripts/estimate-coverage.sh                      # N=20..27, seeds 1..10, --sample 256
#   SIZES="20 21 22" EXTRA="--whole-rows 8" tools/scripts/estimate-coverage.sh
#
# SIZES, SEEDS (default 1..10), SAMPLE (256), THREADS (all cores) and EXTRA (more `estimate`
# flags) choose the runs; BIN the coordinator binary (default: target/release, built if missing).
# Prints one line per run and the share of runs whose interval held the truth, per N and in all.
set -euo pipefail
cd "$(dirname "$0")/../.."
BIN="${BIN:-target/release/nqueens-coordinator}"
[[ -x "$BIN" ]] || cargo build --release -q -p nqueens-cli
SIZES="${SIZES:-20 21 22 23 24 25 26 27}"
SEEDS="${SEEDS:-1 2 3 4 5 6 7 8 9 10}"
SAMPLE="${SAMPLE:-256}"
THREADS="${THREADS:-$(nproc)}"
EXTRA="${EXTRA:-}"
# One line a run: N, seed and `estimate --json`, kept for a second look.
out="${RUNS:-$(mktemp --suffix=.estimate-runs)}"
: >"$out"
echo "runs in $out" >&2
for n in $SIZES; do
    for seed in $SEEDS; do
        # shellcheck disable=SC2086 # EXTRA is a list of flags
        "$BIN" estimate "$n" --seed "$seed" --sample "$SAMPLE" --threads "$THREADS" $EXTRA --json \
            | sed "s/^/$n $seed /" >>"$out"
    done
done
python3 - "$out" reference/known-counts.tsv "${WHOLE_CPU:-}" <<'PY'
import json, sys
runs, table, whole = sys.argv[1], sys.argv[2], sys.argv[3]
known = {}
for line in open(table):
    f = line.split("\t")
    if f[0].isdigit():
        known[int(f[0])] = int(f[1])
cpu = {int(k): float(v) for k, v in (w.split("=") for w in whole.split())}
held = {}
print(f"{'N':>3} {'seed':>4} {'Total/true':>10} {'interval/true':>17} {'in':>3}"
      f" {'ref-core-years':>15} {'CPU/whole':>9} {'in':>3}")
for line in open(runs):
    n, seed, obj = line.split(" ", 2)
    n, e = int(n), json.loads(obj)
    true = known[n]
    inside = e["projected_solutions_low"] <= true <= e["projected_solutions_high"]
    held.setdefault(n, []).append(inside)
    row = (f"{n:>3} {seed:>4} {e['projected_solutions'] / true:>10.3f}"
           f" {e['projected_solutions_low'] / true:>8.3f}..{e['projected_solutions_high'] / true:<7.3f}"
           f" {'yes' if inside else 'NO':>3} {e.get('reference_core_years') or 0:>15.4g}")
    if n in cpu:
        t = cpu[n]
        cpu_in = e["total_cpu_seconds_low"] <= t <= e["total_cpu_seconds_high"]
        held.setdefault(f"{n} CPU", []).append(cpu_in)
        row += f" {e['total_cpu_seconds'] / t:>9.3f} {'yes' if cpu_in else 'NO':>3}"
    print(row)
print()
every = [x for k, v in held.items() if not str(k).endswith("CPU") for x in v]
for k, v in held.items():
    print(f"N={k}: the interval held the truth in {sum(v)} of {len(v)} runs")
print(f"all sizes (Total): {sum(every)} of {len(every)} ({100 * sum(every) / len(every):.0f}%)")
PY
