"""A real controller on loopback: the Recovery gRPC service over a Hub, real Redis, the
Kubernetes API emulator through kubernetes-asyncio, and a local checkpoint folder."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import pathlib
from collections.abc import AsyncIterator, Mapping
from typing import Any

import grpc
import pytest
import redis.asyncio as aioredis
from agentihooks.swarm.v2 import recovery_pb2 as pb
from agentihooks.swarm.v2 import recovery_pb2_grpc as pb_grpc

from services.common import rpc, tokens
from services.common.checkpoints import local
from services.controller import hub as hubs
from services.controller import replacing
from services.controller.api import grpc_api
from services.controller.pods import classifying, kubernetes, templates
from tests.support import k8s_emulator, redis_server

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
) -> tuple[Controller, grpc.aio.Server]:
    """Start a controller whose workers are Pods on the emulator."""
    client = aioredis.Redis.from_url(redis_url)
    runtime = kubernetes.KubernetesRuntime(
        emulator.api_client, NAMESPACE, templates.default_pod_template(), check_nodes=False
    )
    checkpoints = (
        replacing.BackendCheckpoints(local.LocalFolderBackend(root)) if with_store else None
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
    )
    service = grpc_api.RecoveryService(hub)
    server, port = await rpc.start_server(
        "127.0.0.1:0", [service.register], [grpc_api.SERVICE_NAME]
    )
    await hub.start()
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}")
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


@pytest.fixture
async def controller(
    tmp_path: pathlib.Path,
    redis_server: redis_server.RedisServer,
    k8s_emulator: k8s_emulator.K8sEmulator,
) -> AsyncIterator[Controller]:
    """A controller on the emulator with an empty Redis and a local checkpoint folder."""
    flush = aioredis.Redis.from_url(redis_server.url)
    await flush.flushall()
    await flush.aclose()
    root = tmp_path / "checkpoints"
    root.mkdir()
    ctl, server = await start_controller(redis_server.url, k8s_emulator, root)
    try:
        yield ctl
    finally:
        await stop_controller(ctl, server)
        await asyncio.sleep(0)
