# What up.sh may touch (sourced after common.sh, not run). Ours is: a slurm.conf or gres.conf
# under $SYS_ETC that carries $MARK and whose state paths are under $DIR, and a slurmctld/slurmd
# whose pid is the one in $RUN/<daemon>.pid. Anything else is someone else's Slurm (the host's
# own cluster, or one started from another services directory): up.sh says whose and stops
# before writing or starting anything. Every function here only reads.

MARK="# written by xtask/services/slurm/up.sh"

# conf_setting FILE KEY: the value of KEY=... in a slurm.conf (case-insensitive, first one)
conf_setting() { awk -F= -v k="$2" 'tolower($1) == tolower(k) { sub(/^[^=]*=/, ""); print; exit }' "$1" 2>/dev/null; }

# same_path A B: true when A and B name the same place (symlinks resolved)
same_path() { [ "$(realpath -m "$1")" = "$(realpath -m "$2")" ]; }

# foreign_slurm_conf: prints why $SYS_ETC/slurm.conf is not ours; nothing when absent or ours
foreign_slurm_conf() {
  local conf=$SYS_ETC/slurm.conf state
  [ -e "$conf" ] || return 0
  if ! grep -qF "$MARK" "$conf"; then
    echo "$conf is not ours: it has no '$MARK' line (ClusterName=$(conf_setting "$conf" ClusterName), SlurmctldHost=$(conf_setting "$conf" SlurmctldHost)); the host's own Slurm?"
    return 0
  fi
  state=$(conf_setting "$conf" StateSaveLocation)
  # Written for another clone of this project: in the way only while a cluster runs (its
  # daemons); a stale one (that clone's cluster stopped, e.g. a finished CI run) is ours to
  # rewrite, or no second clone on a machine could ever start a cluster.
  if ! same_path "$state" "$STATE/ctld" && slurm_daemons_running; then
    echo "$conf was written by up.sh for another services directory (StateSaveLocation=$state, ours would be $STATE/ctld) and a Slurm daemon runs; stop that cluster with its own 'cargo xtask services down slurm' first"
  fi
}

# slurm_daemons_running: true when any slurmctld or slurmd process (not a zombie) runs
slurm_daemons_running() {
  local pid
  for pid in $(pgrep -x slurmctld || true) $(pgrep -x slurmd || true); do
    running "$pid" && return 0
  done
  return 1
}

# foreign_gres_conf: prints why $SYS_ETC/gres.conf is not ours. Before the marker, up.sh wrote
# gres.conf without one, always together with slurm.conf: such a file is ours when slurm.conf is.
foreign_gres_conf() {
  local gres=$SYS_ETC/gres.conf
  [ -e "$gres" ] || return 0
  grep -qF "$MARK" "$gres" && return 0
  if [ -e "$SYS_ETC/slurm.conf" ] && [ -z "$(foreign_slurm_conf)" ]; then return 0; fi
  echo "$gres is not ours: it has no '$MARK' line and is not next to a slurm.conf of ours"
}

# describe PID: "pid N (user U): CMDLINE"
describe() {
  local user cmd
  user=$(stat -c %U "/proc/$1" 2>/dev/null || echo '?')
  cmd=$(tr '\0' ' ' <"/proc/$1/cmdline" 2>/dev/null | cut -c1-200 | sed 's/ *$//')
  echo "pid $1 (user $user): ${cmd:-?}"
}

# foreign_daemons NAME: prints every running NAME process that is not the one of $RUN/NAME.pid
foreign_daemons() {
  local ours pid
  ours=$(pid_of "$RUN/$1.pid" "$1" || true)
  for pid in $(pgrep -x "$1" || true); do
    running "$pid" || continue
    [ "$pid" = "$ours" ] && continue
    echo "$1 $(describe "$pid") is not ours (ours would be in $RUN/$1.pid: ${ours:-none running})"
  done
}

# foreign_listener PORT NAME: prints who listens on PORT when it is not our NAME
foreign_listener() {
  local ours pid
  ours=$(pid_of "$RUN/$2.pid" "$2" || true)
  for pid in $(ss -ltnpH "sport = :$1" 2>/dev/null | grep -o 'pid=[0-9]*' | cut -d= -f2 | sort -u); do
    [ "$pid" = "$ours" ] && continue
    echo "port $1 (for $2) is taken by $(describe "$pid")"
  done
}

# foreign_slurm: everything in the way, one line each; empty when up.sh may go ahead
foreign_slurm() {
  foreign_slurm_conf
  foreign_gres_conf
  foreign_daemons slurmctld
  foreign_daemons slurmd
  foreign_listener 6817 slurmctld
  foreign_listener 6818 slurmd
}

# refuse_foreign_slurm: exits 1 with the reasons when anything in the way is not ours
refuse_foreign_slurm() {
  local found
  found=$(foreign_slurm)
  [ -z "$found" ] && return 0
  while IFS= read -r line; do log "$line"; done <<<"$found"
  die "refusing to touch a Slurm that up.sh did not set up for $DIR (nothing was changed); stop it or use a machine without one"
}

# own_daemons_answer: our slurmctld and slurmd are alive, hold their ports and the controller
# answers (scontrol ping alone would also accept someone else's controller on 6817)
own_daemons_answer() {
  local daemon port
  for daemon in slurmctld:6817 slurmd:6818; do
    port=${daemon#*:} daemon=${daemon%:*}
    pid_of "$RUN/$daemon.pid" "$daemon" >/dev/null || { echo "our $daemon is not running (see $LOG/$daemon.log)"; return 1; }
    [ -z "$(foreign_listener "$port" "$daemon")" ] || { foreign_listener "$port" "$daemon"; return 1; }
  done
  scontrol ping >/dev/null 2>&1 || { echo "slurmctld does not answer scontrol ping"; return 1; }
}
