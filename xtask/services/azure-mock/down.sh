#!/usr/bin/env bash
# Stops the azure-mock service: only the prism process group that up.sh started and recorded.
set -euo pipefail
source "$(pwd)/xtask/services/azure-mock/common.sh"

if ! pid="$(mock_pid)"; then
  rm -f "$PID_FILE"
  echo "azure-mock is not running"
  exit 0
fi
kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null || true
for _ in $(seq 1 40); do
  kill -0 "$pid" 2>/dev/null || break
  sleep 0.25
done
if kill -0 "$pid" 2>/dev/null; then
  kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid" 2>/dev/null || true
fi
rm -f "$PID_FILE"
echo "azure-mock stopped (pid $pid)"
