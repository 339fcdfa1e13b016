#!/usr/bin/env bash
# Tells whether the azure-mock service is running and answering; exits 1 when it is not.
set -euo pipefail
source "$(pwd)/xtask/services/azure-mock/common.sh"

if pid="$(mock_pid)" && port_answers; then
  echo "azure-mock running on http://$HOST:$PORT (pid $pid)"
  exit 0
fi
echo "azure-mock not running (start it with: cargo xtask services up azure-mock)"
exit 1
