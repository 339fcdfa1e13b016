"""Captures what upstream's own `cl-worker-manager … slurm-batch` (codalab-worksheets v1.7.5,
`codalab/worker_manager/{main,worker_manager,slurm_batch_worker_manager}.py`, unmodified)
writes for a few command lines (only the facts the test compares: the #SBATCH lines, the srun
line and whether the credentials check is there): the argv is parsed by upstream's `main()` and the job script
is built by its `SlurmBatchWorkerManager`; nothing is submitted.

    git -C <codalab-worksheets checkout> archive v1.7.5 codalab/worker_manager | tar -x -C SRC
    python3 make_captures.py SRC > captures.json

Only what would touch the machine or the server is replaced: the CodaLab client (the modules
upstream imports for it), the other backends' modules, `run_command` (squeue, sbatch), the
scratch directory's mkdir, and `uuid4` (a fixed launch id). The password file is read, as
upstream does, from the working directory (`pw`), so it is given as a relative path.
"""

import json
import os
import sys
import tempfile
import types
import uuid

UNIQUE = '0123456789abcdef0123456789abcdef'
SERVER = 'http://127.0.0.1:2900'

# Each flag set as a user types it after the program name.
FLAG_SETS = {
    'defaults': ['--server', SERVER, 'slurm-batch', '--partition', 'cpu', '--user', 'alice',
                 '--account', 'nlp'],
    'every-option': [
        '--server', SERVER, '--worker-tag', 'gpuq', '--worker-tag-exclusive',
        '--worker-work-dir-prefix', '/scratch', '--worker-max-work-dir-size', '88g',
        '--worker-idle-seconds', '60', '--worker-group', 'nlp', '--worker-exit-on-exception',
        'slurm-batch', '--partition', 'gpu', '--user', 'alice', '--job-name', 'jn',
        '--nodelist', 'node[1-2]', '--exclude', 'node3,node4', '--cpus', '4', '--gpus', '2',
        '--gpu-type', 'a100', '--constraint', 'avx2', '--memory-mb', '16384',
        '--time', '1-12:00:00', '--account', 'nlp', '--slurm-work-dir', '/scratch/wm'],
    # Upstream's only place for --password-file: after the backend name.
    'password-file': ['--server', SERVER, 'slurm-batch', '--partition', 'cpu', '--user', 'bob',
                      '--account', 'nlp', '--password-file', 'pw'],
}


def stub(name, **attrs):
    module = types.ModuleType(name)
    module.__dict__.update(attrs)
    sys.modules[name] = module


class OtherBackend:
    DESCRIPTION = 'stub'

    @staticmethod
    def add_arguments_to_subparser(subparser):
        pass


def install_stubs():
    class CodaLabManager:
        def __init__(self, temporary=True):
            pass

        def client(self, server):
            return None

    stub('psutil')
    stub('codalab.common', NotFoundError=Exception, LoginPermissionError=Exception)
    stub('codalab.client')
    stub('codalab.client.json_api_client', JsonApiException=Exception)
    stub('codalab.lib')
    stub('codalab.lib.codalab_manager', CodaLabManager=CodaLabManager)
    stub('codalab.lib.formatting', parse_size=int)
    stub('codalab.worker')
    stub('codalab.worker.bundle_state', State=None)
    for module, cls, name in [
        ('aws_batch_worker_manager', 'AWSBatchWorkerManager', 'aws-batch'),
        ('azure_batch_worker_manager', 'AzureBatchWorkerManager', 'azure-batch'),
        ('kubernetes_worker_manager', 'KubernetesWorkerManager', 'kubernetes'),
    ]:
        stub('codalab.worker_manager.' + module, **{cls: type(cls, (OtherBackend,), {'NAME': name})})


def facts(script):
    """What the test compares, and only that (the scripts themselves are not kept): the
    #SBATCH lines, the srun line, whether the script checks the credentials' variables."""
    lines = script.splitlines()
    return {
        'sbatch': [line for line in lines if line.startswith('#SBATCH')],
        'srun': [line for line in lines if 'srun' in line][-1],
        'checks_credentials': 'CODALAB_PASSWORD' in script,
    }


def capture(src):
    sys.path.insert(0, src)
    install_stubs()
    from codalab.worker_manager import main as upstream_main
    from codalab.worker_manager.slurm_batch_worker_manager import SlurmBatchWorkerManager
    from pathlib import Path

    captured = {}
    SlurmBatchWorkerManager.run_command = lambda self, command, verbose=True: ''
    SlurmBatchWorkerManager.setup_slurm_work_directory = (
        lambda self, worker_id: Path(self.args.slurm_work_dir, worker_id))
    original = SlurmBatchWorkerManager.create_job_definition

    def keep(self, slurm_args, command):
        captured['script'] = original(self, slurm_args=slurm_args, command=command)
        return captured['script']

    SlurmBatchWorkerManager.create_job_definition = keep

    def one_launch(self):
        self.args.dry_run = True
        self.start_worker_job()

    SlurmBatchWorkerManager.run_loop = one_launch
    uuid.uuid4 = lambda: uuid.UUID(UNIQUE)
    out = {'unique': UNIQUE, 'upstream': 'codalab-worksheets v1.7.5', 'captures': []}
    with tempfile.TemporaryDirectory() as cwd:
        os.chdir(cwd)
        with open('pw', 'w') as f:
            f.write('bob\nnot-a-real-password\n')
        for name, argv in FLAG_SETS.items():
            sys.argv = ['cl-worker-manager'] + argv
            captured.clear()
            upstream_main.main()
            out['captures'].append({'name': name, 'argv': argv, **facts(captured['script'])})
    # The stubs' password must not outlive this run.
    os.environ.pop('CODALAB_PASSWORD', None)
    return out


if __name__ == '__main__':
    print(json.dumps(capture(sys.argv[1]), indent=2))
