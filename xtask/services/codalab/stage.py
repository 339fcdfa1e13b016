"""Create N run bundles through codalab's own CLI code in ONE process, wait until they are staged.

Usage (see stage.sh, which sets CODALAB_HOME/SESSION/USERNAME/PASSWORD): stage.py N [cl run flags...]
Each bundle is `cl run <STAGE_DEPS> <STAGE_COMMAND> <flags>` executed in-process by
BundleCLI.do_command (the same argument parsing, metadata defaults and REST requests as the `cl`
command), so only the first one pays for importing codalab. Prints the uuids on stdout, one per
line, once every bundle has reached `staged` (or gone past it: a worker may already have taken it).

The states are read CHUNK bundles per request (a URL naming thousands of uuids is refused with
"Request Line is too large"). A bundle that was dispatched to a worker that has since exited goes
staged -> starting -> staged (the server keeps a dead worker registered for ~60 s): `starting` and
every later state count as "reached staged"; only a failure state stops the wait.
"""
import io
import os
import re
import sys
import time

from codalab.lib.bundle_cli import BundleCLI
from codalab.lib.codalab_manager import CodaLabManager

UUID = re.compile(r'0x[0-9a-f]{32}')
CHUNK = 50  # ~2 KB of URL; gunicorn refuses request lines over 4094 bytes
BEFORE_STAGED = ('created', 'uploading', 'making')
FAILED = ('failed', 'killed', 'worker_offline')


def fail(msg):
    print('stage.sh: ' + msg, file=sys.stderr)
    sys.exit(1)


def main():
    n, flags = int(sys.argv[1]), sys.argv[2:]
    command = os.environ.get('STAGE_COMMAND', 'echo codalab-wm-test-{i}')
    deps = os.environ.get('STAGE_DEPS', '').split()
    timeout = float(os.environ.get('STAGE_TIMEOUT', '120'))
    manager = CodaLabManager()
    t0 = time.time()
    uuids = []
    for i in range(1, n + 1):
        out = io.StringIO()
        cli = BundleCLI(manager, headless=True, stdout=out, stderr=sys.stderr)
        argv = ['run'] + deps + [command.replace('{i}', str(i))] + flags
        try:
            cli.do_command(argv)
        except SystemExit as e:
            fail('cl %s exited with %s: %s' % (' '.join(argv), e.code, out.getvalue().strip()))
        except Exception as e:  # UsageError, PermissionError, NotFoundError ... from the CLI/server
            fail('cl %s failed: %s: %s' % (' '.join(argv), type(e).__name__, e))
        found = UUID.findall(out.getvalue())
        if not found:
            fail('cl %s printed no uuid: %r' % (' '.join(argv), out.getvalue()))
        uuids.append(found[-1])
    t_created = time.time()

    client = manager.current_client()
    states = {}
    while True:
        for start in range(0, len(uuids), CHUNK):
            chunk = [u for u in uuids[start : start + CHUNK] if states.get(u) in (None,) + BEFORE_STAGED]
            if chunk:
                states.update({b['uuid']: b['state'] for b in client.fetch('bundles', params={'specs': chunk})})
        bad = {u: s for u, s in states.items() if s in FAILED}
        if bad:
            fail('bundles failed before they were staged: %s' % bad)
        waiting = {u: states.get(u) for u in uuids if states.get(u) in (None,) + BEFORE_STAGED}
        if not waiting:
            break
        if time.time() - t0 > timeout:
            fail('timeout after %.0f s; %d not staged yet, e.g. %s' % (timeout, len(waiting), dict(list(waiting.items())[:5])))
        time.sleep(0.5)
    for u in uuids:
        print(u)
    print(
        'stage.sh: %d bundle(s) created in %.1f s, all staged (or further) after %.1f s'
        % (n, t_created - t0, time.time() - t0),
        file=sys.stderr,
    )


if __name__ == '__main__':
    main()
