"""Fixtures shared by the API-level tests."""

from __future__ import annotations

from collections.abc import AsyncIterator

import grpc
import pytest
from agentihooks.swarm.v2 import checkpoint_store_pb2_grpc as store_grpc

from tests.support import controller_server as cs
from tests.support import redis_server, store_server


@pytest.fixture
async def store(
    controller: cs.Controller, redis_server: redis_server.RedisServer
) -> AsyncIterator[store_grpc.CheckpointStoreStub]:
    """A real checkpoint-store server over the controller's checkpoint folder and Redis (where
    the controller writes its revocations), checking grants with the controller's key."""
    assert store_server.GRANT_KEY == cs.GRANT_KEY
    server, port, service = await store_server.start_store(
        controller.checkpoint_root, redis_server.url
    )
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}")
    try:
        yield store_grpc.CheckpointStoreStub(channel)
    finally:
        await channel.close()
        await server.stop(None)
        await service.aclose()
