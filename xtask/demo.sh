#!/usr/bin/env bash
# cargo xtask demo [--exit-when-done]: the whole chain on this machine, in one command.
# Starts the real CodaLab 1.7.5 server and a Docker engine (what is not running yet), stages a few
# bundles of different shapes as alice, runs cl-worker-manager (local backend, target mode, real
# cl-worker processes running the bundles in Docker, --listen for the status page), and prints
# each bundle going staged -> starting -> preparing -> running -> ... -> ready. Then it says where
# to look and waits; Ctrl-C stops the manager, its workers, and the services it started.
# --exit-when-done: clean up and exit as soon as the bundles are ready (CI runs it that way).
# Env: DEMO_LISTEN (default 127.0.0.1:9464). Needs root the first time (Debian packages).
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$PWD
CARGO=${CARGO:-cargo}
LISTEN=${DEMO_LISTEN:-127.0.0.1:9464}
WAIT=1; [ "${1:-}" = --exit-when-done ] && WAIT=0
DIR=$REPO/.services/demo
STATE=$DIR/local-workers
mkdir -p "$DIR"
say() { printf '\n\033[1m==> %s\033[0m\n' "$*" >&2; }
[ -t 2 ] || say() { printf '\n==> %s\n' "$*" >&2; }

started=()
manager_pid=""
cleanup() {
  trap - INT TERM EXIT
  say "stopping what the demo started"
  if [ -n "$manager_pid" ]; then kill -TERM "$manager_pid" 2>/dev/null || true; wait "$manager_pid" 2>/dev/null || true; fi
  [ -x "${BIN:-}" ] && "$BIN" down --wait-seconds 30 local --state-dir "$STATE" >/dev/null 2>&1 || true
  [ -n "${MISFIT:-}" ] && bash xtask/services/codalab/cl.sh alice rm $MISFIT >/dev/null 2>&1 || true
  for service in "${started[@]}"; do "$CARGO" xtask services down "$service" >/dev/null 2>&1 || true; done
  echo "done." >&2
}
trap cleanup EXIT
trap 'exit 130' INT TERM

say "services: the real CodaLab server and a Docker engine (first time: a few minutes)"
for service in codalab docker; do
  if ! SERVICES_DIR=$REPO/.services bash "xtask/services/$service/status.sh" >/dev/null 2>&1; then
    started+=("$service")
  fi
done
"$CARGO" xtask services up codalab docker

say "building cl-worker-manager"
"$CARGO" build -q -p codalab-wm
BIN=${CARGO_TARGET_DIR:-$REPO/target}/debug/cl-worker-manager
case "$BIN" in /*) ;; *) BIN=$REPO/$BIN ;; esac

TAG=demo-$(date +%s)
say "staging bundles as alice (tag $TAG)"
flags=(--tags "$TAG" --request-memory 256m)
small=$(STAGE_COMMAND='echo small bundle {i} > out.txt' bash xtask/services/codalab/stage.sh alice 3 "${flags[@]}" --request-cpus 1)
large=$(STAGE_COMMAND='seq 1 100000 | sort -n | tail -1 > out.txt' bash xtask/services/codalab/stage.sh alice 1 "${flags[@]}" --request-cpus 2)
MISFIT=$(STAGE_COMMAND='echo never > out.txt' bash xtask/services/codalab/stage.sh alice 1 "${flags[@]}" --request-cpus 64)
echo "3 bundles asking 1 CPU, 1 asking 2 CPUs, 1 asking 64 CPUs (no worker here has that many)" >&2

say "running cl-worker-manager (local backend, workers of 2 CPUs / 2 GiB, real cl-worker in Docker)"
args=(--server http://127.0.0.1:2900 --min-workers 0 --max-workers 3 --search "tags=$TAG"
      --launch-mode target --max-launches-per-tick 3 --sleep-time 2 --worker-idle-seconds 30
      --worker-executable "$REPO/.services/codalab/venv/bin/cl-worker" --listen "$LISTEN"
      local --cpus 2 --memory-mb 2048 --state-dir "$STATE")
echo "$ cl-worker-manager ${args[*]}" >&2
echo "  (log: $DIR/manager.log)" >&2
CODALAB_USERNAME=alice CODALAB_PASSWORD=alicepw DOCKER_HOST=unix://$REPO/.services/docker/docker.sock \
  "$BIN" "${args[@]}" >"$DIR/manager.log" 2>&1 &
manager_pid=$!

say "bundles (staged -> ... -> ready; the 64-CPU one stays staged)"
source xtask/services/codalab/common.sh
CODALAB_HOME=$(cl_client_home alice) CODALAB_SESSION=main CODALAB_USERNAME=alice CODALAB_PASSWORD=alicepw \
  "$CL_VENV/bin/python" -W ignore xtask/services/codalab/watch.py --timeout 600 --stays $MISFIT $small $large \
  || { tail -n 30 "$DIR/manager.log" >&2; exit 1; }
plain() { sed 's/\x1b\[[0-9;]*m//g' "$DIR/manager.log"; }
echo "manager: started $(plain | grep -c 'started a worker job') worker(s); $(plain | grep -m1 'filtered out bundle' | sed 's/^.*INFO [^ ]* //; s/ bundle=.*//')" >&2
say "the manager's own view (cl-worker-manager status --url http://$LISTEN)"
"$BIN" status --url "http://$LISTEN" >&2 || true

first=${small%%$'\n'*}
say "where to look"
cat >&2 <<HERE
  dashboard (a page)   http://$LISTEN/   (pools, why bundles wait, when they start, charts)
  status (JSON)        curl -s http://$LISTEN/status
  metrics              curl -s http://$LISTEN/metrics
  the manager's view   $BIN status --url http://$LISTEN
  a bundle's output    bash xtask/services/codalab/cl.sh alice cat $first/out.txt
  a bundle's details   bash xtask/services/codalab/cl.sh alice info $first
  the manager's log    $DIR/manager.log   (workers' logs: $STATE/<id>.log)
HERE
echo "  output of $first: $(bash xtask/services/codalab/cl.sh alice cat "$first/out.txt" 2>/dev/null)" >&2
if [ $WAIT = 1 ]; then
  say "the manager keeps running (workers exit after 30 idle seconds); Ctrl-C stops everything the demo started"
  wait "$manager_pid"
fi
