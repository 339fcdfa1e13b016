"""The Python peer for `cargo xtask bench`: codalab 1.7.5's own WorkerManager.run_one_iteration,
driven on the same fake CodaLab server and the same worker jobs as our manager.

Run by `bench-harness run` with the venv of `cargo xtask services up codalab`:
    python bench/peer_iteration.py --server URL --bundles N --jobs J --mode ticks --warmup W --ticks T
    python bench/peer_iteration.py ... --mode first-tick     # prints `first-tick` after one iteration
    python bench/peer_iteration.py ... --mode reaction       # iterations until N workers started
    python bench/peer_iteration.py ... --mode slurm-calls --stub DIR   # upstream's Slurm listing
    python bench/peer_iteration.py ... --mode aws-calls --endpoint PROXY --job-filter RE
    python bench/peer_iteration.py ... --mode k8s-calls --endpoint PROXY
    python bench/peer_iteration.py ... --mode azure-calls --endpoint PROXY --azure-account A \
        --azure-job J --azure-log-container URL    # key in BENCH_AZURE_ACCOUNT_KEY
    python bench/peer_iteration.py ... --mode server-cost --server-pids P,Q --seconds S --min-ticks K
        # iterations against the REAL CodaLab server, with the server's CPU read around them
Prints one JSON line. CODALAB_USERNAME/CODALAB_PASSWORD come from the environment, as for
`cl-worker-manager`. Logging is set up as `cl-worker-manager` does (INFO, to stderr).

The backend is a subclass of upstream's abstract WorkerManager: `get_worker_jobs` returns the
same J jobs as ours (even index pending, odd active) and `start_worker_job` submits nothing
(in reaction mode it records a pending job, like our FakeBackend).

`slurm-calls` builds upstream's own SlurmBatchWorkerManager against the bench's stub
`squeue`/`scontrol` (first on PATH) listing J own jobs, and counts the Slurm commands one
`get_worker_jobs` runs (the stubs log every call; with `--real-slurm` the stubs are shims that
log and run the real commands).

`aws-calls` builds upstream's own AWSBatchWorkerManager, with its boto3 client pointed at the
bench's counting proxy in front of moto (boto3 1.17 has no AWS_ENDPOINT_URL, so `boto3.client`
gets `endpoint_url` added; nothing else of upstream is changed), and counts the HTTP requests one
`get_worker_jobs` sends (the proxy's `/bench/requests`).

`k8s-calls` builds upstream's own KubernetesWorkerManager with `--cluster-host` = the counting
proxy in front of the bench's fake Kubernetes API server (plain HTTP) and counts the same way.

`server-cost` runs upstream's iterations against the REAL CodaLab server of `cargo xtask services
up codalab` (upstream's defaults: min 1, `--max-workers` = J, so none launches) back to back for
`--seconds` (at least `--min-ticks`), after `--warmup` ones, and reads the CPU time of the server's
processes (`--server-pids`: REST server and MariaDB, from /proc/PID/stat) before and after, as
`bench-ours --server-cost` does for ours (`xtask/src/bin/bench_harness/server_cost.rs`).

`azure-calls` builds upstream's own AzureBatchWorkerManager (azure-batch 9.0.0) with
`--service-url` = the counting proxy in front of the bench's fake Batch service (plain HTTP,
Shared Key checked; the account key, a test key, comes from BENCH_AZURE_ACCOUNT_KEY) and counts
the same way. Upstream's `get_worker_jobs` logs a failed request and returns no jobs, so the
mode asserts that it sees all J workers (the fake's tasks are all active or running).
"""
import argparse
import json
import logging
import os
import time
import urllib.request

# The same imports as the `cl-worker-manager` entry point (all backends' modules), so that
# start-up time and peak RSS are those of the real command.
from codalab.worker_manager.main import main as _cl_worker_manager_main  # noqa: F401
from codalab.worker_manager.worker_manager import WorkerJob, WorkerManager


def request_counts(server):
    with urllib.request.urlopen(server + '/bench/requests') as reply:
        return json.load(reply)


def status_kb(field):
    with open('/proc/self/status') as status:
        for line in status:
            if line.startswith(field + ':'):
                return int(line.split()[1])
    return 0


class BenchWorkerManager(WorkerManager):
    NAME = 'bench'
    DESCRIPTION = 'bench peer: fixed worker jobs, launches nothing'

    def __init__(self, args, jobs):
        super().__init__(args)
        self.jobs = [WorkerJob(active=(n % 2 == 1)) for n in range(jobs)]
        self.started = 0

    def get_worker_jobs(self):
        return list(self.jobs)

    def start_worker_job(self):
        self.started += 1
        if self.args.reaction:
            self.jobs.append(WorkerJob(active=False))


def manager_args(opts, max_workers):
    # Every attribute WorkerManager.__init__/run_one_iteration/filter_bundles reads, with the
    # values the bench gives our manager: 4 CPUs, 1 GPU, 8 GiB, no prefilter rejects.
    return argparse.Namespace(
        server=opts.server, temp_session=True, search=[], worker_tag=None,
        worker_tag_exclusive=False, no_prefilter=False, cpus=4, gpus=1, memory_mb=8192,
        restart_after_seconds=None, min_workers=0, max_workers=max_workers,
        min_seconds_between_workers=0, sleep_time=5, reaction=opts.mode == 'reaction',
    )


def slurm_calls(opts):
    from codalab.worker_manager.slurm_batch_worker_manager import SlurmBatchWorkerManager

    args = manager_args(opts, opts.jobs)
    args.user = opts.slurm_user or 'alice'
    args.partition = opts.partition or 'x'
    args.job_name = opts.job_name or 'codalab-slurm-worker'
    args.password_file, args.exit_after_num_failed = None, None
    manager = SlurmBatchWorkerManager(args)  # its constructor lists the jobs once (squeue)
    log = os.path.join(opts.stub, 'calls.log')
    open(log, 'w').close()
    wall = []
    for _ in range(opts.rounds):
        w0 = time.perf_counter()
        jobs = manager.get_worker_jobs()
        wall.append((time.perf_counter() - w0) * 1000.0)
        assert len(jobs) == opts.jobs, len(jobs)
    with open(log) as calls:
        count = sum(1 for _ in calls)
    print(json.dumps({'backend': 'slurm', 'jobs': opts.jobs, 'calls_per_tick': count / opts.rounds,
                      'listed': len(jobs),
                      'wall_samples': wall}))


def count_calls(opts, backend, manager, expected):
    """Times `opts.rounds` calls of upstream's `get_worker_jobs` after a warm-up (connection
    pool, lazy imports) and counts the HTTP requests they send at the bench's counting proxy
    (`opts.endpoint`). Each call must see `expected` workers: upstream's Azure and Kubernetes
    managers answer [] on any error, which must not pass for a measurement."""
    jobs = manager.get_worker_jobs()
    assert len(jobs) == expected, (len(jobs), expected)
    before = request_counts(opts.endpoint)
    wall = []
    for _ in range(opts.rounds):
        w0 = time.perf_counter()
        jobs = manager.get_worker_jobs()
        wall.append((time.perf_counter() - w0) * 1000.0)
        assert len(jobs) == expected, (len(jobs), expected)
    after = request_counts(opts.endpoint)
    calls = sum(after.values()) - sum(before.values())
    print(json.dumps({'backend': backend, 'jobs': opts.jobs, 'calls_per_tick': calls / opts.rounds,
                      'listed': len(jobs), 'wall_samples': wall}))


def aws_calls(opts):
    import boto3
    from codalab.worker_manager.aws_batch_worker_manager import AWSBatchWorkerManager

    real_client = boto3.client

    def client(*args, **kwargs):
        kwargs.setdefault('endpoint_url', opts.endpoint)
        return real_client(*args, **kwargs)

    boto3.client = client
    args = manager_args(opts, opts.jobs)
    args.region, args.job_queue, args.job_filter = 'us-east-1', 'codalab-batch-cpu', opts.job_filter
    count_calls(opts, 'aws', AWSBatchWorkerManager(args), opts.jobs)


def k8s_calls(opts):
    from codalab.worker_manager.kubernetes_worker_manager import KubernetesWorkerManager

    args = manager_args(opts, opts.jobs)
    args.cluster_host, args.auth_token = opts.endpoint, 'bench-token'
    args.cert_path, args.cert = '/dev/null', '/dev/null'
    args.bundle_runtime, args.nfs_volume_name = 'docker', None
    # It counts Running pods only: the even-index half of the fake's pods.
    count_calls(opts, 'kubernetes', KubernetesWorkerManager(args), (opts.jobs + 1) // 2)


def azure_calls(opts):
    from codalab.worker_manager.azure_batch_worker_manager import AzureBatchWorkerManager

    args = manager_args(opts, opts.jobs)
    args.account_name, args.account_key = opts.azure_account, os.environ['BENCH_AZURE_ACCOUNT_KEY']
    args.service_url, args.job_id = opts.endpoint, opts.azure_job
    args.log_container_url, args.user = opts.azure_log_container, 'root'
    count_calls(opts, 'azure', AzureBatchWorkerManager(args), opts.jobs)


def stat_ticks(pid):
    """utime + stime + cutime + cstime of `pid` (fields 14 to 17 of /proc/PID/stat)."""
    with open('/proc/%d/stat' % pid) as stat:
        fields = stat.read().rsplit(')', 1)[1].split()
    return sum(int(f) for f in fields[11:15])


def server_cpu_ms(roots):
    """CPU of the server's `roots` and their children in ms, as bench-ours reads it
    (xtask/src/bin/bench_harness/server_cpu.rs): a child that just exited is skipped."""
    ticks = 0
    for root in roots:
        ticks += stat_ticks(root)
        for task in os.listdir('/proc/%d/task' % root):
            with open('/proc/%d/task/%s/children' % (root, task)) as children:
                for child in children.read().split():
                    try:
                        ticks += stat_ticks(int(child))
                    except (FileNotFoundError, ProcessLookupError):
                        pass
    return ticks * 1000.0 / os.sysconf('SC_CLK_TCK')


def server_cost(opts):
    args = manager_args(opts, opts.jobs)
    args.min_workers = 1
    manager = BenchWorkerManager(args, opts.jobs)
    for _ in range(opts.warmup):
        manager.run_one_iteration()
    pids = [int(p) for p in opts.server_pids.split(',')]
    cpu = []
    server_before, started = server_cpu_ms(pids), time.perf_counter()
    while len(cpu) < opts.min_ticks or time.perf_counter() - started < opts.seconds:
        c0 = time.process_time()
        manager.run_one_iteration()
        cpu.append((time.process_time() - c0) * 1000.0)
        assert manager.started == 0
    wall = time.perf_counter() - started
    print(json.dumps({'ticks': len(cpu), 'wall_s': wall,
                      'server_cpu_ms': server_cpu_ms(pids) - server_before, 'cpu_samples': cpu,
                      'requests_per_tick': 1.0, 'read_per_tick': len(manager.staged_uuids)}))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument('--server', required=True)
    parser.add_argument('--bundles', type=int, required=True)
    parser.add_argument('--jobs', type=int, required=True)
    parser.add_argument(
        '--mode',
        choices=[
            'ticks', 'first-tick', 'reaction', 'slurm-calls', 'aws-calls', 'k8s-calls',
            'azure-calls', 'server-cost',
        ],
        default='ticks',
    )
    parser.add_argument('--stub')
    parser.add_argument('--endpoint')
    parser.add_argument('--job-filter')
    parser.add_argument('--slurm-user')
    parser.add_argument('--partition')
    parser.add_argument('--job-name')
    parser.add_argument('--azure-account')
    parser.add_argument('--azure-job')
    parser.add_argument('--azure-log-container')
    parser.add_argument('--rounds', type=int, default=3)
    parser.add_argument('--warmup', type=int, default=1)
    parser.add_argument('--ticks', type=int, default=10)
    parser.add_argument('--server-pids')
    parser.add_argument('--seconds', type=float, default=5.0)
    parser.add_argument('--min-ticks', type=int, default=10)
    opts = parser.parse_args()
    logging.basicConfig(format='%(asctime)s %(message)s', level=logging.INFO)

    if opts.mode == 'first-tick':
        manager = BenchWorkerManager(manager_args(opts, opts.jobs), opts.jobs)
        manager.run_one_iteration()
        print('first-tick', flush=True)
        assert len(manager.staged_uuids) == opts.bundles, len(manager.staged_uuids)
        print(json.dumps({'vm_hwm_kb': status_kb('VmHWM')}), flush=True)
        return

    if opts.mode == 'slurm-calls':
        slurm_calls(opts)
        return

    if opts.mode == 'server-cost':
        server_cost(opts)
        return

    if opts.mode == 'aws-calls':
        aws_calls(opts)
        return

    if opts.mode == 'k8s-calls':
        k8s_calls(opts)
        return

    if opts.mode == 'azure-calls':
        azure_calls(opts)
        return

    if opts.mode == 'reaction':
        manager = BenchWorkerManager(manager_args(opts, opts.bundles), 0)
        ticks = 0
        while manager.started < opts.bundles and ticks < 10 * opts.bundles + 10:
            manager.run_one_iteration()
            ticks += 1
        print(json.dumps({'mode': 'compat', 'bundles': opts.bundles, 'ticks': ticks,
                          'submitted': manager.started}))
        return

    manager = BenchWorkerManager(manager_args(opts, opts.jobs), opts.jobs)
    for _ in range(opts.warmup):
        manager.run_one_iteration()
    before = request_counts(opts.server)
    cpu, wall = [], []
    for _ in range(opts.ticks):
        c0, w0 = time.process_time(), time.perf_counter()
        manager.run_one_iteration()
        c1, w1 = time.process_time(), time.perf_counter()
        cpu.append((c1 - c0) * 1000.0)
        wall.append((w1 - w0) * 1000.0)
        assert len(manager.staged_uuids) == opts.bundles, len(manager.staged_uuids)
        assert manager.started == 0
    after = request_counts(opts.server)
    http = sum(after.values()) - sum(before.values())
    searches = after.get('/rest/bundles', 0) - before.get('/rest/bundles', 0)
    print(json.dumps({'bundles': opts.bundles, 'jobs': opts.jobs, 'cpu_samples': cpu,
                      'wall_samples': wall, 'vm_hwm_kb': status_kb('VmHWM'),
                      'vm_rss_kb': status_kb('VmRSS'), 'http_per_tick': http / opts.ticks,
                      'searches_per_tick': searches / opts.ticks}))


if __name__ == '__main__':
    main()
