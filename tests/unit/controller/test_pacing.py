"""The pace of the resyncs nobody asked for (`pacing`): at most `rate` turns a second across a
controller's swarms, first come first served."""

from __future__ import annotations

import itertools

import pytest

from services.controller import pacing


async def test_turns_are_spaced_at_the_rate() -> None:
    pacer = pacing.Pacer(rate=100.0)
    delays = [pacer.delay() for _ in range(5)]
    assert delays[0] == 0.0
    # Each later turn comes 10 ms after the one before (taken at almost the same moment).
    for before, after in itertools.pairwise(delays):
        assert after - before == pytest.approx(0.01, abs=0.002)


async def test_many_swarms_share_the_rate_and_few_are_not_slowed() -> None:
    pacer = pacing.Pacer(rate=200.0)
    # 5,000 swarms asking at once: the last waits about 25 s (each comes round every 25 s).
    last = [pacer.delay() for _ in range(5_000)][-1]
    assert last == pytest.approx(5_000 / 200.0 - 1 / 200.0, rel=0.01)
    # Ten swarms on a fresh pacer wait at most 45 ms: far under any pass interval.
    few = pacing.Pacer(rate=200.0)
    assert max(few.delay() for _ in range(10)) < 0.05


def test_the_rate_must_be_positive() -> None:
    with pytest.raises(ValueError, match="positive"):
        pacing.Pacer(rate=0)


async def test_a_turn_taken_with_the_interval_comes_no_sooner_than_it() -> None:
    """An idle swarm takes its turn together with its pass interval (one wait): with few
    swarms the interval decides, with many the turns do."""
    few = pacing.Pacer(rate=200.0)
    assert few.delay(after=2.0) == pytest.approx(2.0, abs=0.01)
    many = pacing.Pacer(rate=200.0)
    delays = [many.delay(after=2.0) for _ in range(5_000)]
    assert delays[0] == pytest.approx(2.0, abs=0.01)
    assert delays[-1] == pytest.approx(2.0 + 4_999 / 200.0, rel=0.01)


async def test_an_asked_resync_is_not_queued_behind_the_periodic_ones() -> None:
    """A resync the watch asked for has turns of its own: one comes at once even while
    thousands of periodic ones are queued; thousands asked together are spread at the rate."""
    pacer = pacing.Pacer(rate=200.0)
    for _ in range(5_000):
        pacer.delay()
    assert pacer.asked() == 0.0
    spread = [pacer.asked() for _ in range(1_000)]
    assert spread[-1] == pytest.approx(1_000 / 200.0, rel=0.01)
