"""The end-to-end cluster: worker Pods whose containers really run.

The controller (Kubernetes runtime, real Redis) and the checkpoint store (on S3: moto server)
serve on loopback; the Kubernetes API emulator's kubelet runs each Pod the controller creates as
processes, exactly as its spec says: the restorer sidecar (`agentihooks-restorer serve`), the
worker entry point (`agentihooks-restorer entry`) exec'ing the harness, the template's user,
volumes and memory limit. The harness is the demo's stand-in for Claude Code, which behaves like
the real 2.1 CLI in what this relies on (session files, `--resume ID -- PROMPT`).

Every connection is TLS, as deploy/k8s/ runs them (issue 24): a CA made for the test issues the
controller's, the store's and the workers' certificates as deploy/k8s/certificates/ asks
cert-manager to; the controller serves TLS, the store requires client certificates (mutual TLS),
and the workers' certificate is the Secret `agentihooks-worker-tls` in the emulator, which the
shipped worker template (`templates.with_worker_tls`) mounts for the worker and its sidecar: the
sidecar serves TLS to the entry point and dials the controller and the store with it.
"""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import json
import os
import pathlib
import shutil
import sys
import tempfile
from collections.abc import AsyncIterator, Mapping
from typing import Any

import aiohttp
import boto3
import pytest

from services.common import tls, tls_settings
from services.common.checkpoints import s3 as s3_backend
from services.controller import deciding
from services.controller import main as controller_main
from services.controller.pods import classifying, templates
from services.controller.state import reading
from tests.support import certificates, git_repos, ports, redis_server, s3, store_server
from tests.support import controller_server as cs
from tests.support.kube import objects
from tests.support.kube.apiserver import emulator as k8s_emulator
from tests.support.kube.controllers import scheduling
from tests.support.kube.node import kubelet as kubelets

SWARM = "example"
SEAT = "eng-1"
FIRST, SECOND = f"{SWARM}.{SEAT}.1", f"{SWARM}.{SEAT}.2"
PROJECT = pathlib.Path(__file__).resolve().parents[2]
IMAGE_PATHS = (
    str(PROJECT),
    sys.prefix,
    sys.base_prefix,
    str(pathlib.Path(sys.executable).resolve().parent.parent),
)
"""The kubelet's "image": this project, its venv and its Python (as the kubelet's default)."""
WAIT_S = 300.0
FAIL_NOW = "FAIL_NOW"
"""The file (in the image folder) whose creation lets generation 1 of the stand-in fail."""
"""Pods start Python processes and clone a repository: seconds here, longer on a loaded CI."""


@dataclasses.dataclass
class Cluster:
    ctl: cs.Controller
    node: kubelets.Kubelet
    bucket: s3.S3Bucket
    image: pathlib.Path
    backend: Any = None
    tls: TLS | None = None

    @property
    def emulator(self) -> k8s_emulator.K8sEmulator:
        return self.ctl.emulator

    def pod(self, execution: str) -> dict[str, Any]:
        pod = self.ctl.pod_of(execution)
        assert pod is not None, f"no Pod for {execution}"
        return pod

    def pod_name(self, execution: str) -> str:
        return templates.pod_name(SWARM, execution)

    def volume(self, execution: str, volume: str) -> pathlib.Path:
        return self.node.volume_path(cs.NAMESPACE, self.pod_name(execution), volume)

    def logs(self, execution: str, container: str) -> str:
        return self.node.logs(cs.NAMESPACE, self.pod_name(execution), container)


@dataclasses.dataclass(frozen=True)
class TLS:
    """The cluster's CA and the TLS settings of the controller and the store."""

    authority: certificates.Authority
    controller: tls_settings.TLSSettings
    store: tls_settings.TLSSettings
    worker: certificates.Leaf


def _issue(folder: pathlib.Path, emulator: k8s_emulator.K8sEmulator) -> TLS:
    """A CA and the three certificates deploy/k8s/certificates/ issues (each naming
    ``localhost`` and 127.0.0.1, where the servers listen here), the workers' one stored as the
    Secret the worker template mounts: ``tls.crt``, ``tls.key``, ``ca.crt``."""
    authority = certificates.Authority(folder, "agentihooks-ca")
    controller = authority.issue("agentihooks-controller")
    store = authority.issue("agentihooks-checkpoint-store")
    worker = authority.issue("agentihooks-worker")
    files = {"tls.crt": worker.cert, "tls.key": worker.key, "ca.crt": authority.bundle}
    emulator.create(
        "secrets",
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "type": "kubernetes.io/tls",
            "metadata": {"name": templates.WORKER_TLS_SECRET},
            "data": {k: base64.b64encode(v.read_bytes()).decode() for k, v in files.items()},
        },
        cs.NAMESPACE,
    )
    return TLS(
        authority,
        tls_settings.load(certificates.tls_env(authority, controller)),
        tls_settings.load(certificates.tls_env(authority, store, client_ca=authority)),
        worker,
    )


def _image_folder() -> pathlib.Path:
    """What the worker image adds to this machine's: the harness on a path any user reads."""
    folder = pathlib.Path(tempfile.mkdtemp(prefix="agentihooks-image-"))
    folder.chmod(0o755)
    bin_dir = folder / "bin"
    bin_dir.mkdir(mode=0o755)
    claude = bin_dir / "claude"
    claude.write_text('#!/bin/sh\nexec python3 -m services.demo_agent "$@"\n')
    claude.chmod(0o755)
    return folder


WORKER_UID = 1000
"""The worker user of the built-in Pod template (runAsUser)."""


def _project(image: pathlib.Path) -> str:
    """The registered project's repository, owned by the worker user (git refuses to read a
    repository another user owns: `safe.directory`)."""
    project = git_repos.project(image / "project")
    for path in [image / "project", *(image / "project").rglob("*")]:
        os.chown(path, WORKER_UID, WORKER_UID, follow_symlinks=False)
    return project.url


def _template(memory_limit: str, failure: str, image: pathlib.Path) -> dict[str, Any]:
    """The template deploy/k8s/ ships (the built-in one with the workers' certificate), with the
    stand-in's knobs and a small memory limit."""
    template = templates.default_pod_template()
    [worker] = template["spec"]["containers"]
    worker["env"] += [
        {"name": "DEMO_VERSION_FILE", "value": str(image / "VERSION")},
        {"name": "DEMO_WORK_SECONDS", "value": "600" if failure == "none" else "3"},
        {"name": "DEMO_FAILURE", "value": failure},
        {"name": "DEMO_FAIL_AFTER_FILE", "value": str(image / FAIL_NOW)},
    ]
    # The harness's version is a property of the image both containers run: the sidecar reads
    # it too (a template's `restorer` container gives the injected sidecar its env).
    template["spec"]["initContainers"] = [
        {
            "name": classifying.RESTORER_CONTAINER,
            "image": "ignored",
            "env": [{"name": "DEMO_VERSION_FILE", "value": str(image / "VERSION")}],
        }
    ]
    worker["resources"]["requests"]["memory"] = memory_limit
    worker["resources"]["limits"]["memory"] = memory_limit
    return templates.with_worker_tls(template)


@pytest.fixture
async def cluster(
    request: pytest.FixtureRequest,
    tmp_path: pathlib.Path,
    redis_server: redis_server.RedisServer,
    s3_bucket: s3.S3Bucket,
    k8s_emulator: k8s_emulator.K8sEmulator,
) -> AsyncIterator[Cluster]:
    reason = kubelets.unsupported_reason()
    if reason is not None:
        pytest.fail(f"the kubelet cannot run Pods on this machine: {reason}")
    image = _image_folder()
    k8s_emulator.hold_deletions = True
    backend = s3_backend.S3Backend(
        s3_bucket.name, s3_bucket.endpoint_url, session=s3_bucket.session()
    )
    root = await cs.empty_state(redis_server.url, tmp_path)
    tls = _issue(tmp_path / "tls", k8s_emulator)
    store, store_port, store_service = await store_server.start_store(
        root, redis_server.url, backend=backend, tls_conf=tls.store
    )
    listen = f"127.0.0.1:{ports.free_port()}"
    conf = controller_main.settings.load_controller(
        {
            "AGENTIHOOKS_RUNTIME": "kubernetes",
            "AGENTIHOOKS_CONTROL_ADDR": listen,
            "AGENTIHOOKS_WORKER_CONTROL_ADDR": listen,
            "AGENTIHOOKS_STORE_ADDR": f"127.0.0.1:{store_port}",
            "AGENTIHOOKS_GRANT_KEY": cs.GRANT_KEY,
            "AGENTIHOOKS_OPERATOR_TOKEN": cs.OPERATOR_TOKEN,
            "AGENTIHOOKS_WORKER_IMAGE": cs.IMAGE,
        }
    )
    worker_env = controller_main.worker_settings(
        conf, listen, {"AGENTIHOOKS_CAPTURE_INTERVAL_S": "0.5"}
    )
    ctl, server = await cs.start_controller(
        redis_server.url,
        k8s_emulator,
        root,
        listen=listen,
        worker_env=worker_env,
        backend=backend,
        template=_template("256Mi", _marked(request, "oom"), image),
        store_addr=f"127.0.0.1:{store_port}",
        entry_point=conf.entry_point,
        check_nodes=True,
        # The production default: Pods running beside the controller load the machine, and a
        # lease that lapses makes a decision call answer not_leader for a moment.
        lease_ttl_ms=10_000,
        tls_conf=tls.controller,
    )
    node = kubelets.Kubelet(
        k8s_emulator.url,
        "node-1",
        root=tmp_path / "kubelet",
        backoff=(0.5, 5.0),
        image_paths=[*IMAGE_PATHS, str(image)],
        heartbeat=1.0,
    )
    scheduler = scheduling.Scheduler(k8s_emulator.url)
    await scheduler.__aenter__()
    await node.start()
    releasing = asyncio.create_task(_fail_once_captured(ctl, image / FAIL_NOW))
    try:
        yield Cluster(ctl, node, s3_bucket, image, backend, tls)
    finally:
        releasing.cancel()
        await asyncio.gather(releasing, return_exceptions=True)
        await node.close()
        await scheduler.__aexit__(None, None, None)
        await cs.stop_controller(ctl, server)
        await store.stop(None)
        await store_service.aclose()
        await backend.aclose()
        shutil.rmtree(image, ignore_errors=True)


async def _fail_once_captured(ctl: cs.Controller, signal: pathlib.Path) -> None:
    """Let generation 1 fail only once the controller holds its sidecar's report of a
    checkpoint with the conversation: the sidecar captures every half second, but on a loaded
    machine not always within the stand-in's few seconds of work, and a crash before that
    leaves nothing to resume."""

    async def captured() -> None:
        execution = await reading.execution(ctl.redis, SWARM, FIRST)
        assert execution is not None and deciding.holds_conversation(execution.archive_watermark)

    await ports.eventually(captured, timeout=WAIT_S)
    await asyncio.to_thread(signal.touch)


def _marked(request: pytest.FixtureRequest, default: str) -> str:
    """How generation 1 of the stand-in fails (`worker_failure` mark): `oom` grows past the
    memory limit, `crash` exits 1, `none` keeps working (`DEMO_WORK_SECONDS` long)."""
    mark = request.node.get_closest_marker("worker_failure")
    return str(mark.args[0]) if mark else default


def _document(cluster: Cluster, *, automation: bool = True) -> str:
    return json.dumps(
        {
            "swarm": SWARM,
            "worker_image": cs.IMAGE,
            "harness": "claude_code",
            "command": [str(cluster.image / "bin" / "claude"), "-p", "Write the progress notes"],
            "restore_automation": automation,
            "checkpoint_remote": True,
            "projects": [{"name": "app", "repository": _project(cluster.image)}],
            "accounts": [{"name": "acct-a", "slots": 2}],
            "seats": [{"seat": SEAT, "task": {"text": "Write the progress notes"}}],
        }
    )


async def _terminated(cluster: Cluster, execution: str, container: str) -> dict[str, Any]:
    async def check() -> dict[str, Any]:
        status = objects.container_status(cluster.pod(execution), container)
        terminated = status.get("state", {}).get("terminated")
        assert terminated, status
        return dict(terminated)

    return await ports.eventually(check, timeout=WAIT_S)


async def _pending(cluster: Cluster) -> Any:
    async def check() -> Any:
        status = await cluster.ctl.status()
        cards = [h for h in status.handoffs if h.execution_id == FIRST]
        assert cards and cards[0].decision == "recovery_pending" and cards[0].resume_available, (
            cards
        )
        return cards[0]

    return await ports.eventually(check, timeout=WAIT_S)


def _s3(cluster: Cluster) -> Any:
    return boto3.client(
        "s3",
        endpoint_url=cluster.bucket.endpoint_url,
        aws_access_key_id=s3.ACCESS_KEY,
        aws_secret_access_key=s3.SECRET_KEY,
        region_name=s3.REGION,
    )


def _pod_exists(cluster: Cluster, execution: str) -> Any:
    async def check() -> dict[str, Any]:
        return cluster.pod(execution)

    return check


# Controllers run as their own processes (`python -m services.controller.main`, e.g.
# tests/e2e/test_redis_outage.py) get the same certificates as settings, through these.

POD_TEMPLATE = "AGENTIHOOKS_POD_TEMPLATE"


def settings_env(conf: tls_settings.TLSSettings) -> dict[str, str]:
    """The ``AGENTIHOOKS_TLS_*`` settings naming `conf`'s files (the inverse of
    `tls_settings.load`)."""
    named = {
        tls_settings.CERT_FILE: conf.cert_file,
        tls_settings.KEY_FILE: conf.key_file,
        tls_settings.CA_FILE: conf.ca_file,
        tls_settings.CLIENT_CA_FILE: conf.client_ca_file,
        tls_settings.PEER_NAME: conf.peer_name,
    }
    return {name: str(value) for name, value in named.items() if value is not None}


def controller_process_env(
    folder: pathlib.Path, emulator: k8s_emulator.K8sEmulator
) -> dict[str, str]:
    """What makes an `agentihooks-controller` process on the emulator TLS on every connection,
    as the cluster above runs its controller: its certificate and the CA (gRPC and HTTP served
    with TLS), and the worker template deploy/k8s/ ships (`templates.with_worker_tls`) written
    to `folder` as ``AGENTIHOOKS_POD_TEMPLATE``, with the workers' certificate Secret in the
    emulator. Each call issues a new CA into a new folder (and replaces the Secret): files a
    running process reads are never rewritten."""
    folder.mkdir(parents=True, exist_ok=True)
    issued = pathlib.Path(tempfile.mkdtemp(prefix="tls-", dir=folder))
    if emulator.get("secrets", templates.WORKER_TLS_SECRET, cs.NAMESPACE) is not None:
        emulator.delete("secrets", templates.WORKER_TLS_SECRET, cs.NAMESPACE)
    certified = _issue(issued, emulator)
    template = issued / "worker-pod.json"  # JSON is YAML
    template.write_text(json.dumps(templates.with_worker_tls(templates.default_pod_template())))
    return {**settings_env(certified.controller), POD_TEMPLATE: str(template)}


def client_of(env: Mapping[str, str]) -> tls_settings.TLSSettings:
    """How a test (or an operator's tool) beside a process of `env` dials it: with its CA, and
    its certificate as the client certificate; plaintext when `env` names no CA."""
    names = (tls_settings.CA_FILE, tls_settings.CERT_FILE, tls_settings.KEY_FILE)
    return tls_settings.load({name: env[name] for name in names if name in env})


def http_base(conf: tls_settings.TLSSettings, port: int) -> str:
    """The base URL of an HTTP server on loopback that serves with `conf`."""
    return f"{'https' if conf.serving else 'http'}://127.0.0.1:{port}"


def http_session(conf: tls_settings.TLSSettings) -> aiohttp.ClientSession:
    """An HTTP client that verifies servers with `conf`'s CA (the system's when it has none)."""
    context = tls.http_client_context(conf)
    return aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=context or True))
