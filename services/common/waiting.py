"""Waiting on a dependency that does not answer: backoff steps, and telling subscribers when it
comes and goes (Redis and the Kubernetes API alike)."""

from __future__ import annotations

import asyncio
import inspect
import logging
import random
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, TypeVar

from services.common import logs

_T = TypeVar("_T")
_U = TypeVar("_U")
_F = TypeVar("_F", bound="asyncio.Future[Any]")

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
        await cancel(waits)


CANCEL_AGAIN_S = 0.5
"""How long a cancelled task may go on running before `cancel` cancels it again: long enough
for what a task does once cancelled (closing a response, a last Redis call) to end before the
next cancellation cuts it short, short enough that a lost one costs a stop half a second."""


async def cancel(tasks: Iterable[_F], timeout: float | None = None) -> list[_F]:
    """Cancel `tasks` and wait until they ended, at most `timeout` seconds (None: no limit);
    returns those still running then. What they raised is taken (never logged as unretrieved)
    and not raised again.

    A task still running after `CANCEL_AGAIN_S` is cancelled again, and so on until it ends,
    because one cancellation can be lost. On Python 3.11, `asyncio.wait_for` returns the result
    of its call instead of raising when the cancellation arrives just as the call completes
    (CPython gh-86296, fixed in 3.12), and redis-py sends every command through it when a socket
    timeout is set. A loop that goes on after one step then goes on for good, and whoever
    awaits it once cancelled waits for ever.
    """
    loop = asyncio.get_running_loop()
    everything = list(tasks)
    for task in everything:
        task.add_done_callback(_retrieve)
    pending = {task for task in everything if not task.done()}
    deadline = None if timeout is None else loop.time() + timeout
    while pending:
        for task in pending:
            task.cancel()
        left = CANCEL_AGAIN_S if deadline is None else min(CANCEL_AGAIN_S, deadline - loop.time())
        if left <= 0:
            break
        _, pending = await asyncio.wait(pending, timeout=left)
    return list(pending)


def _retrieve(task: asyncio.Future[Any]) -> None:
    if not task.cancelled():
        task.exception()


async def both(first: Awaitable[_T], second: Awaitable[_U]) -> tuple[_T, _U]:
    """Await two calls at once; when one fails, cancel the other before raising (no stray task)."""
    one, two = asyncio.ensure_future(first), asyncio.ensure_future(second)
    try:
        return await one, await two
    finally:
        await cancel((one, two))


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
