"""A server whose port is taken refuses to start, in one line naming the port and the setting.

Issue 20: "Servers refuse a port that is in use, with one line naming the port and the variable
or flag that sets it (no SO_REUSEPORT on any gRPC server; no traceback for the HTTP port)." Each
entry point runs as the OS process an operator starts; the port is held by a real server of the
same kind (the store) or by a plain listening socket (any other program).
"""

from __future__ import annotations

import asyncio
import os
import pathlib
import socket
import sys
from collections.abc import Iterator

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from tests.support import controller_server as cs
from tests.support import ports, redis_server

WAIT_S = ports.MIN_DEADLINE_S


@pytest.fixture
def held() -> Iterator[tuple[socket.socket, str]]:
    """A port on 127.0.0.1 another program listens on (a plain socket, no SO_REUSEPORT)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        yield s, f"127.0.0.1:{s.getsockname()[1]}"


def _env(tmp_path: pathlib.Path, **extra: str) -> dict[str, str]:
    return {
        "PATH": os.environ.get("PATH", ""),
        "HOME": str(tmp_path),
        "AGENTIHOOKS_GRANT_KEY": cs.GRANT_KEY,
        **{f"AGENTIHOOKS_{k}": v for k, v in extra.items()},
    }


def _controller_env(tmp_path: pathlib.Path, redis_url: str) -> dict[str, str]:
    return _env(
        tmp_path,
        REDIS_URL=redis_url,
        OPERATOR_TOKEN=cs.OPERATOR_TOKEN,
        WORKER_IMAGE=cs.IMAGE,
        RUNTIME="local",
        WORKDIR=str(tmp_path / "workers"),
    )


async def _run(*argv: str, env: dict[str, str]) -> tuple[int, str]:
    """Run an entry point to its end; its exit code and standard error."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        *argv,
        env=env,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        async with asyncio.timeout(WAIT_S):
            _, err = await proc.communicate()
    except TimeoutError:
        proc.kill()
        await proc.wait()
        raise AssertionError(f"{argv[0]} went on running on a busy port") from None
    return proc.returncode or 0, err.decode()


def _one_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    assert "Traceback" not in err, err
    # The service's structured log lines may come first; the refusal is the last line.
    return lines[-1]


async def _serving(addr: str) -> bool:
    async with grpc.aio.insecure_channel(addr) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        reply = await stub.Check(health_pb2.HealthCheckRequest(service=""), timeout=WAIT_S)
        return bool(reply.status == health_pb2.HealthCheckResponse.SERVING)


async def test_a_second_store_on_a_running_stores_port_refuses_and_the_first_serves_on(
    tmp_path: pathlib.Path, redis_url: str
) -> None:
    """`agentihooks-checkpoint-store --listen` beside a running one exits 1 naming the port
    and `--listen or AGENTIHOOKS_STORE_ADDR`; the first store keeps the port alone."""
    addr = f"127.0.0.1:{ports.free_port()}"
    env = _env(tmp_path, REDIS_URL=redis_url, CHECKPOINT_ROOT=str(tmp_path / "ckpt"))
    first = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "services.checkpoint_store.main",
        "--listen",
        addr,
        env=env,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
    )
    try:
        await ports.eventually(lambda: _assert_serving(addr), timeout=WAIT_S, every=0.1)
        code, err = await _run("services.checkpoint_store.main", "--listen", addr, env=env)
        assert code == 1, err
        assert _one_line(err) == (
            f"agentihooks-checkpoint-store: cannot listen on {addr}: the address is in use "
            "(is another server running there?); set --listen or AGENTIHOOKS_STORE_ADDR to "
            "another HOST:PORT"
        )
        assert await _serving(addr)
        assert first.returncode is None
    finally:
        first.terminate()
        await first.wait()


async def _assert_serving(addr: str) -> None:
    try:
        assert await _serving(addr)
    except grpc.aio.AioRpcError as exc:  # not listening yet
        raise AssertionError(exc.code()) from None


async def test_the_controllers_grpc_port_in_use_is_refused_in_one_line(
    tmp_path: pathlib.Path, redis_url: str, held: tuple[socket.socket, str]
) -> None:
    """The controller's gRPC port taken: exit 1 naming it and `--listen or
    AGENTIHOOKS_CONTROL_ADDR`, no traceback."""
    _, addr = held
    env = _controller_env(tmp_path, redis_url)
    code, err = await _run(
        "services.controller.main",
        "--listen",
        addr,
        "--http",
        f"127.0.0.1:{ports.free_port()}",
        env=env,
    )
    assert code == 1, err
    assert _one_line(err).startswith(f"agentihooks-controller: cannot listen on {addr}: the ")
    assert _one_line(err).endswith("set --listen or AGENTIHOOKS_CONTROL_ADDR to another HOST:PORT")
    assert cs.OPERATOR_TOKEN not in err and cs.GRANT_KEY not in err


async def test_the_controllers_http_port_in_use_is_refused_in_one_line(
    tmp_path: pathlib.Path, redis_url: str, held: tuple[socket.socket, str]
) -> None:
    """The controller's HTTP port taken: exit 1 naming it and `--http or
    AGENTIHOOKS_HTTP_ADDR`; no `OSError: [Errno 98]` traceback."""
    _, addr = held
    env = _controller_env(tmp_path, redis_url)
    code, err = await _run(
        "services.controller.main",
        "--listen",
        f"127.0.0.1:{ports.free_port()}",
        "--http",
        addr,
        env=env,
    )
    assert code == 1, err
    assert _one_line(err) == (
        f"agentihooks-controller: cannot listen on {addr}: the address is in use "
        "(is another server running there?); set --http or AGENTIHOOKS_HTTP_ADDR to another "
        "HOST:PORT"
    )


async def test_the_restorer_sidecars_port_in_use_is_refused_in_one_line(
    tmp_path: pathlib.Path, held: tuple[socket.socket, str]
) -> None:
    """`agentihooks-restorer serve` on a taken port: exit 1 naming it and `--listen or
    AGENTIHOOKS_RESTORER_ADDR`."""
    _, addr = held
    code, err = await _run(
        "services.restorer.main",
        "serve",
        "--listen",
        addr,
        "--capture-interval",
        "0",
        env=_env(
            tmp_path,
            WORKTREE=str(tmp_path),
            CONTROL_ADDR=f"127.0.0.1:{ports.free_port()}",
            WORKER_CREDENTIAL="not-checked-before-the-port",
            ATTEMPT_DIR=str(tmp_path),
        ),
    )
    assert code == 1, err
    assert _one_line(err) == (
        f"agentihooks-restorer serve: cannot listen on {addr}: the address is in use "
        "(is another server running there?); set --listen or AGENTIHOOKS_RESTORER_ADDR to "
        "another HOST:PORT"
    )


@pytest.fixture
def redis_url(redis_server: redis_server.RedisServer) -> str:
    return redis_server.url
