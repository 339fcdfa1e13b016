#!/usr/bin/env bash
# Installs kubernetes-validate (PyPI; the official Kubernetes JSON schemas, bundled, offline) into
# $SERVICES_DIR/k8s-validate/venv for the manifest tests (crates/backend-k8s/tests/it/schema.rs,
# crates/operator/tests/it/deploy.rs), and the Prometheus Operator's CRD schemas (PyPI
# cloudcoil-models-prometheus-operator, generated from its v0.80.1 CRDs) for
# monitoring_crds.py (crates/operator/tests/it/monitoring.rs). Nothing runs: the tests call the
# venv's validators.
#
# Idempotent: reinstalls only when the venv is missing or the pinned version changed.
set -euo pipefail

STATE="${SERVICES_DIR:-$PWD/.services}/k8s-validate"
VENV="$STATE/venv"
SPEC="${K8S_VALIDATE_SPEC:-kubernetes-validate==1.37.0 cloudcoil-models-prometheus-operator==0.80.1.0}"
mkdir -p "$STATE"

# The stamp names the venv's path: a venv's scripts name their interpreter by path, so one
# copied or moved from another checkout is rebuilt.
INSTALLED="$SPEC in $VENV"
if [ ! -x "$VENV/bin/kubernetes-validate" ] || [ "$(cat "$STATE/installed" 2>/dev/null)" != "$INSTALLED" ]; then
  echo "installing $SPEC into $VENV"
  rm -rf "$VENV"
  python3 -m venv "$VENV"
  # shellcheck disable=SC2086 # SPEC is a list of requirements
  "$VENV/bin/pip" install --quiet --disable-pip-version-check $SPEC
  echo "$INSTALLED" > "$STATE/installed"
fi
bash "$(dirname "${BASH_SOURCE[0]}")/status.sh"
