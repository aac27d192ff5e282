"""Worker commands fail loudly at start when an address they need does not answer.

Issue 9, item 6: `agentihooks-restorer serve` needs the controller (where it fetches its launch
record) and, with `AGENTIHOOKS_CHECKPOINT_REMOTE`, the checkpoint store; `entry` needs its
sidecar. An address that does not answer is tried again with a bounded backoff for
`AGENTIHOOKS_START_TIMEOUT_S` (one `start_check_retry` JSON line per retry), then the command
stops with a line naming the variable and a distinct exit code (5 for the controller and the
store, 4 for the sidecar), no restore step run and no secret printed. An address that is not
HOST:PORT stops it at once with exit code 2. A peer that comes up within the time is used.

Every command runs as the real console script in its own process, with exactly the
environment it needs; every peer is a real gRPC server on loopback.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import pathlib
import signal
import sys
from collections.abc import AsyncIterator
from typing import Any

import grpc
import pytest
from agentihooks.swarm.v2 import restorer_pb2, restorer_pb2_grpc

from services.common import directives, rpc
from tests.integration.restorer import sidecar_support as kit
from tests.support import controller_server as cs
from tests.support import git_repos, ports

RESTORER = pathlib.Path(sys.executable).parent / "agentihooks-restorer"
PATH = f"{pathlib.Path(sys.executable).parent}:/usr/bin:/bin"
DEADLINE_S = 120.0
"""The longest any wait on a process may take: a shared, loaded machine."""
CREDENTIAL = "wk-start-check-credential-0123456789"
EXIT_SETTINGS, EXIT_SIDECAR, EXIT_UNREACHABLE = 2, 4, 5


@dataclasses.dataclass
class Command:
    """An `agentihooks-restorer` process and the lines of its stderr, read as they come."""

    process: asyncio.subprocess.Process
    lines: list[str]
    reader: asyncio.Task[None]

    @property
    def err(self) -> str:
        return "".join(self.lines)

    def events(self, name: str) -> list[dict[str, Any]]:
        found = []
        for line in self.lines:
            with contextlib.suppress(ValueError):
                value = json.loads(line)
                if isinstance(value, dict) and value.get("event") == name:
                    found.append(value)
        return found

    async def logged(self, name: str) -> dict[str, Any]:
        """The first `name` event, once it is logged (or the process ended without it)."""

        async def check() -> dict[str, Any]:
            found = self.events(name)
            assert found or self.process.returncode is not None, f"no {name} yet"
            assert found, f"the process ended without {name}: {self.err[-2000:]}"
            return found[0]

        return await ports.eventually(check, timeout=DEADLINE_S)

    async def finish(self) -> int:
        """Wait for the process to end by itself; its exit code."""
        code = await asyncio.wait_for(self.process.wait(), DEADLINE_S)
        await asyncio.wait_for(self.reader, DEADLINE_S)
        return code

    async def stop(self) -> int:
        """SIGTERM unless it already ended; its exit code."""
        if self.process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self.process.send_signal(signal.SIGTERM)
        return await self.finish()


@contextlib.asynccontextmanager
async def restorer(*args: str, env: dict[str, str], cwd: pathlib.Path) -> AsyncIterator[Command]:
    """Run `agentihooks-restorer ARGS` with exactly `env` (plus PATH); stopped on the way out."""
    process = await asyncio.create_subprocess_exec(
        str(RESTORER),
        *args,
        env={"PATH": PATH, **env},
        cwd=cwd,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    lines: list[str] = []

    async def read() -> None:
        assert process.stderr is not None
        async for line in process.stderr:
            lines.append(line.decode(errors="replace"))

    command = Command(process, lines, asyncio.create_task(read(), name="stderr"))
    try:
        yield command
    finally:
        if process.returncode is None:
            process.kill()
        await command.finish()


async def restore_call(addr: str, worktree: pathlib.Path) -> list[restorer_pb2.RestoreEvent]:
    """What the entry point asks the sidecar: one Restore, followed to its end."""
    async with grpc.aio.insecure_channel(addr) as channel:
        stub = restorer_pb2_grpc.RestorerStub(channel)
        request = restorer_pb2.RestoreRequest(worktree=str(worktree))
        return [event async for event in stub.Restore(request, timeout=DEADLINE_S)]


@contextlib.asynccontextmanager
async def late_health_server(addr: str) -> AsyncIterator[None]:
    """A bare gRPC server with health checking only, as the checkpoint store serves it."""
    server, _ = await rpc.start_server(addr, [], [])
    try:
        yield
    finally:
        await server.stop(None)


def assert_no_restore_step(command: Command, worktree: pathlib.Path) -> None:
    for event in ("restore_ready", "restore_verified", "restore_refused", "restore_failed"):
        assert not command.events(event), command.err
    assert not worktree.exists()


def assert_loud(err: str, variable: str, address: str) -> None:
    """One plain line names the variable and its address; no traceback, no credential."""
    line = f"agentihooks-restorer: {variable}={address} does not answer: "
    assert line in err, err
    assert "Traceback" not in err
    assert CREDENTIAL not in err


def sidecar_env(tmp_path: pathlib.Path, **extra: str) -> dict[str, str]:
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    return {
        "HOME": str(home),
        "AGENTIHOOKS_ATTEMPT_DIR": str(tmp_path),
        "AGENTIHOOKS_HARNESS_HOME": str(home),
        **{f"AGENTIHOOKS_{k}": v for k, v in extra.items()},
    }


# --- the controller -----------------------------------------------------------------------


async def test_serve_stops_loudly_when_the_controller_does_not_answer(
    tmp_path: pathlib.Path,
) -> None:
    """Nothing listens at AGENTIHOOKS_CONTROL_ADDR: the sidecar retries, logging each retry,
    then exits 5 naming the variable; a restore asked for meanwhile ends UNAVAILABLE without a
    step (no worktree written, no launch record fetched)."""
    control = f"127.0.0.1:{ports.free_port()}"
    listen = f"127.0.0.1:{ports.free_port()}"
    env = sidecar_env(
        tmp_path, CONTROL_ADDR=control, WORKER_CREDENTIAL=CREDENTIAL, START_TIMEOUT_S="3"
    )
    worktree = tmp_path / "worktree"
    async with restorer("serve", "--listen", listen, env=env, cwd=tmp_path) as serve:
        await serve.logged("listening")
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await restore_call(listen, worktree)
        code = await serve.finish()

    assert refused.value.code() == grpc.StatusCode.UNAVAILABLE
    assert code == EXIT_UNREACHABLE, serve.err
    assert_loud(serve.err, "AGENTIHOOKS_CONTROL_ADDR", control)
    assert "(AGENTIHOOKS_START_TIMEOUT_S)" in serve.err
    retries = serve.events("start_check_retry")
    assert retries, serve.err
    assert {(r["variable"], r["address"]) for r in retries} == {
        ("AGENTIHOOKS_CONTROL_ADDR", control)
    }
    assert [r["attempt"] for r in retries] == list(range(1, len(retries) + 1))
    assert all(r["retry_in_s"] <= 5.0 for r in retries)
    assert_no_restore_step(serve, worktree)


async def test_serve_waits_out_a_controller_that_comes_back(
    tmp_path: pathlib.Path, controllers: cs.Controllers
) -> None:
    """A rollout: the controller is away when the sidecar starts and the entry point asks for
    the restore. The sidecar retries until a new controller answers at the same address, then
    fetches its launch record and restores (a fresh first attempt: the project is cloned)."""
    control = f"127.0.0.1:{ports.free_port()}"
    first = await controllers.start(listen=control)
    project = git_repos.project(tmp_path / "origin")
    document = json.loads(cs.document(seats=("eng-1",)))
    document["projects"] = [{"name": "app", "repository": project.url}]
    [execution] = (await first.apply(json.dumps(document))).admitted_executions
    await cs.wait_for_pod(first, execution)
    credential = cs.worker_credential(first, execution)
    await controllers.stop(first)

    listen = f"127.0.0.1:{ports.free_port()}"
    env = sidecar_env(tmp_path, CONTROL_ADDR=control, WORKER_CREDENTIAL=credential)
    worktree = tmp_path / "worktree"
    async with restorer("serve", "--listen", listen, env=env, cwd=tmp_path) as serve:
        await serve.logged("listening")
        restoring = asyncio.create_task(restore_call(listen, worktree))
        try:
            retry = await serve.logged("start_check_retry")
            assert not worktree.exists()
            await controllers.start(listen=control)
            events = await asyncio.wait_for(restoring, DEADLINE_S)
        finally:
            restoring.cancel()
            with contextlib.suppress(BaseException):
                await restoring
        answered = await serve.logged("start_check_answered")
        code = await serve.stop()

    assert (retry["variable"], retry["address"]) == ("AGENTIHOOKS_CONTROL_ADDR", control)
    assert answered["attempts"] > 1
    assert events[-1].HasField("ready"), events[-1]
    assert (worktree / ".git").is_dir()
    assert code == 0, serve.err
    assert credential not in serve.err


def remote_store_env(tmp_path: pathlib.Path, store: str, **more: str) -> dict[str, str]:
    """A sidecar with a mounted launch record whose checkpoints go through the store at
    `store` (so only the store is checked at start)."""
    return sidecar_env(
        tmp_path,
        LAUNCH_RECORD=str(tmp_path / "launch.json"),
        CHECKPOINT_REMOTE="true",
        STORE_ADDR=store,
        **more,
    )


# --- the checkpoint store -----------------------------------------------------------------


async def test_serve_stops_loudly_when_the_remote_store_does_not_answer(
    tmp_path: pathlib.Path,
) -> None:
    """With AGENTIHOOKS_CHECKPOINT_REMOTE the store must answer at AGENTIHOOKS_STORE_ADDR:
    nothing listens there, so the sidecar exits 5 naming it, no restore step run."""
    store = f"127.0.0.1:{ports.free_port()}"
    listen = f"127.0.0.1:{ports.free_port()}"
    env = remote_store_env(tmp_path, store, START_TIMEOUT_S="2")
    worktree = tmp_path / "worktree"
    async with restorer("serve", "--listen", listen, env=env, cwd=tmp_path) as serve:
        code = await serve.finish()

    assert code == EXIT_UNREACHABLE, serve.err
    assert_loud(serve.err, "AGENTIHOOKS_STORE_ADDR", store)
    assert "the checkpoint store" in serve.err
    assert serve.events("start_check_retry")[0]["variable"] == "AGENTIHOOKS_STORE_ADDR"
    assert_no_restore_step(serve, worktree)


async def test_serve_uses_a_store_that_comes_up_late(tmp_path: pathlib.Path) -> None:
    """The store starts some seconds after the sidecar: the sidecar retries, then the store
    answers and the sidecar carries on serving (it stops cleanly on SIGTERM)."""
    store = f"127.0.0.1:{ports.free_port()}"
    listen = f"127.0.0.1:{ports.free_port()}"
    env = remote_store_env(tmp_path, store)
    async with restorer("serve", "--listen", listen, env=env, cwd=tmp_path) as serve:
        await serve.logged("start_check_retry")
        async with late_health_server(store):
            answered = await serve.logged("start_check_answered")
            code = await serve.stop()

    assert (answered["variable"], answered["address"]) == ("AGENTIHOOKS_STORE_ADDR", store)
    assert code == 0, serve.err
    assert serve.events("stopped")


# --- addresses that are not HOST:PORT -------------------------------------------------------


@pytest.mark.parametrize(
    ("variable", "value", "extra"),
    [
        ("CONTROL_ADDR", "controller", {"WORKER_CREDENTIAL": CREDENTIAL}),
        ("CONTROL_ADDR", "127.0.0.1:0", {"WORKER_CREDENTIAL": CREDENTIAL}),
        ("CONTROL_ADDR", "bad host:50051", {"WORKER_CREDENTIAL": CREDENTIAL}),
        ("STORE_ADDR", "127.0.0.1:0", {"LAUNCH_RECORD": "/launch.json", "CHECKPOINT_REMOTE": "1"}),
    ],
)
async def test_an_address_that_is_not_host_port_stops_the_sidecar_at_once(
    tmp_path: pathlib.Path, variable: str, value: str, extra: dict[str, str]
) -> None:
    """Not HOST:PORT (or a port or host no try could reach): exit 2 naming the variable, with
    no retry and before the sidecar listens."""
    env = sidecar_env(tmp_path, **{variable: value, **extra})
    listen = f"127.0.0.1:{ports.free_port()}"
    async with restorer("serve", "--listen", listen, env=env, cwd=tmp_path) as serve:
        code = await serve.finish()

    assert code == EXIT_SETTINGS, serve.err
    assert f"agentihooks-restorer: AGENTIHOOKS_{variable} must be HOST:PORT" in serve.err
    assert not serve.events("start_check_retry")
    assert not serve.events("listening")
    assert "Traceback" not in serve.err and CREDENTIAL not in serve.err


# --- the entry point and its sidecar ------------------------------------------------------


async def test_entry_stops_loudly_when_its_sidecar_does_not_come_up(
    tmp_path: pathlib.Path,
) -> None:
    """Nothing listens at AGENTIHOOKS_RESTORER_ADDR: the entry point retries for
    AGENTIHOOKS_START_TIMEOUT_S, then exits 4 naming the variable; no harness runs."""
    sidecar = f"127.0.0.1:{ports.free_port()}"
    env = {
        "HOME": str(tmp_path),
        "AGENTIHOOKS_RESTORER_ADDR": sidecar,
        "AGENTIHOOKS_START_TIMEOUT_S": "2",
        "AGENTIHOOKS_WORKER_CREDENTIAL": CREDENTIAL,
    }
    worktree = tmp_path / "worktree"
    async with restorer("entry", "--worktree", str(worktree), env=env, cwd=tmp_path) as entry:
        code = await entry.finish()
        out = await entry.process.stdout.read() if entry.process.stdout else b""

    assert code == EXIT_SIDECAR, entry.err
    assert_loud(entry.err, "AGENTIHOOKS_RESTORER_ADDR", sidecar)
    assert "the restorer sidecar did not come up in 2 s (AGENTIHOOKS_START_TIMEOUT_S)" in entry.err
    assert entry.events("start_check_retry")[0]["variable"] == "AGENTIHOOKS_RESTORER_ADDR"
    assert not entry.events("restore_step")
    assert out == b""


async def test_entry_waits_for_a_sidecar_that_comes_up_late(tmp_path: pathlib.Path) -> None:
    """The sidecar starts some seconds after the entry point: the entry point retries, then
    restores through it and becomes the harness."""
    scene = kit.make_scene(tmp_path, existing=True)
    launch = scene.launch(directives.FRESH)
    command = (sys.executable, "-c", "print('the harness ran')")
    launch = dataclasses.replace(launch, command=command)
    sidecar = f"127.0.0.1:{ports.free_port()}"
    entry_env = {"HOME": str(scene.home), "AGENTIHOOKS_RESTORER_ADDR": sidecar}
    serve_env = {
        "HOME": str(scene.home),
        "AGENTIHOOKS_LAUNCH_RECORD": scene.write_launch(launch),
        "AGENTIHOOKS_ATTEMPT_DIR": str(scene.attempt_dir),
        "AGENTIHOOKS_HARNESS_HOME": str(scene.home),
    }
    worktree = str(scene.worktree)
    async with restorer("entry", "--worktree", worktree, env=entry_env, cwd=tmp_path) as entry:
        await entry.logged("start_check_retry")
        args = ("serve", "--listen", sidecar, "--capture-interval", "0")
        async with restorer(*args, env=serve_env, cwd=tmp_path) as serve:
            code = await entry.finish()
            out = await entry.process.stdout.read() if entry.process.stdout else b""
            await serve.stop()

    assert code == 0, entry.err + serve.err
    assert out.decode() == "the harness ran\n"
    assert entry.events("start_check_answered")[0]["variable"] == "AGENTIHOOKS_RESTORER_ADDR"
