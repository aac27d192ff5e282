"""The checkpoint store without Redis: `agentihooks-checkpoint-store` as an OS process
(`python -m services.checkpoint_store.main`) over a local checkpoint folder and a real
redis-server of the test's own, killed (SIGKILL) and started again on the same port with its
data (AOF, synced before Redis answers). Nothing is mocked.

The store reads grant revocations from Redis. While Redis does not answer it fails closed: every
call is UNAVAILABLE (`redis_unavailable`), never a traceback and never a revoked grant accepted.
"""

from __future__ import annotations

import asyncio
import json
import os
import pathlib
import signal
import sys
import time
from typing import Any

import grpc
import pytest
from agentihooks.swarm.v2 import checkpoint_store_pb2 as pb
from agentihooks.swarm.v2 import checkpoint_store_pb2_grpc as pb_grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from services.checkpoint_store import service
from services.common import redis_link, revocations, rpc, tls, tls_settings, tokens
from tests.support import certificates, ports
from tests.support.redis_server import RestartableRedis

ROOT = pathlib.Path(__file__).resolve().parents[2]
WAIT_S = 180.0
GRANT_KEY = "store-outage-grant-key-" + "k" * 32
PASSWORD = "store-redis-password-never-logged"
SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING
KEY = "registry.local/agent-worker:1.4.2"


def grant(execution: str) -> tuple[tokens.Grant, str]:
    return tokens.mint_grant(
        GRANT_KEY,
        swarm="example",
        seat="eng-1",
        task_id="t-eng-1",
        task_generation=1,
        execution_id=execution,
        execution_generation=1,
        rights=frozenset({tokens.Right.READ, tokens.Right.WRITE}),
    )


def reason_of(error: grpc.aio.AioRpcError) -> str | None:
    for key, value in error.trailing_metadata() or ():
        if key == rpc.REASON_KEY:
            return str(value)
    return None


async def test_the_store_without_redis_fails_closed_and_serves_once_redis_answers(
    tmp_path: pathlib.Path,
) -> None:
    """Started without Redis: NOT_SERVING (as a whole and CheckpointStore), every call
    UNAVAILABLE `redis_unavailable`, one log line per retry step naming
    AGENTIHOOKS_REDIS_URL. Redis comes up: SERVING, calls served. A grant revoked then is
    refused; Redis is killed: NOT_SERVING and that grant (like any) is UNAVAILABLE, never
    accepted; Redis restarts with its data: SERVING, the revoked grant still refused, a valid
    one served. SIGTERM stops it cleanly; no traceback, no password in the log."""
    redis = RestartableRedis(tmp_path / "redis", password=PASSWORD)
    root = tmp_path / "checkpoints"
    root.mkdir()
    port = ports.free_port()
    # Mutual TLS, as deploy/k8s/ serves the store: its certificate, and client certificates
    # of the CA required; the test dials as the controller does, with one of its own.
    authority = certificates.Authority(tmp_path / "tls", "agentihooks-ca")
    store_leaf = authority.issue("agentihooks-checkpoint-store")
    dialing = tls_settings.load(
        certificates.tls_env(authority, authority.issue("agentihooks-controller"))
    )
    env = {
        **certificates.tls_env(authority, store_leaf, client_ca=authority),
        "PATH": os.environ.get("PATH", ""),
        "HOME": str(tmp_path),
        "AGENTIHOOKS_REDIS_URL": redis.url,
        "AGENTIHOOKS_GRANT_KEY": GRANT_KEY,
        "AGENTIHOOKS_CHECKPOINT_ROOT": str(root),
    }
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "services.checkpoint_store.main",
        "--listen",
        f"127.0.0.1:{port}",
        cwd=ROOT,
        env=env,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )
    raw: list[bytes] = []
    lines: list[dict[str, Any]] = []
    listening = asyncio.Event()

    async def read() -> None:
        assert proc.stderr is not None
        async for line in proc.stderr:
            raw.append(line)
            try:
                lines.append(json.loads(line))
            except ValueError:
                lines.append({"raw": line.decode(errors="replace")})
            if lines[-1].get("event") == "listening":
                listening.set()
        listening.set()

    def events(name: str) -> list[dict[str, Any]]:
        return [line for line in lines if line.get("event") == name]

    reader = asyncio.create_task(read())
    channel = tls.channel(f"127.0.0.1:{port}", dialing)
    stub = pb_grpc.CheckpointStoreStub(channel)
    health = health_pb2_grpc.HealthStub(channel)

    async def serving() -> tuple[int, int]:
        out = []
        for name in ("", service.SERVICE_NAME):
            answer = await health.Check(health_pb2.HealthCheckRequest(service=name), timeout=WAIT_S)
            out.append(int(answer.status))
        return out[0], out[1]

    async def listing(token: str) -> pb.ListCheckpointsResponse:
        response: pb.ListCheckpointsResponse = await stub.ListCheckpoints(
            pb.ListCheckpointsRequest(compatibility_key=KEY),
            metadata=(("authorization", f"Bearer {token}"),),
            timeout=WAIT_S,
        )
        return response

    async def refused(token: str) -> grpc.aio.AioRpcError:
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await listing(token)
        return caught.value

    _, valid = grant("example.eng-1.1")
    revoked_grant, revoked = grant("example.eng-1.2")
    try:
        await asyncio.wait_for(listening.wait(), WAIT_S)
        assert proc.returncode is None, lines[-10:]
        assert events("listening")[0]["transport"] == "mutual_tls", lines[-5:]

        async def retrying() -> None:
            assert len(events("redis_unavailable")) >= 2

        await ports.eventually(retrying, timeout=WAIT_S)
        steps = events("redis_unavailable")
        assert [s["retry_in_s"] for s in steps[:2]] == [0.5, 1.0], steps
        for step in steps:
            assert step["variable"] == "AGENTIHOOKS_REDIS_URL", step
            assert step["address"] == f"127.0.0.1:{redis.port}", step
            assert step["service"] == "checkpoint_store", step
        assert await serving() == (NOT_SERVING, NOT_SERVING)
        error = await refused(valid)
        assert (
            error.code() is grpc.StatusCode.UNAVAILABLE and reason_of(error) == "redis_unavailable"
        )

        await asyncio.to_thread(redis.start)

        async def up() -> None:
            assert await serving() == (SERVING, SERVING)

        await ports.eventually(up, timeout=WAIT_S)
        assert list((await listing(valid)).checkpoints) == []
        client = redis_link.connect(redis.url)
        try:
            await revocations.RedisRevocations(client).revoke(
                revoked_grant.swarm, revoked_grant.grant_id, int(time.time()) + 3600
            )
        finally:
            await client.aclose()
        error = await refused(revoked)
        assert error.code() is grpc.StatusCode.UNAUTHENTICATED, error

        redis.kill()

        async def down() -> None:
            assert await serving() == (NOT_SERVING, NOT_SERVING)

        await ports.eventually(down, timeout=WAIT_S)
        for token in (revoked, valid):
            error = await refused(token)
            assert error.code() is grpc.StatusCode.UNAVAILABLE, error
            assert reason_of(error) == redis_link.REASON

        await asyncio.to_thread(redis.start)
        await ports.eventually(up, timeout=WAIT_S)
        error = await refused(revoked)
        assert error.code() is grpc.StatusCode.UNAUTHENTICATED, error
        assert list((await listing(valid)).checkpoints) == []
        assert events("redis_available")

        proc.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(proc.wait(), WAIT_S) == 0
        await reader
        assert events("stopped")
        text = b"".join(raw).decode(errors="replace")
        assert PASSWORD not in text
        assert "Traceback" not in text, text[-3000:]
        assert all("raw" not in line for line in lines)
        assert not events("rpc_failed"), events("rpc_failed")
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
        await asyncio.gather(reader, return_exceptions=True)
        await channel.close()
        redis.kill()
