#!/usr/bin/env bash
# services status docker: exit 0 when our dockerd answers on its socket and the default image exists.
source "$(dirname "$0")/common.sh"
pid=$(our_pid) || { log "dockerd is not running (no live pid in $PIDFILE)"; exit 1; }
answers || { log "dockerd (pid $pid) does not answer on $SOCK"; exit 1; }
for image in $IMAGES; do
  docker image inspect "$image" >/dev/null 2>&1 || { log "image $image is missing"; exit 1; }
done
log "up: dockerd $(docker version --format '{{.Server.Version}}') pid $pid, DOCKER_HOST=$DOCKER_HOST, images: $IMAGES"
