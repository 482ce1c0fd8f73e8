#!/usr/bin/env bash
# The cluster against one machine: for each N (default "17 18"), ROUNDS (default 7: a shared
# machine's speed swings from minute to minute) rounds of
#   solve     `nqueens-coordinator solve N` on every core (no network),
#   worker    a coordinator and one worker with every core, started as the README starts them,
#   2 workers a coordinator and two one-thread workers,
# one after the other in each round so that load on a shared machine falls on all three. Prints
# the wall seconds of each (for the cluster: coordinator start to its result file; the worker's
# start, self-test and registration included) and, per N, the median ratio of each cluster run to solve.
# Every cluster run must end exact: its total is checked against reference/known-counts.tsv.
#
#     cargo build --release && tools/scripts/bench-cluster.sh 17 18
set -euo pipefail
cd "$(dirname "$0")/../.."
SIZES=("${@:-17 18}")
read -r -a SIZES <<<"${SIZES[*]}"
ROUNDS="${ROUNDS:-7}"
BIN="${BIN:-target/release}"
CORES="$(nproc)"

now() { date +%s.%N; }

# A 10 ms pause without a fork: polling with `sleep` would start a hundred processes a second
# beside the run being timed (on a small machine, several percent of its CPU).
exec {napper}<> <(:)
nap() { read -r -t 0.01 -u "$napper" || true; }

known_total() { awk -v n="$1" '!/^#/ && $1 == n {print $2}' reference/known-counts.tsv; }

run_solve() { # n
    local start
    start=$(now)
    "$BIN/nqueens-coordinator" solve "$1" >/dev/null
    echo "$(now) - $start" | bc
}

run_cluster() { # n, threads of each worker...
    local n="$1" dir port start c
    shift
    dir="$(mktemp -d)"
    port=$((20000 + RANDOM % 20000))
    start=$(now)
    "$BIN/nqueens-coordinator" serve --n "$n" --state "$dir/run.db" --listen "127.0.0.1:$port" \
        --exit-when-done >"$dir/coordinator.log" 2>&1 &
    c=$!
    local i=0
    for threads in "$@"; do
        i=$((i + 1))
        "$BIN/nqueens-worker" --connect "http://127.0.0.1:$port" --threads "$threads" --gpu off \
            --name "w$i" >"$dir/w$i.log" 2>&1 &
    done
    # The answer is known when the result file appears (the coordinator then lingers a few
    # seconds so that workers hear the run is complete; that is not the run's time).
    while ! [[ -s "$dir/run.db.result.json" ]]; do
        if ! kill -0 "$c" 2>/dev/null; then
            echo "the coordinator exited without a result; its log:" >&2
            cat "$dir/coordinator.log" >&2
            exit 1
        fi
        nap
    done
    local wall total
    wall=$(echo "$(now) - $start" | bc)
    wait
    total=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["total"])' "$dir/run.db.result.json")
    if [[ "$total" != "$(known_total "$n")" ]]; then
        echo "N=$n: the cluster counted $total, the reference says $(known_total "$n")" >&2
        exit 1
    fi
    rm -rf "$dir"
    echo "$wall"
}

median() { tr ' ' '\n' | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

echo "machine: $CORES cores; rounds: $ROUNDS"
for n in "${SIZES[@]}"; do
    r1=() r2=()
    for round in $(seq "$ROUNDS"); do
        s=$(run_solve "$n")
        w=$(run_cluster "$n" "$CORES")
        two=$(run_cluster "$n" 1 1)
        printf 'N=%s round %s: solve %6.2f s  worker %6.2f s (%.2fx)  2 workers %6.2f s (%.2fx)\n' \
            "$n" "$round" "$s" "$w" "$(echo "$w / $s" | bc -l)" "$two" "$(echo "$two / $s" | bc -l)"
        r1+=("$(echo "$w / $s" | bc -l)")
        r2+=("$(echo "$two / $s" | bc -l)")
    done
    printf 'N=%s median ratio to solve: one worker %.2fx, two 1-thread workers %.2fx\n' \
        "$n" "$(echo "${r1[*]}" | median)" "$(echo "${r2[*]}" | median)"
done
