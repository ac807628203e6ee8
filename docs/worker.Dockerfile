# The project-worker image for the Kubernetes launcher (docs/SCALING.md, "Kubernetes").
#
# Build it from the repository root (the build context is the whole workspace; what it skips
# is in docs/worker.Dockerfile.dockerignore):
#
#   docker build -f docs/worker.Dockerfile -t pegasus-worker:dev .
#
# The worker holds no credential and needs none: the image has no key, no config.yml and no
# kubeconfig. pegasusd starts it with `project-worker <project_dir>` as the container's
# arguments and the three bootstrap variables as its only environment.

# Build with the Debian release the image runs on, so the binary's glibc is the image's.
FROM rust:1-slim-trixie AS build
WORKDIR /src
COPY . .
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked --bin project-worker \
 && cp target/release/project-worker /usr/local/bin/project-worker

FROM debian:trixie-slim
# tini is PID 1: it forwards SIGTERM to the worker when the pod is deleted (a PID 1 without
# handlers ignores it, and the pod would wait out its grace period) and reaps what the
# worker's commands leave behind.
# git is the worker's own (worktrees, merges); the rest is what a model's `exec` commands and
# a code project's hydrate/verify steps commonly reach for. Add your project's toolchains in
# an image built FROM this one.
RUN apt-get update \
 && apt-get install -y --no-install-recommends \
      tini ca-certificates git openssh-client \
      bash coreutils findutils grep sed gawk diffutils patch procps less file \
      curl jq ripgrep python3 make \
 && rm -rf /var/lib/apt/lists/*
COPY --from=build /usr/local/bin/project-worker /usr/local/bin/project-worker

# The worker's files on the shared volume must belong to the user pegasusd runs as on its
# host: build with --build-arg UID=$(id -u) --build-arg GID=$(id -g), or set the launcher's
# run_as_user / run_as_group.
ARG UID=1000
ARG GID=1000
RUN groupadd --gid "$GID" pegasus \
 && useradd --uid "$UID" --gid "$GID" --create-home --shell /bin/bash pegasus
USER pegasus
WORKDIR /home/pegasus

ENTRYPOINT ["/usr/bin/tini", "--"]
CMD ["project-worker"]
