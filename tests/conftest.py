"""Shared fixtures: real servers on loopback (see tests/support/)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

pytest_plugins = [
    "tests.support.redis_server",
    "tests.support.store_server",
    "tests.support.s3",
    "tests.support.kube.apiserver.emulator",
    "tests.support.controller_server",
    "tests.support.browser",
]


LEFTOVER_GRACE_S = 30.0
"""How long a test's unfinished tasks get to end by themselves before they count as left over
(a bound on a failure only: tasks that end sooner end the wait)."""


@pytest.fixture(autouse=True)
async def _no_leftover_tasks() -> AsyncIterator[None]:
    """Fail any test that leaves asyncio tasks running (sloppy cleanup hides bugs)."""
    before = asyncio.all_tasks()
    yield
    await asyncio.sleep(0)
    current = asyncio.current_task()
    left = [t for t in asyncio.all_tasks() - before if t is not current and not t.done()]
    if left:
        # Tasks already ending (a cancelled gRPC call's own tasks on a loaded machine) are given
        # time to end by themselves; only those still running after it are left over.
        await asyncio.wait(left, timeout=LEFTOVER_GRACE_S)
        left = [t for t in left if not t.done()]
    if left:
        # Named before they are cancelled: a finished task no longer has its coroutine.
        names = ", ".join(sorted(_task_name(t) for t in left))
        for task in left:
            task.cancel()
        await asyncio.gather(*left, return_exceptions=True)
        pytest.fail(f"test left asyncio tasks running: {names}")


def _task_name(task: asyncio.Task[object]) -> str:
    coro = task.get_coro()
    return f"{task.get_name()} ({getattr(coro, '__qualname__', type(coro).__name__)})"
