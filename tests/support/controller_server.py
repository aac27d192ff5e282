"""A real controller on loopback: the Recovery gRPC service over a Hub, real Redis, the
Kubernetes API emulator through kubernetes-asyncio, and a local checkpoint folder."""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import datetime
import hashlib
import json
import pathlib
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any

import grpc
import pytest
import redis.asyncio as aioredis
from agentihooks.swarm.v2 import recovery_pb2 as pb
from agentihooks.swarm.v2 import recovery_pb2_grpc as pb_grpc

from services.common import rpc, tls, tls_settings, tokens
from services.common.checkpoints import local, storing
from services.common.checkpoints import records as ckpt_records
from services.controller import hub as hubs
from services.controller import replacing
from services.controller.api import grpc_api
from services.controller.pods import classifying, kubernetes, templates
from tests.support import ports, redis_server
from tests.support.kube.apiserver import emulator as k8s_emulator

GRANT_KEY = "test-grant-key-" + "x" * 32
OPERATOR_TOKEN = "operator-token-" + "o" * 24
IMAGE = "registry.local/agent-worker:1.4.2"
NAMESPACE = "agents"
MASTER_SECRET = "master-credential-0123456789"
OTHER_SECRET = "other-master-credential-987654"


def document(
    swarm: str = "example",
    *,
    seats: tuple[str, ...] = ("eng-1", "eng-2"),
    automation: bool = True,
    legacy: bool = False,
    text: str = "build the thing",
) -> str:
    """A swarm document (JSON text) with two masters and one project."""
    return json.dumps(
        {
            "swarm": swarm,
            "worker_image": IMAGE,
            "harness": "claude_code",
            "command": ["claude", "--print"],
            "restore_automation": automation,
            "projects": [{"name": "app", "repository": "https://git.example/app.git"}],
            "masters": [
                {"agent": "master@example-1", "credential": MASTER_SECRET},
                {"agent": "master@example-2", "credential": OTHER_SECRET},
            ],
            "accounts": [{"name": "acct-a", "slots": 4}],
            "seats": [
                {
                    "seat": s,
                    "legacy_spawn": legacy,
                    "task": {"id": f"t-{s}", "text": f"{text} ({s})", "awaiting": "worker"},
                }
                for s in seats
            ],
        }
    )


def md(token: str) -> tuple[tuple[str, str], ...]:
    """Call metadata carrying a bearer credential."""
    return (("authorization", f"Bearer {token}"),)


OPERATOR = md(OPERATOR_TOKEN)


@dataclasses.dataclass
class Controller:
    """A running controller and the parts tests look at."""

    hub: hubs.Hub
    stub: pb_grpc.RecoveryStub
    channel: grpc.aio.Channel
    emulator: k8s_emulator.K8sEmulator
    redis: aioredis.Redis
    checkpoint_root: pathlib.Path
    addr: str

    def pods(self) -> list[dict[str, Any]]:
        """Every Pod the emulator holds in the workers' namespace."""
        return list(self.emulator.objects("pods", NAMESPACE))

    def pod_of(self, execution_id: str) -> dict[str, Any] | None:
        for pod in self.pods():
            labels = pod["metadata"].get("labels", {})
            if labels.get("agentihooks.io/execution") == execution_id:
                return dict(pod)
        return None

    def fail(self, execution_id: str, status: Mapping[str, Any]) -> None:
        """Set the status of an attempt's Pod as the kubelet would."""
        pod = self.pod_of(execution_id)
        assert pod is not None, f"no pod for {execution_id}"
        self.emulator.set_pod_status(NAMESPACE, pod["metadata"]["name"], status)

    def worker_token(
        self, execution_id: str, generation: int, seat: str, swarm: str = "example"
    ) -> str:
        """A worker credential as the controller mints it (same key, same claims)."""
        _, token = tokens.mint_worker_credential(
            GRANT_KEY,
            swarm=swarm,
            seat=seat,
            execution_id=execution_id,
            execution_generation=generation,
        )
        return token

    async def apply(self, doc: str | None = None) -> pb.ApplySwarmResponse:
        response: pb.ApplySwarmResponse = await self.stub.ApplySwarm(
            pb.ApplySwarmRequest(document=doc or document()), metadata=OPERATOR
        )
        return response

    async def status(self, swarm: str = "example") -> pb.SwarmStatus:
        status: pb.SwarmStatus = await self.stub.GetSwarmStatus(
            pb.GetSwarmStatusRequest(swarm=swarm), metadata=OPERATOR
        )
        return status

    async def reconcile(self, swarm: str = "example") -> Any:
        """Run one pass now (the loop also runs on its own)."""
        recovery = await self.hub.recovery(swarm)
        return await recovery.reconcile()


def terminated(reason: str = "Error", exit_code: int = 1) -> dict[str, Any]:
    """A Pod status whose worker container terminated (a complete kubelet-style status)."""
    return {
        "phase": "Failed",
        "startTime": "2026-12-02T10:00:00Z",
        "containerStatuses": [
            {
                "name": classifying.WORKER_CONTAINER,
                "image": IMAGE,
                "imageID": "sha256:" + "0" * 64,
                "ready": False,
                "restartCount": 0,
                "state": {"terminated": {"reason": reason, "exitCode": exit_code}},
            }
        ],
    }


async def start_controller(
    redis_url: str,
    emulator: k8s_emulator.K8sEmulator,
    root: pathlib.Path,
    *,
    with_store: bool = True,
    pass_interval_s: float = 0.2,
    lease_ttl_ms: int = 2000,
    listen: str = "127.0.0.1:0",
    worker_env: Mapping[str, str] | None = None,
    backend: storing.Backend | None = None,
    template: Mapping[str, Any] | None = None,
    check_nodes: bool = False,
    store_addr: str | None = None,
    entry_point: tuple[str, ...] = (),
    events_timeout: float | None = None,
    tls_conf: tls_settings.TLSSettings | None = None,
) -> tuple[Controller, grpc.aio.Server]:
    """Start a controller whose workers are Pods on the emulator (`worker_env`: the settings
    its Pods get, as `agentihooks-controller` gives them from its own; `backend`: where it
    lists checkpoints, the local folder `root` by default; `template`: the worker Pod
    template, the built-in one by default; `events_timeout`: how long one call posting a
    Kubernetes Event may take, the runtime's default when None; `tls_conf`: the controller's
    TLS files, also what the test's own channel dials with, the process's environment when
    None)."""
    client = aioredis.Redis.from_url(redis_url)
    runtime = kubernetes.KubernetesRuntime(
        emulator.api_client,
        NAMESPACE,
        dict(template) if template is not None else templates.default_pod_template(),
        check_nodes=check_nodes,
        worker_env=worker_env,
        **({} if events_timeout is None else {"events_timeout": events_timeout}),
    )
    checkpoints = (
        replacing.BackendCheckpoints(backend or local.LocalFolderBackend(root))
        if with_store
        else None
    )
    hub = hubs.Hub(
        client,
        runtime,
        grant_key=GRANT_KEY,
        operator_token=OPERATOR_TOKEN,
        worker_image=IMAGE,
        checkpoints=checkpoints,
        lease_ttl_ms=lease_ttl_ms,
        pass_interval_s=pass_interval_s,
        runtime_name="kubernetes",
        store_addr=store_addr,
        entry_point=entry_point,
    )
    service = grpc_api.RecoveryService(hub)
    server, port = await rpc.start_server(
        listen,
        [service.register],
        [grpc_api.SERVICE_NAME],
        authenticate=service.authenticate,
        tls_conf=tls_conf,
    )
    await hub.start()
    channel = tls.channel(f"127.0.0.1:{port}", tls_conf)
    ctl = Controller(
        hub, pb_grpc.RecoveryStub(channel), channel, emulator, client, root, f"127.0.0.1:{port}"
    )
    return ctl, server


async def stop_controller(ctl: Controller, server: grpc.aio.Server) -> None:
    await ctl.channel.close()
    await server.stop(None)
    await ctl.hub.stop()
    await ctl.hub.runtime.aclose()
    await ctl.redis.aclose()


async def empty_state(redis_url: str, tmp_path: pathlib.Path) -> pathlib.Path:
    """An empty Redis and a new local checkpoint folder (returned) for a controller."""
    flush = aioredis.Redis.from_url(redis_url)
    await flush.flushall()
    await flush.aclose()
    root = tmp_path / "checkpoints"
    root.mkdir()
    return root


@pytest.fixture
async def controller(
    tmp_path: pathlib.Path,
    redis_server: redis_server.RedisServer,
    k8s_emulator: k8s_emulator.K8sEmulator,
) -> AsyncIterator[Controller]:
    """A controller on the emulator with an empty Redis and a local checkpoint folder."""
    root = await empty_state(redis_server.url, tmp_path)
    ctl, server = await start_controller(redis_server.url, k8s_emulator, root)
    try:
        yield ctl
    finally:
        await stop_controller(ctl, server)
        await asyncio.sleep(0)


# Helpers for the API-level tests (tests/integration/api/).


def worker_credential(ctl: Controller, execution_id: str, swarm: str = "example") -> str:
    """The worker credential the controller put in the attempt's Secret: what its Pod gets."""
    secret = ctl.emulator.get("secrets", templates.secret_name(swarm, execution_id), NAMESPACE)
    assert secret is not None, f"no credential Secret for {execution_id}"
    return base64.b64decode(secret["data"][templates.CREDENTIAL_KEY]).decode()


def worker_env(pod: Mapping[str, Any]) -> dict[str, str]:
    """The plain environment of a Pod's worker container."""
    for container in pod["spec"]["containers"]:
        if container["name"] == classifying.WORKER_CONTAINER:
            return {e["name"]: e["value"] for e in container.get("env", []) if "value" in e}
    raise AssertionError("the Pod has no worker container")


async def wait_for_pod(
    ctl: Controller, execution_id: str, timeout: float = 10, swarm: str = "example"
) -> dict[str, Any]:
    """The attempt's Pod once the emulator holds it and its credential Secret (the runtime
    creates the Pod first, then the Secret)."""

    async def created() -> dict[str, Any]:
        pod = ctl.pod_of(execution_id)
        assert pod is not None, f"no pod for {execution_id}"
        secret = templates.secret_name(swarm, execution_id)
        assert ctl.emulator.get("secrets", secret, NAMESPACE) is not None, "no Secret yet"
        return pod

    return await ports.eventually(created, timeout=timeout)


async def put_checkpoint(
    root: pathlib.Path,
    seat: str,
    generation: int = 1,
    *,
    checkpoint_id: str = "ckpt-7",
    sequence: int = 7,
    session: str | None = "0b0c7a1e-1111-2222-3333-444455556666",
    watermark: int = 412,
    key: str = IMAGE,
    swarm: str = "example",
    leave_out_session_files: bool = False,
) -> dict[str, Any]:
    """Write a committed checkpoint of `swarm`'s attempt `SWARM.SEAT.GENERATION` into a
    controller's local checkpoint folder, as the store would have written it.

    `session=None` writes a context-only checkpoint; `leave_out_session_files` leaves its native
    session object out, so the checkpoint is not complete.
    """
    transcript = f'{{"n":1,"checkpoint":"{checkpoint_id}"}}\n'.encode()
    session_file = f'{{"type":"user","checkpoint":"{checkpoint_id}"}}\n'.encode()
    native = None
    if session is not None:
        native = ckpt_records.Native(
            harness="claude_code",
            harness_version="2.1.3",
            native_session_id=session,
            files=(
                ckpt_records.NativeFile(
                    f"projects/-work-app/{checkpoint_id}.jsonl",
                    ckpt_records.Blob.of(session_file),
                ),
            ),
        )
    record = ckpt_records.new_record(
        checkpoint_id=checkpoint_id,
        sequence=sequence,
        created_at="2026-12-02T15:00:00Z",
        authority=ckpt_records.Authority(
            swarm=swarm,
            seat=seat,
            task_id=f"t-{seat}",
            task_generation=1,
            execution_id=f"{swarm}.{seat}.{generation}",
            execution_generation=generation,
        ),
        project="app",
        compatibility_key=key,
        transcript=ckpt_records.Blob.of(transcript),
        watermark=watermark,
        native=native,
    )
    store = local.LocalFolderBackend(root).scoped(storing.StoreScope(swarm, f"t-{seat}", 1))
    blobs = [transcript]
    if native is not None and not leave_out_session_files:
        blobs.append(session_file)
    for data in blobs:

        async def chunks(data: bytes = data) -> AsyncIterator[bytes]:
            yield data

        await store.put_object(
            chunks(), sha256=hashlib.sha256(data).hexdigest(), size=len(data), max_size=1 << 20
        )
    await store.put_manifest(checkpoint_id, ckpt_records.encode_manifest(record))
    return record


@dataclasses.dataclass
class Controllers:
    """Starts controllers on one Redis, one emulator and one checkpoint folder, and restarts
    them (a new process: new holder, fresh runtime) on the same state."""

    redis_url: str
    emulator: k8s_emulator.K8sEmulator
    root: pathlib.Path
    running: list[tuple[Controller, grpc.aio.Server]] = dataclasses.field(default_factory=list)

    async def start(self, **options: Any) -> Controller:
        ctl, server = await start_controller(self.redis_url, self.emulator, self.root, **options)
        self.running.append((ctl, server))
        return ctl

    async def stop(self, ctl: Controller) -> None:
        for item in list(self.running):
            if item[0] is ctl:
                self.running.remove(item)
                await stop_controller(*item)

    async def restart(self, ctl: Controller, swarm: str = "example", **options: Any) -> Controller:
        """Stop `ctl`, start a new controller and wait until it holds the swarm's lease."""
        await self.stop(ctl)
        new = await self.start(**options)
        await new.hub.wait_until_leader(swarm)
        return new

    async def stop_all(self) -> None:
        while self.running:
            await stop_controller(*self.running.pop())


@pytest.fixture
async def controllers(
    tmp_path: pathlib.Path,
    redis_server: redis_server.RedisServer,
    k8s_emulator: k8s_emulator.K8sEmulator,
) -> AsyncIterator[Controllers]:
    """Controllers to start and restart on an empty Redis, the emulator and a local folder."""
    root = await empty_state(redis_server.url, tmp_path)
    runner = Controllers(redis_server.url, k8s_emulator, root)
    try:
        yield runner
    finally:
        await runner.stop_all()
        await asyncio.sleep(0)


async def refusal(call: Awaitable[Any]) -> grpc.aio.AioRpcError:
    """The error a call ended with (the test fails when it succeeded)."""
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await call
    return caught.value


def reason_of(error: grpc.aio.AioRpcError) -> str | None:
    """The spec's reason code a refusal carries in its trailing metadata."""
    for key, value in error.trailing_metadata() or ():
        if key == rpc.REASON_KEY:
            return str(value)
    return None


async def card(ctl: Controller, seat: str, swarm: str = "example") -> Any:
    """The seat's card of the Handoff outcomes panel (GetSwarmStatus), or None."""
    status = await ctl.status(swarm)
    return next((c for c in status.handoffs if c.seat == seat), None)


async def watch(
    ctl: Controller,
    until: Callable[[list[Any]], bool],
    *,
    after: str = "0-0",
    metadata: tuple[tuple[str, str], ...] = OPERATOR,
    timeout: float = 10,
    swarm: str = "example",
) -> list[Any]:
    """Events of WatchRecovery from `after` until `until(events so far)` holds."""
    call = ctl.stub.WatchRecovery(
        pb.WatchRecoveryRequest(swarm=swarm, after=after), metadata=metadata
    )
    seen: list[Any] = []

    async def follow() -> None:
        async for event in call:
            seen.append(event)
            if until(seen):
                return

    try:
        await asyncio.wait_for(follow(), timeout)
    finally:
        call.cancel()
    return seen


def image_pull(started: datetime.datetime) -> dict[str, Any]:
    """A Pod status whose restorer sidecar cannot pull its image since `started` (the worker
    container waits behind it), as the kubelet reports it."""
    return {
        "phase": "Pending",
        "startTime": started.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "conditions": [
            {"type": "Initialized", "status": "False", "reason": "ContainersNotInitialized"},
            {"type": "Ready", "status": "False", "reason": "ContainersNotReady"},
        ],
        "initContainerStatuses": [
            {
                "name": classifying.RESTORER_CONTAINER,
                "image": IMAGE,
                "imageID": "",
                "ready": False,
                "restartCount": 0,
                "started": False,
                "state": {
                    "waiting": {
                        "reason": "ImagePullBackOff",
                        "message": f'Back-off pulling image "{IMAGE}"',
                    }
                },
            }
        ],
        "containerStatuses": [
            {
                "name": classifying.WORKER_CONTAINER,
                "image": IMAGE,
                "imageID": "",
                "ready": False,
                "restartCount": 0,
                "state": {"waiting": {"reason": "PodInitializing"}},
            }
        ],
    }
