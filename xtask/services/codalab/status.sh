#!/usr/bin/env bash
# status.sh -- exit 0 when the CodaLab REST server answers on 127.0.0.1:2900, 1 otherwise;
# prints the state of each recorded process.
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
for name in mariadbd rest-server bundle-manager; do
  if pid=$(cl_pid "$name"); then echo "codalab: $name running (pid $pid)"; else echo "codalab: $name not running"; fi
done
if cl_rest_ok; then
  echo "codalab: REST answers on $CL_URL ($(curl -s -m 5 "$CL_URL/rest/bundles?keywords=.count"))"
  exit 0
fi
echo "codalab: REST does not answer on $CL_URL"
exit 1
