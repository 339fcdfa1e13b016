#!/usr/bin/env bash
# cl.sh USER ARGS... -- run the venv's `cl` (CodaLab CLI 1.7.5) as USER against the local server.
# USER is one of the users up.sh creates: codalab (root, pw codalab), alice (alicepw), bob (bobpw), bench (benchpw: the bench's own), carol (carolpw: the quota tests').
# Each user has its own CODALAB_HOME ($SERVICES_DIR/codalab/clients/USER: config + cached token),
# CODALAB_SESSION=main; the password comes from CODALAB_USERNAME/CODALAB_PASSWORD (no prompt).
# Example: bash xtask/services/codalab/cl.sh alice run 'echo hi' --request-cpus 1 --request-memory 512m
# Each call is a new Python process: ~3-5 s of imports. For many bundles use stage.sh.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
[ $# -ge 1 ] || { echo "usage: cl.sh USER ARGS... (users: codalab alice bob)" >&2; exit 2; }
user=$1; shift
pw=$(cl_password "$user") || { echo "cl.sh: unknown user '$user' (known: $(cl_user_names))" >&2; exit 2; }
[ -x "$CL_VENV/bin/cl" ] || { echo "cl.sh: no venv yet; run: cargo xtask services up codalab" >&2; exit 2; }
export CODALAB_HOME; CODALAB_HOME=$(cl_client_home "$user")
export CODALAB_SESSION=main CODALAB_USERNAME=$user CODALAB_PASSWORD=$pw
export PYTHONWARNINGS=${PYTHONWARNINGS:-ignore}
exec "$CL_VENV/bin/cl" "$@"
