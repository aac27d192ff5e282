"""The resyncs nobody asked for, spaced across a controller's swarms.

Each swarm the controller holds resyncs when its watch asks (a Pod deleted, a node lost) and at
least every pass interval (`holding`), the resync nobody asked for that finds what a watch
missed. With thousands of swarms those alone would saturate one event loop (5,000 swarms every
2 s is 2,500 resyncs a second) and starve what must not wait: lease renewals, failures, calls.
The pacer gives them turns, at most `rate` a second across every swarm of the process, first
come first served. With few swarms nothing changes (each still resyncs every interval); with
many, each swarm's comes round every swarms/`rate` seconds, and an idle swarm costs about
`rate`/swarms resyncs a second. A failure the watch brings is worked at once, never paced. A
resync the watch asks for (a Pod deleted, a node lost) has turns of its own (`asked`): one runs
at once, while thousands asked together (a Pod watch that listed again after a break asks every
swarm) are spread at `rate` a second instead of saturating the loop.
"""

from __future__ import annotations

import asyncio

from services.common import settings

RATE = float(settings.DEFAULT_RESYNC_RATE)
"""Resyncs nobody asked for, per second, across a controller's swarms, by default
(`AGENTIHOOKS_RESYNC_RATE`)."""


class _Turns:
    """One line of turns `gap` seconds apart."""

    def __init__(self, gap: float) -> None:
        self._gap = gap
        self._next = 0.0

    def take(self, after: float) -> float:
        now = asyncio.get_running_loop().time()
        turn = max(now + after, self._next)
        self._next = turn + self._gap
        return turn - now


class Pacer:
    """Turns for the resyncs nobody asked for, at most `rate` a second.

    Args:
        rate: Turns per second.
    """

    def __init__(self, rate: float = RATE) -> None:
        if rate <= 0:
            raise ValueError("the resync rate must be positive")
        self._periodic = _Turns(1.0 / rate)
        self._asked = _Turns(1.0 / rate)

    def delay(self, after: float = 0.0) -> float:
        """Take the first free turn at least `after` seconds from now: the seconds until it
        comes. A turn not used (the swarm was woken before it) is simply lost."""
        return self._periodic.take(after)

    def asked(self) -> float:
        """Take the next turn for a resync the watch asked for: the seconds until it comes.
        Asked resyncs have turns of their own, at the same rate, so one swarm's is not queued
        behind thousands of periodic ones (it runs at once), while a list that asks every swarm
        at once (the Pod watch listed again after a break) is spread out, not run all together.
        """
        return self._asked.take(0.0)
