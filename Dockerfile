# syntax=docker/dockerfile:1
# Bub container image. Build and run with `docker compose up -d --build` (see docker/README.md).

# ---- Stage 1: build the release binary ---------------------------------------------------------
# The Rust version is Cargo.toml's `rust-version`. The slim image already ships gcc and libc6-dev,
# which is all `ring` (rustls' crypto) needs: no OpenSSL, no pkg-config.
FROM rust:1.95-slim-bookworm AS builder
WORKDIR /build
COPY Cargo.toml Cargo.lock build.rs ./
# Cargo.toml declares [[bench]] targets; cargo refuses the manifest if their sources are missing.
COPY benches ./benches
COPY config ./config
COPY src ./src
# The built-in skills are compiled into the binary.
COPY skills ./skills
# The registry and target directories are BuildKit caches, so rebuilds only compile what changed;
# the binary is copied out of the cache mount in the same step.
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/build/target \
    cargo build --release --locked \
    && install -m 0755 /build/target/release/bub /usr/local/bin/bub

# ---- Stage 2: runtime --------------------------------------------------------------------------
# Debian slim plus the tools the agent's bash tool is expected to use. tini is PID 1: it reaps
# the orphans shell commands leave behind and forwards signals to the entrypoint. The mounted
# workspace belongs to the host user, who may not be Bub's uid, so git is told to trust it.
FROM debian:bookworm-slim
RUN apt-get update \
    && apt-get install -y --no-install-recommends \
        tini bash ca-certificates curl git gh jq less openssh-client procps ripgrep unzip \
    && rm -rf /var/lib/apt/lists/* \
    && git config --system --add safe.directory '*'
# Bub runs as `bub`: the entrypoint, started as root, gives it the uid/gid PUID/PGID (default
# 1000) and drops to it with setpriv (util-linux, already in the image). Its home holds git's
# config and ~/.agents.
RUN groupadd --gid 1000 bub \
    && useradd --uid 1000 --gid bub --create-home --home-dir /home/bub --shell /bin/bash bub \
    && mkdir -p /data /workspace \
    && chown bub:bub /data /workspace
COPY --from=builder /usr/local/bin/bub /usr/local/bin/bub
COPY --chmod=0755 entrypoint.sh /usr/local/bin/bub-entrypoint
# Tapes, jobs.json and history live on the volume, whatever .env says.
ENV BUB_HOME=/data
VOLUME /data
# The workspace (the agent's files, .env, AGENTS.md, startup.sh) is the working directory.
WORKDIR /workspace
# Healthy while `bub message` answers `bub status` (or, in startup.sh mode, while the script
# runs); unhealthy after a configuration error. One short process a minute.
HEALTHCHECK --interval=60s --timeout=10s --start-period=60s --retries=3 \
    CMD ["/usr/local/bin/bub-entrypoint", "--healthcheck"]
# tini signals only its direct child, the entrypoint, which passes SIGTERM on to `bub message`,
# or to the startup script and `bub idle`: so no `tini -g`.
ENTRYPOINT ["/usr/bin/tini", "--", "/usr/local/bin/bub-entrypoint"]
