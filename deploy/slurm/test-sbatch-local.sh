#!/usr/bin/env bash
# Runs deploy/slurm/nqueens.sbatch for real on this one machine, with stand-ins for srun and
# scontrol (srun runs --ntasks copies of its command here; scontrol prints the node list), against the
# project's release binaries on loopback:
#   1. N=12 with 2 "nodes": the result in <state>.result.json matches the reference counts;
#      submitting again only prints the finished result;
#   2. resume: a N=15 job is stopped (SIGTERM to the batch script, as at a time limit) part way,
#      submitted again with the same state path, and finishes with the exact counts.
# Needs: target/release/nqueens-{coordinator,worker} (cargo build --release), python3.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
bin="${NQ_BIN_DIR:-${CARGO_TARGET_DIR:-$root/target}/release}"
KNOWN="${NQ_KNOWN_COUNTS:-$root/reference/known-counts.tsv}"
fail() { echo "test-sbatch-local: FAIL: $*" >&2; exit 1; }
for b in nqueens-coordinator nqueens-worker; do [[ -x "$bin/$b" ]] || fail "$bin/$b missing (cargo build --release)"; done

work="$(mktemp -d "${TMPDIR:-/tmp}/nqueens-sbatch-test.XXXXXX")"
jobpid=""
cleanup() {
    local rc=$?
    if [[ -n "$jobpid" ]] && kill -0 "$jobpid" 2>/dev/null; then kill -TERM "$jobpid" 2>/dev/null || true; wait "$jobpid" 2>/dev/null || true; fi
    rm -rf "$work"
    exit $rc
}
trap cleanup EXIT

mkdir -p "$work/shims"
cat >"$work/shims/srun" <<'SH'
#!/usr/bin/env bash
# srun stand-in: skip srun's own options, run --ntasks copies (default 1) of the command here.
ntasks=1
while [[ $# -gt 0 && "$1" == -* ]]; do
    case "$1" in --ntasks=*) ntasks="${1#*=}" ;; esac
    shift
done
pids=()
for _ in $(seq 1 "$ntasks"); do "$@" & pids+=($!); done
trap 'kill -TERM "${pids[@]}" 2>/dev/null' TERM INT
rc=0
for p in "${pids[@]}"; do
    while :; do wait "$p"; r=$?; kill -0 "$p" 2>/dev/null || break; done
    [[ $r -eq 0 ]] || rc=$r
done
exit $rc
SH
cat >"$work/shims/scontrol" <<'SH'
#!/usr/bin/env bash
# scontrol stand-in: `scontrol show hostnames LIST` prints LIST's comma-separated names, one a line.
[[ "$1 $2" == "show hostnames" ]] || { echo "scontrol stand-in: only 'show hostnames'" >&2; exit 1; }
tr ',' '\n' <<<"$3"
SH
chmod +x "$work/shims/"*

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# submit N STATE: run the batch script as Slurm would on a 2-node allocation (both nodes: loopback).
# `env` execs the script, so `submit ... &` gives the batch script's own PID in $!.
submit() {
    exec env PATH="$work/shims:$PATH" SLURM_JOB_ID=$$ SLURM_JOB_NODELIST=127.0.0.1 SLURM_JOB_NUM_NODES=2 \
        SLURM_CPUS_ON_NODE=1 SLURM_SUBMIT_DIR="$work" NQ_BIN_DIR="$bin" NQ_PORT="$(free_port)" \
        NQ_METRICS_PORT="$(free_port)" NQ_LEASE_SECONDS=5 NQ_STATE="$2" \
        bash "$here/nqueens.sbatch" "$1"
}

# 1. a whole run
(submit 12 "$work/runs/n12.db") >"$work/n12.out" 2>"$work/n12.err" || { cat "$work/n12.err" >&2; fail "N=12 job failed"; }
python3 "$here/../check-counts.py" "$KNOWN" 12 "$(cat "$work/runs/n12.db.result.json")" || fail "N=12 result"
[[ "$(stat -c %a "$work/runs/n12.db.token")" == 600 ]] || fail "token file is not mode 0600"
(submit 12 "$work/runs/n12.db") >"$work/n12b.out" 2>&1 || fail "second submission of a finished run failed"
grep -q "already complete" "$work/n12b.out" || fail "second submission did not just print the result"

# 2. stopped part way (as at a time limit), then resubmitted with the same state
state="$work/runs/n15.db"
submit 15 "$state" >"$work/n15a.out" 2>&1 &
jobpid=$!
done_jobs=0
for _ in $(seq 1 300); do
    sleep 0.2
    done_jobs="$("$bin/nqueens-coordinator" status --state "$state" --json 2>/dev/null \
        | python3 -c 'import json,sys; print(json.load(sys.stdin)["jobs_done"])' 2>/dev/null || echo 0)"
    [[ "$done_jobs" -gt 50 ]] && break
done
[[ ! -e "$state.result.json" ]] || fail "N=15 finished before it could be stopped"
kill -TERM "$jobpid"; wait "$jobpid" || true; jobpid=""
# Nothing of the stopped job may be left running on the state file.
sleep 1
if pgrep -f -- "--state $state" >/dev/null; then pgrep -a -f -- "--state $state" >&2; fail "the stopped job left processes behind"; fi
stopped="$("$bin/nqueens-coordinator" status --state "$state" --json | python3 -c 'import json,sys; d=json.load(sys.stdin); print(d["jobs_done"], d["jobs_total"], d["complete"])')"
echo "test-sbatch-local: stopped at jobs_done/jobs_total/complete = $stopped"
read -r d t c <<<"$stopped"
[[ "$d" -gt 0 && "$d" -lt "$t" && "$c" == False ]] || fail "the stopped run is not part way ($stopped)"
(submit 15 "$state") >"$work/n15b.out" 2>"$work/n15b.err" || { cat "$work/n15b.err" >&2; fail "resubmitted N=15 job failed"; }
python3 "$here/../check-counts.py" "$KNOWN" 15 "$(cat "$state.result.json")" || fail "N=15 result after resume"
echo "test-sbatch-local: 2 passed, 0 failed"
