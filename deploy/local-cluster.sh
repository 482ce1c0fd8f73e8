#!/usr/bin/env bash
# Run a whole nqueens cluster on this Docker host and print its result.
#
#   deploy/local-cluster.sh N [WORKERS]
#
# Builds what is needed (static binaries, then FROM-scratch images: nothing is pulled), brings up
# one coordinator and WORKERS workers (default 2) under a compose project of its own, waits for the
# run to finish, tears everything down (containers, network, volume, image tags) and prints the
# coordinator's final JSON result line (the fields of `solve --json`) as the LAST line of output.
# Progress goes to stderr. Exit code: 0 on success, non-zero if anything failed.
#
# Environment (all optional):
#   NQ_THREADS=T           threads per worker (default: the worker's own default, all cores)
#   NQ_LEASE_SECONDS=S     lease timeout (default 60)   NQ_TARGET_JOBS=J  jobs to split into
#   NQ_TIMEOUT=SECONDS     give up after this long (default 0: no limit)
#   NQ_SHOW_LOGS=1         print every container's log (stderr) before tearing down
#   NQ_KEEP=1              leave the cluster up on failure, for a look (remove it with the printed command)
#   NQ_SKIP_CARGO_BUILD=1  reuse target/x86_64-unknown-linux-gnu/release binaries as they are
#   NQ_BUILD_CONTEXT=DIR + NQ_SKIP_STAGE=1   reuse a context staged by stage-images.sh
#   NQ_COMPOSE="docker-compose"             force the compose tool
set -euo pipefail
source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/lib.sh"

usage() { echo "usage: $0 N [WORKERS]" >&2; exit 2; }
[[ $# -ge 1 && $# -le 2 ]] || usage
N="$1"; WORKERS="${2:-2}"
[[ "$N" =~ ^[0-9]+$ && "$WORKERS" =~ ^[0-9]+$ && "$WORKERS" -ge 1 ]] || usage

nq_docker_ok || { echo "local-cluster: no Docker engine answers (docker info failed)" >&2; exit 1; }
nq_pick_compose || { echo "local-cluster: neither 'docker compose' nor docker-compose is installed" >&2; exit 1; }

export NQ_N="$N"
# Verification re-solves a fraction of the jobs on a *different* worker: with one worker it could
# never happen and the run would never finish, so it is off then unless asked for.
if [[ "$WORKERS" -eq 1 && -z "${NQ_VERIFY_FRACTION:-}" ]]; then
    export NQ_VERIFY_FRACTION=0
    nq_log "one worker: verification (needs a second worker) is off"
fi
nq_new_project nqlocal
on_exit() {
    local rc=$?
    if [[ $rc -ne 0 && "${NQ_KEEP:-0}" == 1 ]]; then
        nq_log "failed (exit $rc); cluster kept: ${NQ_COMPOSE_CMD[*]} -f $NQ_DEPLOY_DIR/docker-compose.yml -p $NQ_PROJECT down -v --rmi all"
        exit $rc
    fi
    nq_teardown
    exit $rc
}
trap on_exit EXIT
trap 'exit 130' INT TERM

nq_log "project $NQ_PROJECT: N=$N, $WORKERS worker(s), compose: ${NQ_COMPOSE_CMD[*]}"
nq_build_images
nq_compose up -d --no-build --scale worker="$WORKERS" >&2

coord="$(nq_cid coordinator)"
[[ -n "$coord" ]] || { nq_log "no coordinator container"; exit 1; }
nq_log "coordinator $coord up; gRPC published at $(nq_compose port coordinator 7447 2>/dev/null || echo '?'), metrics at $(nq_compose port coordinator 9447 2>/dev/null || echo '?')"

set +e
nq_wait_coordinator "$coord" "${NQ_TIMEOUT:-0}"
rc=$?
set -e
if [[ $rc -ne 0 ]]; then
    nq_log "coordinator did not finish cleanly (exit $rc; 124 = timeout); the last log lines:"
    nq_compose logs --no-color --tail 20 >&2 2>&1 || true
    exit 1
fi
result="$(nq_result_line "$coord" || true)"
if [[ -z "$result" ]]; then
    nq_log "coordinator exited 0 but left no result line; its last log lines:"
    docker logs --tail 40 "$coord" >&2 2>&1 || true
    exit 1
fi
if [[ "${NQ_SHOW_LOGS:-0}" == 1 ]]; then
    nq_compose logs --no-color >&2 2>&1 || true
fi
trap - EXIT
nq_teardown
printf '%s\n' "$result"
