#!/usr/bin/env bash
# Nothing runs, so nothing stops; the packages are kept in $SERVICES_DIR/grafana-schema.
set -euo pipefail
echo "grafana-schema: nothing to stop (packages kept in ${SERVICES_DIR:-$PWD/.services}/grafana-schema)"
