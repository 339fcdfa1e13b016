#!/usr/bin/env bash
# services down slurm: cancels the cluster's jobs, then stops slurmd and slurmctld (by their pid
# files under $SERVICES_DIR/slurm/run). munged is left running: other programs may use it.
source "$(dirname "$0")/common.sh"
if pid_of "$RUN/slurmctld.pid" slurmctld >/dev/null; then
  jobs=$(squeue -h -o %i 2>/dev/null | tr '\n' ' ' || true)
  if [ -n "${jobs// /}" ]; then
    log "cancelling jobs $jobs"
    # shellcheck disable=SC2086
    scancel $jobs 2>/dev/null || true
    wait_until 15 sh -c '[ -z "$(squeue -h -o %i)" ]' || log "some jobs did not end"
  fi
fi
for daemon in slurmd slurmctld; do
  pid=$(pid_of "$RUN/$daemon.pid" "$daemon") || { log "$daemon is not running"; continue; }
  kill -TERM "$pid"
  if wait_until 10 sh -c "! [ -e /proc/$pid ] || [ \"\$(cut -d' ' -f3 /proc/$pid/stat)\" = Z ]"; then
    log "$daemon stopped"
  else
    kill -KILL "$pid" && log "$daemon killed"
  fi
done
