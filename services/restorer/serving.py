"""The restorer sidecar (`agentihooks-restorer serve`): the Restorer gRPC service on loopback,
then captures continuously once restored, and a final capture when it stops.

It listens at once, but a restore waits for the start check (the controller and the store answer
at the addresses their settings name); when the check gives up, the sidecar stops with exit
code 5. Captures follow the session files and the worktree (`following`), with a capture on an
interval as a safety net (and at once on SIGUSR1). On SIGTERM, or when the worker process is
gone (`--exit-with`), the capture loops stop and a final capture archives what the worker
completed.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import signal
import sys
from collections.abc import AsyncIterator, Sequence
from typing import Any

import grpc
from agentihooks.swarm.v2 import restorer_pb2

from services.common import errors, logs, rpc, settings, tls_settings, waiting
from services.restorer import (
    captures,
    capturing,
    entry,
    following,
    launching,
    restores,
    sidecar,
)

log = logging.getLogger("services.restorer")


async def _exit_with(pid: int, stopping: asyncio.Event) -> None:
    """Set `stopping` once process `pid` is gone: a sidecar started beside a worker outside
    Kubernetes ends with it, as a native sidecar ends with its Pod's main container."""
    while True:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            stopping.set()
            return
        except PermissionError:
            pass
        await asyncio.sleep(0.5)


async def reach_all(needed: Sequence[entry.Address], timeout_s: float) -> None:
    """Return once every address in `needed` answers, in order, all within `timeout_s`.

    Raises:
        entry.Unreachable: one did not answer in the time left.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    for address in needed:
        await entry.reach(address, entry.Patience(max(0.0, deadline - loop.time())))


def _unreached(checking: asyncio.Task[None]) -> entry.Unreachable | None:
    """The start check's failure, once it has given up."""
    if not checking.done() or checking.cancelled():
        return None
    error = checking.exception()
    return error if isinstance(error, entry.Unreachable) else None


class _Checked(sidecar.RestorerService):
    """The sidecar's service, whose restore starts only once the start check has passed.

    The sidecar listens at once (its Pod's entry point and probes find it), but a restore asked
    for meanwhile waits for the controller and the store to answer; when the check gives up the
    call ends UNAVAILABLE and the sidecar stops, no restore step run.
    """

    def __init__(
        self,
        conf: settings.RestorerSettings,
        checking: asyncio.Task[None],
        on_ready: sidecar.OnReady,
    ) -> None:
        super().__init__(conf, on_ready=on_ready)
        self._checking = checking

    @rpc.handled
    async def Restore(
        self, request: restorer_pb2.RestoreRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> AsyncIterator[restorer_pb2.RestoreEvent]:
        try:
            await asyncio.shield(self._checking)
        except entry.Unreachable:
            raise errors.Unavailable(
                "unavailable", "the sidecar stops: a setting's address does not answer"
            ) from None
        async for event in super().Restore(request, context):
            yield event


FINAL_CAPTURE_S = 10.0
"""How long the final capture may take: within the controller's wait for it (15 s after the
worker stopped) and the worker Pod's termination grace (30 s)."""


async def _final_captures(capturers: Sequence[capturing.Capturer]) -> None:
    """Capture and report, as final, everything complete the worker wrote; bounded, and never
    raising (the sidecar ends either way; without a final report the fence says the lost
    tail's length is unknown)."""
    for capturer in capturers:
        try:
            async with asyncio.timeout(FINAL_CAPTURE_S):
                await capturer.capture(final=True)
        except TimeoutError:
            logs.event(log, "final_capture_failed", logging.WARNING, reason="timeout")
        except captures.CaptureError as error:
            logs.event(log, "final_capture_failed", logging.WARNING, reason=str(error))
        except Exception as error:
            # The type only: its message may hold paths.
            logs.event(log, "final_capture_failed", logging.ERROR, exception=type(error).__name__)


async def _stopped(tasks: Sequence[asyncio.Task[None]]) -> None:
    """Cancel `tasks` and wait until they ended; a task that failed is logged (the start
    check's failure is read later), so the final capture runs all the same."""
    await waiting.cancel(tasks)
    for task in tasks:
        error = None if task.cancelled() else task.exception()
        if error is not None and not isinstance(error, entry.Unreachable):
            # The type only: its message may hold paths.
            logs.event(
                log,
                "task_failed",
                logging.ERROR,
                task=task.get_name(),
                exception=type(error).__name__,
            )


async def serve(
    conf: settings.RestorerSettings,
    capture_interval_s: float,
    exit_with: int | None = None,
    needed: Sequence[entry.Address] = (),
    cadence: following.Cadence | None = None,
) -> int:
    """The sidecar. `cadence` None captures on the interval only (no following)."""
    capturers: list[capturing.Capturer] = []
    followers: list[following.Follower] = []
    loops: list[asyncio.Task[None]] = []  # the capture loops, stopped before the final capture
    tasks: list[asyncio.Task[None]] = []

    def start_capturing(launch: launching.LaunchRecord, attempt: restores.Attempt) -> None:
        if capture_interval_s <= 0:
            return
        capturer = capturing.Capturer(
            launch,
            attempt,
            conf.storage,
            control_addr=conf.control_addr,
            worker_credential=conf.worker_credential,
        )
        capturers.append(capturer)
        if cadence is None:
            loops.append(asyncio.create_task(capturer.run(capture_interval_s), name="capture"))
            return
        follower = following.Follower(
            capturer,
            following.session_folder(launch.harness, attempt.harness_home, attempt.harness_env),
            attempt.worktree,
            dataclasses.replace(cadence, interval_s=capture_interval_s),
        )
        followers.append(follower)
        loops.append(asyncio.create_task(follower.run(), name="capture"))

    stopping = asyncio.Event()
    checking = asyncio.create_task(reach_all(needed, conf.start_timeout_s), name="start-check")

    def stop_if_unreached(task: asyncio.Task[None]) -> None:
        if _unreached(task) is not None:
            stopping.set()

    checking.add_done_callback(stop_if_unreached)
    service = _Checked(conf, checking, on_ready=start_capturing)
    try:
        server, port = await rpc.start_server(
            conf.listen, [service.register], [sidecar.SERVICE_NAME], tls_conf=conf.tls
        )
        transport = tls_settings.transport(conf.tls)
        logs.event(log, "listening", service="restorer", port=port, transport=transport)
        loop = asyncio.get_running_loop()

        def capture_now() -> None:
            for capturer in capturers:
                capturer.wake.set()
            for follower in followers:
                follower.capture_now()

        loop.add_signal_handler(signal.SIGUSR1, capture_now)
        if exit_with is not None:
            tasks.append(asyncio.create_task(_exit_with(exit_with, stopping), name="exit-with"))
        await rpc.wait_for_termination(5.0, server, stopping=stopping)
        # SIGTERM (a native sidecar gets it once the worker container stopped, and on a Pod's
        # termination) or the worker process gone (--exit-with): archive what it completed,
        # once the capture loops stopped, so the final capture is the last one.
        await _stopped(loops)
        await _final_captures(capturers)
    finally:
        await _stopped([checking, *tasks, *loops])
        for capturer in capturers:
            await capturer.aclose()
        await service.aclose()
    unreached = _unreached(checking)
    if unreached is not None:
        print(f"agentihooks-restorer: {unreached}", file=sys.stderr, flush=True)
        return entry.EXIT_UNREACHABLE
    logs.event(log, "stopped", service="restorer")
    return 0
