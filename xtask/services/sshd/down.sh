#!/usr/bin/env bash
# services down sshd: stops the sshd started by up.sh (by its pid file); sessions end with it.
set -euo pipefail
: "${SERVICES_DIR:=$PWD/.services}"
DIR=$SERVICES_DIR/sshd
pid=$(cat "$DIR/sshd.pid" 2>/dev/null || true)
if [ -z "$pid" ] || [ "$(cat "/proc/$pid/comm" 2>/dev/null)" != sshd ]; then
  echo "[sshd] not running" >&2; exit 0
fi
kill -TERM "$pid"
for _ in $(seq 100); do
  [ -e "/proc/$pid" ] && [ "$(cut -d' ' -f3 "/proc/$pid/stat" 2>/dev/null)" != Z ] || { echo "[sshd] stopped" >&2; exit 0; }
  sleep 0.1
done
kill -KILL "$pid"; echo "[sshd] killed" >&2
