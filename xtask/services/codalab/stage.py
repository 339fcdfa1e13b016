"""Create N run bundles through codalab's own CLI code in ONE process, wait until they are staged.

Usage (see stage.sh, which sets CODALAB_HOME/SESSION/USERNAME/PASSWORD): stage.py N [cl run flags...]
Each bundle is `cl run <STAGE_COMMAND> <flags>` executed in-process by BundleCLI.do_command (the
same argument parsing, metadata defaults and REST requests as the `cl` command), so only the first
one pays for importing codalab. Prints the uuids on stdout, one per line, once all are `staged`.
"""
import io
import os
import re
import sys
import time

from codalab.lib.bundle_cli import BundleCLI
from codalab.lib.codalab_manager import CodaLabManager

UUID = re.compile(r'0x[0-9a-f]{32}')


def fail(msg):
    print('stage.sh: ' + msg, file=sys.stderr)
    sys.exit(1)


def main():
    n, flags = int(sys.argv[1]), sys.argv[2:]
    command = os.environ.get('STAGE_COMMAND', 'echo codalab-wm-test-{i}')
    timeout = float(os.environ.get('STAGE_TIMEOUT', '120'))
    manager = CodaLabManager()
    t0 = time.time()
    uuids = []
    for i in range(1, n + 1):
        out = io.StringIO()
        cli = BundleCLI(manager, headless=True, stdout=out, stderr=sys.stderr)
        argv = ['run', command.replace('{i}', str(i))] + flags
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
        bundles = client.fetch('bundles', params={'specs': uuids})
        states = {b['uuid']: b['state'] for b in bundles}
        if all(states.get(u) == 'staged' for u in uuids):
            break
        bad = {u: s for u, s in states.items() if s not in ('created', 'uploading', 'staged')}
        if bad:
            fail('bundles left the created->staged path: %s' % bad)
        if time.time() - t0 > timeout:
            fail('timeout after %.0f s; states: %s' % (timeout, states))
        time.sleep(0.5)
    for u in uuids:
        print(u)
    print(
        'stage.sh: %d bundle(s) created in %.1f s, all staged after %.1f s'
        % (n, t_created - t0, time.time() - t0),
        file=sys.stderr,
    )


if __name__ == '__main__':
    main()
