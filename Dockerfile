# cl-worker-manager with every backend, as a container image; it runs as an unprivileged user
# (65532) and holds no secret: give CODALAB_USERNAME/CODALAB_PASSWORD (or --password-file, a
# mounted SSH key, cloud credentials) at run time.
#
# With a registry (Docker Hub's rust and debian images), compile inside:
#   docker build -t codalab-wm .
#   docker run --rm -e CODALAB_USERNAME -e CODALAB_PASSWORD -v codalab-wm:/var/lib/codalab-wm \
#       codalab-wm --server https://... kubernetes ...
# (the volume keeps the launch records across containers; see below).
#
# What runs in it: the cloud backends (aws-batch, azure-batch, gce, kubernetes) and Slurm over
# SSH (slurm-batch --ssh-host: mount the key and a known_hosts file, the image has no HOME).
# Not slurm-batch on the local host (no sbatch/squeue in the image), not `local` (no
# cl-worker). `codalab-wm:latest`, which deploy/ refers to, is published nowhere: push the
# image to your registry and set `image:`.
#
# Without one (this project's machines), `cargo xtask image` builds the `prebuilt` target from a
# Debian base made by debootstrap and a binary already built (xtask/image/build.sh):
#   docker build --target prebuilt --build-arg BASE=codalab-wm-base:bookworm -f Dockerfile CONTEXT
# where CONTEXT holds only `cl-worker-manager`.

ARG BASE=debian:bookworm-slim

# What the binary needs at run time: TLS roots and OpenSSL (libssh2, which the Slurm backend
# speaks SSH with, links it; no ssh program is run). A base that has them already (the
# debootstrap one) needs no package index.
FROM ${BASE} AS runtime
RUN if ! dpkg-query -W ca-certificates libssl3 >/dev/null 2>&1; then \
      apt-get update \
      && apt-get install -y --no-install-recommends ca-certificates libssl3 \
      && rm -rf /var/lib/apt/lists/*; \
    fi \
 && mkdir -p /var/lib/codalab-wm && chmod 1777 /var/lib/codalab-wm
# The launch records (--record-dir) go to /var/lib/codalab-wm/records, writable whatever user
# the container runs as (compose files often set one): mount a volume at /var/lib/codalab-wm
# so that a restarted manager knows the jobs it launched and its budget's day (and so that it
# starts at all on a read-only root, as deploy/kubernetes/manager.yaml runs it).
ENV XDG_STATE_HOME=/var/lib
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/cl-worker-manager"]

# The binary of the build context (cargo xtask image).
FROM runtime AS prebuilt
COPY cl-worker-manager /usr/local/bin/cl-worker-manager

FROM rust:1-bookworm AS build
WORKDIR /src
COPY . .
RUN cargo build --release --locked -p codalab-wm --features full \
 && cp target/release/cl-worker-manager /cl-worker-manager

# The default target: the binary compiled above.
FROM runtime
COPY --from=build /cl-worker-manager /usr/local/bin/cl-worker-manager
