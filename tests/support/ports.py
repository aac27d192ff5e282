"""Free loopback ports and waiting without sleeps."""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

T = TypeVar("T")


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


MIN_DEADLINE_S = 120.0
"""The shortest deadline any wait gets: the suite runs on shared two-core machines beside other
work, where a step that takes milliseconds alone can take many seconds. A deadline only bounds
a failure; a wait that succeeds ends as soon as its check holds."""


async def eventually(
    check: Callable[[], Awaitable[T]], timeout: float = 5.0, every: float = 0.02
) -> T:
    """Call `check` until it returns without AssertionError or the deadline passes.

    `timeout` says how long the wait takes on an idle machine; the deadline is never shorter
    than `MIN_DEADLINE_S`.
    """
    deadline = time.monotonic() + max(timeout, MIN_DEADLINE_S)
    while True:
        try:
            return await check()
        except AssertionError:
            if time.monotonic() > deadline:
                raise
        await asyncio.sleep(every)


def wait_port(port: int, timeout: float = 10.0) -> None:
    """Block until something accepts connections on 127.0.0.1:port (deadline: at least
    `MIN_DEADLINE_S`)."""
    deadline = time.monotonic() + max(timeout, MIN_DEADLINE_S)
    while time.monotonic() < deadline:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.02)
    raise TimeoutError(f"nothing listens on 127.0.0.1:{port}")
