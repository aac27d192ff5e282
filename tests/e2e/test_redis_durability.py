"""`AGENTIHOOKS_REDIS_WAIT_AOF` asks for WAITAOF, which Redis runs from 7.2 on: the controller's
real entry point (`python -m services.controller.main`) refuses it on the Debian Redis 7.0 with
one line naming the setting and the server's version, exit code 2, whether Redis answers at
start or only later (issue 23, "Acknowledge only what is durable")."""

from __future__ import annotations

import asyncio
import pathlib
import sys

import pytest
import redis.asyncio as aioredis

from tests.e2e import test_redis_outage as outage
from tests.support.kube.apiserver import emulator as k8s_emulator
from tests.support.redis_server import RestartableRedis

ROOT = pathlib.Path(__file__).resolve().parents[2]
REFUSAL = (
    "agentihooks-controller: AGENTIHOOKS_REDIS_WAIT_AOF=true needs WAITAOF (Redis 7.2 or "
    "later), but the Redis at 127.0.0.1:{port} is {version}: upgrade Redis or set "
    "AGENTIHOOKS_REDIS_WAIT_AOF=false"
)


async def version_of(redis: RestartableRedis) -> str:
    """The server's version; the test is skipped on a Redis that runs WAITAOF."""
    client = aioredis.Redis.from_url(redis.url)
    try:
        version = str((await client.info("server"))["redis_version"])
    finally:
        await client.aclose()
    if tuple(int(n) for n in version.split(".")[:2]) >= (7, 2):
        pytest.skip("this Redis runs WAITAOF")
    return version


async def test_waitaof_on_a_redis_without_it_is_refused_at_start_with_one_line(
    tmp_path: pathlib.Path,
) -> None:
    """Redis (with its append-only file) answers at start: the controller serves nothing and
    exits 2 having printed exactly one line, which names the setting, Redis's address and
    version, and the two ways out."""
    redis = RestartableRedis(tmp_path / "redis")
    redis.start()
    try:
        version = await version_of(redis)
        async with k8s_emulator.serving() as emulator:
            env = outage.controller_env(tmp_path, emulator, redis.url) | {
                "AGENTIHOOKS_REDIS_WAIT_AOF": "true"
            }
            proc = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "services.controller.main",
                "--listen",
                "127.0.0.1:0",
                "--http",
                "127.0.0.1:0",
                cwd=ROOT,
                env=env,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
            )
            out, err = await asyncio.wait_for(proc.communicate(), outage.WAIT_S)
        assert proc.returncode == 2, err
        assert out == b""
        assert err.decode().splitlines() == [REFUSAL.format(port=redis.port, version=version)]
    finally:
        redis.kill()


async def test_waitaof_is_refused_when_redis_first_answers_after_the_start(
    tmp_path: pathlib.Path,
) -> None:
    """Redis is down at start: the controller starts as it always does (it waits for Redis);
    when Redis first answers, it logs `redis_wait_refused` and stops, exit 2, with the same
    line last on its output."""
    redis = RestartableRedis(tmp_path / "redis")
    try:
        async with k8s_emulator.serving() as emulator, outage.controllers() as running:
            env = outage.controller_env(tmp_path, emulator, redis.url) | {
                "AGENTIHOOKS_REDIS_WAIT_AOF": "true"
            }
            ctl = await outage.start_controller(env)
            running.append(ctl)
            await asyncio.to_thread(redis.start)
            version = await version_of(redis)
            code = await asyncio.wait_for(ctl.proc.wait(), outage.WAIT_S)
            await ctl.reader
            await ctl.channel.close()
            assert code == 2
            (refused,) = ctl.events("redis_wait_refused")
            assert refused["level"] == "error"
            assert refused["reason"].startswith("AGENTIHOOKS_REDIS_WAIT_AOF=true needs WAITAOF")
            assert ctl.raw[-1].decode().rstrip("\n") == REFUSAL.format(
                port=redis.port, version=version
            )
            assert "Traceback" not in b"".join(ctl.raw).decode()
    finally:
        redis.kill()
