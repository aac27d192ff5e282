"""A work queue of keys, in the shape of client-go's workqueue and kopf's per-object queues.

Producers only `add` keys; workers `get` a key, work on it, and call `done`. Three guarantees:

- **One worker per key.** A key handed to a worker is *processing* until `done`; it is not handed
  out again meanwhile.
- **No duplicate while queued.** A key added while it waits (it is *dirty*) is not queued twice.
- **Worked again when touched mid-work.** A key added while it is processing is marked dirty
  and queued again at `done`, so whatever changed during the work is looked at after it.

`add_after` is how a worker says "come back later"; `add_rate_limited` re-adds a key after a
per-key exponential backoff (a failing key waits longer each time, until `forget`). Keys are
worked in the order they became ready. Pure asyncio: no I/O, no threads.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
from collections.abc import Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)


class ShutDown(Exception):
    """The queue was shut down: no key is handed out any more."""


@dataclasses.dataclass(frozen=True)
class Backoff:
    """Per-key exponential backoff: `base_s` after the first failure, doubling, at most `cap_s`."""

    base_s: float = 0.1
    cap_s: float = 10.0

    def delay(self, failures: int) -> float:
        """The wait before a key that failed `failures` times before is worked again."""
        return min(self.cap_s, self.base_s * 2.0 ** min(failures, 64))


class WorkQueue(Generic[K]):
    """Keys waiting to be worked on, each by one worker at a time.

    Args:
        backoff: The per-key backoff of `add_rate_limited`.
    """

    def __init__(self, *, backoff: Backoff | None = None) -> None:
        self.backoff = backoff or Backoff()
        self._ready: collections.deque[K] = collections.deque()
        self._dirty: set[K] = set()
        self._processing: set[K] = set()
        self._timers: dict[K, tuple[float, asyncio.TimerHandle]] = {}
        self._failures: dict[K, int] = {}
        self._getters: collections.deque[asyncio.Future[None]] = collections.deque()
        self._idle = asyncio.Event()
        self._idle.set()
        self._shut_down = False

    # Producers.

    def add(self, key: K) -> None:
        """Queue `key` unless it is queued already; a key being worked is queued again at its
        `done`. Ignored once the queue is shut down."""
        if self._shut_down or key in self._dirty:
            return
        self._dirty.add(key)
        if key in self._processing:
            return
        self._ready.append(key)
        self._idle.clear()
        self._wake()

    def add_after(self, key: K, delay_s: float) -> None:
        """`add` the key once `delay_s` seconds have passed. A key already waiting keeps the
        earlier of the two times."""
        if self._shut_down:
            return
        if delay_s <= 0:
            self.add(key)
            return
        loop = asyncio.get_running_loop()
        when = loop.time() + delay_s
        waiting = self._timers.get(key)
        if waiting is not None:
            if waiting[0] <= when:
                return
            waiting[1].cancel()
        self._timers[key] = (when, loop.call_at(when, self._due, key))

    def add_rate_limited(self, key: K) -> None:
        """`add_after` the key's backoff: longer after each failure until `forget`."""
        failures = self._failures.get(key, 0)
        self._failures[key] = failures + 1
        self.add_after(key, self.backoff.delay(failures))

    def forget(self, key: K) -> None:
        """The key succeeded: its next failure starts the backoff from the beginning."""
        self._failures.pop(key, None)

    def failures(self, key: K) -> int:
        """How many times the key was re-added by `add_rate_limited` since its last `forget`."""
        return self._failures.get(key, 0)

    # Workers.

    async def get(self) -> K:
        """Wait for a key and mark it processing (call `done` when its work ends).

        Raises:
            ShutDown: the queue was shut down.
        """
        return (await self.get_batch(1))[0]

    async def get_batch(self, limit: int) -> list[K]:
        """Wait for at least one key, then take up to `limit` keys that are ready now, oldest
        first, each marked processing (call `done` for each).

        Raises:
            ShutDown: the queue was shut down.
        """
        while not self._ready:
            if self._shut_down:
                raise ShutDown()
            getter = asyncio.get_running_loop().create_future()
            self._getters.append(getter)
            try:
                await getter
            except BaseException:
                getter.cancel()
                if not getter.cancelled():
                    self._wake()  # it was woken for a key it will not take: wake another
                raise
        if self._shut_down:
            raise ShutDown()
        taken: list[K] = []
        while self._ready and len(taken) < max(1, limit):
            key = self._ready.popleft()
            self._dirty.discard(key)
            self._processing.add(key)
            taken.append(key)
        if self._ready:
            self._wake()
        return taken

    def done(self, key: K) -> None:
        """The work on `key` ended: queued again when it was added meanwhile."""
        self._processing.discard(key)
        if key in self._dirty and not self._shut_down:
            self._ready.append(key)
            self._wake()
        self._check_idle()

    # State.

    def holds(self, key: K) -> bool:
        """Whether the key is queued or being worked on (a key waiting for `add_after` is
        neither)."""
        return key in self._dirty or key in self._processing

    def held(self) -> frozenset[K]:
        """Every key queued or being worked on."""
        return frozenset(self._dirty | self._processing)

    def processing(self, key: K) -> bool:
        return key in self._processing

    def __len__(self) -> int:
        """Keys waiting to be handed out (not those being worked on, nor delayed ones)."""
        return len(self._ready)

    async def idle(self) -> None:
        """Wait until no key is queued or being worked on (keys waiting for `add_after` aside)."""
        await self._idle.wait()

    @property
    def idle_event(self) -> asyncio.Event:
        """Set while `idle` would return at once (to wait for it beside other events)."""
        return self._idle

    @property
    def shutting_down(self) -> bool:
        return self._shut_down

    def shut_down(self) -> None:
        """Hand out nothing more: waiting and later `get` calls raise `ShutDown`, delayed keys
        are dropped, `add` is ignored. Keys being worked on may still be `done`."""
        self._shut_down = True
        for _, timer in self._timers.values():
            timer.cancel()
        self._timers.clear()
        self._ready.clear()
        self._dirty.clear()
        while self._getters:
            getter = self._getters.popleft()
            if not getter.done():
                getter.set_result(None)
        self._check_idle()

    # Internals.

    def _due(self, key: K) -> None:
        self._timers.pop(key, None)
        self.add(key)

    def _wake(self) -> None:
        while self._getters:
            getter = self._getters.popleft()
            if not getter.done():
                getter.set_result(None)
                return

    def _check_idle(self) -> None:
        if not self._ready and not self._processing:
            self._idle.set()
