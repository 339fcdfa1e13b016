#!/usr/bin/env bash
# Nothing runs, so nothing stops; the venv is kept (remove it with K8S_VALIDATE_REMOVE=1).
set -euo pipefail

STATE="${SERVICES_DIR:-$PWD/.services}/k8s-validate"
if [ "${K8S_VALIDATE_REMOVE:-0}" = "1" ]; then
  rm -rf "$STATE/venv" "$STATE/installed"
  echo "k8s-validate: removed $STATE/venv"
else
  echo "k8s-validate: nothing to stop (venv kept in $STATE/venv)"
fi
