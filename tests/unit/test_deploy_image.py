"""The Dockerfile builds the image the deploy files run (read, not built: no Docker here).

The worker Pod template and compose.yaml rely on the image for the user the containers run as,
its home, the folders they write, the console scripts and the harness; each is checked against
the file that relies on it.
"""

from __future__ import annotations

import re

from services.controller.pods import templates
from tests.unit.test_deploy_manifests import (
    CONSOLE_SCRIPTS,
    IMAGE,
    REPO,
    dockerfile_instructions,
    section_8,
)

DOCKERFILE = (REPO / "Dockerfile").read_text()
instructions = dockerfile_instructions


def test_it_runs_as_the_worker_templates_user_with_a_writable_home() -> None:
    spec = templates.default_pod_template()["spec"]
    uid, gid = spec["securityContext"]["runAsUser"], spec["securityContext"]["runAsGroup"]
    (worker,) = spec["containers"]
    home = next(e["value"] for e in worker["env"] if e["name"] == "HOME")
    users = [args for keyword, args in instructions() if keyword == "USER"]
    assert users[-1] == f"{uid}:{gid}"  # numeric: runAsNonRoot can verify it
    runs = " ".join(args for keyword, args in instructions() if keyword == "RUN")
    assert f"--uid {uid}" in runs and f"--gid {gid}" in runs
    assert f"--home-dir {home} --create-home" in runs
    assert f"HOME={home}" in [args for keyword, args in instructions() if keyword == "ENV"]
    # The folders the deployments write, owned by that user: the template's work volume and
    # the Compose worker folders (a named volume starts with the image folder's owner).
    for folder in ("/work", "/var/lib/agentihooks/workers"):
        assert re.search(rf"mkdir -p [^&]*{re.escape(folder)}\b", runs), folder
        assert re.search(rf"chown agent:agent [^&]*{re.escape(folder)}\b", runs), folder
    mounts = {m["mountPath"] for m in worker["volumeMounts"]}
    assert {"/work", home} <= mounts


def test_it_installs_the_project_and_the_pinned_harness() -> None:
    makefile = (REPO / "Makefile").read_text()
    (version,) = re.findall(r"^CLAUDE_CODE_VERSION \?= (\S+)$", makefile, re.M)
    assert f"ARG CLAUDE_CODE_VERSION={version}" in [
        f"{keyword} {args}" for keyword, args in instructions()
    ]
    runs = " ".join(args for keyword, args in instructions() if keyword == "RUN")
    assert re.search(r"apt-get install [^&]*\bnodejs npm\b", runs)
    assert '"@anthropic-ai/claude-code@${CLAUDE_CODE_VERSION}"' in runs
    assert "claude --version" in runs
    assert "DISABLE_AUTOUPDATER=1" in " ".join(a for k, a in instructions() if k == "ENV")
    # Exactly the locked runtime set, hashes checked, then the project without resolving again.
    assert "pip install --require-hashes --no-deps -r scripts/uv-requirements.txt" in runs
    assert "uv export --frozen --no-emit-project --output-file /tmp/locked.txt" in runs
    assert "pip install --require-hashes --no-deps -r /tmp/locked.txt" in runs
    assert "pip install --no-deps ." in runs
    for script in CONSOLE_SCRIPTS:
        assert f"{script} --help" in runs, f"the build does not check {script}"
    copied = [args for keyword, args in instructions() if keyword == "COPY"]
    assert copied == [
        "pyproject.toml README.md uv.lock ./",
        "scripts/uv-requirements.txt ./scripts/",
        "services ./services",
    ]


def test_the_build_context_leaves_out_local_state_and_secrets() -> None:
    ignored = [
        line.strip()
        for line in (REPO / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    for entry in (".git", ".venv", ".harnesses", ".demo", "**/*.env", "deploy", "tests"):
        assert entry in ignored, entry
    for needed in ("pyproject.toml", "README.md", "uv.lock", "services"):
        assert needed not in ignored
    assert "!scripts/uv-requirements.txt" in ignored


def test_the_documented_build_command_makes_the_deployed_image() -> None:
    assert f"docker build -t {IMAGE} ." in DOCKERFILE
    assert f"docker build -t {IMAGE} ." in section_8()
