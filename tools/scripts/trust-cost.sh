#!/usr/bin/env bash
# What the trust checks cost: a coordinator and two one-thread workers count N (default 17) on
# this machine, with the default checks and with every optional check off, alternating ROUNDS
# (default 4) pairs of runs. Prints, per run, the CPU seconds (user + sys of the three
# processes), the wall seconds, the answers beyond one per job (workers answering a job twice,
# opinions that waited) and the coordinator's own solves (referee checks, spot-check answers).
#
#     cargo build --release && tools/scripts/trust-cost.sh 17
#
# Run it on a quiet machine: the figures are CPU seconds, but other load still moves them.
set -euo pipefail
cd "$(dirname "$0")/../.."
N="${1:-17}"
ROUNDS="${ROUNDS:-4}"
BIN="${BIN:-target/release}"

one_run() { # label, extra coordinator flags...
    local label="$1" dir port start
    shift
    dir="$(mktemp -d)"
    port=$((20000 + RANDOM % 20000))
    start=$(date +%s.%N)
    TIMEFORMAT="%U %S"
    local cpu
    cpu=$( { time (
        RUST_LOG=info "$BIN/nqueens-coordinator" serve --n "$N" --state "$dir/run.db" \
            --listen "127.0.0.1:$port" --http-listen off --exit-when-done "$@" \
            >"$dir/coordinator.log" 2>&1 &
        local c=$!
        for w in a b; do
            "$BIN/nqueens-worker" --connect "http://127.0.0.1:$port" --threads 1 --gpu off \
                --name "$w" >"$dir/$w.log" 2>&1 &
        done
        wait "$c"
        wait
    ); } 2>&1 )
    local wall jobs rows referee
    wall=$(echo "$(date +%s.%N) - $start" | bc)
    jobs=$(python3 -c "import sqlite3,sys; c=sqlite3.connect(sys.argv[1]); print(c.execute('select count(*) from jobs').fetchone()[0])" "$dir/run.db")
    rows=$(python3 -c "import sqlite3,sys; c=sqlite3.connect(sys.argv[1]); print(c.execute('select count(*) from results where worker_id<>0').fetchone()[0])" "$dir/run.db")
    referee=$(grep -c "the coordinator's own answer\|reference answers computed" "$dir/coordinator.log" || true)
    printf '%-10s cpu %6.2f s  wall %6.2f s  answers beyond one per job %5d (%.1f%%)  coordinator solves %d\n' \
        "$label" "$(echo "$cpu" | awk '{print $1 + $2}')" "$wall" $((rows - jobs)) \
        "$(echo "100 * ($rows - $jobs) / $jobs" | bc -l)" "$referee"
    rm -rf "$dir"
}

for _ in $(seq "$ROUNDS"); do
    one_run defaults
    one_run off --verify-fraction 0 --no-spot-checks --recheck-fraction 0
done
