"""The resyncs nobody asked for, spaced across a controller's swarms.

Each swarm the controller holds resyncs when its watch asks (a Pod deleted, a node lost) and at
least every pass interval (`holding`), the resync nobody asked for that finds what a watch
missed. With thousands of swarms those alone would saturate one event loop (5,000 swarms every
2 s is 2,500 resyncs a second) and starve what must not wait: lease renewals, failures, calls.
The pacer gives them turns, at most `rate` a second across every swarm of the process, first
come first served. With few swarms nothing changes (each still resyncs every interval); with
many, each swarm's comes round every swarms/`rate` seconds, and an idle swarm costs about
`rate`/swarms resyncs a second. Nothing the watch brings waits for a turn: a failure's seat is
worked at once and a relist asked for runs at once.
"""

from __future__ import annotations

import asyncio

from services.common import settings

RATE = float(settings.DEFAULT_RESYNC_RATE)
"""Resyncs nobody asked for, per second, across a controller's swarms, by default
(`AGENTIHOOKS_RESYNC_RATE`)."""


class Pacer:
    """Turns for the resyncs nobody asked for, at most `rate` a second.

    Args:
        rate: Turns per second.
    """

    def __init__(self, rate: float = RATE) -> None:
        if rate <= 0:
            raise ValueError("the resync rate must be positive")
        self._gap = 1.0 / rate
        self._next = 0.0

    def delay(self) -> float:
        """Take the next free turn: the seconds until it comes (0 when it is free now). A turn
        not used (the swarm was woken before it) is simply lost."""
        now = asyncio.get_running_loop().time()
        turn = max(now, self._next)
        self._next = turn + self._gap
        return turn - now
