"""Start a codalab 1.7.5 server process with the one runtime patch it needs here.

Usage: venv/bin/python launch.py rest-server|bundle-manager [args of cl-server / cl-bundle-manager]

Patch (applied in this process only; site-packages is not modified): the worker wake-up.
  Upstream sends a message to a worker (e.g. "run this bundle") in two steps: it wakes the
  worker through the websocket server (cl-ws-server, hard-coded at ws://ws-server:2901, the
  docker-compose host name), which makes the worker check in at once, and then hands the
  message to that check-in: a check-in waits on the server up to 5 s (a long poll on a Unix
  socket under CODALAB_HOME/worker_sockets) and takes one message; a send that finds no
  check-in waiting gives up after 1 s and the bundle goes back to staged. Neither half of the
  wake-up runs on Python 3.11: WorkerModel._ping_worker_ws raises "TypeError: Passing
  coroutines is forbidden" (loop.run_until_complete(asyncio.wait([coroutine]))), which aborts
  the dispatch, and cl-worker 1.7.5's websocket listener fails the same way. Without a
  wake-up a second bundle for one worker in one dispatch finds no check-in waiting, and the
  bundle manager offers it to the next worker in its order: where a bundle runs would depend
  on the workers' check-in timing, not on the dispatch rules.
  So the ping is replaced by what it achieves: before a send to a worker that is running (a
  process on this machine whose command line has `--id <worker id>`, or the process the
  default id `host(pid)` names), wait (at most WAKE_UP_SECONDS) until a check-in of it listens
  on its socket (a listening socket at that path in /proc/net/unix), then send as upstream
  does. A live worker checks in every few seconds; one that does not (partitioned) costs the
  wait and then the send fails as upstream's would. A worker whose process has ended is not
  waited for: upstream's ws-server has no connection to wake it (cl-ws-server's ping finds
  its closed websocket and gives up), so the send fails after its own 1 s timeout, and the
  bundle manager, which lists an ended worker until its check-ins are 60 s old, offers the
  bundle to the next worker. Waiting 8 s there made each such offer cost 9 s where
  production's costs 1. Creating bundles and staging them (created -> staged) never reaches
  this code; the patch only matters if something checks in as a worker.
"""
import logging
import os
import re
import sys
import time


WAKE_UP_SECONDS = 8.0
ACCEPTING_CONNECTIONS = 0x10000  # __SO_ACCEPTCON in /proc/net/unix's Flags column


def listening(path):
    """Whether a socket listens at `path` (a check-in waits on it)."""
    with open('/proc/net/unix') as table:
        next(table)
        for line in table:
            fields = line.split()
            if len(fields) >= 8 and fields[7] == path and int(fields[3], 16) & ACCEPTING_CONNECTIONS:
                return True
    return False


def running(worker_id):
    """Whether the worker `worker_id` has a live process here (all workers run on this machine:
    local and Slurm jobs, and containers of the local Docker engine, whose processes /proc
    lists too)."""
    default = re.fullmatch(r'.*\((\d+)\)', worker_id)
    if default and os.path.exists('/proc/%s' % default.group(1)):
        return True
    wanted = b'\0--id\0' + worker_id.encode() + b'\0'
    for pid in os.listdir('/proc'):
        if not pid.isdigit():
            continue
        try:
            with open('/proc/%s/cmdline' % pid, 'rb') as cmdline:
                if wanted in b'\0' + cmdline.read():
                    return True
        except OSError:
            continue  # ended meanwhile, or not ours to read
    return False


def wait_for_checkin(path, seconds):
    deadline = time.monotonic() + seconds
    while not listening(path) and time.monotonic() < deadline:
        time.sleep(0.05)


def patch():
    from codalab.model import worker_model

    model = worker_model.WorkerModel
    upstream_send = model.send_json_message

    def _ping_worker_ws(self, worker_id):
        logging.debug("no ws-server: waiting for worker %s to check in instead", worker_id)

    def send_json_message(self, socket_id, worker_id, message, timeout_secs, autoretry=True):
        if running(worker_id):
            wait_for_checkin(os.path.abspath(self._socket_path(socket_id)), WAKE_UP_SECONDS)
        else:
            logging.debug("worker %s has no process: not woken, as upstream's ws-server", worker_id)
        return upstream_send(self, socket_id, worker_id, message, timeout_secs, autoretry)

    model._ping_worker_ws = _ping_worker_ws
    model.send_json_message = send_json_message


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    which = sys.argv[1]
    sys.argv = ['cl-' + which] + sys.argv[2:]
    patch()
    if which == 'rest-server':
        from codalab.bin.server import main as entry  # = cl-server (gunicorn, binds server.rest_host)
    elif which == 'bundle-manager':
        from codalab.bin.bundle_manager import main as entry  # = cl-bundle-manager
    else:
        sys.exit('unknown service %r' % which)
    sys.exit(entry())


if __name__ == '__main__':
    main()
