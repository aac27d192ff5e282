"""Stopping a task that reads Redis, against a real redis-server: every stop ends the task.

Found by the storm bench: a controller being stopped waited for ever on its Kubernetes Events
relay (`kubernetes-events-relay`, cancelling, back in its poll sleep). redis-py sends every
command through `asyncio.wait_for` when a socket timeout is set (the services' clients set
one), and on Python 3.11 that returns the command's result instead of raising when the
cancellation lands as the command completes (CPython gh-86296). The relay's read then went on,
and its loop with it. `waiting.cancel` sends a cancellation again until the task ended; every
stop of a task goes through it.
"""

from __future__ import annotations

import asyncio
import json
import random
from collections.abc import AsyncIterator

import pytest
import redis.asyncio as aioredis

from services.common import redis_link
from services.controller import relaying, telemetry
from services.controller.pods import notices
from services.controller.state import keys
from tests.support import redis_server

SWARM = "stops"
EVENTS = 250


class Held:
    def is_held(self) -> bool:
        return True


class Swarm:
    """A swarm as the relay reads it (`relaying.Followed`): its lease held, something new
    written before every pass, its events read from its real stream."""

    def __init__(self, client: redis_link.Client) -> None:
        self.client = client
        self.lease = Held()
        self.reads = 0
        self._written = 0

    @property
    def events_written(self) -> int:
        self._written += 1
        return self._written

    async def events(
        self, after: str | None = None, block_ms: int | None = None
    ) -> list[telemetry.Event]:
        self.reads += 1
        return await telemetry.read(self.client, SWARM, after=after, block_ms=block_ms)


class Sink:
    """A recording runtime (`pods.Recording`) that keeps what it is given."""

    def __init__(self) -> None:
        self.recorded = 0

    def start_recording(self, instance: str) -> None:
        pass

    def record(self, notice: notices.Notice) -> None:
        self.recorded += 1

    async def stop_recording(self) -> None:
        pass


@pytest.fixture
async def client(redis_server: redis_server.RedisServer) -> AsyncIterator[redis_link.Client]:
    plain = aioredis.Redis.from_url(redis_server.url)
    await plain.flushall()
    for i in range(EVENTS):
        await plain.xadd(
            keys.events(SWARM),
            {
                "kind": "fence",
                "swarm": SWARM,
                "seat": f"seat-{i:03d}",
                "execution_id": f"{SWARM}:seat-{i:03d}:1",
                "expected_generation": "1",
                "detail": json.dumps({"failure": "OOMKilled"}),
            },
        )
    await plain.aclose()
    connected = redis_link.connect(redis_server.url)  # as the controller's: a socket timeout
    try:
        yield connected
    finally:
        await connected.aclose()


async def test_a_relay_stopped_while_it_reads_its_stream_always_ends(
    client: redis_link.Client,
) -> None:
    swarm, sink, rng = Swarm(client), Sink(), random.Random(7)
    for _ in range(20):
        relay = relaying.Relay(sink, "holder", lambda: {SWARM: swarm}, poll_s=0.001)  # type: ignore[arg-type]
        relay.start()
        await asyncio.sleep(rng.uniform(0, 0.004))  # mostly while a read is under way
        async with asyncio.timeout(60):
            await relay.stop()
    assert swarm.reads > 20 and sink.recorded >= EVENTS  # it was reading when stopped
