#!/usr/bin/env bash
# Says whether the kubernetes-validate venv is installed and works; exits 1 when not.
set -uo pipefail

STATE="${SERVICES_DIR:-$PWD/.services}/k8s-validate"
VENV="$STATE/venv"
if [ ! -x "$VENV/bin/kubernetes-validate" ]; then
  echo "k8s-validate: not installed (run: cargo xtask services up k8s-validate)"
  exit 1
fi
if ! version="$("$VENV/bin/python" -c 'import importlib.metadata as m; print(m.version("kubernetes-validate"))' 2>&1)"; then
  echo "k8s-validate: installed in $VENV but broken: $version"
  exit 1
fi
if ! crds="$("$VENV/bin/python" -c 'import importlib.metadata as m, cloudcoil.models.prometheus_operator.v1; print(m.version("cloudcoil.models.prometheus_operator"))' 2>&1)"; then
  echo "k8s-validate: the Prometheus Operator schemas are missing or broken in $VENV: $crds (run: cargo xtask services up k8s-validate)"
  exit 1
fi
echo "k8s-validate: kubernetes-validate $version and the Prometheus Operator $crds schemas installed in $VENV"
