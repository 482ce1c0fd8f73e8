#!/usr/bin/env bash
# Cost of --replication 2 against the default: N, workers (1 thread each, half per credential).
# Usage: tools/scripts/bench-replication.sh (from the repository root, after cargo build --release).
# `seconds` is the result record's (run creation to completion): it includes the 4 s before the
# workers start (the two per-host tokens are added to the live run and come into force).
B="${B:-target/release}"
run() {
  local n=$1 w=$2 r=$3 d; d=$(mktemp -d)
  local port=$((20000 + RANDOM % 20000))
  local t0=$(date +%s.%N)
  $B/nqueens-coordinator serve --n $n --state $d/run.db --replication $r --listen 127.0.0.1:$port --http-listen off --exit-when-done --lease-seconds 20 > $d/c.log 2>&1 &
  local cp=$!
  sleep 1
  local a b; a=$($B/nqueens-coordinator token add site-a --state $d/run.db 2>/dev/null | tail -1); b=$($B/nqueens-coordinator token add site-b --state $d/run.db 2>/dev/null | tail -1)
  sleep 3
  for i in $(seq 1 $w); do
    tok=$a; [ $((i % 2)) = 0 ] && tok=$b
    $B/nqueens-worker --connect http://127.0.0.1:$port --threads 1 --name w$i --token "$tok" > $d/w$i.log 2>&1 &
  done
  wait $cp
  local rc=$?
  local t1=$(date +%s.%N)
  wait
  python3 - "$d/run.db.result.json" $n $w $r $rc $t0 $t1 <<'PY'
import json,sys
f,n,w,r,rc,t0,t1=sys.argv[1:]
j=json.load(open(f)); e=j["evidence"]
print(f"N={n} workers={w} replication={r} exit={rc} total={j['total']} seconds={j['seconds']:.1f} wall={float(t1)-float(t0):.1f} nodes={j['nodes']} independent={e['jobs_independent']} coordinator={e['jobs_coordinator']} one_party={e['jobs_one_party']}")
PY
  rm -rf $d
}
for n in 17 18; do for w in 2 8; do for r in 1 2; do run $n $w $r; done; done; done
