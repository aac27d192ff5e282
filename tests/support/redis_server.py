"""A real redis-server on a free loopback port, one per test session, flushed per test."""

from __future__ import annotations

import pathlib
import signal
import subprocess
import tempfile
import time
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


class RestartableRedis:
    """A redis-server of one test that can be killed and started again on the same port with
    the same data: every write is appended to its AOF and synced before Redis answers it
    (``--appendonly yes --appendfsync always``), so a SIGKILL loses nothing Redis acknowledged.

    Args:
        folder: Where its data lives (kept across restarts).
        password: Set ``requirepass`` (the URL then carries it).
    """

    def __init__(self, folder: pathlib.Path, *, password: str | None = None) -> None:
        self.folder = folder
        self.folder.mkdir(parents=True, exist_ok=True)
        self.port = ports.free_port()
        self.password = password
        auth = f":{password}@" if password else ""
        self.url = f"redis://{auth}127.0.0.1:{self.port}/0"
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def start(self) -> None:
        """Start it (again) on its port with its data; return once it accepts connections and
        has loaded its data."""
        assert not self.running, "already running"
        exe = binaries.require("redis-server")
        args = [
            exe,
            "--port",
            str(self.port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "yes",
            "--appendfsync",
            "always",
            "--dir",
            str(self.folder),
            "--logfile",
            str(self.folder / "redis.log"),
            "--protected-mode",
            "yes",
        ]
        if self.password:
            args += ["--requirepass", self.password]
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.starts += 1
        ports.wait_port(self.port)
        self._wait_loaded()

    def _wait_loaded(self) -> None:
        import redis as sync_redis

        client = sync_redis.Redis.from_url(self.url)
        deadline = time.monotonic() + ports.MIN_DEADLINE_S
        try:
            while True:
                try:
                    client.ping()
                    return
                except sync_redis.exceptions.BusyLoadingError:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.02)
        finally:
            client.close()

    def writes(self) -> list[list[str]]:
        """Every write Redis recorded in its AOF so far, oldest first, as words (a script's
        writes appear one by one: Redis 7 records a script's effects, not the call). Nothing
        is compacted: the AOF is never rewritten at the sizes a test writes."""
        folder = self.folder / "appendonlydir"

        def sequence(path: pathlib.Path) -> int:
            return int(path.name.split(".")[-3])

        out: list[list[str]] = []
        for path in sorted(folder.glob("*.incr.aof"), key=sequence):
            data, i = path.read_bytes(), 0
            while i < len(data):
                end = data.find(b"\r\n", i)
                if end < 0:
                    break  # a torn tail (not expected with appendfsync always)
                if data[i : i + 1] == b"#":  # an annotation line
                    i = end + 2
                    continue
                count, i = int(data[i + 1 : end]), end + 2  # "*COUNT"
                words: list[str] = []
                for _ in range(count):
                    end = data.index(b"\r\n", i)
                    size, i = int(data[i + 1 : end]), end + 2  # "$SIZE"
                    words.append(data[i : i + size].decode(errors="replace"))
                    i += size + 2
                out.append(words)
        return out

    def kill(self) -> None:
        """SIGKILL it (nothing acknowledged is lost: see the class)."""
        if self.proc is not None:
            if self.proc.poll() is None:
                self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(ports.MIN_DEADLINE_S)
            self.proc = None

    def stop(self) -> None:
        """Stop it cleanly (SIGTERM: Redis flushes its AOF and exits)."""
        if self.proc is not None:
            if self.proc.poll() is None:
                self.proc.terminate()
            self.proc.wait(ports.MIN_DEADLINE_S)
            self.proc = None


@pytest.fixture
def restartable_redis(tmp_path: pathlib.Path) -> Iterator[RestartableRedis]:
    """A redis-server of this test's own, NOT started: call `start()`; stopped at the end."""
    server = RestartableRedis(tmp_path / "redis-data")
    try:
        yield server
    finally:
        server.kill()
