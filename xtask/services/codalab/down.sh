#!/usr/bin/env bash
# down.sh [--purge|--purge-all] -- stop what up.sh started, by the pids it recorded in run/*.pid
# (bundle-manager, rest-server + its gunicorn worker children, mariadbd): TERM, then KILL after 20 s.
# Nothing is killed by name. --purge also deletes the database, the server/CLI homes, logs and pid
# files (next `up` starts from an empty DB; the venv is kept); --purge-all deletes the venv too.
# (`cargo xtask services down codalab` passes no arguments; purge with `bash xtask/services/codalab/down.sh --purge`.)
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
purge=${1:-}
case "$purge" in ""|--purge|--purge-all) ;; *) echo "usage: down.sh [--purge|--purge-all]" >&2; exit 2 ;; esac

stop_svc() {  # NAME
  local name=$1 pid kids k t0
  if ! pid=$(cl_pid "$name"); then
    [ -f "$CL_RUN/$name.pid" ] && echo "codalab: $name not running (stale pid file removed)"
    rm -f "$CL_RUN/$name.pid"
    return
  fi
  kids=$(ps -o pid= --ppid "$pid" 2>/dev/null | tr -s ' \n' ' ')  # gunicorn workers of rest-server
  t0=$(date +%s.%N)
  kill -TERM "$pid" 2>/dev/null
  for _ in $(seq 1 80); do kill -0 "$pid" 2>/dev/null || break; sleep 0.25; done
  if kill -0 "$pid" 2>/dev/null; then
    echo "codalab: $name (pid $pid) ignored TERM for 20 s, sending KILL"
    kill -KILL "$pid" 2>/dev/null
  fi
  for k in $kids; do  # normally already gone with their master
    kill -0 "$k" 2>/dev/null || continue
    kill -TERM "$k" 2>/dev/null
    for _ in $(seq 1 20); do kill -0 "$k" 2>/dev/null || break; sleep 0.25; done
    kill -KILL "$k" 2>/dev/null
  done
  rm -f "$CL_RUN/$name.pid"
  echo "codalab: stopped $name (pid $pid${kids:+, children:$kids}) in $(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b-a}')s"
}

# the two codalab processes in parallel (gunicorn needs ~4 s to stop gracefully), the DB last
stop_svc bundle-manager &
stop_svc rest-server &
wait
stop_svc mariadbd

if [ -n "$purge" ]; then
  rm -rf "$CL_DIR/mysql-data" "$CL_HOME" "$CL_DIR/clients" "$CL_RUN" "$CL_LOGS" "$CL_DIR/my.cnf"
  echo "codalab: purged database, homes and logs under $CL_DIR"
  if [ "$purge" = --purge-all ]; then rm -rf "$CL_DIR"; echo "codalab: removed $CL_DIR (venv too)"; fi
fi
exit 0
