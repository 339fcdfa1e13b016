"""Start a codalab 1.7.5 server process with the one runtime patch it needs here.

Usage: venv/bin/python launch.py rest-server|bundle-manager [args of cl-server / cl-bundle-manager]

Patch (applied in this process only; site-packages is not modified):
  WorkerModel._ping_worker_ws. Before each message to a worker (e.g. "run this bundle"),
  upstream wakes the worker through the websocket server (cl-ws-server, hard-coded at
  ws://ws-server:2901, the docker-compose host name) with
  loop.run_until_complete(asyncio.wait([coroutine])). On Python 3.11 that raises
  "TypeError: Passing coroutines is forbidden", which aborts the dispatch. We run no
  ws-server (cl-worker 1.7.5's own websocket listener fails the same way on Python 3.11), so
  the ping becomes a no-op. The ping is only a wake-up: a message reaches a worker while its
  check-in waits on the server (a long poll on a Unix socket under CODALAB_HOME/worker_sockets,
  up to 5 s, one message a check-in); a send that finds no check-in waiting gives up after 1 s
  and the bundle goes back to staged for the next iteration. So a second bundle for one worker
  in one iteration often waits for that worker's next check-in (seconds, not minutes).
  Creating bundles and staging them (created -> staged) never reaches this code; the patch only
  matters if something checks in as a worker.
"""
import logging
import sys


def patch():
    from codalab.model import worker_model

    def _ping_worker_ws(self, worker_id):
        logging.debug("no ws-server: not pinging worker %s (it gets the message at check-in)", worker_id)

    worker_model.WorkerModel._ping_worker_ws = _ping_worker_ws


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
