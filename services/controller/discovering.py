"""Finding the swarms a controller process serves: those Redis names, and those whose workers run.

At start the hub asks for them once Redis answers: at once when its first ping is answered,
else on a task of its own that waits for Redis and tries again with a backoff (meanwhile the
process serves, not ready). The runtime is surveyed too, where it can say which swarms' workers
run, so a swarm whose records Redis lost still gets its loop, whose first resync says
`state_lost`. Each swarm found is handed to the hub, which starts its loop.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable

from services.common import logs, redis_link, waiting
from services.controller.pods import runtime as pods
from services.controller.state import reading

log = logging.getLogger("services.controller.hub")

SURVEY_WAIT_S = 30.0
"""How long finding the swarms at start waits for the runtime's list of workers: after it the
swarms Redis names start without it (a worker's swarm Redis lost is then not followed)."""


class Discovery:
    """Finds the applied swarms once Redis answers, and hands each to `found`.

    Args:
        client: Redis.
        runtime: Where workers run (surveyed when it can list the swarms whose workers run).
        link: Whether Redis answers.
        stop: Set when the hub stops: finding the swarms later gives up then.
        found: Starts the loop of every swarm named that is not known yet (the hub's).
    """

    def __init__(
        self,
        client: redis_link.Client,
        runtime: pods.PodRuntime,
        link: redis_link.RedisLink,
        stop: asyncio.Event,
        found: Callable[[Iterable[str]], Awaitable[None]],
    ) -> None:
        self._client = client
        self._runtime = runtime
        self._link = link
        self._stop = stop
        self._found = found
        self._later: asyncio.Task[None] | None = None

    async def start(self) -> None:
        """Find the swarms now if Redis answers within its first ping's wait, else on a task
        that finds them once it does."""
        if await self._link.wait_known(redis_link.START_WAIT_S):
            try:
                await self._discover()
                return
            except Exception as exc:
                if not redis_link.unreachable(exc):
                    raise
                self._link.suspect()
        self._later = asyncio.create_task(self._discover_later(), name="swarm-discovery")

    async def stop(self) -> None:
        """Stop finding the swarms later, if that is still under way."""
        if self._later is not None:
            await waiting.cancel([self._later])

    async def _discover(self) -> None:
        """Start the loop of every swarm Redis names and, where the runtime can say, of every
        swarm whose workers run: one Redis lost (restarted empty) is found by its loop's first
        resync (`losses`), which says `state_lost`.

        The runtime is surveyed first: on Kubernetes that is the Pod watch's first list, a few
        seconds of parsing with tens of thousands of workers, done before any lease is taken
        (a lease taken before it would wait that long for its first renewal)."""
        names = await reading.swarm_names(self._client)
        running: set[str] = set()
        if isinstance(self._runtime, pods.Surveying):
            try:
                async with asyncio.timeout(SURVEY_WAIT_S):
                    running = await self._runtime.swarms()
            except (pods.PodsError, TimeoutError) as exc:
                logs.event(log, "workers_unlisted", logging.WARNING, exception=type(exc).__name__)
        await self._found(names)
        await self._found(sorted(running - set(names)))

    async def _discover_later(self) -> None:
        """Find the applied swarms once Redis answers (retried with a backoff)."""
        backoff = redis_link.Backoff()
        while await self._link.wait_up(self._stop):
            try:
                await self._discover()
                return
            except Exception as exc:
                unreachable = redis_link.unreachable(exc)
                if unreachable:
                    self._link.suspect()
                delay = backoff.next()
                logs.event(
                    log,
                    "swarm_discovery_failed",
                    logging.WARNING if unreachable else logging.ERROR,
                    exception=type(exc).__name__,
                    retry_in_s=delay,
                    **({"variable": redis_link.VARIABLE} if unreachable else {}),
                )
                if await redis_link.wait(self._stop, delay):
                    return
