#!/usr/bin/env bash
# check-dashboard.sh DASHBOARD.json: type-checks a Grafana dashboard against Grafana's own
# schema for dashboard JSON (@grafana/schema 13.2.3, `Dashboard` of raw/dashboard/x, the
# classic JSON model that Dashboards → Import reads), strictly: the JSON becomes a TypeScript
# object literal typed `Dashboard`, so a field the schema does not know (at any depth where the
# schema lists its fields) or a wrong type is an error naming it. Panel `options` and query
# `targets` are free-form in the schema and so not checked here (the queries are run against a
# real Prometheus by crates/cli/tests/it/prometheus.rs). Exit 0 when it type-checks.
set -euo pipefail

STATE="${SERVICES_DIR:-$PWD/.services}/grafana-schema"
dashboard="$(realpath "${1:?usage: check-dashboard.sh DASHBOARD.json}")"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
# One line before the JSON's first: the errors' line numbers are the dashboard file's.
{
  printf '%s ' "import type { Dashboard } from \"$STATE/node_modules/@grafana/schema/dist/types/raw/dashboard/x/types.gen\";"
  printf 'export const dashboard: Dashboard = '
  cat "$dashboard"
  echo ';'
} > "$work/dashboard.ts"
(cd "$work" && "$STATE/node_modules/.bin/tsc" --noEmit --strict --skipLibCheck --pretty false \
  --moduleResolution node --module esnext --target es2020 dashboard.ts) \
  | sed "s|^dashboard.ts|$dashboard|"
echo "$dashboard: a valid Grafana dashboard (@grafana/schema 13.2.3, strict)"
