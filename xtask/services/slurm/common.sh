# Shared by up.sh, down.sh and status.sh of the slurm service (sourced, not run).
# A one-node Slurm cluster from Debian's packages (slurmctld + slurmd 22.05, munge), on 127.0.0.1.
set -euo pipefail
: "${SERVICES_DIR:=$PWD/.services}"
# resolved, so a worktree whose .services is a symlink to another's names the same cluster
DIR=$(realpath -m "$SERVICES_DIR")/slurm
ETC=$DIR/etc RUN=$DIR/run LOG=$DIR/log STATE=$DIR/state DEV=$DIR/dev
NODE=$(hostname -s)
CPUS=${SLURM_SERVICE_CPUS:-8}
GPUS=${SLURM_SERVICE_GPUS:-2}
SYS_ETC=${SYS_ETC:-/etc/slurm}   # where clients look for slurm.conf (tests point it elsewhere)

log() { printf '[slurm] %s\n' "$*" >&2; }
die() { log "$*"; exit 1; }
# running and not a zombie (PID 1 here may be slow to reap)
running() { [ -n "${1:-}" ] && [ -e "/proc/$1" ] && [ "$(cut -d' ' -f3 "/proc/$1/stat" 2>/dev/null)" != Z ]; }
# pid from a pid file, if that process still runs program $2
pid_of() { local pid; pid=$(cat "$1" 2>/dev/null || true); running "$pid" && [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = "$2" ] && echo "$pid"; }
# wait_until SECONDS COMMAND...: polls COMMAND every 0.1 s, fails after SECONDS
wait_until() {
  local limit=$(( $1 * 10 )); shift
  for _ in $(seq "$limit"); do "$@" >/dev/null 2>&1 && return 0; sleep 0.1; done
  "$@"
}
node_state() { sinfo -h -n "$NODE" -o '%T' 2>/dev/null | sort -u | head -n1; }
