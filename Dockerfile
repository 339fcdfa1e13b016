# A small image of cl-worker-manager with every backend.
#   docker build -t codalab-wm .
#   docker run --rm -e CODALAB_USERNAME -e CODALAB_PASSWORD codalab-wm --server https://... kubernetes ...
FROM rust:1-bookworm AS build
WORKDIR /src
COPY . .
RUN cargo build --release --locked -p codalab-wm --features full \
 && cp target/release/cl-worker-manager /cl-worker-manager

FROM debian:bookworm-slim
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates libssl3 openssh-client \
 && rm -rf /var/lib/apt/lists/*
COPY --from=build /cl-worker-manager /usr/local/bin/cl-worker-manager
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/cl-worker-manager"]
