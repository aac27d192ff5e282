"""Edges of the `agentihooks` command a new user ran into (issue 20, part 4): a closed stdout,
errors that say what was typed, controller addresses that are not HOST:PORT, and credentials
kept out of every error. Each runs the installed command as a real process against a real
controller (gRPC, Redis, the Kubernetes API emulator or local worker processes)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import pathlib
import sys
from collections.abc import AsyncIterator

import grpc
import pytest
import redis.asyncio as aioredis
from agentihooks.swarm.v2 import recovery_pb2 as pb
from agentihooks.swarm.v2 import recovery_pb2_grpc as pb_grpc
from agentihooks.swarm.v2 import types_pb2

from services.cli import exits
from services.common import rpc
from services.controller import hub as hubs
from services.controller.api import grpc_api
from services.controller.pods import local
from tests.support import controller_server as cs
from tests.support import ports, redis_server
from tests.support.cli_process import RUN_TIMEOUT_S, agentihooks

NOT_PENDING = "no recovery decision is pending for this attempt"
EXECUTABLE = pathlib.Path(sys.executable).parent / "agentihooks"


async def _awaiting(controller: cs.Controller, seat: str) -> None:
    """Fail the seat's first attempt (no checkpoint) and wait until it awaits a decision."""
    execution = f"example.{seat}.1"
    await cs.wait_for_pod(controller, execution)
    controller.fail(execution, cs.terminated("OOMKilled", 137))

    async def pending() -> None:
        cards = [h for h in (await controller.status()).handoffs if h.seat == seat]
        assert cards and cards[0].decision == "recovery_pending", cards

    await ports.eventually(pending, timeout=RUN_TIMEOUT_S)


async def _spawn(*args: str, stdout: int, control: str) -> asyncio.subprocess.Process:
    """The command with the operator's environment, its stdout the given pipe end."""
    env = {
        "PATH": f"{EXECUTABLE.parent}:/usr/bin:/bin",
        "AGENTIHOOKS_TOKEN": cs.OPERATOR_TOKEN,
        "AGENTIHOOKS_CONTROL_ADDR": control,
    }
    return await asyncio.create_subprocess_exec(
        str(EXECUTABLE), *args, env=env, stdout=stdout, stderr=asyncio.subprocess.PIPE
    )


async def _ended(process: asyncio.subprocess.Process) -> tuple[int, str]:
    """The exit code and stderr of a process whose stdout is not ours to read."""
    assert process.stderr is not None
    err = await asyncio.wait_for(process.stderr.read(), RUN_TIMEOUT_S)
    code = await asyncio.wait_for(process.wait(), RUN_TIMEOUT_S)
    return code, err.decode()


# Line 1: a closed stdout ends the command quietly.


async def test_a_closed_stdout_ends_every_printing_command_quietly(
    controller: cs.Controller,
) -> None:
    """Issue 20 part 4, line 1: "A closed stdout must end the CLI quietly (no traceback; the
    conventional exit …), for every command that prints". Each command writes into a pipe whose
    reader has already closed: exit 141 (what a shell reports for a SIGPIPE end), nothing on
    stderr."""
    await controller.apply()
    await _awaiting(controller, "eng-2")  # so that `events` has lines to print
    commands = [
        ("swarm", "example", "status"),
        ("swarm", "example", "status", "--json"),
        ("swarm", "example", "events"),
        ("swarm", "example", "pause"),
        ("swarm", "example", "restore-decision", "eng-2", "fresh", "--no-wait"),
        ("--help",),
    ]
    for command in commands:
        reader, writer = os.pipe()
        os.close(reader)
        try:
            process = await _spawn(*command, stdout=writer, control=controller.addr)
        finally:
            os.close(writer)
        code, err = await _ended(process)
        assert (code, err) == (exits.EXIT_STDOUT_CLOSED, ""), command
    assert exits.EXIT_STDOUT_CLOSED == 141


async def test_events_follow_into_head_ends_quietly_when_head_has_its_line(
    controller: cs.Controller,
) -> None:
    """Issue 20 part 4, line 1: "`agentihooks swarm demo events | head -1` ends in a
    BrokenPipeError traceback … Test it through a real pipe whose reader closes early." The
    reader takes one line and closes, as `head -1` does; the next event the stream brings
    ends the command with 141 and no traceback."""
    await controller.apply()
    await _awaiting(controller, "eng-2")
    reader, writer = os.pipe()
    try:
        process = await _spawn(
            "swarm", "example", "events", "--follow", stdout=writer, control=controller.addr
        )
    finally:
        os.close(writer)
    with os.fdopen(reader, "rb") as head:
        first = await asyncio.wait_for(asyncio.to_thread(head.readline), RUN_TIMEOUT_S)
    assert b'"kind": "fence"' in first
    await cs.wait_for_pod(controller, "example.eng-1.1")
    controller.fail("example.eng-1.1", cs.terminated("OOMKilled", 137))
    code, err = await _ended(process)
    assert (code, err) == (exits.EXIT_STDOUT_CLOSED, "")


# Line 2: errors say what was typed.


async def test_an_unknown_swarm_is_named(controller: cs.Controller) -> None:
    """Issue 20 part 4, line 2: "`no such swarm` must name the swarm (e.g. `no such swarm:
    typo`)"; the reason code stays swarm_not_found, the exit code 5."""
    await controller.apply()
    for command in (("status",), ("events",), ("restore-decision", "eng-1", "fresh")):
        ran = await agentihooks("swarm", "typo", *command, control=controller.addr)
        assert ran.code == exits.EXIT_NOT_FOUND, (command, ran.err)
        assert "no such swarm: typo" in ran.err, command
    error = await cs.refusal(controller.status("typo"))
    assert error.details() == "no such swarm: typo"
    assert cs.reason_of(error) == "swarm_not_found"


async def test_an_unknown_seat_is_named_with_the_seats_that_exist(
    controller: cs.Controller,
) -> None:
    """Issue 20 part 4, line 2: "`no such seat` must name the seat asked and the seats that
    exist"; the reason code stays seat_not_found, the exit code 5. A name that cannot be a
    seat is explained instead of repeated."""
    await controller.apply()
    ran = await agentihooks(
        "swarm", "example", "restore-decision", "eng-9", "fresh", control=controller.addr
    )
    assert ran.code == exits.EXIT_NOT_FOUND, (ran.out, ran.err)
    assert "no such seat in swarm example: eng-9" in ran.err
    assert "the seats of swarm example are eng-1, eng-2" in ran.err
    error = await cs.refusal(
        controller.stub.RequestRestoreDecision(
            pb.RestoreDecisionRequest(swarm="example", seat="eng-9", choice=types_pb2.CHOICE_FRESH),
            metadata=cs.OPERATOR,
        )
    )
    assert error.details() == "no such seat in swarm example: eng-9"
    assert cs.reason_of(error) == "seat_not_found"
    ran = await agentihooks(
        "swarm", "example", "restore-decision", "Eng-2", "fresh", control=controller.addr
    )
    assert ran.code == exits.EXIT_NOT_FOUND, (ran.out, ran.err)
    assert "a seat name is lowercase letters, digits and '-'" in ran.err
    assert "eng-1, eng-2" in ran.err


async def test_the_seats_listed_are_bounded(controller: cs.Controller) -> None:
    """Issue 20 part 4, line 2: "(bounded: list at most ~20 then 'and N more')". A swarm of 23
    seats: the first 20 are named, then `and 3 more`."""
    seats = tuple(f"s-{n:02d}" for n in range(1, 24))
    doc = json.loads(cs.document(seats=seats))
    doc["accounts"] = [{"name": "acct-a", "slots": len(seats)}]
    await controller.apply(json.dumps(doc))
    ran = await agentihooks(
        "swarm", "example", "restore-decision", "s-99", "fresh", control=controller.addr
    )
    assert ran.code == exits.EXIT_NOT_FOUND, (ran.out, ran.err)
    assert "the seats of swarm example are " + ", ".join(seats[:20]) + " and 3 more" in ran.err
    assert "s-21" not in ran.err


async def test_a_refused_second_choice_says_which_decision_was_accepted(
    controller: cs.Controller,
) -> None:
    """Issue 20 part 4, line 2: "a refused second, different decision must still print the
    spec's exact message … and then add which decision was accepted (choice, and the
    replacement if known) … the gRPC status message stays verbatim". Kubernetes: the pass
    refuses the recorded request; the CLI adds what status says was accepted."""
    await controller.apply()
    await _awaiting(controller, "eng-2")
    ran = await agentihooks(
        "swarm", "example", "restore-decision", "eng-2", "fresh", control=controller.addr
    )
    assert ran.code == exits.EXIT_OK, (ran.out, ran.err)
    other = await agentihooks(
        "swarm", "example", "restore-decision", "eng-2", "resume", control=controller.addr
    )
    assert other.code == exits.EXIT_REFUSED, (other.out, other.err)
    assert (
        f"refused: {NOT_PENDING}; fresh was accepted for example.eng-2.1, "
        "replacement example.eng-2.2"
    ) in other.err
    error = await cs.refusal(
        controller.stub.RestoreDecision(
            pb.RestoreDecisionRequest(
                swarm="example", seat="eng-2", choice=types_pb2.CHOICE_RESUME
            ),
            metadata=cs.OPERATOR,
        )
    )
    assert error.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert error.details() == NOT_PENDING


WORKER = """
import os, sys, time
if os.environ["AGENTIHOOKS_GENERATION"] == "1":
    sys.exit(1)
time.sleep(60)
"""


@pytest.fixture
async def local_control(
    tmp_path: pathlib.Path, redis_server: redis_server.RedisServer
) -> AsyncIterator[tuple[str, pb_grpc.RecoveryStub]]:
    """A controller whose workers are processes on this machine (the `local` runtime, where
    the CLI's choice is applied at once), with no checkpoint store: its address and a stub.
    The first attempt of each seat exits 1; later ones run."""
    await cs.empty_state(redis_server.url, tmp_path)
    client = aioredis.Redis.from_url(redis_server.url)
    workers = local.LocalRuntime(tmp_path / "workers", base_env={"PATH": os.environ["PATH"]})
    hub = hubs.Hub(
        client,
        workers,
        grant_key=cs.GRANT_KEY,
        operator_token=cs.OPERATOR_TOKEN,
        worker_image=cs.IMAGE,
        pass_interval_s=0.2,
        lease_ttl_ms=2000,
        runtime_name="local",
    )
    service = grpc_api.RecoveryService(hub)
    server, port = await rpc.start_server(
        "127.0.0.1:0",
        [service.register],
        [grpc_api.SERVICE_NAME],
        authenticate=service.authenticate,
    )
    await hub.start()
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}")
    try:
        yield f"127.0.0.1:{port}", pb_grpc.RecoveryStub(channel)
    finally:
        await channel.close()
        await server.stop(None)
        await hub.stop()
        for attempt in await workers.list_attempts("example"):
            await workers.remove("example", attempt.execution_id)
        await workers.aclose()
        await client.aclose()


async def test_a_refused_second_choice_on_local_workers_says_which_was_accepted(
    local_control: tuple[str, pb_grpc.RecoveryStub],
) -> None:
    """Issue 20 part 4, line 2, as above for the local runtime, where the choice is applied at
    once and the refusal is the call's own status: the CLI prints it, then the accepted
    decision."""
    addr, stub = local_control
    doc = json.loads(cs.document(seats=("eng-1",)))
    doc["command"] = [sys.executable, "-c", WORKER]
    await stub.ApplySwarm(pb.ApplySwarmRequest(document=json.dumps(doc)), metadata=cs.OPERATOR)

    async def pending() -> None:
        status = await stub.GetSwarmStatus(
            pb.GetSwarmStatusRequest(swarm="example"), metadata=cs.OPERATOR
        )
        assert [h.decision for h in status.handoffs] == ["recovery_pending"], status.handoffs

    await ports.eventually(pending, timeout=RUN_TIMEOUT_S)
    ran = await agentihooks("swarm", "example", "restore-decision", "eng-1", "fresh", control=addr)
    assert ran.code == exits.EXIT_OK, (ran.out, ran.err)
    assert "replacement example.eng-1.2" in ran.out
    other = await agentihooks(
        "swarm", "example", "restore-decision", "eng-1", "resume", control=addr
    )
    assert other.code == exits.EXIT_REFUSED, (other.out, other.err)
    assert (
        f"{NOT_PENDING} (failed_precondition); fresh was accepted for example.eng-1.1, "
        "replacement example.eng-1.2"
    ) in other.err


# Line 3: a controller address that is not HOST:PORT is a usage error, before any connection.


@contextlib.asynccontextmanager
async def _listener() -> AsyncIterator[tuple[int, list[int]]]:
    """A TCP port that counts the connections made to it."""
    connections: list[int] = []

    async def accepted(_: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connections.append(1)
        writer.close()

    server = await asyncio.start_server(accepted, "127.0.0.1", 0)
    try:
        yield server.sockets[0].getsockname()[1], connections
    finally:
        server.close()
        await server.wait_closed()


@pytest.mark.parametrize("where", ["--control", "AGENTIHOOKS_CONTROL_ADDR"])
async def test_an_address_that_is_not_host_port_is_refused_before_connecting(where: str) -> None:
    """Issue 20 part 4, line 3: "`--control http://127.0.0.1:50051` (or
    AGENTIHOOKS_CONTROL_ADDR with a scheme, or missing port, or garbage) … must be refused at
    once as malformed with a clear line saying the address must be HOST:PORT and what was
    given, with the usage exit code, before any connection is tried". A listener on the port
    named sees no connection."""
    async with _listener() as (port, connections):
        for value in (
            f"http://127.0.0.1:{port}",
            f"dns:127.0.0.1:{port}",
            "127.0.0.1",
            "garbage",
            f"127.0.0.1:{port}/",
        ):
            if where == "--control":
                ran = await agentihooks("--control", value, "swarm", "example", "status")
            else:
                ran = await agentihooks("swarm", "example", "status", control=value)
            assert ran.code == exits.EXIT_USAGE, (value, ran.err)
            lines = ran.err.strip().splitlines()
            assert len(lines) == 1, ran.err
            assert "must be HOST:PORT" in lines[0] and f"{where} is {value!r}" in lines[0]
        assert connections == []


async def test_an_events_after_that_is_not_an_event_id_is_a_usage_error(
    controller: cs.Controller,
) -> None:
    """Issue 20 part 4, line 3: "Also check other flags' values the same way". `--after` takes
    an event id; anything else was an internal error from the controller (exit 1) and is now
    refused at once with exit 2 and a line saying what an event id looks like."""
    await controller.apply()
    for value in ("garbage", "-1", "1-x"):
        ran = await agentihooks(
            "swarm", "example", "events", "--after", value, control=controller.addr
        )
        assert ran.code == exits.EXIT_USAGE, (value, ran.err)
        assert f"argument --after: {value!r} is not an event id" in ran.err
    ran = await agentihooks("swarm", "example", "events", "--after", "0-0", control=controller.addr)
    assert ran.code == exits.EXIT_OK, ran.err


# Line 4: no error repeats a credential.


async def test_no_error_repeats_the_token(controller: cs.Controller) -> None:
    """Issue 20 part 4, line 4: "Keep tokens out of every error message (never echo
    AGENTIHOOKS_TOKEN)". The token pasted where an address, a choice or a seat goes, or inside
    a URL, comes back as <redacted>; the refusals still say what is wrong."""
    await controller.apply()
    token = cs.OPERATOR_TOKEN
    runs = [
        await agentihooks("swarm", "example", "status", control=token),
        await agentihooks("--control", f"http://{token}@127.0.0.1:1", "swarm", "example", "status"),
        await agentihooks("--control", f"{token}:1x", "swarm", "example", "status"),
        await agentihooks(
            "swarm", "example", "restore-decision", "eng-1", token, control=controller.addr
        ),
        await agentihooks(
            "swarm", "example", "restore-decision", token, "fresh", control=controller.addr
        ),
        await agentihooks("swarm", "example", "events", "--after", token, control=controller.addr),
    ]
    for ran in runs:
        assert ran.code != exits.EXIT_OK, ran
        assert token not in ran.out + ran.err, ran
        assert ran.err.strip(), ran
    assert "<redacted>" in runs[0].err and "<redacted>" in runs[3].err
