#!/usr/bin/env bash
# services up sshd: a key-only sshd on 127.0.0.1:2222 standing in for a Slurm login node, with its
# own host key, a client key (authorized for root) and a known_hosts file for clients, all under
# $SERVICES_DIR/sshd. Never touches /etc/ssh or port 22. Idempotent.
set -euo pipefail
: "${SERVICES_DIR:=$PWD/.services}"
DIR=$SERVICES_DIR/sshd
PORT=${SSHD_SERVICE_PORT:-2222}
log() { printf '[sshd] %s\n' "$*" >&2; }
mkdir -p "$DIR" && chmod 700 "$DIR"

if [ ! -x /usr/sbin/sshd ] || ! command -v ssh-keygen >/dev/null; then
  log "installing openssh-server"
  export DEBIAN_FRONTEND=noninteractive
  own_policy=0
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d && chmod 755 /usr/sbin/policy-rc.d && own_policy=1
  fi
  apt-get -o DPkg::Lock::Timeout=300 update -q > "$DIR/apt.log" 2>&1
  apt-get -o DPkg::Lock::Timeout=300 install -y -q --no-install-recommends openssh-server openssh-client >> "$DIR/apt.log" 2>&1 \
    || { tail -n 20 "$DIR/apt.log" >&2; exit 1; }
  if [ $own_policy = 1 ]; then rm -f /usr/sbin/policy-rc.d; fi
fi

[ -f "$DIR/host_ed25519" ] || ssh-keygen -q -t ed25519 -N '' -C codalab-wm-sshd-host -f "$DIR/host_ed25519"
[ -f "$DIR/client_ed25519" ] || ssh-keygen -q -t ed25519 -N '' -C codalab-wm-sshd-client -f "$DIR/client_ed25519"
cp "$DIR/client_ed25519.pub" "$DIR/authorized_keys" && chmod 600 "$DIR/authorized_keys"
# what a client needs to trust this server (ssh's format for a non-default port)
echo "[127.0.0.1]:$PORT $(cut -d' ' -f1,2 "$DIR/host_ed25519.pub")" > "$DIR/known_hosts"

cat > "$DIR/sshd_config" <<CONF
# written by xtask/services/sshd/up.sh
Port $PORT
ListenAddress 127.0.0.1
HostKey $DIR/host_ed25519
PidFile $DIR/sshd.pid
AuthorizedKeysFile $DIR/authorized_keys
PermitRootLogin prohibit-password
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
X11Forwarding no
AllowTcpForwarding no
PrintMotd no
Subsystem sftp internal-sftp
CONF
install -d -m 755 /run/sshd   # sshd's privilege separation directory
/usr/sbin/sshd -t -f "$DIR/sshd_config"

pid=$(cat "$DIR/sshd.pid" 2>/dev/null || true)
if [ -n "$pid" ] && [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = sshd ]; then
  kill -HUP "$pid"   # re-read the config; running sessions stay
  log "sshd already running (pid $pid), configuration reloaded"
else
  /usr/sbin/sshd -f "$DIR/sshd_config" -E "$DIR/sshd.log"
fi
for _ in $(seq 100); do
  if ssh -p "$PORT" -i "$DIR/client_ed25519" -o BatchMode=yes -o UserKnownHostsFile="$DIR/known_hosts" \
       -o StrictHostKeyChecking=yes -o ConnectTimeout=2 root@127.0.0.1 true 2>/dev/null; then
    log "up on 127.0.0.1:$PORT (key $DIR/client_ed25519, known_hosts $DIR/known_hosts)"
    exit 0
  fi
  sleep 0.1
done
log "sshd did not accept the client key within 10 s"; tail -n 5 "$DIR/sshd.log" >&2 || true
exit 1
