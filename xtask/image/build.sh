#!/usr/bin/env bash
# Builds the container image of cl-worker-manager from a binary already built, with no registry:
#   xtask/image/build.sh BINARY [TAG]        (TAG: codalab-wm:latest)
# The base, codalab-wm-base:bookworm, is Debian bookworm made by debootstrap (minbase, plus
# ca-certificates and libssl3: what the binary needs), imported into the
# project's dockerd (`cargo xtask services up docker`) once; then the Dockerfile's `prebuilt`
# target adds the binary, the unprivileged user and the entrypoint. Measured here: debootstrap
# ~60 s once (its tar is kept in the docker service's cache), the build ~5 s.
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
BINARY=${1:?usage: build.sh BINARY [TAG]}
TAG=${2:-codalab-wm:latest}
BASE=codalab-wm-base:bookworm
: "${SERVICES_DIR:=$REPO/.services}"
# shellcheck source=../services/docker/common.sh
source "$REPO/xtask/services/docker/common.sh"
log() { printf '[image] %s\n' "$*" >&2; }

[ -x "$BINARY" ] || { log "no executable binary at $BINARY"; exit 1; }
answers || { log "the project's dockerd does not answer: run \`cargo xtask services up docker\`"; exit 1; }

if ! docker image inspect "$BASE" >/dev/null 2>&1; then
  tar=$CACHE/bookworm-wm-base.tar
  if [ ! -s "$tar" ]; then
    rootfs=$CACHE/wm-base.tmp
    rm -rf "$rootfs"
    log "debootstrap --variant=minbase bookworm with ca-certificates, libssl3 (once; log: $CACHE/wm-base.log)"
    debootstrap --variant=minbase --include=ca-certificates,libssl3 bookworm "$rootfs" \
      >"$CACHE/wm-base.log" 2>&1 || { tail -n 20 "$CACHE/wm-base.log" >&2; log "debootstrap failed"; exit 1; }
    rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/*
    tar -C "$rootfs" -cf "$tar.tmp" . && mv "$tar.tmp" "$tar"
    rm -rf "$rootfs"
  fi
  docker import "$tar" "$BASE" >/dev/null
  log "base image $BASE imported"
fi

context=$(mktemp -d)
trap 'rm -rf "$context"' EXIT
cp "$BINARY" "$context/cl-worker-manager"
docker build --target prebuilt --build-arg BASE="$BASE" -f "$REPO/Dockerfile" -t "$TAG" "$context" >"$context/build.log" 2>&1 \
  || { cat "$context/build.log" >&2; log "docker build failed"; exit 1; }
size=$(docker image inspect --format '{{.Size}}' "$TAG")
log "built $TAG ($((size / 1048576)) MiB) from $BINARY"
