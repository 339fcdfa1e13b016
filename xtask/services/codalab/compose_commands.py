"""The worker-manager services of CodaLab's own docker-compose deployment, with our override.

Usage: venv/bin/python compose_commands.py OVERRIDE WORKDIR   (prints JSON on stdout)

For each worker manager type codalab_service.py supports (aws-batch, azure-batch, kubernetes),
runs the installed codalab 1.7.5's `codalab_service.py start --dry-run`, which prints each
docker-compose command it would run with its environment; takes the ones that bring up the
worker-manager services, and runs them as `docker-compose ... -f OVERRIDE config` instead (the
real docker-compose merging upstream's docker-compose.yml with OVERRIDE). Prints, per service,
the merged image, entrypoint, command line (split as docker-compose splits it), environment,
user, volumes and secrets (`{source, target}`).
Settings codalab_service.py has no default for (cloud accounts, GPUs per worker, tags, the
Kubernetes bundle runtime; without them upstream's own argparse refuses the command line too)
get placeholders, as an admin would give them; CODALAB_SERVER is a closed port of 127.0.0.1
(nothing is contacted).
"""
import json
import os
import shlex
import subprocess
import sys

import yaml

SETTINGS = {
    "CODALAB_SERVER": "http://127.0.0.1:9",
    "CODALAB_WORKER_MANAGER_AZURE_BATCH_ACCOUNT_NAME": "acct",
    "CODALAB_WORKER_MANAGER_AZURE_BATCH_ACCOUNT_KEY": "a2V5",
    "CODALAB_WORKER_MANAGER_AZURE_BATCH_SERVICE_URL": "https://acct.westeurope.batch.azure.com",
    "CODALAB_WORKER_MANAGER_CPU_AZURE_BATCH_JOB_ID": "cpu-job",
    "CODALAB_WORKER_MANAGER_GPU_AZURE_BATCH_JOB_ID": "gpu-job",
    "CODALAB_WORKER_MANAGER_CPU_AZURE_LOG_CONTAINER_URL": "https://s.blob.core.windows.net/logs?sig=x",
    "CODALAB_WORKER_MANAGER_GPU_AZURE_LOG_CONTAINER_URL": "https://s.blob.core.windows.net/logs?sig=x",
    "CODALAB_WORKER_MANAGER_CPU_KUBERNETES_CLUSTER_HOST": "https://127.0.0.1:9",
    "CODALAB_WORKER_MANAGER_GPU_KUBERNETES_CLUSTER_HOST": "https://127.0.0.1:9",
    "CODALAB_WORKER_MANAGER_CPU_KUBERNETES_AUTH_TOKEN": "token",
    "CODALAB_WORKER_MANAGER_GPU_KUBERNETES_AUTH_TOKEN": "token",
    "CODALAB_WORKER_MANAGER_CPU_KUBERNETES_CERT": "/var/run/secrets/ca.crt",
    "CODALAB_WORKER_MANAGER_GPU_KUBERNETES_CERT": "/var/run/secrets/ca.crt",
    "CODALAB_WORKER_MANAGER_CPU_BUNDLE_RUNTIME": "kubernetes",
    "CODALAB_WORKER_MANAGER_GPU_BUNDLE_RUNTIME": "kubernetes",
    "CODALAB_WORKER_MANAGER_DEFAULT_GPUS": "1",
    "CODALAB_WORKER_MANAGER_CPU_TAG": "cpu",
    "CODALAB_WORKER_MANAGER_GPU_TAG": "gpu",
}


# A test may point the settings elsewhere (a JSON object in COMPOSE_SETTINGS, e.g. the real
# server and a fake cluster) and ask for each service's whole merged config (COMPOSE_FULL=1).
SETTINGS.update(json.loads(os.environ.get("COMPOSE_SETTINGS", "{}")))


def compose_lines(workdir, kind):
    """The `(cd DIR; ENV docker-compose ... up ... SERVICE)` lines of codalab_service.py."""
    import codalab_service

    env = dict(SETTINGS, PATH=os.environ["PATH"], HOME=workdir, CODALAB_HOME=workdir + "/home")
    for key in ("CODALAB_WORKER_MANAGER_CPU_KUBERNETES_CERT_PATH", "CODALAB_WORKER_MANAGER_GPU_KUBERNETES_CERT_PATH"):
        env[key] = workdir + "/ca.crt"
    out = subprocess.run(
        [sys.executable, codalab_service.__file__, "start", "--dry-run", "--version", "1.7.5",
         "--worker-manager-type", kind, "--services", "worker-manager-cpu", "worker-manager-gpu"],
        env=env, cwd=workdir, capture_output=True, text=True, check=True,
    ).stdout
    return [l for l in out.splitlines() if l.startswith("(cd ") and "worker-manager" in l]


def merged(line, override):
    """Runs the line's docker-compose command as `config` with `-f override`: (service, config)."""
    cd, rest = line[len("(cd "):].rstrip(")").split("; ", 1)
    words = shlex.split(rest)
    at = words.index("docker-compose")
    env = dict(w.split("=", 1) for w in words[:at])
    compose = words[at:]
    up = compose.index("up")
    service = compose[-1]
    command = compose[:up] + ["-f", override, "config"]
    rendered = subprocess.run(command, env=env, cwd=cd, capture_output=True, text=True)
    if rendered.returncode != 0:
        sys.exit("docker-compose config failed: %s\n%s" % (" ".join(command), rendered.stderr))
    return service, yaml.safe_load(rendered.stdout)["services"][service]


def main():
    override, workdir = os.path.abspath(sys.argv[1]), sys.argv[2]
    # The cluster's CA (--cert-path): any certificate.
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=ca",
         "-keyout", workdir + "/ca.key", "-out", workdir + "/ca.crt"],
        capture_output=True, check=True,
    )
    services = []
    for kind in ("aws-batch", "azure-batch", "kubernetes"):
        for line in compose_lines(workdir, kind):
            service, config = merged(line, override)
            command = config["command"]
            environment = config.get("environment") or {}
            services.append({
                "service": service,
                "image": config.get("image"),
                "entrypoint": config.get("entrypoint"),
                "argv": shlex.split(command) if isinstance(command, str) else command,
                "environment": environment,
                "user": config.get("user"),
                "volumes": config.get("volumes") or [],
                "secrets": config.get("secrets") or [],
            })
            if os.environ.get("COMPOSE_FULL") == "1":
                services[-1]["config"] = config
    json.dump(services, sys.stdout, indent=1)


if __name__ == "__main__":
    main()
