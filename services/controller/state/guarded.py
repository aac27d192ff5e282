"""What every writer of one swarm's state shares: its lease, its clock and how a declared
script runs under the lease (its events logged as they are written).

The writes themselves are grouped by what they record: `writing` (the swarm, fences,
releases and decisions), `reports` (what a running attempt reports) and `bookkeeping` (the
seat's launch, attention and expected attempts, recorded requests, the pause switch).
"""

from __future__ import annotations

import datetime
import enum
import functools
import math
import time
from collections.abc import Callable
from typing import Any, TypeVar

from services.common import tokens
from services.controller import telemetry
from services.controller.state import keys, leasing, scripting

S = TypeVar("S", bound=enum.StrEnum)

Clock = Callable[[], float]

WORKER_CREDENTIAL_TTL_S = 30 * 24 * 3600
"""How long a worker credential lives; it is revoked as soon as its attempt is fenced."""

REVOCATION_MARGIN_S = 120
"""Keep a revocation a little past the last moment its token could still pass a check."""

GRANT_REVOCATION_S = tokens.DEFAULT_GRANT_TTL_S + tokens.LEEWAY_S + REVOCATION_MARGIN_S
"""How long a store grant's revocation is kept: grants are minted on demand (never after the
fence), each for at most the default grant lifetime, so that long covers every copy."""


def rfc3339(at: float) -> str:
    """A UTC timestamp as RFC 3339 with a `Z` (whole seconds)."""
    # The second `datetime.fromtimestamp` lands on: it rounds to the microsecond, half to even.
    fraction, second = math.modf(at)
    microseconds = round(fraction * 1e6)
    if microseconds >= 1_000_000:
        second += 1
    elif microseconds < 0:
        second -= 1
    return _second(int(second))


@functools.lru_cache(maxsize=8)
def _second(at: int) -> str:
    # Every write of a storm stamps the same few seconds: each is formatted once.
    stamp = datetime.datetime.fromtimestamp(at, datetime.UTC).isoformat(timespec="seconds")
    return stamp.replace("+00:00", "Z")


class Guarded:
    """Runs one swarm's scripts, always under its lease.

    Args:
        lease: The swarm's lease (its holder and epoch guard every script).
        clock: Seconds since the epoch (tests pass a fixed clock).
    """

    def __init__(self, lease: leasing.Lease, *, clock: Clock = time.time) -> None:
        self.lease = lease
        self.swarm = lease.swarm
        self.clock = clock
        self.events_written = 0
        """How many telemetry events this process's scripts wrote to the swarm's stream (the
        Kubernetes Events relay reads a stream only when this moved)."""

    def now(self) -> str:
        return rfc3339(self.clock())

    async def _run(self, call: scripting.Call[S]) -> scripting.Reply[S]:
        reply = await self.lease.run(call)
        events = reply.fields.get("events", [])
        if events:
            self.events_written += len(events)
            telemetry.log_events(events)
        return reply

    def _revocations(self, now: float) -> dict[str, Any]:
        """What the scripts' `revocations` takes besides the attempt's record: the revocation
        key prefix, now, how long past its issue a worker credential's revocation is kept
        (until it could no longer pass a check), how long a store grant's is."""
        return {
            "revoke_prefix": keys.revoked(self.swarm, ""),
            "now": int(now),
            "credential_ttl_s": WORKER_CREDENTIAL_TTL_S + REVOCATION_MARGIN_S,
            "grant_ttl_s": GRANT_REVOCATION_S,
        }
