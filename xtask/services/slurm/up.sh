#!/usr/bin/env bash
# services up slurm: installs munge + slurm-wlm when missing, writes a one-node config (partitions
# `cpu` (default) and `gpu`, fake GPUs as char devices), starts munged, slurmctld and slurmd on
# 127.0.0.1 and waits until the node is idle. Idempotent; state under $SERVICES_DIR/slurm.
# Needs root: installs Debian packages, writes /etc/slurm/{slurm,gres}.conf and the munge key.
# Refuses (exit 1, nothing changed) when a Slurm it did not set up is there: a slurm.conf or
# gres.conf without its marker line, or a slurmctld/slurmd or a listener on 6817/6818 that is not
# the one of its pid files (owner.sh). Reports success only once its own daemons run and answer.
# Knobs: SLURM_SERVICE_CPUS (8), SLURM_SERVICE_GPUS (2), SLURM_SERVICE_MEM_MB (half the RAM).
source "$(dirname "$0")/common.sh"
source "$(dirname "$0")/owner.sh"
refuse_foreign_slurm
mkdir -p "$ETC" "$RUN" "$LOG" "$STATE/ctld" "$STATE/spool" "$DEV"

# --- packages (no systemd here: keep postinst from starting daemons, we start them ourselves)
missing=()
for pkg in munge slurmctld slurmd slurm-client; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'ok installed' || missing+=("$pkg")
done
if [ ${#missing[@]} -gt 0 ]; then
  log "installing ${missing[*]}"
  own_policy=0
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d && chmod 755 /usr/sbin/policy-rc.d && own_policy=1
  fi
  export DEBIAN_FRONTEND=noninteractive
  apt-get -o DPkg::Lock::Timeout=300 update -q > "$LOG/apt.log" 2>&1
  apt-get -o DPkg::Lock::Timeout=300 install -y -q --no-install-recommends "${missing[@]}" >> "$LOG/apt.log" 2>&1 \
    || { tail -n 20 "$LOG/apt.log" >&2; exit 1; }
  if [ $own_policy = 1 ]; then rm -f /usr/sbin/policy-rc.d; fi
fi

# --- fake GPUs: slurmd 22.05 only counts GPUs backed by a character device
if [ "$GPUS" -gt 0 ]; then
  for i in $(seq 0 $((GPUS - 1))); do
    [ -c "$DEV/nvidia$i" ] && continue
    rm -f "$DEV/nvidia$i"
    mknod "$DEV/nvidia$i" c 1 3 2>/dev/null || { log "mknod refused: no fake GPUs"; GPUS=0; break; }
  done
fi

# --- configuration
MEM_MB=${SLURM_SERVICE_MEM_MB:-$(( $(awk '/^MemTotal/ {print int($2 / 1024)}' /proc/meminfo) / 2 ))}
if [ "$GPUS" -gt 0 ]; then
  gres_types="GresTypes=gpu" node_gres="Gres=gpu:$GPUS"
  gpu_partition="PartitionName=gpu Nodes=$NODE Default=NO MaxTime=1-00:00:00 State=UP"
  printf '%s\nNodeName=%s Name=gpu File=%s\n' "$MARK" "$NODE" "$DEV/nvidia[0-$((GPUS - 1))]" > "$ETC/gres.conf.new"
else
  gres_types="" node_gres="" gpu_partition=""
  echo "$MARK" > "$ETC/gres.conf.new"
fi
cat > "$ETC/slurm.conf.new" <<CONF
$MARK: one node, no cgroups, no accounting, 127.0.0.1 only
ClusterName=codalabwm
SlurmctldHost=$NODE(127.0.0.1)
SlurmUser=root
SlurmdUser=root
SlurmctldPort=6817
SlurmdPort=6818
CommunicationParameters=NoCtldInAddrAny,NoInAddrAny
AuthType=auth/munge
CredType=cred/munge
StateSaveLocation=$STATE/ctld
SlurmdSpoolDir=$STATE/spool
SlurmctldPidFile=$RUN/slurmctld.pid
SlurmdPidFile=$RUN/slurmd.pid
SlurmctldLogFile=$LOG/slurmctld.log
SlurmdLogFile=$LOG/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
MpiDefault=none
MailProg=/bin/true
ReturnToService=2
SlurmdParameters=config_overrides
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU_Memory
SchedulerParameters=batch_sched_delay=0,sched_min_interval=0,default_queue_depth=100
DefMemPerCPU=256
EnforcePartLimits=ALL
MinJobAge=600
KillWait=5
CompleteWait=0
MessageTimeout=10
$gres_types
NodeName=$NODE NodeAddr=127.0.0.1 CPUs=$CPUS RealMemory=$MEM_MB $node_gres State=UNKNOWN
PartitionName=cpu Nodes=$NODE Default=YES MaxTime=INFINITE State=UP
$gpu_partition
CONF
changed=0   # a change of comments alone needs no restart
for file in slurm.conf gres.conf; do
  cmp -s <(grep -v '^#' "$ETC/$file.new") <(grep -sv '^#' "$SYS_ETC/$file") || changed=1
  mv "$ETC/$file.new" "$ETC/$file"
  install -D -m 644 "$ETC/$file" "$SYS_ETC/$file"   # where clients (and ssh sessions) look
done

# --- munge
if [ ! -s /etc/munge/munge.key ]; then
  log "creating the munge key"
  mungekey --create --keyfile=/etc/munge/munge.key --force
  chown munge:munge /etc/munge/munge.key && chmod 400 /etc/munge/munge.key
fi
install -d -o munge -g munge -m 755 /run/munge
if ! munge -n 2>/dev/null | unmunge >/dev/null 2>&1; then
  log "starting munged"
  runuser -u munge -- /usr/sbin/munged
  wait_until 10 sh -c 'munge -n | unmunge'
fi

# --- slurmctld and slurmd (node Gres changes need a restart, not a reconfigure)
stop() {
  local pid; pid=$(pid_of "$RUN/$1.pid" "$1") || return 0
  log "restarting $1 (configuration changed)"
  kill -TERM "$pid"; wait_until 10 sh -c "! [ -e /proc/$pid ] || [ \"\$(cut -d' ' -f3 /proc/$pid/stat)\" = Z ]"
}
if [ $changed = 1 ]; then stop slurmd; stop slurmctld; fi
if ! pid_of "$RUN/slurmctld.pid" slurmctld >/dev/null; then
  log "starting slurmctld"
  slurmctld
fi
wait_until 30 scontrol ping
if ! pid_of "$RUN/slurmd.pid" slurmd >/dev/null; then
  log "starting slurmd"
  slurmd -N "$NODE"
fi

# --- wait until the node takes jobs (resume it once if saved state left it drained/down)
resumed=0
for _ in $(seq 600); do
  state=$(node_state || true)
  case "$state" in
    idle|mixed|allocated)
      if ! why=$(own_daemons_answer); then
        tail -n 5 "$LOG/slurmctld.log" "$LOG/slurmd.log" >&2 || true
        die "node $NODE is $state, but not through our daemons: $why"
      fi
      log "node $NODE is $state; partitions: $(sinfo -h -o %P | tr '\n' ' ')"; exit 0 ;;
    drain*|down*|inval*)
      [ $resumed = 0 ] && { scontrol update NodeName="$NODE" State=RESUME >/dev/null 2>&1 || true; resumed=1; } ;;
  esac
  sleep 0.1
done
log "node $NODE did not become idle within 60 s (state: ${state:-unknown})"
tail -n 5 "$LOG/slurmctld.log" "$LOG/slurmd.log" >&2 || true
exit 1
