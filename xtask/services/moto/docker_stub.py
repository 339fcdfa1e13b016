"""A stand-in for the Docker Engine API on a unix socket, for moto's Batch job runner.

moto runs each Batch job in a thread that talks to a Docker engine through docker-py. This
stub answers just the calls that thread makes, runs nothing, and keeps every "container"
running until one of:
  - moto kills it (terminate_job)                    -> exit code 137
  - a test asks: POST /stub/exit {"name": ..., "code": N} -> exit code N
    (every container whose name contains `name`; moto names containers `<job name>-<job id>`).
    moto reports a job RUNNING a moment before it creates the container: when no container
    matches yet, the exit is remembered and the container exits as soon as it starts.
  - it has run for DOCKER_STUB_LIFETIME seconds (default 900) -> exit code 0
so a Batch job stays RUNNING for as long as a test needs and never lingers for ever.

GET /stub/containers lists the containers, for debugging.

Usage: python docker_stub.py SOCKET_PATH
"""

import json
import os
import re
import socketserver
import sys
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler
from urllib.parse import parse_qs, urlparse

LIFETIME = float(os.environ.get("DOCKER_STUB_LIFETIME", "900"))
API_VERSION = "1.45"


class Container:
    def __init__(self, name, spec):
        self.id = uuid.uuid4().hex + uuid.uuid4().hex
        self.name = name
        self.spec = spec
        self.created = time.time()
        self.started = None
        self.exit_code = None
        self.changed = threading.Condition()

    def running(self):
        if self.started is not None and self.exit_code is None and time.time() - self.started > LIFETIME:
            self.finish(0)
        return self.started is not None and self.exit_code is None

    def finish(self, code):
        with self.changed:
            if self.exit_code is None:
                self.exit_code = code
            self.changed.notify_all()

    def wait(self, timeout):
        deadline = time.time() + timeout
        with self.changed:
            while self.running() and time.time() < deadline:
                self.changed.wait(min(1.0, max(0.0, deadline - time.time())))
        return self.exit_code if self.exit_code is not None else -1

    def describe(self):
        running = self.running()
        status = "running" if running else ("exited" if self.exit_code is not None else "created")
        return {
            "Id": self.id,
            "Name": "/" + self.name,
            "Created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.created)),
            "State": {
                "Status": status,
                "Running": running,
                "ExitCode": self.exit_code or 0,
                "Pid": 4242 if running else 0,
            },
            "Config": {
                "Image": self.spec.get("Image", ""),
                "Cmd": self.spec.get("Cmd"),
                "Env": self.spec.get("Env") or [],
                "Tty": False,
            },
            "Image": "sha256:" + "0" * 64,
            "NetworkSettings": {"IPAddress": "", "Networks": {"bridge": {"IPAddress": "172.17.0.2"}}},
        }


class Engine:
    def __init__(self):
        self.lock = threading.Lock()
        self.containers = {}
        self.deferred_exits = {}

    def create(self, name, spec):
        container = Container(name or uuid.uuid4().hex[:12], spec)
        with self.lock:
            self.containers[container.id] = container
        return container

    def find(self, ref):
        with self.lock:
            for container in self.containers.values():
                if ref in (container.id, container.name) or (len(ref) >= 12 and container.id.startswith(ref)):
                    return container
        return None

    def remove(self, ref):
        container = self.find(ref)
        if container is not None:
            with self.lock:
                self.containers.pop(container.id, None)
        return container

    def exit(self, fragment, code):
        """Ends the containers whose name contains `fragment`, or the next one that starts."""
        with self.lock:
            matched = [c for c in self.containers.values() if fragment in c.name]
            if not matched:
                self.deferred_exits[fragment] = code
        for container in matched:
            container.finish(code)
        return len(matched)

    def start(self, container):
        with self.lock:
            container.started = container.started or time.time()
            deferred = [f for f in self.deferred_exits if f in container.name]
            codes = [self.deferred_exits.pop(f) for f in deferred]
        if codes:
            container.finish(codes[0])


ENGINE = Engine()
VERSIONED = re.compile(r"^/v[0-9.]+(/.*)$")


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    # Requests come over a unix socket, which has no client address to print.
    def address_string(self):
        return "unix"

    def log_message(self, fmt, *args):
        sys.stderr.write("%s %s\n" % (time.strftime("%H:%M:%S"), fmt % args))

    def reply(self, status, body=None, content_type="application/json"):
        data = b"" if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode())
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Api-Version", API_VERSION)
        self.end_headers()
        self.wfile.write(data)

    def body(self):
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            return json.loads(raw) if raw else {}
        except ValueError:
            return {}

    def route(self, method):
        url = urlparse(self.path)
        match = VERSIONED.match(url.path)
        path = match.group(1) if match else url.path
        query = {k: v[-1] for k, v in parse_qs(url.query).items()}
        parts = [p for p in path.split("/") if p]
        payload = self.body() if method in ("POST", "PUT") else {}
        handled = self.dispatch(method, parts, query, payload)
        if handled is None:
            self.reply(404, {"message": "docker stub: no route for %s %s" % (method, path)})
        else:
            self.reply(*handled)

    def dispatch(self, method, parts, query, payload):
        if parts in (["_ping"],):
            return 200, b"OK", "text/plain"
        if parts == ["version"]:
            return 200, {"ApiVersion": API_VERSION, "MinAPIVersion": "1.24", "Version": "0.0.0-stub",
                         "Os": "linux", "Arch": "amd64"}
        if parts == ["info"]:
            return 200, {"Containers": len(ENGINE.containers), "Name": "docker-stub"}
        if parts[:1] == ["images"]:
            if method == "POST" and parts[1:] == ["create"]:
                return 200, {"status": "stub: nothing pulled"}
            if method == "GET" and parts[-1:] == ["json"]:
                return 200, {"Id": "sha256:" + "0" * 64, "RepoTags": ["/".join(parts[1:-1])]}
        if parts[:1] == ["containers"]:
            return self.containers(method, parts[1:], query, payload)
        if parts[:1] == ["stub"]:
            return self.control(method, parts[1:], payload)
        return None

    def containers(self, method, rest, query, payload):
        if method == "POST" and rest == ["create"]:
            container = ENGINE.create(query.get("name"), payload)
            return 201, {"Id": container.id, "Warnings": []}
        if method == "GET" and rest == ["json"]:
            return 200, [c.describe() for c in list(ENGINE.containers.values())]
        if not rest:
            return None
        if method == "DELETE" and len(rest) == 1:
            found = ENGINE.remove(rest[0])
            return (204, None) if found else (404, {"message": "no such container"})
        container = ENGINE.find(rest[0])
        if container is None:
            return 404, {"message": "no such container: %s" % rest[0]}
        action = rest[1] if len(rest) > 1 else ""
        if method == "GET" and action == "json":
            return 200, container.describe()
        if method == "POST" and action == "start":
            ENGINE.start(container)
            return 204, None
        if method == "POST" and action in ("kill", "stop"):
            container.finish(137)
            return 204, None
        if method == "POST" and action == "wait":
            return 200, {"StatusCode": container.wait(LIFETIME)}
        if method == "GET" and action == "logs":
            return 200, b"", "application/vnd.docker.raw-stream"
        return None

    def control(self, method, rest, payload):
        if method == "GET" and rest == ["containers"]:
            return 200, [{"id": c.id, "name": c.name, "running": c.running(), "exit_code": c.exit_code}
                         for c in list(ENGINE.containers.values())]
        if method == "POST" and rest == ["exit"]:
            fragment = str(payload.get("name") or "")
            if not fragment:
                return 400, {"message": "body needs a non-empty name"}
            exited = ENGINE.exit(fragment, int(payload.get("code", 0)))
            return 200, {"exited": exited, "deferred": exited == 0}
        return None

    def do_GET(self):
        self.route("GET")

    def do_POST(self):
        self.route("POST")

    def do_DELETE(self):
        self.route("DELETE")

    def do_HEAD(self):
        self.route("HEAD")


class Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True
    # moto opens one connection per job thread; a short backlog refuses some (EAGAIN).
    request_queue_size = 512


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: docker_stub.py SOCKET_PATH")
    path = sys.argv[1]
    if os.path.exists(path):
        os.unlink(path)
    with Server(path, Handler) as server:
        os.chmod(path, 0o600)
        sys.stderr.write("docker stub listening on %s (lifetime %ss)\n" % (path, LIFETIME))
        server.serve_forever()


if __name__ == "__main__":
    main()
