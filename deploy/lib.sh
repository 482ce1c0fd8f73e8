# Shared helpers for deploy/local-cluster.sh and deploy/test-compose-cluster.sh (sourced, not run).
# Every run gets its own compose project, image tag, build context and token, so parallel or
# earlier runs never collide, and nq_teardown removes exactly what this run made.

NQ_DEPLOY_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
NQ_ROOT="$(cd "$NQ_DEPLOY_DIR/.." && pwd)"

nq_log() { echo "[$(date +%H:%M:%S)] $*" >&2; }

# Is a Docker engine answering? (prints nothing)
nq_docker_ok() { docker info >/dev/null 2>&1; }

# The compose tool: Compose v2 (`docker compose`) where installed, else docker-compose v1.
nq_pick_compose() {
    if [[ -n "${NQ_COMPOSE:-}" ]]; then
        read -r -a NQ_COMPOSE_CMD <<<"$NQ_COMPOSE"
    elif docker compose version >/dev/null 2>&1; then
        NQ_COMPOSE_CMD=(docker compose)
    elif command -v docker-compose >/dev/null 2>&1; then
        NQ_COMPOSE_CMD=(docker-compose)
    else
        return 1
    fi
}

# The coordinator container's descriptor limit: 65,536, or the Docker daemon's own hard limit
# where that is lower (a container cannot be given more; runc refuses to start it). The daemon's
# limit is read from /proc where it can be, else this shell's hard limit stands in for it.
nq_nofile() {
    local pid limit
    pid="$(pgrep -xo dockerd 2>/dev/null || true)"
    if [[ -n "$pid" && -r "/proc/$pid/limits" ]]; then
        limit="$(awk '/^Max open files/ {print $5}' "/proc/$pid/limits")"
    else
        limit="$(ulimit -Hn)"
    fi
    if [[ "$limit" == unlimited || ! "$limit" =~ ^[0-9]+$ || "$limit" -gt 65536 ]]; then
        limit=65536
    fi
    echo "$limit"
}

# Set up a fresh project: name, image tag, token, published ports on ephemeral loopback ports.
# $1: a short prefix for the project name.
nq_new_project() {
    local prefix="${1:-nq}"
    NQ_PROJECT="${prefix}$(date +%s)$$${RANDOM}"
    export NQ_IMAGE_TAG="$NQ_PROJECT"
    export NQ_TOKEN="${NQ_TOKEN:-$(head -c 18 /dev/urandom | od -An -tx1 | tr -d ' \n')}"
    export NQ_GRPC_PUBLISH="127.0.0.1:"      # "127.0.0.1::7447": a free loopback port
    export NQ_METRICS_PUBLISH="127.0.0.1:"
    export NQ_NOFILE="${NQ_NOFILE:-$(nq_nofile)}"
    NQ_OWN_CONTEXT=""
    if [[ -z "${NQ_BUILD_CONTEXT:-}" ]]; then
        NQ_BUILD_CONTEXT="$(mktemp -d "${TMPDIR:-/tmp}/nqueens-ctx.XXXXXX")"
        NQ_OWN_CONTEXT="$NQ_BUILD_CONTEXT"
    fi
    export NQ_BUILD_CONTEXT
}

nq_compose() {
    local files=(-f "$NQ_DEPLOY_DIR/docker-compose.yml")
    # NQ_COMPOSE_OVERRIDE: an extra compose file layered on top (the tests throttle workers with it).
    if [[ -n "${NQ_COMPOSE_OVERRIDE:-}" ]]; then files+=(-f "$NQ_COMPOSE_OVERRIDE"); fi
    "${NQ_COMPOSE_CMD[@]}" "${files[@]}" --project-directory "$NQ_DEPLOY_DIR" -p "$NQ_PROJECT" "$@"
}

# Stage the build context (unless NQ_SKIP_STAGE=1 and it is already staged) and build both images.
nq_build_images() {
    if [[ "${NQ_SKIP_STAGE:-0}" != 1 || ! -x "$NQ_BUILD_CONTEXT/bin/nqueens-worker" ]]; then
        "$NQ_DEPLOY_DIR/stage-images.sh" "$NQ_BUILD_CONTEXT"
    fi
    nq_log "building images ${NQ_IMAGE_PREFIX:-nqueens}-{coordinator,worker}:$NQ_IMAGE_TAG (FROM scratch, no pull)"
    nq_compose build --quiet >&2 2>/dev/null || nq_compose build >&2
}

# Container id of a service's first (or Nth) container.
nq_cid() { nq_compose ps -q "$1" 2>/dev/null | sed -n "${2:-1}p"; }

# Remove every container, network, volume and image tag of this project, and the staged context.
nq_teardown() {
    [[ -n "${NQ_PROJECT:-}" ]] || return 0
    nq_log "tearing down compose project $NQ_PROJECT"
    nq_compose down -v --remove-orphans --rmi all -t 5 >/dev/null 2>&1 || true
    # Belt and braces: anything still labelled with the project, and the image tags.
    local ids
    ids="$(docker ps -aq --filter "label=com.docker.compose.project=$NQ_PROJECT")"
    [[ -z "$ids" ]] || docker rm -f $ids >/dev/null 2>&1 || true
    ids="$(docker network ls -q --filter "label=com.docker.compose.project=$NQ_PROJECT")"
    [[ -z "$ids" ]] || docker network rm $ids >/dev/null 2>&1 || true
    ids="$(docker volume ls -q --filter "label=com.docker.compose.project=$NQ_PROJECT")"
    [[ -z "$ids" ]] || docker volume rm -f $ids >/dev/null 2>&1 || true
    local img
    for img in coordinator worker; do
        docker image rm "${NQ_IMAGE_PREFIX:-nqueens}-$img:$NQ_IMAGE_TAG" >/dev/null 2>&1 || true
    done
    if [[ -n "${NQ_OWN_CONTEXT:-}" ]]; then rm -rf "$NQ_OWN_CONTEXT"; fi
    NQ_PROJECT=""
}

# Wait until the coordinator container has exited for good. $1: container id, $2: timeout in
# seconds (0: none). Returns its exit code, or 124 on timeout. While it runs, logs progress now and
# then from `status` (run inside the container: the image has no shell, but it has the binary).
nq_wait_coordinator() {
    local cid="$1" timeout="${2:-0}" start=$SECONDS last=$SECONDS st code restarts
    while :; do
        read -r st code restarts < <(docker inspect -f '{{.State.Status}} {{.State.ExitCode}} {{.RestartCount}}' "$cid" 2>/dev/null || echo "gone 255 0")
        case "$st" in
            exited|dead)
                # on-failure restarts a failed coordinator; wait for it unless it keeps failing.
                if [[ "$code" == 0 || "$restarts" -ge "${NQ_MAX_RESTARTS:-3}" ]]; then return "$code"; fi ;;
            gone) return 255 ;;
        esac
        if (( timeout > 0 && SECONDS - start > timeout )); then return 124; fi
        if (( SECONDS - last >= ${NQ_PROGRESS_EVERY:-30} )); then
            last=$SECONDS
            docker exec "$cid" /usr/local/bin/nqueens-coordinator status --connect http://127.0.0.1:7447 \
                --token "$NQ_TOKEN" 2>&1 | sed 's/^/    status: /' >&2 || true
        fi
        sleep 1
    done
}

# The final result line of a finished coordinator container: its <state>.result.json (copied out
# of the stopped container, volume included), else the last JSON result line of its log.
nq_result_line() {
    local cid="$1" tmp line
    tmp="$(mktemp -d)"
    if docker cp "$cid:/data/nqueens.db.result.json" "$tmp/result.json" >/dev/null 2>&1; then
        line="$(grep -m1 '"total"' "$tmp/result.json" || true)"
    fi
    if [[ -z "${line:-}" ]]; then
        line="$(docker logs "$cid" 2>&1 | grep -o '{"n":[^}]*}' | tail -n1 || true)"
    fi
    rm -rf "$tmp"
    [[ -n "$line" ]] && printf '%s\n' "$line"
}
