"""Backoff steps and telling subscribers (services/common/waiting.py): the waits Redis and the
Kubernetes API outages are retried with, and the one way both tell their subscribers."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging

import pytest

from services.common import redis_link, waiting


def test_a_backoff_doubles_up_to_its_cap_and_starts_again_after_a_reset() -> None:
    backoff = waiting.Backoff(0.5, 3.0)
    assert [backoff.next() for _ in range(5)] == [0.5, 1.0, 2.0, 3.0, 3.0]
    backoff.reset()
    assert backoff.next() == 0.5


def test_redis_waits_keep_their_documented_steps() -> None:
    backoff = redis_link.Backoff()
    steps = [backoff.next() for _ in range(8)]
    assert steps[0] == redis_link.INITIAL_S and max(steps) == redis_link.CAP_S


def test_a_jittered_backoff_spreads_each_step_within_its_fraction() -> None:
    for _ in range(200):
        backoff = waiting.Backoff(0.2, 10.0, jitter=0.5)
        steps = [backoff.next() for _ in range(8)]
        nominal = [0.2, 0.4, 0.8, 1.6, 3.2, 6.4, 10.0, 10.0]
        assert all(n * 0.5 <= s <= n * 1.5 for s, n in zip(steps, nominal, strict=True)), steps
    spread = {waiting.Backoff(1.0, 1.0, jitter=0.5).next() for _ in range(50)}
    assert len(spread) > 1  # not in step


async def test_every_subscriber_is_told_in_order_and_a_failing_one_is_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    heard: list[tuple[str, bool]] = []

    def plain(state: bool) -> None:
        heard.append(("plain", state))

    def broken(state: bool) -> None:
        raise RuntimeError("secret detail")

    async def coroutine(state: bool) -> None:
        heard.append(("coroutine", state))

    logger = logging.getLogger("tests.waiting")
    with caplog.at_level(logging.ERROR, logger="tests.waiting"):
        await waiting.tell([plain, broken, coroutine], False, logger, "thing_subscriber_failed")
    assert heard == [("plain", False), ("coroutine", False)]
    [record] = caplog.records
    assert record.getMessage() == "thing_subscriber_failed"
    assert "secret detail" not in caplog.text


class Stepping:
    """A loop whose every step awaits `asyncio.wait_for` (as a redis-py command does), and a
    way to complete the step it waits on: a cancellation that lands as the step completes is
    lost on Python 3.11 (CPython gh-86296), and the loop carries on."""

    def __init__(self) -> None:
        self.steps = 0
        self._step: asyncio.Future[None] | None = None
        self.waiting = asyncio.Event()

    async def run(self) -> None:
        while True:
            self._step = asyncio.get_running_loop().create_future()
            self.waiting.set()
            await asyncio.wait_for(self._step, 60)
            self.waiting.clear()
            self.steps += 1

    def complete(self) -> None:
        assert self._step is not None
        self._step.set_result(None)


async def _cancelled_as_its_step_completes() -> tuple[Stepping, asyncio.Task[None]]:
    stepping = Stepping()
    task = asyncio.create_task(stepping.run())
    await stepping.waiting.wait()
    stepping.complete()
    task.cancel()  # lands as the step completes
    return stepping, task


async def test_one_cancellation_lands_as_a_step_completes_and_the_loop_goes_on() -> None:
    # Why `cancel` sends it again: the task was told once and carries on.
    stepping, task = await _cancelled_as_its_step_completes()
    await asyncio.sleep(0.05)
    assert not task.done() and stepping.steps == 1 and stepping.waiting.is_set()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_cancel_sends_a_lost_cancellation_again_until_the_task_ended() -> None:
    stepping, task = await _cancelled_as_its_step_completes()
    async with asyncio.timeout(60):
        assert await waiting.cancel([task]) == []
    assert task.cancelled() and stepping.steps == 1


async def test_cancel_returns_a_task_still_running_when_its_timeout_passed() -> None:
    stop = asyncio.Event()

    async def stubborn() -> None:
        while not stop.is_set():
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.sleep(3600)

    task = asyncio.create_task(stubborn())
    await asyncio.sleep(0)
    assert await waiting.cancel([task], timeout=0.2) == [task]
    assert not task.done()
    stop.set()
    async with asyncio.timeout(60):
        assert await waiting.cancel([task]) == []


async def test_cancel_takes_what_the_tasks_raised_and_raises_nothing() -> None:
    async def failing_on_cancel() -> None:
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            raise ValueError("while stopping") from None

    unhandled: list[dict[str, object]] = []
    loop = asyncio.get_running_loop()
    loop.set_exception_handler(lambda _, context: unhandled.append(context))
    try:
        failed = asyncio.create_task(failing_on_cancel())
        done = asyncio.create_task(asyncio.sleep(0))
        await asyncio.sleep(0.01)
        assert await waiting.cancel([failed, done]) == []
        assert failed.done() and not failed.cancelled() and done.result() is None
        del failed  # its ValueError never looked at here: `cancel` took it
        gc.collect()
        await asyncio.sleep(0)
        assert unhandled == []
    finally:
        loop.set_exception_handler(None)


async def test_cancel_with_no_time_left_still_cancels_once() -> None:
    task = asyncio.create_task(asyncio.sleep(3600))
    await asyncio.sleep(0)
    assert await waiting.cancel([task], timeout=0) == [task]
    with pytest.raises(asyncio.CancelledError):
        await task
