#!/usr/bin/env bash
# End-to-end test of the docker-compose cluster, with faults.
#
#   deploy/test-compose-cluster.sh
#
# 1. N=15 with 3 workers through deploy/local-cluster.sh: Total, Unique and COUNT2/4/8 must equal
#    the row of reference/known-counts.tsv (the repository's copy of the published values; NQ_KNOWN_COUNTS
#    overrides the path).
# 2. N=18 with 3 throttled workers and a 10 s lease, while it runs: kill one worker container, cut
#    another off the network (docker network disconnect) for longer than the lease, restart the
#    coordinator container meanwhile, reconnect the worker (a lease must have expired), then
#    `docker-compose down` (keeping the volume) and `up` again (the run must resume where it was).
#    The result must still be exact, and the coordinator's status must show every job counted
#    exactly once and no conflict.
#    That `down` is a clean stop (no -t: the compose file's stop_grace_period): the workers must
#    release their jobs before the coordinator stops, so the state file holds no lease after it,
#    and the resumed coordinator must reload no lease and let none expire (its log, its status).
# Every container, network, volume, image tag and temp dir it made is removed, even on failure.
# No Docker engine: prints why and exits 0 (skipped), except under CI=true, where that fails.
#
# Knobs: NQ_TEST_N (board size of phase 2, default 18: long enough at 0.1 CPU per worker for the
#        faults with the current solver), NQ_TEST_WORKER_CPUS (CPU share per worker in phase 2, default 0.1),
#        NQ_TEST_LEASE (default 10), NQ_TEST_TIMEOUT (seconds per run, default 900: phase 2 takes
#        about 500 s on a 2-vCPU 2.2 GHz Zen 2 VM without AVX-512, far less with AVX-512).
set -euo pipefail
source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/lib.sh"

T0=$SECONDS
fail() { echo "test-compose-cluster: FAIL: $*" >&2; exit 1; }

if ! nq_docker_ok; then
    if [[ "${CI:-}" == true ]]; then fail "no Docker engine answers (docker info failed), and CI=true"; fi
    echo "test-compose-cluster: SKIPPED: no Docker engine answers (docker info failed)"
    exit 0
fi
if ! nq_pick_compose; then
    if [[ "${CI:-}" == true ]]; then fail "no compose tool (docker compose / docker-compose), and CI=true"; fi
    echo "test-compose-cluster: SKIPPED: neither 'docker compose' nor docker-compose is installed"
    exit 0
fi
command -v python3 >/dev/null || fail "python3 is needed to read JSON"

KNOWN="${NQ_KNOWN_COUNTS:-$NQ_ROOT/reference/known-counts.tsv}"
[[ -r "$KNOWN" ]] || fail "reference counts $KNOWN not readable"

# --- everything this test makes, removed on any exit ----------------------------------------------
WORK="$(mktemp -d "${TMPDIR:-/tmp}/nqueens-compose-test.XXXXXX")"
export NQ_BUILD_CONTEXT="$WORK/context"
cleanup() {
    local rc=$?
    trap - EXIT INT TERM
    if [[ $rc -ne 0 && -n "${NQ_PROJECT:-}" ]]; then
        nq_log "--- diagnostics for $NQ_PROJECT ---"
        nq_compose ps >&2 2>&1 || true
        nq_compose logs --no-color --tail 30 >&2 2>&1 || true
    fi
    nq_teardown
    rm -rf "$WORK"
    nq_log "test-compose-cluster finished after $((SECONDS - T0)) s (exit $rc)"
    exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# check_counts N JSON_LINE: the result's counts against the reference row (never hard-coded here).
check_counts() { python3 "$NQ_DEPLOY_DIR/check-counts.py" "$KNOWN" "$1" "$2"; }

# Stage the context once (one static cargo build) and share it between both phases.
nq_log "staging static binaries and the image build context"
"$NQ_DEPLOY_DIR/stage-images.sh" "$NQ_BUILD_CONTEXT"
export NQ_SKIP_STAGE=1

# --- phase 1: N=15, 3 workers, through local-cluster.sh ---------------------------------------------
nq_log "phase 1: deploy/local-cluster.sh 15 3"
out="$WORK/phase1.out"
NQ_SHOW_LOGS=1 NQ_TIMEOUT="${NQ_TEST_TIMEOUT:-900}" "$NQ_DEPLOY_DIR/local-cluster.sh" 15 3 >"$out" 2>"$WORK/phase1.err" \
    || { tail -n 40 "$WORK/phase1.err" >&2; fail "local-cluster.sh 15 3 exited non-zero"; }
line="$(tail -n1 "$out")"
nq_log "phase 1 result: $line"
check_counts 15 "$line" || fail "phase 1 (N=15) result is wrong"
# local-cluster.sh must have removed its own project (its containers carry its image tag).
left="$(docker ps -a --filter "label=com.docker.compose.service" --format '{{.Image}}' | grep -c '^nqueens-.*:nqlocal' || true)"
[[ "$left" == 0 ]] || fail "local-cluster.sh left $left container(s) behind"

# --- phase 2: N=18 (NQ_TEST_N) with faults -----------------------------------------------------------
LEASE="${NQ_TEST_LEASE:-10}"
N2="${NQ_TEST_N:-18}"
export NQ_N="$N2" NQ_LEASE_SECONDS="$LEASE" NQ_THREADS=1
if [[ -n "${NQ_TEST_TARGET_JOBS:-}" ]]; then export NQ_TARGET_JOBS="$NQ_TEST_TARGET_JOBS"; else unset NQ_TARGET_JOBS; fi
export NQ_COMPOSE_OVERRIDE="$WORK/throttle.yml"
cat >"$NQ_COMPOSE_OVERRIDE" <<YML
version: "2.4"
services:
  worker:
    cpus: ${NQ_TEST_WORKER_CPUS:-0.1}
YML
nq_new_project nqtest
nq_log "phase 2: project $NQ_PROJECT, N=$N2, 3 workers at ${NQ_TEST_WORKER_CPUS:-0.1} CPU each, lease ${LEASE}s"
nq_build_images
nq_compose up -d --no-build --scale worker=3 >&2
coord="$(nq_cid coordinator)"; w1="$(nq_cid worker 1)"; w2="$(nq_cid worker 2)"
[[ -n "$coord" && -n "$w1" && -n "$w2" ]] || fail "cluster did not come up"
net="${NQ_PROJECT}_cluster"

status_json() {  # the live status, from inside the coordinator container
    docker exec "$coord" /usr/local/bin/nqueens-coordinator status --connect http://127.0.0.1:7447 \
        --token "$NQ_TOKEN" --json 2>/dev/null
}
running() { [[ "$(docker inspect -f '{{.State.Running}}' "$coord" 2>/dev/null)" == true ]]; }
healthy_wait() {  # wait for the coordinator to answer its health check again
    local i
    for i in $(seq 1 60); do
        docker exec "$coord" /usr/local/bin/nqueens-coordinator healthcheck --connect http://127.0.0.1:7447 \
            >/dev/null 2>&1 && return 0
        sleep 1
    done
    return 1
}
still_running() { running || fail "the run finished before fault '$1' could be injected: throttle harder (NQ_TEST_WORKER_CPUS)"; }
# wait_for_lease CONTAINER: until the coordinator reports jobs leased to the worker in CONTAINER
# (workers are named after their host name, which is the container's).
wait_for_lease() {
    local host i leased
    host="$(docker inspect -f '{{.Config.Hostname}}' "$1")"
    for i in $(seq 1 120); do
        leased="$(status_json | python3 -c 'import json,sys; s=json.load(sys.stdin); print(sum(w["jobs_leased"] for w in s["workers"] if w["name"] == sys.argv[1]))' "$host" 2>/dev/null || echo 0)"
        if [[ "$leased" =~ ^[0-9]+$ && "$leased" -ge 1 ]]; then
            nq_log "worker $host holds $leased leased job(s)"
            return 0
        fi
        sleep 0.5
    done
    fail "worker $host ($1) never held a lease"
}

wait_for_lease "$w1"
still_running "kill a worker"
nq_log "fault 1: docker kill worker $w1 (it holds a lease)"
docker kill "$w1" >/dev/null

wait_for_lease "$w2"
still_running "cut a worker off"
nq_log "fault 2: docker network disconnect $net $w2 (for > lease ${LEASE}s)"
docker network disconnect -f "$net" "$w2"
cut_at=$SECONDS

sleep 4
still_running "restart the coordinator"
nq_log "fault 3: docker restart coordinator $coord (worker $w2 still cut off)"
docker restart -t 10 "$coord" >/dev/null
healthy_wait || fail "coordinator not healthy again after restart"
healthy_at=$SECONDS
nq_log "coordinator healthy again"

# Leases found in the store get a fresh grace period when the coordinator starts, so the cut must
# outlast the lease both in all and after the restart.
while (( SECONDS - cut_at < LEASE + 8 || SECONDS - healthy_at < LEASE + 5 )); do sleep 1; done
still_running "reconnect the worker"
docker network connect "$net" "$w2"
nq_log "worker $w2 reconnected after $((SECONDS - cut_at)) s"
sleep 1
live="$(status_json || true)"
nq_log "live status: $live"
# Both the killed and the cut-off worker held leases and stayed away for longer than a lease: their
# jobs must have been taken back, before the restart or after it (stored leases get a fresh grace
# period). The status counter only covers the current process; the container's log covers both.
expiries="$(printf '%s' "$live" | python3 -c 'import json,sys; print(json.load(sys.stdin)["lease_expiries"])' 2>/dev/null || echo "?")"
expired_lines="$(docker logs "$coord" 2>&1 | grep -c "leases expired" || true)"
nq_log "lease expiries since the coordinator restart: $expiries; 'leases expired' lines in its log, both runs: $expired_lines"
[[ "$expired_lines" -ge 1 ]] || fail "no lease expired though two workers holding leases were gone for longer than the lease"

# The state is on the named volume: `down` (without -v) and `up` again resumes the run. Without
# -t, `down` gives each container its stop_grace_period and stops the workers before the
# coordinator they depend on: every worker finishes or releases its jobs while the coordinator is
# still there, so the resumed run waits on no lease.
img="${NQ_IMAGE_PREFIX:-nqueens}-coordinator:$NQ_IMAGE_TAG"
offline_status() {  # status --state of the volume's state file, while no coordinator runs
    docker run --rm --network none -v "${NQ_PROJECT}_state:/data" "$img" \
        status --state /data/nqueens.db --json 2>"$WORK/status.err" || { cat "$WORK/status.err" >&2; return 1; }
}
sleep 2
still_running "down and up"
before="$(status_json | python3 -c 'import json,sys; d=json.load(sys.stdin); print(d["jobs_done"])')"
nq_log "fault 4: docker-compose down (no -t: the compose file's grace periods; volume kept) at $before jobs done, then up again"
down_at=$SECONDS
nq_compose down >&2 2>&1
nq_log "down took $((SECONDS - down_at)) s"
docker volume inspect "${NQ_PROJECT}_state" >/dev/null || fail "down removed the state volume"
read -r stored_done stored_leased < <(offline_status | python3 -c 'import json,sys; d=json.load(sys.stdin); print(d["jobs_done"], d["jobs_leased"])') \
    || fail "offline status of the state file after down failed"
nq_log "state file after down: $stored_done jobs done, $stored_leased leased"
[[ "$stored_leased" == 0 ]] || fail "$stored_leased jobs are still leased after a clean down: the workers did not release them before the coordinator stopped"
nq_compose up -d --no-build --scale worker=3 >&2
coord="$(nq_cid coordinator)"
healthy_wait || fail "coordinator not healthy after up"
live="$(status_json)"
after="$(printf '%s' "$live" | python3 -c 'import json,sys; print(json.load(sys.stdin)["jobs_done"])')"
nq_log "resumed at $after jobs done (was $before before down, $stored_done in the state file)"
[[ "$after" -ge "$before" && "$before" -gt 0 ]] || fail "the run did not resume from the volume ($before -> $after jobs done)"
loaded="$(docker logs "$coord" 2>&1 | grep -m1 'run loaded' || true)"
nq_log "resumed coordinator: ${loaded:-no 'run loaded' line}"
[[ "$loaded" =~ \ leased=0([^0-9]|$) ]] || fail "the resumed coordinator did not load the run with no lease"
docker exec "$coord" /usr/local/bin/nqueens-coordinator status --connect http://127.0.0.1:7447 \
    --token "$NQ_TOKEN" 2>&1 | sed 's/^/    status: /' >&2 || true

set +e
nq_wait_coordinator "$coord" "${NQ_TEST_TIMEOUT:-900}"
rc=$?
set -e
[[ $rc -eq 0 ]] || fail "coordinator did not finish cleanly (exit $rc; 124 = timeout)"
line="$(nq_result_line "$coord")" || fail "no result line from the coordinator"
nq_log "phase 2 result: $line"
check_counts "$N2" "$line" || fail "phase 2 (N=$N2 with faults) result is wrong"
# After the clean down, no lease may have expired in the resumed coordinator's whole life.
expired_after="$(docker logs "$coord" 2>&1 | grep -c "leases expired" || true)"
nq_log "'leases expired' lines in the resumed coordinator's log: $expired_after"
[[ "$expired_after" == 0 ]] || fail "a lease expired after the clean down and up: a job waited on a lease its worker should have released"

# The coordinator's own record: every job counted exactly once, duplicates only discarded.
offline_status >"$WORK/status.json" || fail "offline status of the state file failed"
nq_log "final status: $(cat "$WORK/status.json")"
python3 - "$WORK/status.json" "$line" <<'PY' || fail "the coordinator's status shows a result counted twice, a conflict or an unfinished run"
import json, sys
s = json.load(open(sys.argv[1]))
result = json.loads(sys.argv[2])
print(f"jobs_done={s['jobs_done']}/{s['jobs_total']} conflicts={s['conflicts']} failed={s['jobs_failed']} "
      f"complete={s['complete']} partial_total={s['partial_total']} result.total={result['total']}")
assert s["complete"] is True, "run not complete"
assert s["jobs_done"] == s["jobs_total"], "not every job counted exactly once"
assert s["conflicts"] == 0, "conflicting results"
assert s["jobs_failed"] == 0, "failed jobs"
# Each job's counts are summed once: the sum over jobs equals the reference-checked total.
assert s["partial_total"] == result["total"], "sum over jobs differs from the result"
if s.get("result") is not None:
    assert s["result"]["total"] == result["total"], "status result differs from the result file"
PY
echo "test-compose-cluster: 2 passed, 0 failed"
