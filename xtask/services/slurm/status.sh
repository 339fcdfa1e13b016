#!/usr/bin/env bash
# services status slurm: exit 0 when the controller answers and the node takes jobs.
source "$(dirname "$0")/common.sh"
scontrol ping >/dev/null 2>&1 || { log "slurmctld is not answering"; exit 1; }
state=$(node_state || true)
case "$state" in
  idle|mixed|allocated) log "up: node $NODE is $state" ;;
  *) log "node $NODE is ${state:-unknown}"; exit 1 ;;
esac
