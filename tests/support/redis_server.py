"""A real redis-server on a free loopback port, one per test session, flushed per test."""

from __future__ import annotations

import subprocess
import tempfile
from collections.abc import AsyncIterator, Iterator

import pytest
import redis.asyncio as aioredis

from tests.support import binaries, ports


class RedisServer:
    """A running redis-server process."""

    def __init__(self, port: int, proc: subprocess.Popen[bytes]) -> None:
        self.port = port
        self.proc = proc
        self.url = f"redis://127.0.0.1:{port}/0"


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer]:
    """Start redis-server (no persistence) for the session."""
    exe = binaries.require("redis-server")
    port = ports.free_port()
    with tempfile.TemporaryDirectory() as tmp:
        proc = subprocess.Popen(
            [
                exe,
                "--port",
                str(port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                tmp,
                "--protected-mode",
                "yes",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            ports.wait_port(port)
            yield RedisServer(port, proc)
        finally:
            proc.terminate()
            proc.wait(10)


@pytest.fixture
async def redis_client(redis_server: RedisServer) -> AsyncIterator[aioredis.Redis]:
    """A client on an empty database; closed after the test."""
    client = aioredis.Redis.from_url(redis_server.url)
    await client.flushall()
    try:
        yield client
    finally:
        await client.aclose()
