#!/usr/bin/env bash
# Says whether Grafana's schema and tsc are installed; exits 1 when not.
set -uo pipefail

STATE="${SERVICES_DIR:-$PWD/.services}/grafana-schema"
TYPES="$STATE/node_modules/@grafana/schema/dist/types/raw/dashboard/x/types.gen.d.ts"
if [ ! -x "$STATE/node_modules/.bin/tsc" ] || [ ! -f "$TYPES" ]; then
  echo "grafana-schema: not installed (run: cargo xtask services up grafana-schema)"
  exit 1
fi
echo "grafana-schema: $(cat "$STATE/installed" 2>/dev/null) installed in $STATE"
