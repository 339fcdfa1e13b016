# Shared settings of the azure-mock service scripts (sourced, not run). Run from the
# repository root with SERVICES_DIR set, as `cargo xtask services …` does.
SERVICES_DIR="${SERVICES_DIR:-$PWD/.services}"
STATE="$SERVICES_DIR/azure-mock"
HERE="$(pwd)/xtask/services/azure-mock"
SPEC_DIR="$(pwd)/crates/backend-azure/spec"
HOST=127.0.0.1
PORT=4010
PID_FILE="$STATE/prism.pid"
LOG_FILE="$STATE/prism.log"
PRISM="$STATE/node_modules/.bin/prism"

# The pid of our prism if it is alive, else nothing.
mock_pid() {
  [ -f "$PID_FILE" ] || return 1
  local pid
  pid="$(cat "$PID_FILE")"
  [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null && echo "$pid"
}

# Whether something accepts connections on HOST:PORT.
port_answers() {
  (exec 3<>"/dev/tcp/$HOST/$PORT") 2>/dev/null
}
