#!/usr/bin/env bash
# stage.sh USER N [cl run flags...] -- create N run bundles as USER and wait until all are `staged`;
# prints their uuids, one per line, on stdout (everything else goes to stderr).
#   bash xtask/services/codalab/stage.sh alice 12 --request-cpus 1 --request-memory 512m
#   bash xtask/services/codalab/stage.sh alice 1 --request-cpus 64 --request-memory 512g
# The flags are those of `cl run` (e.g. --request-cpus/-gpus/-memory/-disk/-time/-queue, --tags, -n NAME).
# Env: STAGE_COMMAND (default 'echo codalab-wm-test-{i}'; {i} is the bundle's index 1..N),
#      STAGE_DEPS (dependencies put before the command, e.g. 'a:0x1234...'),
#      STAGE_TIMEOUT (seconds to wait for `staged`, default 120),
#      STAGE_WAIT=0 (print the uuids once created, without waiting: e.g. held by a dependency).
# One Python process runs `cl run` once in-process through codalab's own BundleCLI (same parsing,
# metadata and worksheet as the cl command) to get the bundle it would create, then creates the N
# bundles with the server's bulk create, 250 per request, on no worksheet (1,000 bundles in ~10 s,
# not one `cl run` each); bundle i's command is STAGE_COMMAND with {i} = i.
# Exit: 0 all staged (or created, with STAGE_WAIT=0); 1 timeout/failure (states on stderr); 2 usage.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
[ $# -ge 2 ] || { sed -n '2,/^set /{/^#/s/^# \{0,1\}//p}' "${BASH_SOURCE[0]}" >&2; exit 2; }
user=$1; n=$2; shift 2
[[ "$n" =~ ^[0-9]+$ ]] || { echo "stage.sh: N must be a number, got '$n'" >&2; exit 2; }
pw=$(cl_password "$user") || { echo "stage.sh: unknown user '$user' (known: $(cl_user_names))" >&2; exit 2; }
[ -x "$CL_VENV/bin/python" ] || { echo "stage.sh: no venv yet; run: cargo xtask services up codalab" >&2; exit 2; }
export CODALAB_HOME; CODALAB_HOME=$(cl_client_home "$user")
export CODALAB_SESSION=main CODALAB_USERNAME=$user CODALAB_PASSWORD=$pw
exec "$CL_VENV/bin/python" -W ignore "$CL_SCRIPTS/stage.py" "$n" "$@"
