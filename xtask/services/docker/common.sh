# Shared by up.sh, down.sh and status.sh of the docker service (sourced, not run).
# A Docker engine of our own for the real `cl-worker`: Debian's docker.io (dockerd 20.10), started by
# hand with its own data root, exec root, pid file and socket under $SERVICES_DIR/docker, so it never
# touches a system dockerd or /var/lib/docker. Clients use DOCKER_HOST=unix://$SOCK.
set -euo pipefail
: "${SERVICES_DIR:=$PWD/.services}"
DIR=$(realpath -m "$SERVICES_DIR/docker")  # one name for one engine, through symlinks too
SOCK=$DIR/docker.sock
PIDFILE=$DIR/dockerd.pid
LOGFILE=$DIR/dockerd.log
CACHE=$DIR/cache
# The image every bundle without --request-docker-image runs in (the server's `default_cpu_image`,
# see xtask/services/codalab/common.sh): a minimal Debian made by debootstrap, imported locally
# (there is no registry here). The GPU default gets the same image (no GPUs on these machines).
IMAGES="codalab/default-cpu:latest codalab/default-gpu:latest"
SUITE=${DOCKER_SERVICE_SUITE:-bookworm}
ROOTFS_TAR=$CACHE/$SUITE-minbase.tar
export DOCKER_HOST=unix://$SOCK

log() { printf '[docker] %s\n' "$*" >&2; }
running() { [ -n "${1:-}" ] && [ -e "/proc/$1" ] && [ "$(cut -d' ' -f3 "/proc/$1/stat" 2>/dev/null)" != Z ]; }
# pid of OUR dockerd: alive, named dockerd, and started with our socket
our_pid() {
  local pid; pid=$(cat "$PIDFILE" 2>/dev/null || true)
  running "$pid" && [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = dockerd ] \
    && tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -qF "$SOCK" && echo "$pid"
}
answers() { timeout 10 docker version --format '{{.Server.Version}}' >/dev/null 2>&1; }
