#!/usr/bin/env bash
# services up docker: a Docker engine of our own for the real `cl-worker` (see common.sh), and the
# images bundles run in, built without a registry. Idempotent; needs root (installs Debian's
# docker.io and debootstrap when missing; dockerd adds a docker0 bridge and iptables rules).
#   engine: dockerd --data-root $DIR/data --exec-root (short path under /run) --host unix://$DIR/docker.sock
#   images: codalab/default-cpu:latest (= default-gpu): `debootstrap --variant=minbase bookworm`,
#           imported with `docker import`; the root file system is cached as $DIR/cache/*.tar.
# Use it with DOCKER_HOST=unix://$SERVICES_DIR/docker/docker.sock (the worker and the docker CLI).
# Measured here: install ~15 s, debootstrap ~30 s (once), dockerd answers in < 1 s, import ~2 s.
source "$(dirname "$0")/common.sh"
mkdir -p "$DIR" "$CACHE" && chmod 700 "$DIR"

install_packages() {
  local need=()
  command -v dockerd >/dev/null 2>&1 || need+=(docker.io)
  command -v debootstrap >/dev/null 2>&1 || need+=(debootstrap)
  command -v iptables >/dev/null 2>&1 || need+=(iptables)
  # the probe image of crates/backend-gce/tests/it/metadata_firewall.rs
  command -v busybox >/dev/null 2>&1 || need+=(busybox-static)
  [ ${#need[@]} -eq 0 ] && return 0
  [ "$(id -u)" = 0 ] || { log "missing Debian packages (${need[*]}) and not root"; exit 1; }
  log "apt-get install ${need[*]} (log: $DIR/apt.log)"
  local own_policy=0
  # keep the packages' postinst from starting a system dockerd (it would not be ours)
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d && chmod 755 /usr/sbin/policy-rc.d && own_policy=1
  fi
  export DEBIAN_FRONTEND=noninteractive
  { apt-get -o DPkg::Lock::Timeout=600 update -q && apt-get -o DPkg::Lock::Timeout=600 install -y -q \
      --no-install-recommends "${need[@]}"; } >"$DIR/apt.log" 2>&1 \
    || { [ $own_policy = 1 ] && rm -f /usr/sbin/policy-rc.d; tail -n 20 "$DIR/apt.log" >&2; log "apt-get failed"; exit 1; }
  [ $own_policy = 1 ] && rm -f /usr/sbin/policy-rc.d
  return 0
}

# A dockerd that is not ours would fight ours over the docker0 bridge and iptables chains.
refuse_foreign() {
  local pid
  for pid in $(pgrep -x dockerd || true); do
    [ "$pid" = "$(our_pid || true)" ] && continue
    running "$pid" || continue   # a zombie (ours, just stopped, not yet reaped)
    log "a dockerd that is not ours runs as pid $pid: $(tr '\0' ' ' </proc/$pid/cmdline | cut -c1-200)"
    log "ours would clash with it over the docker0 bridge; stop it (or use it: set DOCKER_HOST for the worker yourself)"
    exit 1
  done
}

start_dockerd() {
  local exec_root driver=overlay2
  exec_root=/run/codalab-wm-docker-$(printf '%s' "$DIR" | sha256sum | cut -c1-8)  # unix socket paths are short
  # overlay2 cannot sit on an overlay file system (a container's own root)
  [ "$(stat -f -c %T "$DIR")" = overlayfs ] && driver=vfs
  mkdir -p "$DIR/data" "$exec_root"
  rm -f "$SOCK"
  log "starting dockerd (storage driver $driver, log $LOGFILE)"
  # setsid + closed fds: the daemon outlives this script and holds none of its pipes
  # Every cl-worker creates 3 networks and a killed one leaves them behind (later workers prune
  # unused ones). Docker's default pools hold ~30 networks, so 10 leaked workers stopped every
  # new worker ("could not find an available, non-overlapping IPv4 address pool"): /24s of the
  # same 172.16.0.0/12 range give 4,096.
  setsid dockerd --data-root "$DIR/data" --exec-root "$exec_root" --pidfile "$PIDFILE" \
    --host "unix://$SOCK" --storage-driver "$driver" \
    --default-address-pool base=172.16.0.0/12,size=24 </dev/null >"$LOGFILE" 2>&1 9>&- &
  for _ in $(seq 300); do answers && return 0; sleep 0.1; done
  tail -n 20 "$LOGFILE" >&2
  log "dockerd did not answer on $SOCK within 30 s"
  exit 1
}

build_images() {
  local missing=0 image
  for image in $IMAGES; do docker image inspect "$image" >/dev/null 2>&1 || missing=1; done
  [ $missing = 0 ] && return 0
  if [ ! -s "$ROOTFS_TAR" ]; then
    local rootfs=$CACHE/rootfs.tmp
    rm -rf "$rootfs"
    log "debootstrap --variant=minbase $SUITE (once; ~30 s; log: $CACHE/debootstrap.log)"
    debootstrap --variant=minbase "$SUITE" "$rootfs" >"$CACHE/debootstrap.log" 2>&1 \
      || { tail -n 20 "$CACHE/debootstrap.log" >&2; log "debootstrap failed"; exit 1; }
    rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/*
    tar -C "$rootfs" -cf "$ROOTFS_TAR.tmp" . && mv "$ROOTFS_TAR.tmp" "$ROOTFS_TAR"
    rm -rf "$rootfs"
  fi
  local first=${IMAGES%% *}
  docker import "$ROOTFS_TAR" "$first" >/dev/null
  for image in $IMAGES; do [ "$image" = "$first" ] || docker tag "$first" "$image"; done
  log "images ready: $IMAGES"
}

install_packages
if pid=$(our_pid) && answers; then
  log "dockerd already running (pid $pid)"
else
  refuse_foreign
  start_dockerd
fi
build_images
pid=$(our_pid) || { log "dockerd exited after starting; see $LOGFILE"; tail -n 20 "$LOGFILE" >&2; exit 1; }
log "up: dockerd $(docker version --format '{{.Server.Version}}') pid $pid; use DOCKER_HOST=$DOCKER_HOST"
