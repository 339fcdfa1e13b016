#!/usr/bin/env bash
# services down docker: stops our dockerd (TERM to its pid; it stops its containerd and containers).
# Images and the cached root file system stay (`--purge` removes the data root too).
source "$(dirname "$0")/common.sh"
pid=$(our_pid) || { log "not running"; pid=""; }
if [ -n "$pid" ]; then
  kill -TERM "$pid"
  for _ in $(seq 300); do running "$pid" || break; sleep 0.1; done
  if running "$pid"; then kill -KILL "$pid"; log "killed (did not stop within 30 s)"; else log "stopped"; fi
fi
rm -f "$PIDFILE" "$SOCK"
if [ "${1:-}" = --purge ]; then rm -rf "$DIR/data" "$DIR/exec"; log "data root removed"; fi
