# common.sh -- shared settings of the codalab service scripts (sourced, not run).
# Layout under $SERVICES_DIR/codalab (git-ignored):
#   venv/           python venv: codalab==1.7.5 (--no-deps) + requirements-py311.txt
#   my.cnf mysql-data/   MariaDB config + datadir (127.0.0.1:$CL_MYSQL_PORT)
#   home/           CODALAB_HOME of the server processes (config.json, bundle store, worker sockets)
#   clients/<user>/ CODALAB_HOME of the CLI, one per user (cl.sh, stage.sh)
#   run/            pid files + MariaDB socket;  logs/  process logs
CL_SCRIPTS=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
CL_REPO=$(cd "$CL_SCRIPTS/../../.." && pwd)
SERVICES_DIR=${SERVICES_DIR:-$CL_REPO/.services}
CL_DIR=$SERVICES_DIR/codalab
CL_VENV=$CL_DIR/venv
CL_RUN=$CL_DIR/run
CL_LOGS=$CL_DIR/logs
CL_HOME=$CL_DIR/home
CL_REST_PORT=${CL_REST_PORT:-2900}
CL_MYSQL_PORT=${CL_MYSQL_PORT:-3316}
CL_URL=http://127.0.0.1:$CL_REST_PORT
# user table (name:password); `codalab` is the root user (user_id 0); `bench` is the bench's
# own (`cargo xtask bench` stages and removes thousands of bundles as bench, so no test sees them);
# `carol` is the user whose parallel_run_quota the dispatch tests set (nobody else's changes);
# `dave` and `erin` are the dispatch differential test's own (no other test leaves bundles of
# theirs staged, so their bundles' places in the server's dispatch order are the test's);
# `frank` is chaos's dispatch-stopped scenario's own (it runs beside the other scenarios, which
# revoke bob's tokens)
CL_USERS="codalab:codalab alice:alicepw bob:bobpw bench:benchpw carol:carolpw dave:davepw erin:erinpw frank:frankpw"

cl_user_names() {  # the user names of CL_USERS, space-separated
  local up names=""
  for up in $CL_USERS; do names="$names ${up%%:*}"; done
  echo "${names# }"
}

cl_password() {  # USER -> password, non-zero if unknown
  local up
  for up in $CL_USERS; do
    if [ "${up%%:*}" = "$1" ]; then echo "${up#*:}"; return 0; fi
  done
  return 1
}

# pid of a recorded service if it is alive and really ours (guards against stale pid files / pid reuse)
cl_pid() {  # NAME
  local f=$CL_RUN/$1.pid pid
  [ -f "$f" ] || return 1
  pid=$(cat "$f" 2>/dev/null) || return 1
  [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null || return 1
  tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -qF "$CL_DIR" || return 1
  echo "$pid"
}

cl_rest_ok() {  # 0 if the REST API answers 200 to the health probe
  [ "$(curl -s -o /dev/null -m 5 -w '%{http_code}' "$CL_URL/rest/bundles?keywords=.count" 2>/dev/null)" = 200 ]
}

cl_config_json() {  # SECRET -> config.json used by the server and by the CLI homes
  cat <<JSON
{
  "cli": {"default_address": "$CL_URL", "verbose": 1},
  "server": {
    "rest_host": "127.0.0.1",
    "rest_port": $CL_REST_PORT,
    "class": "MySQLModel",
    "engine_url": "mysql://codalab:codalab@127.0.0.1:$CL_MYSQL_PORT/codalab_bundles",
    "auth": {"class": "RestOAuthHandler"},
    "verbose": 1,
    "secret_key": "$1",
    "default_user_info": {"time_quota": "1y", "disk_quota": "1t", "edu_time_quota": "1y",
                          "edu_disk_quota": "1t", "parallel_run_quota": 100}
  },
  "ws-server": {"ws_port": 2901},
  "aliases": {"main": "$CL_URL", "localhost": "$CL_URL"},
  "workers": {"default_cpu_image": "codalab/default-cpu:latest",
              "default_gpu_image": "codalab/default-gpu:latest"}
}
JSON
}

cl_client_home() {  # USER -> prints its CLI CODALAB_HOME, creating config.json if missing
  local h=$CL_DIR/clients/$1
  if [ ! -f "$h/config.json" ]; then
    mkdir -p "$h"
    cl_config_json client-has-no-secret >"$h/config.json"
  fi
  echo "$h"
}
