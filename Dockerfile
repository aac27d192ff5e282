# One image for the whole system: the controller (`agentihooks-controller`), the checkpoint store
# (`agentihooks-checkpoint-store`), the worker entry point and restorer sidecar
# (`agentihooks-restorer`), the operator CLI (`agentihooks`), and the harness the workers run:
# Claude Code, pinned (the version the native-resume suite qualified).
#
#   docker build -t registry.local/agent-worker:1.4.2 .
#
# The tag is the checkpoint compatibility key: the controller's AGENTIHOOKS_WORKER_IMAGE and the
# swarms' `worker_image` name it, and only checkpoints captured under it are offered. Build a new
# tag whenever the harness or this project changes.
FROM python:3.11-slim-trixie

ARG CLAUDE_CODE_VERSION=2.1.112

# DISABLE_AUTOUPDATER: the harness version is part of what a checkpoint was captured under, so
# the harness never updates itself.
ENV PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    DISABLE_AUTOUPDATER=1

# git: the restorer clones and applies source. Node and npm from Debian's packages: the harness.
RUN apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates git nodejs npm \
    && rm -rf /var/lib/apt/lists/*

RUN npm install --global --no-audit --no-fund --loglevel=error \
        "@anthropic-ai/claude-code@${CLAUDE_CODE_VERSION}" \
    && npm cache clean --force \
    && claude --version

# Exactly the locked runtime set (uv.lock, hashes checked), then the project itself without
# resolving anything again; uv, pinned by hash, only exports the lock and is removed after.
WORKDIR /src
COPY pyproject.toml README.md uv.lock ./
COPY scripts/uv-requirements.txt ./scripts/
COPY services ./services
RUN pip install --require-hashes --no-deps -r scripts/uv-requirements.txt \
    && uv export --frozen --no-emit-project --output-file /tmp/locked.txt \
    && pip install --require-hashes --no-deps -r /tmp/locked.txt \
    && pip install --no-deps . \
    && pip uninstall -y uv \
    && agentihooks-controller --help >/dev/null \
    && agentihooks-checkpoint-store --help >/dev/null \
    && agentihooks-restorer --help >/dev/null \
    && agentihooks --help >/dev/null

# The user every container runs as: uid and gid 1000, as the worker Pod template's securityContext
# says, with a writable home (/home/agent, also the template's home volume). /work is the
# template's work volume (its worktree is /work/app); /var/lib/agentihooks holds the local
# runtime's worker folders under Docker Compose (a named volume there starts with this owner).
RUN groupadd --gid 1000 agent \
    && useradd --uid 1000 --gid 1000 --home-dir /home/agent --create-home --shell /bin/bash agent \
    && mkdir -p /work /var/lib/agentihooks/workers \
    && chown agent:agent /work /var/lib/agentihooks /var/lib/agentihooks/workers
ENV HOME=/home/agent
USER 1000:1000
WORKDIR /work

# Every deployment names its command: agentihooks-controller | agentihooks-checkpoint-store |
# agentihooks-restorer serve | agentihooks-restorer entry | agentihooks-restorer worker.
CMD ["agentihooks-controller", "--help"]
