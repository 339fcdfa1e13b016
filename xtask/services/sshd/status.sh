#!/usr/bin/env bash
# services status sshd: exit 0 when the sshd answers with the expected host key and takes the client key.
set -euo pipefail
: "${SERVICES_DIR:=$PWD/.services}"
DIR=$SERVICES_DIR/sshd
PORT=${SSHD_SERVICE_PORT:-2222}
ssh -p "$PORT" -i "$DIR/client_ed25519" -o BatchMode=yes -o UserKnownHostsFile="$DIR/known_hosts" \
  -o StrictHostKeyChecking=yes -o ConnectTimeout=2 root@127.0.0.1 true \
  && echo "[sshd] up on 127.0.0.1:$PORT" >&2
