#!/usr/bin/env bash
# Stops the moto server and the docker stub started by up.sh (only the recorded pids, and only
# if they still run what up.sh started). Keeps the venv.
set -euo pipefail

STATE="${SERVICES_DIR:-$PWD/.services}/moto"

# Stops the process whose pid is in file $1 if its command line contains $2.
stop() {
  local pidfile="$1" pattern="$2" pid
  [ -f "$pidfile" ] || return 0
  pid="$(cat "$pidfile")"
  if [ -n "$pid" ] && [ -r "/proc/$pid/cmdline" ] && tr '\0' ' ' < "/proc/$pid/cmdline" | grep -q -- "$pattern"; then
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null || true
    echo "stopped $pattern (pid $pid)"
  fi
  rm -f "$pidfile"
}

stop "$STATE/moto.pid" moto_server
stop "$STATE/docker-stub.pid" docker_stub.py
rm -f "$STATE/docker.sock" "$STATE/endpoint"
