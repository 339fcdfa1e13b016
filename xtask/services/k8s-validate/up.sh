#!/usr/bin/env bash
# Installs kubernetes-validate (PyPI; the official Kubernetes JSON schemas, bundled, offline) into
# $SERVICES_DIR/k8s-validate/venv for the kubernetes backend's manifest tests
# (crates/backend-k8s/tests/schema.rs). Nothing runs: the tests call the venv's validator.
#
# Idempotent: reinstalls only when the venv is missing or the pinned version changed.
set -euo pipefail

STATE="${SERVICES_DIR:-$PWD/.services}/k8s-validate"
VENV="$STATE/venv"
SPEC="${K8S_VALIDATE_SPEC:-kubernetes-validate==1.37.0}"
mkdir -p "$STATE"

if [ ! -x "$VENV/bin/kubernetes-validate" ] || [ "$(cat "$STATE/installed" 2>/dev/null)" != "$SPEC" ]; then
  echo "installing $SPEC into $VENV"
  rm -rf "$VENV"
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install --quiet --disable-pip-version-check "$SPEC"
  echo "$SPEC" > "$STATE/installed"
fi
bash "$(dirname "${BASH_SOURCE[0]}")/status.sh"
