#!/usr/bin/env python3
"""Insert-request vectors of the official Python client, for the `gce` backend's equivalence test.

For each case (a combination of the backend's flags), this builds the worker instance with the
official client, `google-cloud-compute` (`compute_v1.Instance`, as Google's own samples build
Spot VMs, GPUs and startup scripts), sends `InstancesClient.insert` over its REST transport to a
loopback HTTP server that records the request, and writes what the client sent (method, path,
query, JSON body) to `insert-vectors.json`. `crates/backend-gce/src/spec.rs`'s test builds the
same instances from the same flags and compares the bodies field for field.

The startup script is the backend's own text (tested on its own); both sides use the
placeholder `STARTUP_SCRIPT` for it.

Run (from the repository root):

    python3 -m venv crates/backend-gce/tests/data/.venv
    crates/backend-gce/tests/data/.venv/bin/pip install google-cloud-compute
    crates/backend-gce/tests/data/.venv/bin/python crates/backend-gce/tests/data/make_insert_vectors.py
"""

import http.server
import json
import pathlib
import threading
from importlib.metadata import version

from google.api_core.client_options import ClientOptions
from google.auth.credentials import AnonymousCredentials
from google.cloud import compute_v1

PROJECT = "test-project"
UNIQUE = "0123456789abcdef0123456789abcdef"
COS = "projects/cos-cloud/global/images/family/cos-stable"

# The backend's flags (table keys) that shape the body; the others keep their defaults.
DEFAULTS = {
    "zone": "us-central1-a",
    "machine_type": "e2-standard-4",
    "accelerator_type": None,
    "gpus": 0,
    "boot_disk_size_gb": 50,
    "image": COS,
    "network": None,
    "subnetwork": None,
    "no_external_ip": False,
    "service_account": "default",
    "provisioning": "spot",
    "manager_id": "codalab-wm",
    "pool": "default",
}

CASES = {
    "spot_defaults": {},
    "standard": {"provisioning": "standard", "machine_type": "n2-standard-8"},
    "spot_gpu": {
        "zone": "europe-west4-b",
        "machine_type": "n1-standard-8",
        "accelerator_type": "nvidia-tesla-t4",
        "gpus": 2,
        "boot_disk_size_gb": 200,
        "pool": "gpu",
    },
    "standard_gpu_private_subnet": {
        "provisioning": "standard",
        "accelerator_type": "nvidia-l4",
        "gpus": 1,
        "machine_type": "g2-standard-8",
        "network": "projects/net-host/global/networks/shared",
        "subnetwork": "projects/net-host/regions/us-central1/subnetworks/workers",
        "no_external_ip": True,
        "service_account": "workers@test-project.iam.gserviceaccount.com",
        "image": "projects/my-images/global/images/codalab-worker-2026",
        "manager_id": "team-a",
    },
}


def instance(flags):
    """The worker instance of `flags`, built the way Google's samples build one."""
    zone = flags["zone"]
    disk = compute_v1.AttachedDisk(
        boot=True,
        auto_delete=True,
        initialize_params=compute_v1.AttachedDiskInitializeParams(
            source_image=flags["image"], disk_size_gb=flags["boot_disk_size_gb"]
        ),
    )
    nic = compute_v1.NetworkInterface()
    if flags["network"]:
        nic.network = flags["network"]
    if flags["subnetwork"]:
        nic.subnetwork = flags["subnetwork"]
    if not flags["no_external_ip"]:
        nic.access_configs = [
            compute_v1.AccessConfig(
                name="External NAT",
                type_=compute_v1.AccessConfig.Type.ONE_TO_ONE_NAT.name,
            )
        ]
    gpus = flags["gpus"] > 0
    scheduling = compute_v1.Scheduling()
    if flags["provisioning"] == "spot":
        scheduling.provisioning_model = compute_v1.Scheduling.ProvisioningModel.SPOT.name
        scheduling.instance_termination_action = "DELETE"
        scheduling.automatic_restart = False
        scheduling.on_host_maintenance = "TERMINATE"
    else:
        scheduling.provisioning_model = compute_v1.Scheduling.ProvisioningModel.STANDARD.name
        if gpus:
            scheduling.automatic_restart = False
            scheduling.on_host_maintenance = "TERMINATE"
    result = compute_v1.Instance(
        name=f"cl-worker-{UNIQUE}",
        machine_type=f"zones/{zone}/machineTypes/{flags['machine_type']}",
        labels={"codalab-wm-manager": flags["manager_id"], "codalab-wm-pool": flags["pool"]},
        disks=[disk],
        network_interfaces=[nic],
        service_accounts=[
            compute_v1.ServiceAccount(
                email=flags["service_account"],
                scopes=["https://www.googleapis.com/auth/cloud-platform"],
            )
        ],
        scheduling=scheduling,
        metadata=compute_v1.Metadata(
            items=[compute_v1.Items(key="startup-script", value="STARTUP_SCRIPT")]
        ),
    )
    if gpus:
        result.guest_accelerators = [
            compute_v1.AcceleratorConfig(
                accelerator_type=f"zones/{zone}/acceleratorTypes/{flags['accelerator_type']}",
                accelerator_count=flags["gpus"],
            )
        ]
    return result


class Recorder(http.server.BaseHTTPRequestHandler):
    recorded = []

    def do_POST(self):
        length = int(self.headers.get("Content-Length", 0))
        body = self.rfile.read(length)
        path, _, query = self.path.partition("?")
        self.recorded.append(
            {"method": "POST", "path": path, "query": query, "body": json.loads(body)}
        )
        answer = json.dumps({"name": "operation-1", "status": "DONE", "kind": "compute#operation"})
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(answer.encode())

    def log_message(self, *args):
        pass


def main():
    server = http.server.HTTPServer(("127.0.0.1", 0), Recorder)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    client = compute_v1.InstancesClient(
        credentials=AnonymousCredentials(),
        transport="rest",
        client_options=ClientOptions(api_endpoint=f"http://127.0.0.1:{server.server_port}"),
    )
    vectors = []
    for name, changes in CASES.items():
        flags = {**DEFAULTS, **changes}
        client.insert(project=PROJECT, zone=flags["zone"], instance_resource=instance(flags))
        request = Recorder.recorded.pop()
        vectors.append({"name": name, "flags": flags, "request": request})
    server.shutdown()
    out = {
        "description": "instances.insert requests of the official Python client for the gce "
        "backend's flags; the startup script is the placeholder STARTUP_SCRIPT",
        "produced_by": f"make_insert_vectors.py with google-cloud-compute "
        f"{version('google-cloud-compute')} (proto-plus {version('proto-plus')}, "
        f"protobuf {version('protobuf')}), REST transport",
        "project": PROJECT,
        "unique": UNIQUE,
        "vectors": vectors,
    }
    path = pathlib.Path(__file__).with_name("insert-vectors.json")
    path.write_text(json.dumps(out, indent=2, sort_keys=True) + "\n")
    print(f"wrote {len(vectors)} vectors to {path}")


if __name__ == "__main__":
    main()
