"""Fixtures of the controller core's integration tests: real redis-server, fake runtime."""

from __future__ import annotations

import pytest
import redis.asyncio as aioredis

from tests.integration.controller import harness


@pytest.fixture
async def hx(redis_client: aioredis.Redis) -> harness.Harness:
    """A swarm `example` (seats eng-1, eng-2) applied by a controller that holds the lease."""
    return await harness.start(redis_client)
