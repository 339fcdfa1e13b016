#!/usr/bin/env bash
# up.sh -- install (when missing) and start a real CodaLab Worksheets 1.7.5 server for tests.
# Run as `cargo xtask services up codalab` (or `bash xtask/services/codalab/up.sh` from anywhere;
# SERVICES_DIR defaults to <repo>/.services). Needs root on Debian bookworm with CPython 3.11.
#
# What it starts (everything bound to 127.0.0.1 only; state under $SERVICES_DIR/codalab, see common.sh):
#   mariadbd          127.0.0.1:3316, own my.cnf/datadir/socket (Debian's mariadb-server package,
#                     started by hand: no systemd needed; DB codalab_bundles, user codalab/codalab)
#   cl-server (REST)  127.0.0.1:2900, gunicorn gthread, 1 worker process x 10 threads (+ its master)
#   cl-bundle-manager --sleep-time 1 (no port): moves bundles created -> staged (-> starting if a
#                     worker checks in)
#   no cl-ws-server: not needed for the REST API nor for staging (see launch.py).
# Users (refreshed on every up, verified + has_access): CL_USERS in common.sh says who they are and
# whose each is; root is codalab/codalab. Each has a home worksheet; CLI homes under
# clients/<user> (used by cl.sh and stage.sh).
# Health probe: GET http://127.0.0.1:2900/rest/bundles?keywords=.count -> 200 (no auth).
# Idempotent: only what is not running is started ("already running" otherwise); waits at most
# 120 s for REST. Stop with down.sh (`down.sh --purge` also deletes DB, homes and logs; the venv stays).
#
# Timings measured 2026-11-21 on the 2-core dev machine (while others compiled Rust):
#   fresh (MariaDB packages missing, no venv, empty pip cache): 110 s for up.sh = apt 9.5 s (update +
#     install) + pip 94 s + datadir/tables/users 4 s + REST answering 2.8 s after launch;
#     `cargo xtask services up codalab` 152 s wall incl. compiling xtask. A second venv build with
#     PIP_NO_CACHE_DIR=1 took 76 s; reference runs took 135-218 s for pip: budget ~2-4 min.
#   fresh data, venv kept (after `down.sh --purge`): 5 s.
#   warm restart after down (venv + data kept): 3.2-4.4 s (REST answers 2.4-3.3 s after launch).
#   up while already running: 2.2 s ("already running", users refreshed).   down: ~6 s.
#   stage.sh alice 12 ...: ~3 s (2 s of imports, 0.4-0.9 s to create 12, staged within ~1 s).
#
# Pitfalls handled:
#   - `pip install codalab==1.7.5` fails on py3.11 (apache-beam 2.38 has no 3.11 build): codalab is
#     installed --no-deps, then requirements-py311.txt (upstream pins; 7 changed, each one commented).
#   - SQLite cannot be used (SQLiteModel is in-memory only) -> MariaDB, run without systemd;
#     mariadbd as root needs user=root; latin1 like upstream's mysql:5.5; socket auth for root;
#     apt's postinst is kept from starting the system MariaDB on :3306 (temporary policy-rc.d, unless
#     the image already has one, as Docker-built Debian images do).
#   - the server hard-codes the ws-server ping (the worker wake-up) with an asyncio call that breaks on
#     py3.11: launch.py replaces it by waiting for the worker's next check-in before a send (only hit
#     when messaging a worker; nothing in site-packages is edited). Checked: the dispatch differential
#     test's bundle-manager log shows no refused send and no bundle offered to a second worker.
#   - one up at a time (flock on up.lock); daemons are started with that fd closed, otherwise they
#     would hold the lock forever and the next up would hang.
#   - tables are created by the first model() call (create_users.py runs before the services on a
#     fresh DB, so the REST server and the bundle manager do not race on CREATE TABLE).
#   - pid files are checked against /proc/<pid>/cmdline (stale pid files after a machine hand-over);
#     a foreign listener on 2900/3316 is reported instead of silently "answering".
#   - home worksheets are created once per user over REST (the server creates one on the first
#     `specs=/` lookup; doing it here keeps concurrent first `cl run`s of a user from racing on it).
#   - a fresh client CODALAB_HOME would point at worksheets.codalab.org: each gets a local config.json.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

CL_PYTHON=${CL_PYTHON:-python3}
T0=$(date +%s.%N)
since() { awk -v a="$1" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b-a}'; }
log() { echo "[codalab up +$(since "$T0")s] $*"; }
die() { echo "[codalab up] ERROR: $*" >&2; exit 1; }
port_busy() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
port_taken() {  # PORT: fail, naming the listener (e.g. an instance of another clone: stop it with ITS down.sh)
  local who
  who=$(ss -ltnpH "sport = :$1" 2>/dev/null | grep -o 'pid=[0-9]*' | head -1 | cut -d= -f2)
  [ -n "$who" ] && who=" by pid $who: $(tr '\0' ' ' <"/proc/$who/cmdline" 2>/dev/null | cut -c1-200)"
  die "127.0.0.1:$1 is taken$who -- not ours (ours live under $CL_DIR)"
}

mkdir -p "$CL_RUN" "$CL_LOGS" "$CL_HOME" "$CL_DIR/clients"
# one up at a time (the long-running children are started with fd 9 closed, so they never hold it)
exec 9>"$CL_DIR/up.lock"
flock -w 900 9 || die "another up.sh has held $CL_DIR/up.lock for 15 min"

# ------------------------------------------------------------------ 1. Debian packages
need=()
[ -x /usr/sbin/mariadbd ] || need+=(mariadb-server)
command -v mariadb >/dev/null 2>&1 && command -v mariadb-admin >/dev/null 2>&1 \
  && command -v mariadb-install-db >/dev/null 2>&1 || need+=(mariadb-client)
[ -e /usr/include/mariadb/mysql.h ] || need+=(default-libmysqlclient-dev)
command -v pkg-config >/dev/null 2>&1 || need+=(pkg-config)
{ command -v gcc && command -v g++ && command -v make; } >/dev/null 2>&1 || need+=(build-essential)
command -v curl >/dev/null 2>&1 || need+=(curl)
command -v flock >/dev/null 2>&1 || need+=(util-linux)
"$CL_PYTHON" -c 'import venv, ensurepip' 2>/dev/null || need+=(python3-venv)  # Debian's own python3 only
if [ ${#need[@]} -gt 0 ]; then
  [ "$(id -u)" = 0 ] || die "missing Debian packages (${need[*]}) and not root"
  log "apt-get install ${need[*]} (log: $CL_LOGS/apt.log)"
  # keep the packages' postinst from starting the system MariaDB (it is not ours, it would sit on :3306)
  policy_rc=""
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d && chmod 755 /usr/sbin/policy-rc.d
    policy_rc=/usr/sbin/policy-rc.d
    trap 'rm -f /usr/sbin/policy-rc.d' EXIT
  fi
  apt-get -o DPkg::Lock::Timeout=600 update -q >"$CL_LOGS/apt.log" 2>&1 \
    || { tail -20 "$CL_LOGS/apt.log" >&2; die "apt-get update failed"; }
  DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -q --no-install-recommends \
    "${need[@]}" >>"$CL_LOGS/apt.log" 2>&1 || { tail -30 "$CL_LOGS/apt.log" >&2; die "apt-get install failed"; }
  if [ -n "$policy_rc" ]; then rm -f "$policy_rc"; trap - EXIT; fi
  log "apt packages installed"
fi

# ------------------------------------------------------------------ 2. python venv
REQ=$CL_SCRIPTS/requirements-py311.txt
# The stamp names the venv's path: a venv's scripts (cl, cl-worker) name their interpreter by
# path, so one copied or moved from another checkout is rebuilt, not run broken.
want_stamp="codalab==1.7.5 $(sha256sum "$REQ" | cut -c1-16) in $CL_VENV"
if [ "$(cat "$CL_VENV/.codalab-ready" 2>/dev/null)" != "$want_stamp" ]; then
  [ -e "$CL_VENV/.codalab-ready" ] && rm -rf "$CL_VENV"
  "$CL_PYTHON" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))' \
    || log "WARNING: $CL_PYTHON is not CPython 3.11; requirements-py311.txt is made for 3.11"
  log "installing codalab==1.7.5 + requirements-py311.txt into $CL_VENV (several minutes; log: $CL_LOGS/pip.log)"
  [ -x "$CL_VENV/bin/python" ] || "$CL_PYTHON" -m venv "$CL_VENV"
  { "$CL_VENV/bin/pip" install --no-deps codalab==1.7.5 \
      && "$CL_VENV/bin/pip" install -r "$REQ"; } >"$CL_LOGS/pip.log" 2>&1 \
    || { tail -30 "$CL_LOGS/pip.log" >&2; die "pip install failed (see $CL_LOGS/pip.log)"; }
  "$CL_VENV/bin/python" -W ignore -c 'import codalab.lib.bundle_cli, MySQLdb, gunicorn, apache_beam.io.filesystems' \
    >>"$CL_LOGS/pip.log" 2>&1 || { tail -30 "$CL_LOGS/pip.log" >&2; die "venv does not import codalab"; }
  echo "$want_stamp" >"$CL_VENV/.codalab-ready"
  log "venv ready"
fi
PY=$CL_VENV/bin/python

# ------------------------------------------------------------------ 3. MariaDB
MYCNF=$CL_DIR/my.cnf
cat >"$MYCNF" <<EOF
[mysqld]
datadir=$CL_DIR/mysql-data
socket=$CL_RUN/mysqld.sock
pid-file=$CL_RUN/mariadbd.internal.pid
bind-address=127.0.0.1
port=$CL_MYSQL_PORT
user=root
skip-name-resolve
log-error=$CL_LOGS/mariadbd.err
character-set-server=latin1
collation-server=latin1_swedish_ci
innodb_buffer_pool_size=64M
[client]
socket=$CL_RUN/mysqld.sock
port=$CL_MYSQL_PORT
EOF
if [ ! -d "$CL_DIR/mysql-data/mysql" ]; then
  log "initialising the MariaDB datadir"
  rm -rf "$CL_DIR/mysql-data"
  mariadb-install-db --defaults-file="$MYCNF" --auth-root-authentication-method=socket \
    >"$CL_LOGS/mariadb-install-db.log" 2>&1 || { tail -20 "$CL_LOGS/mariadb-install-db.log" >&2; die "mariadb-install-db failed"; }
fi
if pid=$(cl_pid mariadbd); then
  log "mariadbd already running (pid $pid)"
else
  port_busy "$CL_MYSQL_PORT" && port_taken "$CL_MYSQL_PORT"
  setsid nohup /usr/sbin/mariadbd --defaults-file="$MYCNF" >>"$CL_LOGS/mariadbd.out" 2>&1 </dev/null 9>&- &
  echo $! >"$CL_RUN/mariadbd.pid"
  log "started mariadbd on 127.0.0.1:$CL_MYSQL_PORT (pid $!)"
fi
for _ in $(seq 1 120); do
  mariadb-admin --defaults-file="$MYCNF" ping >/dev/null 2>&1 && break
  cl_pid mariadbd >/dev/null || { tail -20 "$CL_LOGS/mariadbd.err" >&2; die "mariadbd died"; }
  sleep 0.25
done
mariadb-admin --defaults-file="$MYCNF" ping >/dev/null 2>&1 || die "MariaDB did not answer in 30 s ($CL_LOGS/mariadbd.err)"
mariadb --defaults-file="$MYCNF" <<'EOF'
CREATE DATABASE IF NOT EXISTS codalab_bundles CHARACTER SET latin1 COLLATE latin1_swedish_ci;
CREATE USER IF NOT EXISTS 'codalab'@'127.0.0.1' IDENTIFIED BY 'codalab';
GRANT ALL ON codalab_bundles.* TO 'codalab'@'127.0.0.1';
EOF
tables=$(mariadb --defaults-file="$MYCNF" -N -e "SELECT COUNT(*) FROM information_schema.tables WHERE table_schema='codalab_bundles'")
log "MariaDB up ($tables tables)"

# ------------------------------------------------------------------ 4. server config, users
export CODALAB_HOME=$CL_HOME
if [ ! -f "$CL_HOME/config.json" ]; then
  cl_config_json "$(head -c 36 /dev/urandom | base64 | tr -d '/+=\n')" >"$CL_HOME/config.json"
fi
users_pid=""
if [ "$tables" -eq 0 ]; then
  # fresh DB: create the tables (first model() call) before two processes race on it
  "$PY" "$CL_SCRIPTS/create_users.py" $CL_USERS >"$CL_LOGS/create_users.log" 2>&1 \
    || { tail -20 "$CL_LOGS/create_users.log" >&2; die "creating the tables/users failed"; }
  log "tables and users created"
else
  "$PY" "$CL_SCRIPTS/create_users.py" $CL_USERS >"$CL_LOGS/create_users.log" 2>&1 &
  users_pid=$!
fi

# ------------------------------------------------------------------ 5. REST server, bundle manager
start_svc() {  # NAME ARGS... (launched through launch.py, pid recorded in run/NAME.pid)
  local name=$1 pid; shift
  if pid=$(cl_pid "$name"); then log "$name already running (pid $pid)"; return; fi
  setsid nohup "$PY" "$CL_SCRIPTS/launch.py" "$name" "$@" >>"$CL_LOGS/$name.log" 2>&1 </dev/null 9>&- &
  echo $! >"$CL_RUN/$name.pid"
  log "started $name (pid $!)"
}
if ! cl_pid rest-server >/dev/null && port_busy "$CL_REST_PORT"; then
  port_taken "$CL_REST_PORT"
fi
start_svc rest-server --processes 1 --threads 10
start_svc bundle-manager --sleep-time 1
T_REST=$(date +%s.%N)
for _ in $(seq 1 480); do
  cl_rest_ok && break
  cl_pid rest-server >/dev/null || { tail -30 "$CL_LOGS/rest-server.log" >&2; die "rest-server died"; }
  sleep 0.25
done
cl_rest_ok || { tail -30 "$CL_LOGS/rest-server.log" >&2; die "REST did not answer within 120 s"; }
log "REST answers on $CL_URL (waited $(since "$T_REST")s)"
if [ -n "$users_pid" ]; then
  wait "$users_pid" || { tail -20 "$CL_LOGS/create_users.log" >&2; die "refreshing the users failed"; }
  log "users refreshed"
fi
cl_pid bundle-manager >/dev/null || { tail -30 "$CL_LOGS/bundle-manager.log" >&2; die "bundle-manager died"; }

# ------------------------------------------------------------------ 6. logins, home worksheets, CLI homes
for up in $CL_USERS; do
  u=${up%%:*}; p=${up#*:}
  cl_client_home "$u" >/dev/null
  tok=$(curl -sf -m 20 -u codalab_cli_client: -H 'X-Requested-With: XMLHttpRequest' \
          --data-urlencode grant_type=password --data-urlencode "username=$u" --data-urlencode "password=$p" \
          "$CL_URL/rest/oauth2/token" | "$PY" -c 'import json,sys; print(json.load(sys.stdin)["access_token"])') \
    || die "login as $u failed"
  # GET worksheets?specs=/ creates the user's home worksheet if it does not exist yet
  curl -sf -m 20 -o /dev/null -H "Authorization: Bearer $tok" -H 'X-Requested-With: XMLHttpRequest' \
    "$CL_URL/rest/worksheets?specs=%2F" || die "home worksheet of $u"
done
log "users ready: $(echo "$CL_USERS" | sed 's/:/\//g; s/ /, /g') (codalab is root; login checked, home worksheets exist)"
log "done in $(since "$T0")s. REST $CL_URL; CLI: bash xtask/services/codalab/cl.sh USER ARGS...; logs $CL_LOGS"
