#!/usr/bin/env bash
# Starts the azure-mock service: Stoplight Prism serving the vendored Azure Batch data-plane
# OpenAPI spec (crates/backend-azure/spec) on 127.0.0.1:4010 with request validation on
# (--errors), for the backend's contract test. Idempotent: installs Prism into
# $SERVICES_DIR/azure-mock when missing, regenerates the mock copy of the spec, starts Prism
# when it is not running and waits (bounded) until it answers.
set -euo pipefail
source "$(pwd)/xtask/services/azure-mock/common.sh"
mkdir -p "$STATE"

if pid="$(mock_pid)" && port_answers; then
  echo "azure-mock already running on $HOST:$PORT (pid $pid)"
  exit 0
fi
if port_answers; then
  echo "azure-mock: $HOST:$PORT is taken by another process; stop it first" >&2
  exit 1
fi

if [ ! -x "$PRISM" ]; then
  command -v npm >/dev/null || { echo "azure-mock: npm is needed (Node.js 18 or newer)" >&2; exit 1; }
  echo "installing @stoplight/prism-cli@5 into $STATE"
  [ -f "$STATE/package.json" ] || echo '{"name":"azure-mock","private":true}' > "$STATE/package.json"
  npm install --prefix "$STATE" --no-audit --no-fund --loglevel=error "@stoplight/prism-cli@5"
fi

# The spec's x-ms-examples point at ./examples/*.json next to it.
node "$HERE/make-mock-spec.js" "$SPEC_DIR/BatchService.json" "$STATE/BatchService.mock.json"
rm -rf "$STATE/examples"
cp -R "$SPEC_DIR/examples" "$STATE/examples"

# setsid: prism leads its own process group, so down.sh can stop exactly it and its children.
setsid "$PRISM" mock "$STATE/BatchService.mock.json" -h "$HOST" -p "$PORT" --errors \
  >"$LOG_FILE" 2>&1 </dev/null &
echo $! >"$PID_FILE"

deadline=$((SECONDS + 120))
until port_answers; do
  if ! mock_pid >/dev/null; then
    echo "azure-mock: prism exited; last lines of $LOG_FILE:" >&2
    tail -n 20 "$LOG_FILE" >&2
    exit 1
  fi
  if ((SECONDS >= deadline)); then
    echo "azure-mock: prism did not answer within 120 s; last lines of $LOG_FILE:" >&2
    tail -n 20 "$LOG_FILE" >&2
    bash "$HERE/down.sh"
    exit 1
  fi
  sleep 0.5
done
echo "azure-mock up on http://$HOST:$PORT (pid $(cat "$PID_FILE"), log $LOG_FILE)"
