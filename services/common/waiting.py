"""Waiting on a dependency that does not answer: backoff steps, and telling subscribers when it
comes and goes (Redis and the Kubernetes API alike)."""

from __future__ import annotations

import asyncio
import inspect
import logging
import random
from collections.abc import Awaitable, Callable, Iterable
from typing import TypeVar

from services.common import logs

_T = TypeVar("_T")
_U = TypeVar("_U")

Subscriber = Callable[[bool], Awaitable[None] | None]
"""Told True when the dependency answers again, False when it stops; may be a coroutine."""


class Backoff:
    """Exponential waits: `initial_s`, doubling on each `next()`, never over `cap_s`.

    With `jitter` (a fraction), each wait is spread that much either way, so many clients
    that lost the same dependency do not retry in step.
    """

    def __init__(self, initial_s: float = 0.5, cap_s: float = 30.0, *, jitter: float = 0.0) -> None:
        self.initial_s = initial_s
        self.cap_s = cap_s
        self.jitter = jitter
        self._next = initial_s

    def next(self) -> float:
        """The wait before the next attempt (and double the one after)."""
        delay = self._next
        self._next = min(self.cap_s, self._next * 2)
        if self.jitter:
            delay = round(delay * random.uniform(1 - self.jitter, 1 + self.jitter), 3)
        return delay

    def reset(self) -> None:
        """Start again from `initial_s` (after a success)."""
        self._next = self.initial_s

    async def sleep(self) -> None:
        await asyncio.sleep(self.next())


async def first(events: Iterable[asyncio.Event], timeout: float | None = None) -> None:
    """Wait until one of `events` is set, at most `timeout` seconds (None: no limit)."""
    waits = [asyncio.ensure_future(e.wait()) for e in events]
    try:
        await asyncio.wait(waits, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for w in waits:
            w.cancel()
        await asyncio.gather(*waits, return_exceptions=True)


async def both(first: Awaitable[_T], second: Awaitable[_U]) -> tuple[_T, _U]:
    """Await two calls at once; when one fails, cancel the other before raising (no stray task)."""
    one, two = asyncio.ensure_future(first), asyncio.ensure_future(second)
    try:
        return await one, await two
    finally:
        for task in (one, two):
            task.cancel()
        await asyncio.gather(one, two, return_exceptions=True)


async def tell(
    subscribers: Iterable[Subscriber], state: bool, logger: logging.Logger, failed_event: str
) -> None:
    """Tell each subscriber `state`, in order, awaiting those that are coroutines. One that
    raises is logged (`failed_event`, the exception's type only) and the rest are still told."""
    for subscriber in list(subscribers):
        try:
            result = subscriber(state)
            if inspect.isawaitable(result):
                await result
        except Exception as exc:
            logs.event(logger, failed_event, logging.ERROR, exception=type(exc).__name__)
