"""One watch consumer's wakes: coalesced changes, timed wakes and a follower's fatal error.

`informing.Informer` gives each `KubernetesRuntime.watch` a `Wake` and fans the changes of its
swarm out to it; the watch waits on it for the next `runtime.Change`.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
from datetime import UTC, datetime

from services.controller.pods import runtime


class Wake:
    """Coalesced wakes for one watch consumer, with timed wakes and a follower's fatal error.

    No wake is given before every follower has listed once: a change in between would be in
    neither the pass the first wake starts nor any event.
    """

    def __init__(self, followers: set[str]) -> None:
        self._unlisted = set(followers)
        self._event = asyncio.Event()
        self._poke = asyncio.Event()
        self._deadlines: list[datetime] = []
        self._error: runtime.PodsError | None = None
        self._closed = False
        self._failed: dict[str, runtime.Attempt] = {}
        self._relist = False

    def relist(self) -> None:
        self._relist = True
        self._set()

    def failed(self, attempt: runtime.Attempt) -> None:
        self._failed[attempt.execution_id] = attempt
        self._set()

    def _set(self) -> None:
        self._event.set()
        self._poke.set()

    def _take(self) -> runtime.Change:
        change = runtime.Change(tuple(self._failed.values()), self._relist)
        self._failed, self._relist = {}, False
        return change

    def started(self, follower: str) -> None:
        self._unlisted.discard(follower)
        self._poke.set()

    def at(self, when: datetime) -> None:
        heapq.heappush(self._deadlines, when)
        self._poke.set()

    def fail(self, error: runtime.PodsError) -> None:
        self._error = error
        self._set()

    def close(self) -> None:
        self._closed = True
        self._set()

    async def wait(self) -> runtime.Change | None:
        """Wait for the next wake; None once the watch is closed."""
        while True:
            if self._error is not None:
                raise self._error
            if self._closed:
                return None
            if self._unlisted:
                self._poke.clear()
                await self._poke.wait()
                continue
            if self._event.is_set():
                self._event.clear()
                return self._take()
            now = datetime.now(UTC)
            if self._deadlines and self._deadlines[0] <= now:
                while self._deadlines and self._deadlines[0] <= now:
                    heapq.heappop(self._deadlines)
                self._relist = True
                return self._take()
            timeout = (self._deadlines[0] - now).total_seconds() if self._deadlines else None
            self._poke.clear()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(timeout):
                    await self._poke.wait()
