#!/usr/bin/env bash
# Runs deploy/slurm/nqueens.sbatch on a real Slurm cluster of one node, started here for the test
# (munged, slurmctld and slurmd from Debian's munge and slurm-wlm, a generated slurm.conf, every
# file under one temp dir), with a Prometheus server scraping the coordinator's metrics port:
#   1. N=12 submitted with sbatch: <state>.result.json must equal the row of
#      reference/known-counts.tsv; submitting again only prints the finished result.
#   2. A board that takes one solver thread 30 s to 3 min (N=18 on a slow core, 19 on a fast one:
#      chosen from a timed `solve 16`, so the run outlasts the checks on any core): once a fifth
#      of the jobs is committed (`status --state`),
#      Prometheus must see rate(nqueens_results_total[30s]) > 0; the job is then scancel'ed,
#      resubmitted with the same state file, and must resume (the coordinator reloads the done
#      jobs and counts only the rest) and end with the exact counts. At the end Prometheus must
#      show nqueens_jobs{state="done"} equal to the job count.
# Every daemon it starts is stopped and its temp dir removed on exit, failure included.
# Missing engines are installed with apt-get (--no-install-recommends, services not started). Not
# root or no apt-get: prints why and exits 0 (skipped), except under CI=true, where that fails.
#
# Needs: target/release/nqueens-{coordinator,worker} (cargo build --release; NQ_BIN_DIR
# overrides), python3. Knobs: NQ_TEST_LONG_N (the board of part 2; chosen from the timed solve by
# default), NQ_TEST_TIMEOUT (seconds per job, 600).
set -euo pipefail
export PATH="$PATH:/usr/sbin:/sbin"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
bin="${NQ_BIN_DIR:-${CARGO_TARGET_DIR:-$root/target}/release}"
KNOWN="${NQ_KNOWN_COUNTS:-$root/reference/known-counts.tsv}"
LONG_N="${NQ_TEST_LONG_N:-}"
TIMEOUT="${NQ_TEST_TIMEOUT:-600}"
T0=$SECONDS

log() { echo "[$(date +%H:%M:%S)] test-slurm-real: $*" >&2; }
fail() { echo "test-slurm-real: FAIL: $*" >&2; exit 1; }
skip() {
    if [[ "${CI:-}" == true ]]; then fail "$* (a missing engine fails under CI=true)"; fi
    echo "test-slurm-real: SKIPPED: $*"
    exit 0
}

for b in nqueens-coordinator nqueens-worker; do
    [[ -x "$bin/$b" ]] || fail "$bin/$b missing (cargo build --release -p nqueens-cli -p nqueens-worker --bins)"
done
command -v python3 >/dev/null || fail "python3 is needed to read JSON"
[[ -r "$KNOWN" ]] || fail "reference counts $KNOWN not readable"

# --- the engines: installed with apt-get when missing --------------------------------------------
missing=()
for pair in slurmctld:slurm-wlm slurmd:slurm-wlm sbatch:slurm-wlm srun:slurm-wlm munged:munge prometheus:prometheus; do
    command -v "${pair%%:*}" >/dev/null 2>&1 || missing+=("${pair#*:}")
done
if [[ ${#missing[@]} -gt 0 ]]; then
    read -r -a missing <<<"$(printf '%s\n' "${missing[@]}" | sort -u | tr '\n' ' ')"
    [[ $EUID -eq 0 ]] || skip "${missing[*]} not installed, and not root to install them"
    command -v apt-get >/dev/null || skip "${missing[*]} not installed, and no apt-get to install them"
    log "installing ${missing[*]} (apt-get, no recommends, services not started)"
    # Packages must not start their own daemons here: a policy-rc.d that refuses, for the install.
    own_policy=""
    if [[ ! -e /usr/sbin/policy-rc.d ]]; then
        printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d && chmod +x /usr/sbin/policy-rc.d
        own_policy=1
    fi
    apt_install() { DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}" >&2; }
    installed=0
    apt_install || { apt-get update -q >&2 && apt_install; } || installed=$?
    if [[ -n "$own_policy" ]]; then rm -f /usr/sbin/policy-rc.d; fi
    [[ $installed -eq 0 ]] || fail "apt-get could not install ${missing[*]}"
fi
log "engines: $(slurmctld -V), munge $(munged --version 2>&1 | grep -o '[0-9][0-9.]*' | head -n1), prometheus $(prometheus --version 2>&1 | grep -o 'version [^ ]*' | head -n1)"

# --- everything this test starts, stopped on any exit ----------------------------------------------
work="$(mktemp -d "${TMPDIR:-/tmp}/nqueens-slurm-test.XXXXXX")"
chmod 0755 "$work"   # job steps run as the submitting user, who must reach the state files
pids=()              # daemons, stopped in reverse order
jobs_submitted=()
cleanup() {
    local rc=$? i
    trap - EXIT INT TERM
    if [[ ${#jobs_submitted[@]} -gt 0 ]]; then
        scancel "${jobs_submitted[@]}" >/dev/null 2>&1 || true
        for _ in $(seq 1 40); do
            [[ -z "$(squeue -h -j "$(IFS=,; echo "${jobs_submitted[*]}")" 2>/dev/null)" ]] && break
            sleep 0.5
        done
    fi
    if [[ $rc -ne 0 ]]; then
        for f in "$work"/log/*.log "$work"/submit/*.out; do
            [[ -e "$f" ]] || continue
            echo "--- last lines of $f" >&2
            tail -n 25 "$f" >&2
        done
    fi
    for ((i = ${#pids[@]} - 1; i >= 0; i--)); do kill -TERM "${pids[i]}" 2>/dev/null || true; done
    for ((i = ${#pids[@]} - 1; i >= 0; i--)); do
        for _ in $(seq 1 50); do kill -0 "${pids[i]}" 2>/dev/null || break; sleep 0.2; done
        kill -KILL "${pids[i]}" 2>/dev/null || true
        wait "${pids[i]}" 2>/dev/null || true
    done
    rm -rf "$work"
    log "finished after $((SECONDS - T0)) s (exit $rc)"
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
mkdir -p "$work/munge" "$work/log" "$work/state" "$work/spool" "$work/submit" "$work/runs" "$work/prom"
chmod 0700 "$work/munge"

# --- the board of part 2: long enough on this core -------------------------------------------------
# Part 2 must still be running after a fifth of its jobs, the Prometheus checks and the scancel
# (10-20 s). A fixed N does not do it: N=18 on one thread took 40 s on one CI host and 5 s on a
# faster one, where the run ended before the scancel. Each N costs about 6.5x the one before.
if [[ -z "$LONG_N" ]]; then
    t0=$(date +%s.%N)
    "$bin/nqueens-coordinator" solve 16 --threads 1 >/dev/null 2>&1 || fail "solve 16 failed"
    read -r LONG_N t16 < <(python3 -c '
import sys
t16 = float(sys.argv[2]) - float(sys.argv[1])
t, n = t16, 16
while t < 30 and n < 21:  # 30 s to 3 min of one thread, whatever the core
    t, n = t * 6.5, n + 1
print(n, f"{t16:.2f}")' "$t0" "$(date +%s.%N)")
    log "solve 16 on one thread took $t16 s: part 2 solves N=$LONG_N"
fi

# --- munge: its own key and socket -----------------------------------------------------------------
(umask 077 && head -c 1024 /dev/urandom >"$work/munge/munge.key")
sock="$work/munge/munge.socket"
munged --foreground --force --socket="$sock" --key-file="$work/munge/munge.key" \
    --pid-file="$work/munge/munged.pid" --seed-file="$work/munge/munged.seed" \
    --log-file="$work/log/munged.log" >>"$work/log/munged.log" 2>&1 &
pids+=($!)
for _ in $(seq 1 50); do [[ -S "$sock" ]] && break; sleep 0.1; done
munge -S "$sock" -n | unmunge -S "$sock" >/dev/null || fail "munged does not answer on $sock"

# --- slurm: one node (this machine), one partition -------------------------------------------------
cpus="$(nproc)"
ctld_port="$(free_port)"; slurmd_port="$(free_port)"
export SLURM_CONF="$work/slurm.conf"
cat >"$SLURM_CONF" <<CONF
# One-node test cluster of deploy/slurm/test-slurm-real.sh (generated; no cgroups in a container).
ClusterName=nqtest
SlurmctldHost=localhost
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$sock
StateSaveLocation=$work/state
SlurmdSpoolDir=$work/spool
SlurmctldPidFile=$work/slurmctld.pid
SlurmdPidFile=$work/slurmd.pid
SlurmctldLogFile=$work/log/slurmctld.log
SlurmdLogFile=$work/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
ReturnToService=2
KillWait=30
InactiveLimit=0
SlurmctldTimeout=30
SlurmdTimeout=60
NodeName=localhost NodeAddr=127.0.0.1 CPUs=$cpus State=UNKNOWN
PartitionName=test Nodes=localhost Default=YES MaxTime=INFINITE State=UP
CONF
slurmctld -D -i -f "$SLURM_CONF" >>"$work/log/slurmctld.out" 2>&1 &
pids+=($!)
slurmd -D -N localhost -f "$SLURM_CONF" >>"$work/log/slurmd.out" 2>&1 &
pids+=($!)
node_state=""
for _ in $(seq 1 120); do
    node_state="$(sinfo -h -n localhost -o %t 2>/dev/null || true)"
    [[ "$node_state" == idle ]] && break
    sleep 0.5
done
[[ "$node_state" == idle ]] || { cat "$work/log/slurmctld.out" "$work/log/slurmd.out" >&2 || true; fail "the node did not become idle (state '$node_state')"; }
log "slurm cluster up: $(sinfo -h -o '%P %D nodes %c cpus %t')"

# --- helpers -------------------------------------------------------------------------------------
grpc_port="$(free_port)"; metrics_port="$(free_port)"
# submit N STATE [VAR=VALUE]: the job id. The same ports for every job (they run one at a time).
submit() {
    sbatch --parsable --nodes=1 --chdir="$work/submit" --output="$work/submit/nqueens-%j.out" \
        --export="ALL,NQ_BIN_DIR=$bin,NQ_STATE=$2,NQ_PORT=$grpc_port,NQ_METRICS_PORT=$metrics_port,NQ_LEASE_SECONDS=20${3:+,$3}" \
        "$here/nqueens.sbatch" "$1"
}
job_state() { scontrol show job "$1" 2>/dev/null | grep -o 'JobState=[A-Z_]*' | cut -d= -f2; }
# wait_job ID: until it has left the queue (or TIMEOUT); prints its final state.
wait_job() {
    local start=$SECONDS st=""
    while (( SECONDS - start < TIMEOUT )); do
        st="$(job_state "$1")"
        case "$st" in COMPLETED|CANCELLED|FAILED|TIMEOUT|NODE_FAIL|PREEMPTED|OUT_OF_MEMORY|"") echo "${st:-GONE}"; return 0 ;; esac
        sleep 1
    done
    echo "STILL-$st"
}
status_field() {  # status_field STATE FIELD...: fields of `status --state --json`, space-separated
    "$bin/nqueens-coordinator" status --state "$1" --json 2>/dev/null | python3 -c '
import json, sys
d = json.load(sys.stdin)
print(" ".join(str(d[k]) for k in sys.argv[1:]))' "${@:2}"
}
check_counts() { python3 "$here/../check-counts.py" "$KNOWN" "$1" "$2"; }

# --- 1. a whole run ----------------------------------------------------------------------------------
state="$work/runs/n12.db"
id="$(submit 12 "$state")"; jobs_submitted+=("$id")
log "1. N=12: job $id submitted"
st="$(wait_job "$id")"
log "1. job $id ended: $st"
[[ "$st" == COMPLETED ]] || fail "N=12 job $id ended $st, not COMPLETED"
[[ -s "$state.result.json" ]] || fail "N=12 job left no result file"
check_counts 12 "$(cat "$state.result.json")" || fail "N=12 result"
[[ "$(stat -c %a "$state.token")" == 600 ]] || fail "token file is not mode 0600"
grep -q "coordinator=localhost:$grpc_port workers=1 x $cpus threads" "$work/submit/nqueens-$id.out" \
    || fail "the job's output does not show one worker on the allocated CPUs"
id="$(submit 12 "$state")"; jobs_submitted+=("$id")
st="$(wait_job "$id")"
[[ "$st" == COMPLETED ]] || fail "second N=12 job $id ended $st"
grep -q "already complete" "$work/submit/nqueens-$id.out" || fail "second submission did not just print the result"
log "1. passed: exact counts; a second submission only printed the result"

# --- Prometheus, scraping the coordinator's metrics port every second ------------------------------
prom_port="$(free_port)"
cat >"$work/prometheus.yml" <<YML
global:
  scrape_interval: 1s
  evaluation_interval: 1s
scrape_configs:
  - job_name: nqueens-coordinator
    # The metrics port listens on 0.0.0.0, so it wants the run's token (written by nqueens.sbatch
    # to <state>.token; Prometheus reads the file at every scrape, so it may appear later).
    authorization:
      type: Bearer
      credentials_file: "$work/runs/n$LONG_N.db.token"
    static_configs:
      - targets: ["127.0.0.1:$metrics_port"]
YML
prometheus --config.file="$work/prometheus.yml" --storage.tsdb.path="$work/prom" \
    --web.listen-address="127.0.0.1:$prom_port" --log.level=warn >>"$work/log/prometheus.log" 2>&1 &
pids+=($!)
prom="http://127.0.0.1:$prom_port"
for _ in $(seq 1 60); do
    python3 -c 'import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=2)' "$prom/-/ready" 2>/dev/null && break
    sleep 0.5
done
# promql EXPR: the instant query's value (the first series'), or "none"; the raw answer on stderr.
promql() {
    python3 - "$prom" "$1" <<'PY'
import json, sys, urllib.parse, urllib.request
url = sys.argv[1] + "/api/v1/query?" + urllib.parse.urlencode({"query": sys.argv[2]})
d = json.load(urllib.request.urlopen(url, timeout=5))
assert d["status"] == "success", d
r = d["data"]["result"]
print(f"  prometheus: {sys.argv[2]} -> {json.dumps(r)}", file=sys.stderr)
print(r[0]["value"][1] if r else "none")
PY
}
promql 'up' >/dev/null || fail "prometheus does not answer queries at $prom"
log "prometheus up at $prom, scraping 127.0.0.1:$metrics_port every 1s"

# --- 2. stopped with scancel part way, resubmitted, resumed ----------------------------------------
state="$work/runs/n$LONG_N.db"
id="$(submit "$LONG_N" "$state" NQ_THREADS=1)"
jobs_submitted+=("$id")
log "2. N=$LONG_N with 1 solver thread: job $id submitted"
done_jobs=0; total=0
for _ in $(seq 1 $((TIMEOUT * 5))); do
    sleep 0.2
    read -r done_jobs total < <(status_field "$state" jobs_done jobs_total 2>/dev/null || echo "0 0")
    [[ "$total" -gt 0 && "$done_jobs" -ge $((total / 5)) ]] && break
    [[ -z "$(job_state "$id" | grep -E 'RUNNING|PENDING|CONFIGURING' || true)" ]] && fail "job $id ended before it could be cancelled"
done
[[ "$total" -gt 0 && "$done_jobs" -ge $((total / 5)) ]] || fail "N=$LONG_N never got to a fifth of its jobs"
log "2. $done_jobs/$total jobs committed; asking prometheus for the rate"
rate="none"
for _ in $(seq 1 30); do
    rate="$(promql 'rate(nqueens_results_total[30s])')" || true
    python3 -c 'import sys; sys.exit(0 if sys.argv[1] not in ("none", "NaN") and float(sys.argv[1]) > 0 else 1)' "$rate" && break
    sleep 1
done
python3 -c 'import sys; sys.exit(0 if sys.argv[1] not in ("none", "NaN") and float(sys.argv[1]) > 0 else 1)' "$rate" \
    || fail "prometheus: rate(nqueens_results_total[30s]) is $rate during the run, not > 0"
log "2. prometheus: rate(nqueens_results_total[30s]) = $rate results/s during the run"
[[ ! -e "$state.result.json" ]] || fail "N=$LONG_N finished before it could be cancelled: raise NQ_TEST_LONG_N"
read -r before _ < <(status_field "$state" jobs_done jobs_total)
log "2. scancel $id at $before/$total jobs done"
scancel "$id"
st="$(wait_job "$id")"
log "2. job $id ended: $st"
[[ "$st" == CANCELLED ]] || fail "job $id ended $st after scancel, not CANCELLED"
sleep 1
if pgrep -f -- "--state $state" >/dev/null; then pgrep -a -f -- "--state $state" >&2; fail "the cancelled job left processes behind"; fi
grep -q "stopped (time limit or scancel)" "$work/submit/nqueens-$id.out" || fail "the batch script did not report the stop"
read -r stopped leased complete < <(status_field "$state" jobs_done jobs_leased complete)
log "2. after scancel: jobs_done=$stopped/$total leased=$leased complete=$complete (state file)"
[[ "$stopped" -ge "$before" && "$stopped" -lt "$total" && "$complete" == False ]] || fail "the cancelled run is not part way ($stopped/$total, complete=$complete)"

id="$(submit "$LONG_N" "$state" NQ_THREADS=1)"
jobs_submitted+=("$id")
log "2. resubmitted as job $id (same state file)"
st="$(wait_job "$id")"
log "2. job $id ended: $st"
[[ "$st" == COMPLETED ]] || fail "resubmitted N=$LONG_N job $id ended $st"
out="$work/submit/nqueens-$id.out"
loaded="$(grep -m1 'run loaded' "$out" | grep -o ' done=[0-9]*' | cut -d= -f2 || true)"
log "2. the resumed coordinator loaded the run with done=${loaded:-?} (the state file said $stopped)"
[[ "$loaded" == "$stopped" ]] || fail "the resubmitted job did not resume from the $stopped done jobs (loaded: '${loaded:-nothing}')"
check_counts "$LONG_N" "$(cat "$state.result.json")" || fail "N=$LONG_N result after scancel and resubmission"
read -r final ftotal complete < <(status_field "$state" jobs_done jobs_total complete)
[[ "$final" == "$ftotal" && "$complete" == True ]] || fail "final status: $final/$ftotal complete=$complete"

# Prometheus at the end: the last scraped values (the coordinator lingers a few seconds after the
# last result, and it is scraped every second).
sleep 2
done_metric="$(promql 'last_over_time(nqueens_jobs{state="done"}[5m])')"
counted="$(promql 'last_over_time(nqueens_results_total[5m])')"
log "2. prometheus at the end: nqueens_jobs{state=\"done\"} = $done_metric (jobs: $total); results counted by the resumed coordinator = $counted (jobs left: $total - $stopped = $((total - stopped)), plus the trust checks' answers)"
[[ "$done_metric" == "$total" ]] || fail "prometheus: nqueens_jobs{state=\"done\"} is $done_metric at the end, not $total"
# Every job left is answered once; a few more answers are the trust checks' (spot checks of known
# answers and second opinions, about 2% by default). Re-solving from zero would add the $stopped.
left=$((total - stopped))
[[ "$counted" -ge "$left" && "$counted" -le $((left + left / 20)) ]] \
    || fail "the resumed coordinator counted $counted results for the $left jobs left (re-solved from zero?)"
echo "test-slurm-real: 2 passed, 0 failed ($((SECONDS - T0)) s)"
