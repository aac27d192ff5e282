"""A real checkpoint-store gRPC server on loopback, over a real backend and real Redis."""

from __future__ import annotations

import dataclasses
import pathlib
from collections.abc import AsyncIterator

import grpc
import pytest
import redis.asyncio as aioredis

from services.checkpoint_store import service
from services.common import revocations, rpc, tls_settings, tokens
from services.common.checkpoints import local
from tests.support import redis_server

GRANT_KEY = "test-grant-key-" + "x" * 32
MAX_OBJECT_BYTES = 4 * 1024 * 1024


@dataclasses.dataclass
class StoreServer:
    """A running store: its address, its root folder and a way to mint grants."""

    addr: str
    root: pathlib.Path
    revoked: revocations.RedisRevocations
    channel: grpc.aio.Channel

    def grant(
        self,
        *rights: tokens.Right,
        task_id: str = "t-eng-2",
        task_generation: int = 1,
        execution_id: str = "e-42",
        execution_generation: int = 3,
        seat: str = "eng-2",
        swarm: str = "example",
    ) -> tuple[tokens.Grant, str]:
        """Mint a grant the store accepts (default: the test attempt, read and write)."""
        return tokens.mint_grant(
            GRANT_KEY,
            swarm=swarm,
            seat=seat,
            task_id=task_id,
            task_generation=task_generation,
            execution_id=execution_id,
            execution_generation=execution_generation,
            rights=frozenset(rights or (tokens.Right.READ, tokens.Right.WRITE)),
        )


async def start_store(
    root: pathlib.Path,
    redis_url: str,
    backend: object | None = None,
    tls_conf: tls_settings.TLSSettings | None = None,
) -> tuple[grpc.aio.Server, int, service.CheckpointStoreService]:
    """Start the store service on a free loopback port (with `tls_conf`'s TLS files; the
    process's environment when None)."""
    client = aioredis.Redis.from_url(redis_url)
    store = service.CheckpointStoreService(
        backend or local.LocalFolderBackend(root),  # type: ignore[arg-type]
        GRANT_KEY,
        revocations.RedisRevocations(client),
        MAX_OBJECT_BYTES,
        client,
    )
    server, port = await rpc.start_server(
        "127.0.0.1:0", [store.register], [service.SERVICE_NAME], tls_conf=tls_conf
    )
    return server, port, store


@pytest.fixture
async def store_server(
    tmp_path: pathlib.Path, redis_server: redis_server.RedisServer
) -> AsyncIterator[StoreServer]:
    """A store on a local folder, empty Redis, and a channel to it."""
    root = tmp_path / "checkpoints"
    root.mkdir()
    client = aioredis.Redis.from_url(redis_server.url)
    await client.flushall()
    server, port, store = await start_store(root, redis_server.url)
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}")
    try:
        yield StoreServer(f"127.0.0.1:{port}", root, revocations.RedisRevocations(client), channel)
    finally:
        await channel.close()
        await server.stop(None)
        await store.aclose()
        await client.aclose()
