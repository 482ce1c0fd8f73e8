#!/usr/bin/env bash
# Stage the Docker build context for the coordinator and worker images: statically linked binaries
# built on this host, the two Dockerfiles and a tiny root filesystem (passwd/group for the non-root
# user 10001, nsswitch.conf, and the coordinator's state directory owned by that user).
# Nothing is ever pulled: both images are FROM scratch.
#
#   deploy/stage-images.sh [CONTEXT_DIR]        (default: deploy/build)
#
# Environment:
#   NQ_SKIP_CARGO_BUILD=1   use the static binaries already in target/x86_64-unknown-linux-gnu/release
#   CARGO_TARGET_DIR        honoured as by cargo
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/.." && pwd)"
ctx="${1:-$here/build}"
triple=x86_64-unknown-linux-gnu
bindir="${CARGO_TARGET_DIR:-$root/target}/$triple/release"

if [[ "${NQ_SKIP_CARGO_BUILD:-0}" != 1 ]]; then
    echo "stage-images: building static binaries for $triple (cargo build --release --target $triple)" >&2
    # The explicit --target keeps build scripts and proc-macros dynamic; only the binaries are static.
    (cd "$root" && RUSTFLAGS="${RUSTFLAGS:-} -C target-feature=+crt-static" \
        cargo build --release --target "$triple" -p nqueens-cli -p nqueens-worker --bins >&2)
fi

for b in nqueens-coordinator nqueens-worker; do
    if [[ ! -x "$bindir/$b" ]]; then
        echo "stage-images: $bindir/$b is missing (build it, or unset NQ_SKIP_CARGO_BUILD)" >&2
        exit 1
    fi
    # A dynamically linked binary would not start in a scratch image: refuse it here, not at run time.
    if ldd "$bindir/$b" 2>&1 | grep -q '=>'; then
        echo "stage-images: $bindir/$b is dynamically linked; build with -C target-feature=+crt-static" >&2
        exit 1
    fi
done

mkdir -p "$ctx"
rm -rf "$ctx/bin" "$ctx/rootfs" "$ctx/data"
mkdir -p "$ctx/bin" "$ctx/rootfs/etc" "$ctx/rootfs/tmp" "$ctx/data"
chmod 1777 "$ctx/rootfs/tmp"
chmod 0755 "$ctx/data"
for b in nqueens-coordinator nqueens-worker; do
    cp "$bindir/$b" "$ctx/bin/$b"
    # Line tables only are kept in release builds; drop them from the image copy to keep it small.
    if command -v strip >/dev/null; then strip --strip-debug "$ctx/bin/$b"; fi
    chmod 0755 "$ctx/bin/$b"
done
cp "$here/docker/passwd" "$here/docker/group" "$here/docker/nsswitch.conf" "$ctx/rootfs/etc/"
chmod 0644 "$ctx/rootfs/etc/"*
cp "$here/docker/coordinator.Dockerfile" "$here/docker/worker.Dockerfile" "$ctx/"
echo "stage-images: build context ready in $ctx" >&2
