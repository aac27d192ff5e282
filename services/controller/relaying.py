"""Kubernetes Events for what the swarms' streams record: fences, decisions and outcomes.

The relay follows the telemetry stream (`telemetry`) of every swarm whose lease this controller
holds, the events its recovery writes in the same scripts as their transitions, and hands each
one that concerns a worker Pod to the runtime as notices (`notices.of_event`). No recovery step
calls it and none waits for it: it reads the streams on its own task, one swarm at a time, with
reads that do not block (so it holds at most one Redis connection, and never for long), and it
never raises. A stream is read only when there can be something new in it: when this process
starts following it, and after this process's scripts wrote events to it (`events_written`),
so thousands of idle swarms cost the relay nothing but a look at a counter each. Only a runtime
that records (`pods.Recording`: Kubernetes) gets notices; with any other runtime the relay does
nothing at all.

Where each stream is read from: where this process left it; for a swarm it starts following (at
start, or when it takes the swarm's lease over) the last `LOOKBACK_S` of it, which a replica that
died or handed the swarm over may not have posted yet. The Events it had posted have the same
names (`event_bodies.name`), so posting them again adds nothing.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping
from typing import Protocol

from services.common import logs, waiting
from services.controller import telemetry
from services.controller.pods import notices
from services.controller.pods import runtime as pods

log = logging.getLogger("services.controller.relaying")

POLL_S = 1.0
"""How often the held swarms' streams are read."""

LOOKBACK_S = 600.0
"""How far back a stream is read when this process starts following it."""

BATCH = 100
"""Events read in one call (`telemetry.read`'s count)."""


class Lease(Protocol):
    def is_held(self) -> bool: ...


class Followed(Protocol):
    """A swarm as the relay reads it (`recovering.Recovery`)."""

    @property
    def lease(self) -> Lease: ...

    @property
    def events_written(self) -> int:
        """How many events this process wrote to the swarm's stream so far."""
        ...

    async def events(
        self, after: str | None = None, block_ms: int | None = None
    ) -> list[telemetry.Event]: ...


class Relay:
    """Follows the held swarms' streams and records their events on the runtime.

    Args:
        runtime: Where workers run; only a `pods.Recording` one is given notices.
        holder: This process's holder id (the Events' `reportingInstance`).
        swarms: The swarms this process serves, now (`Hub.recoveries`).
        poll_s: How often the streams are read.
        lookback_s: How far back a stream is read when its following starts.
        clock: Wall-clock seconds (stream ids are Redis's milliseconds).
    """

    def __init__(
        self,
        runtime: pods.PodRuntime,
        holder: str,
        swarms: Callable[[], Mapping[str, Followed]],
        *,
        poll_s: float = POLL_S,
        lookback_s: float = LOOKBACK_S,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._runtime = runtime if isinstance(runtime, pods.Recording) else None
        self._holder = holder
        self._swarms = swarms
        self._poll_s = poll_s
        self._lookback_ms = int(lookback_s * 1000)
        self._clock = clock
        self._cursors: dict[str, str] = {}
        self._read_at: dict[str, int] = {}  # swarm -> `events_written` when last read whole
        self._task: asyncio.Task[None] | None = None
        self._logged: set[str] = set()

    def start(self) -> None:
        """Start following (nothing happens when the runtime does not record)."""
        if self._runtime is None or self._task is not None:
            return
        self._runtime.start_recording(self._holder)
        self._task = asyncio.get_running_loop().create_task(
            self._run(), name="kubernetes-events-relay"
        )

    async def stop(self) -> None:
        """Stop following and recording."""
        task, self._task = self._task, None
        if task is not None:
            await waiting.cancel([task])
        if self._runtime is not None:
            await self._runtime.stop_recording()

    async def _run(self) -> None:
        while True:
            for swarm, followed in list(self._swarms().items()):
                if not followed.lease.is_held():
                    # Followed again from its lookback once held again (another replica may
                    # have written meanwhile).
                    self._read_at.pop(swarm, None)
                    continue
                written = followed.events_written
                if self._read_at.get(swarm) != written and await self._follow(swarm, followed):
                    self._read_at[swarm] = written
            await asyncio.sleep(self._poll_s)

    async def _follow(self, swarm: str, followed: Followed) -> bool:
        """Record what the swarm's stream holds past its cursor; whether it was read to its
        end."""
        assert self._runtime is not None
        since = f"{int(self._clock() * 1000) - self._lookback_ms}-0"
        after = _later(self._cursors.get(swarm), since)
        try:
            while True:
                found = await followed.events(after)
                for event in found:
                    for notice in notices.of_event(event):
                        self._runtime.record(notice)
                    after = event.id
                self._cursors[swarm] = after
                if len(found) < BATCH:
                    break
            self._logged.clear()
            return True
        except Exception as exc:  # Redis away, a lease lost mid-read: read again next time
            kind = type(exc).__name__
            if kind not in self._logged:
                self._logged.add(kind)
                logs.event(
                    log, "kubernetes_events_unread", logging.WARNING, swarm=swarm, exception=kind
                )
            return False


def _later(cursor: str | None, since: str) -> str:
    """The later of two stream ids (`MS-SEQ`)."""
    if cursor is None:
        return since

    def key(stream_id: str) -> tuple[int, int]:
        ms, _, seq = stream_id.partition("-")
        return int(ms), int(seq or 0)

    return cursor if key(cursor) >= key(since) else since
