"""Print each state change of the given bundles until they settle (used by `cargo xtask demo`).

Usage (env as stage.sh sets it: CODALAB_HOME/SESSION/USERNAME/PASSWORD):
  watch.py [--timeout S] [--stays UUID]... UUID...
Prints `+12.3s  0x1234abcd  staged -> running` for every change. Exits 0 once every bundle is in a
final state (ready, failed, killed, worker_offline) and every --stays bundle is still staged (or in
the staged <-> starting flap); 1 on timeout or when a bundle fails. States are read 50 per request.
"""
import os
import sys
import time

from codalab.lib.codalab_manager import CodaLabManager

FINAL = ('ready', 'failed', 'killed', 'worker_offline')
CHUNK = 50


def main():
    args, stays, uuids, timeout = sys.argv[1:], [], [], 600.0
    while args:
        arg = args.pop(0)
        if arg == '--timeout':
            timeout = float(args.pop(0))
        elif arg == '--stays':
            stays.append(args.pop(0))
        else:
            uuids.append(arg)
    client = CodaLabManager().current_client()
    t0, last = time.time(), {}
    while True:
        states = {}
        for start in range(0, len(uuids + stays), CHUNK):
            chunk = (uuids + stays)[start : start + CHUNK]
            states.update({b['uuid']: b['state'] for b in client.fetch('bundles', params={'specs': chunk})})
        for uuid, state in states.items():
            if last.get(uuid) != state:
                was = last.get(uuid, '')
                arrow = '%s -> %s' % (was, state) if was else state
                print('+%5.1fs  %s  %s' % (time.time() - t0, uuid[:10], arrow), flush=True)
        last = states
        failed = [u for u in uuids if states.get(u) in FINAL and states[u] != 'ready']
        if failed:
            print('bundles failed: %s' % failed, file=sys.stderr)
            return 1
        if all(states.get(u) == 'ready' for u in uuids):
            moved = [u for u in stays if states.get(u) not in ('staged', 'starting')]
            if moved:
                print('bundles that no worker fits left staged: %s' % moved, file=sys.stderr)
                return 1
            return 0
        if time.time() - t0 > timeout:
            print('timeout after %.0f s: %s' % (timeout, states), file=sys.stderr)
            return 1
        time.sleep(0.5)


if __name__ == '__main__':
    sys.exit(main())
