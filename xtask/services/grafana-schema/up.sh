#!/usr/bin/env bash
# Installs Grafana's own dashboard schema (npm @grafana/schema: the TypeScript types Grafana
# generates from its CUE schemas) and the TypeScript compiler into
# $SERVICES_DIR/grafana-schema, for check-dashboard.sh (crates/cli/tests/it/grafana_schema.rs).
# Nothing runs. Idempotent: reinstalls only when missing or the pinned versions changed.
set -euo pipefail

STATE="${SERVICES_DIR:-$PWD/.services}/grafana-schema"
SPEC="@grafana/schema@13.2.3 typescript@5.9.3"
mkdir -p "$STATE"

if [ ! -x "$STATE/node_modules/.bin/tsc" ] || [ "$(cat "$STATE/installed" 2>/dev/null)" != "$SPEC" ]; then
  command -v npm >/dev/null || { echo "grafana-schema: npm is needed (Node.js 18 or newer)" >&2; exit 1; }
  echo "installing $SPEC into $STATE"
  rm -rf "$STATE/node_modules"
  echo '{"name":"grafana-schema","private":true}' > "$STATE/package.json"
  # shellcheck disable=SC2086 # SPEC is a list of packages
  npm install --prefix "$STATE" --no-audit --no-fund --loglevel=error $SPEC
  echo "$SPEC" > "$STATE/installed"
fi
bash "$(dirname "${BASH_SOURCE[0]}")/status.sh"
