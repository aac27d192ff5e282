"""Backoff steps and telling subscribers (services/common/waiting.py): the waits Redis and the
Kubernetes API outages are retried with, and the one way both tell their subscribers."""

from __future__ import annotations

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
