#!/usr/bin/env bash
# Starts moto (AWS API emulator) on 127.0.0.1:${MOTO_PORT:-5055} for the aws-batch tests, with the
# project's docker stub (docker_stub.py) as its Docker engine on a unix socket, so Batch jobs go
# SUBMITTED -> ... -> RUNNING and stay RUNNING until terminated (or told to exit, see the stub).
# Seeds the IAM role, a compute environment and the job queue `codalab-batch-cpu`.
#
# Idempotent: installs what is missing, starts what is not running, waits (bounded) until moto
# answers, re-seeds. State (venv, pids, logs, socket) lives in $SERVICES_DIR/moto.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
STATE="${SERVICES_DIR:-$PWD/.services}/moto"
PORT="${MOTO_PORT:-5055}"
URL="http://127.0.0.1:$PORT"
MOTO_SPEC="${MOTO_SPEC:-moto[server]==5.2.5}"
VENV="$STATE/venv"
SOCKET="$STATE/docker.sock"
mkdir -p "$STATE"

# Whether the pid in file $1 is alive and its command line contains $2.
alive() {
  local pid
  [ -f "$1" ] || return 1
  pid="$(cat "$1")"
  [ -n "$pid" ] && [ -r "/proc/$pid/cmdline" ] && tr '\0' ' ' < "/proc/$pid/cmdline" | grep -q -- "$2"
}

# Polls command "$@" every 0.2 s for at most $WAIT_SECONDS seconds.
wait_for() {
  local tries=$((WAIT_SECONDS * 5))
  for _ in $(seq 1 "$tries"); do
    if "$@" >/dev/null 2>&1; then return 0; fi
    sleep 0.2
  done
  return 1
}

# A venv's scripts name its own path: one copied or moved from another checkout is rebuilt.
INSTALLED="$MOTO_SPEC in $VENV"
if [ ! -x "$VENV/bin/moto_server" ] || [ "$(cat "$STATE/installed" 2>/dev/null)" != "$INSTALLED" ]; then
  echo "installing $MOTO_SPEC into $VENV"
  rm -rf "$VENV"
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install --quiet --disable-pip-version-check "$MOTO_SPEC"
  echo "$INSTALLED" > "$STATE/installed"
fi

if alive "$STATE/docker-stub.pid" docker_stub.py; then
  echo "docker stub already running (pid $(cat "$STATE/docker-stub.pid"))"
else
  rm -f "$SOCKET"
  setsid "$VENV/bin/python" "$HERE/docker_stub.py" "$SOCKET" >>"$STATE/docker-stub.log" 2>&1 </dev/null &
  echo $! > "$STATE/docker-stub.pid"
  WAIT_SECONDS=15 wait_for test -S "$SOCKET" || { echo "docker stub did not create $SOCKET; see $STATE/docker-stub.log" >&2; exit 1; }
  echo "started docker stub (pid $(cat "$STATE/docker-stub.pid")) on $SOCKET"
fi

if alive "$STATE/moto.pid" moto_server; then
  echo "moto already running (pid $(cat "$STATE/moto.pid")) on $URL"
else
  if curl --silent --max-time 2 --output /dev/null "$URL/moto-api/"; then
    echo "something else answers on $URL; stop it or set MOTO_PORT" >&2
    exit 1
  fi
  DOCKER_HOST="unix://$SOCKET" setsid "$VENV/bin/moto_server" -H 127.0.0.1 -p "$PORT" \
    >>"$STATE/moto.log" 2>&1 </dev/null &
  echo $! > "$STATE/moto.pid"
  echo "started moto (pid $(cat "$STATE/moto.pid")) on $URL"
fi
WAIT_SECONDS=60 wait_for curl --silent --fail --max-time 2 --output /dev/null "$URL/moto-api/data.json" \
  || { echo "moto did not answer on $URL within 60 s; see $STATE/moto.log" >&2; exit 1; }

"$VENV/bin/python" "$HERE/seed.py" "$URL"
echo "$URL" > "$STATE/endpoint"
echo "moto is up: AWS_ENDPOINT_URL=$URL, docker stub at $SOCKET"
