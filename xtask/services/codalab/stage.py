"""Create N run bundles through codalab's own CLI code, in bulk, and wait until they are staged
(STAGE_WAIT=0: print them once created, e.g. while a dependency holds them back).

Usage (see stage.sh, which sets CODALAB_HOME/SESSION/USERNAME/PASSWORD): stage.py N [cl run flags...]
`cl run <STAGE_DEPS> <STAGE_COMMAND> <flags>` is executed in-process by BundleCLI.do_command once
(the same argument parsing, worksheet and dependency resolution, and metadata defaults as the `cl`
command), with the client's `create` call caught: that yields the bundle `cl run` would create. The
N bundles are then created from it by the server's own bulk create (`POST /rest/bundles` with a
list, as the CLI's JsonApiClient.create sends it; CHUNK bundles per request), each with its own
command ({i} = 1..N). They are created detached, then given the worksheet's group permissions (the
request `cl perm` sends): that is what `cl run` gives a bundle (the server copies them from the
worksheet it adds the bundle to), without the worksheet item: a worksheet of thousands of items
makes every further create slower (20-35 ms per bundle instead of 8), and a bundle with no group
permission at all is invisible to every search, its owner's included. So thousands of bundles
take seconds, not one `cl run` each.

The states are read CHUNK_STATES uuids per request (a URL naming thousands of uuids is refused with
"Request Line is too large"), only for bundles not yet staged. A bundle that was dispatched to a
worker that has since exited goes staged -> starting -> staged (the server keeps a dead worker
registered for ~60 s): `starting` and every later state count as "reached staged"; only a
failure state stops the wait. Prints the uuids on stdout, one per line, once all are staged.
"""
import copy
import io
import os
import sys
import time

from codalab.client.json_api_client import JsonApiRelationship
from codalab.lib.bundle_cli import BundleCLI
from codalab.lib.codalab_manager import CodaLabManager

CHUNK = 250  # bundles per bulk create request (~0.1 MB of JSON, a few seconds of server work)
CHUNK_STATES = 80  # ~3.4 KB of URL; gunicorn refuses request lines over 4094 bytes
MARK = '__stage_i__'
BEFORE_STAGED = ('created', 'uploading', 'making')
FAILED = ('failed', 'killed', 'worker_offline')


def fail(msg):
    print('stage.sh: ' + msg, file=sys.stderr)
    sys.exit(1)


def template(manager, argv):
    """The bundle `cl run argv` would create, with MARK where {i} goes, and its worksheet."""
    client = manager.current_client()
    caught = []

    def create(resource_type, data, params=None):
        if resource_type != 'bundles' or caught:
            fail('cl run made an unexpected create call: %s' % resource_type)
        caught.append((data, params['worksheet']))
        return {'uuid': '0x' + '0' * 32, 'id': '0x' + '0' * 32}

    client.create = create
    out = io.StringIO()
    cli = BundleCLI(manager, headless=True, stdout=out, stderr=sys.stderr)
    try:
        cli.do_command(argv)
    except SystemExit as e:
        fail('cl %s exited with %s: %s' % (' '.join(argv), e.code, out.getvalue().strip()))
    except Exception as e:  # UsageError, PermissionError, NotFoundError ... from the CLI/server
        fail('cl %s failed: %s: %s' % (' '.join(argv), type(e).__name__, e))
    finally:
        del client.create  # back to the class's method
    if not caught:
        fail('cl %s did not create a bundle' % ' '.join(argv))
    return caught[0]


def fill(value, i):
    """`value` with MARK replaced by `i` in every string."""
    if isinstance(value, str):
        return value.replace(MARK, str(i))
    if isinstance(value, dict):
        return {k: fill(v, i) for k, v in value.items()}
    if isinstance(value, list):
        return [fill(v, i) for v in value]
    return value


def worksheet_permissions(client, worksheet):
    """(group uuid, permission) of each group permission of `worksheet`."""
    info = client.fetch('worksheets', worksheet, params={'include': ['group_permissions']})
    return [(p['group'].id_, p['permission']) for p in info.get('group_permissions') or []]


def create_all(client, bundle, worksheet, n):
    permissions = worksheet_permissions(client, worksheet)
    uuids = []
    for start in range(1, n + 1, CHUNK):
        batch = [fill(copy.deepcopy(bundle), i) for i in range(start, min(start + CHUNK, n + 1))]
        created = [b['uuid'] for b in client.create('bundles', batch, params={'detached': 1})]
        grants = [
            {
                'group': JsonApiRelationship('groups', group),
                'bundle': JsonApiRelationship('bundles', uuid),
                'permission': permission,
            }
            for uuid in created
            for group, permission in permissions
        ]
        if grants:
            client.create('bundle-permissions', grants)
        uuids.extend(created)
    if len(uuids) != n:
        fail('the server created %d bundles, not %d' % (len(uuids), n))
    return uuids


def wait_staged(client, uuids, t0, timeout):
    states = {}
    while True:
        todo = [u for u in uuids if states.get(u) in (None,) + BEFORE_STAGED]
        for start in range(0, len(todo), CHUNK_STATES):
            chunk = todo[start : start + CHUNK_STATES]
            states.update({b['uuid']: b['state'] for b in client.fetch('bundles', params={'specs': chunk})})
        bad = {u: s for u, s in states.items() if s in FAILED}
        if bad:
            fail('bundles failed before they were staged: %s' % dict(list(bad.items())[:5]))
        waiting = {u: states.get(u) for u in uuids if states.get(u) in (None,) + BEFORE_STAGED}
        if not waiting:
            return
        if time.time() - t0 > timeout:
            fail('timeout after %.0f s; %d not staged yet, e.g. %s' % (timeout, len(waiting), dict(list(waiting.items())[:5])))
        time.sleep(0.5)


def main():
    n, flags = int(sys.argv[1]), sys.argv[2:]
    command = os.environ.get('STAGE_COMMAND', 'echo codalab-wm-test-{i}')
    deps = os.environ.get('STAGE_DEPS', '').split()
    timeout = float(os.environ.get('STAGE_TIMEOUT', '120'))
    wait = os.environ.get('STAGE_WAIT', '1') != '0'
    manager = CodaLabManager()
    t0 = time.time()
    uuids = []
    if n > 0:
        bundle, worksheet = template(manager, ['run'] + deps + [command.replace('{i}', MARK)] + flags)
        client = manager.current_client()
        uuids = create_all(client, bundle, worksheet, n)
        t_created = time.time()
        if wait:
            wait_staged(client, uuids, t0, timeout + (t_created - t0))
    for u in uuids:
        print(u)
    print(
        'stage.sh: %d bundle(s) created in %.1f s, %s after %.1f s'
        % (
            n,
            (t_created if n else t0) - t0,
            'all staged (or further)' if wait else 'not waited for (STAGE_WAIT=0)',
            time.time() - t0,
        ),
        file=sys.stderr,
    )


if __name__ == '__main__':
    main()
