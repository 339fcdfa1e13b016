#!/usr/bin/env bash
# Says whether moto and its docker stub are running and answering; exits 1 when not.
set -uo pipefail

STATE="${SERVICES_DIR:-$PWD/.services}/moto"
URL="http://127.0.0.1:${MOTO_PORT:-5055}"
ok=0
for name in moto docker-stub; do
  pid="$(cat "$STATE/$name.pid" 2>/dev/null || true)"
  if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
    echo "$name: running (pid $pid)"
  else
    echo "$name: not running"
    ok=1
  fi
done
if curl --silent --fail --max-time 2 --output /dev/null "$URL/moto-api/data.json"; then
  echo "moto: answers on $URL"
else
  echo "moto: no answer on $URL"
  ok=1
fi
exit "$ok"
