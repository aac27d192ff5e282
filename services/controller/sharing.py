"""Controllers share the swarms: each live replica works a fair share of the swarm leases.

Every replica keeps an entry in the controllers' registry in Redis (`MEMBERS`, a sorted set of
holder ids scored by when their entry expires, and `ADDRESSES`, where each answers), renewed by
a heartbeat every third of the lease time. Each heartbeat also reads the swarm index and who
holds every swarm's lease, and computes the assignment (`assign`): every replica computes the
same one from the same registry, so no coordinator is needed.

- **Fair share.** With S swarms and N live replicas each replica is given at most ceil(S/N)
  swarms. A swarm stays with its current holder while that holder is live and under its share;
  the rest go to the replica that ranks highest for the swarm (rendezvous hashing) among those
  under their share. A replica joining takes over only what the others hold beyond their new
  share; a replica leaving (a clean stop removes its entry) or dying (its entry expires) leaves
  its swarms to be spread over the others.
- **Taking and handing back.** A replica tries to acquire a swarm's lease only when the swarm is
  assigned to it, or when the swarm has had no holder for a whole lease time (an assigned
  replica that cannot work it must not leave it orphaned). A replica holding a swarm assigned to
  another live replica finishes its pass and releases the lease (`lease_handed_back`); the new
  owner, woken by its own heartbeat, acquires it at once.
- **New swarms.** A swarm applied on any replica is found by every other at its next heartbeat
  (no restart). A swarm the registry's index does not show yet (being applied here) may be taken
  by the replica applying it; the heartbeats then hand it to its assigned owner.

Correctness never rests on the assignment: every write is a script under the swarm's lease, so
two replicas that briefly disagree only both wait or one waits; they never both write.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import hashlib
import json
import logging
import math
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence

from services.common import logs, redis_link
from services.controller.state import keys

log = logging.getLogger("services.controller.sharing")

MEMBERS = "agentihooks:{agentihooks:controllers}:members"
"""Live controller replicas: holder id -> when its entry expires (Redis time, ms)."""
ADDRESSES = "agentihooks:{agentihooks:controllers}:addresses"
"""Holder id -> JSON {"grpc": HOST:PORT, "http": HOST:PORT}: where a replica answers."""

_BEAT = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local dead = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now)
if #dead > 0 then
  redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
  redis.call('HDEL', KEYS[2], unpack(dead))
end
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), ARGV[1])
redis.call('HSET', KEYS[2], ARGV[1], ARGV[3])
return redis.call('HGETALL', KEYS[2])
"""
"""One heartbeat: drop expired entries, renew this one, return every live replica's address."""

_LEAVE = """
redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('HDEL', KEYS[2], ARGV[1])
return 1
"""


def _rank(swarm: str, member: str) -> bytes:
    """Rendezvous weight of `member` for `swarm` (higher ranks first)."""
    return hashlib.sha256(f"{swarm}\0{member}".encode()).digest()


def assign(
    swarms: Iterable[str], members: Iterable[str], holders: Mapping[str, str | None]
) -> dict[str, str]:
    """Swarm -> the replica that should hold it: at most ceil(S/N) each, sticky to the current
    holder while it is live and under its share, else rendezvous-ranked among those under it.

    Deterministic: every replica computes the same assignment from the same inputs.
    """
    names = sorted(set(swarms))
    live = sorted(set(members))
    if not names or not live:
        return {}
    share = math.ceil(len(names) / len(live))
    load = dict.fromkeys(live, 0)
    out: dict[str, str] = {}
    # Keep what live holders already hold, up to their share (the swarms they rank highest for
    # first, so what a holder over its share gives up does not depend on names alone).
    kept: dict[str, list[str]] = {m: [] for m in live}
    for swarm in names:
        holder = holders.get(swarm)
        if holder in load:
            kept[holder].append(swarm)
    for member, held in kept.items():
        held.sort(key=functools.partial(_rank, member=member), reverse=True)
        for swarm in held[:share]:
            out[swarm] = member
            load[member] += 1
    for swarm in names:
        if swarm in out:
            continue
        for member in sorted(live, key=functools.partial(_rank, swarm), reverse=True):
            if load[member] < share:
                out[swarm] = member
                load[member] += 1
                break
    return out


@dataclasses.dataclass(frozen=True)
class Peer:
    """Where a live replica answers."""

    grpc: str | None
    http: str | None


@dataclasses.dataclass(frozen=True)
class View:
    """One heartbeat's picture: the live replicas, the swarms, who holds each, who should."""

    peers: Mapping[str, Peer]
    swarms: Sequence[str]
    holders: Mapping[str, str | None]
    assignment: Mapping[str, str]


class Sharing:
    """This replica's membership and its verdicts: which swarm leases it may take or keep.

    Args:
        client: Redis.
        holder: This replica's holder id (its swarm leases name it).
        ttl_ms: The lease time: a heartbeat every third of it, an entry that lives as long.
        link: Whether Redis answers (heartbeats pause while it does not).
        on_swarms: Called with the swarm index after each heartbeat (finds new swarms).
    """

    def __init__(
        self,
        client: redis_link.Client,
        holder: str,
        *,
        ttl_ms: int,
        link: redis_link.RedisLink,
        on_swarms: Callable[[Sequence[str]], Awaitable[None]] | None = None,
    ) -> None:
        self._client = client
        self.holder = holder
        self._ttl_ms = ttl_ms
        self._link = link
        self._on_swarms = on_swarms
        self._beat = client.register_script(_BEAT)
        self._leave = client.register_script(_LEAVE)
        self.address = Peer(None, None)
        self.view: View | None = None
        self.joined = asyncio.Event()
        """Set after the first heartbeat: this replica knows its peers and its share."""
        self._free_since: dict[str, float] = {}
        self._wakes: dict[str, asyncio.Event] = {}
        self._task: asyncio.Task[None] | None = None
        self._stop = asyncio.Event()

    @property
    def running(self) -> bool:
        """Whether the heartbeat runs (a hub that was never started shares nothing)."""
        return self._task is not None

    @property
    def interval_s(self) -> float:
        return self._ttl_ms / 3000

    def advertise(self, grpc: str | None, http: str | None) -> None:
        """Where this replica answers, as its peers reach it (written at the next heartbeat)."""
        self.address = Peer(grpc, http)

    def wake(self, swarm: str) -> asyncio.Event:
        """Set when a heartbeat changed the verdict for `swarm` (`may_take`, `may_keep`)."""
        return self._wakes.setdefault(swarm, asyncio.Event())

    # Verdicts.

    def may_take(self, swarm: str) -> bool:
        """Whether this replica should try to acquire `swarm`'s lease now."""
        view = self.view
        if view is None:
            # Not heard from the registry yet: wait for the first heartbeat, unless this
            # replica does not share (no heartbeat runs: it takes every lease it can).
            return not self.running
        if swarm not in view.assignment:
            return True  # not in the index yet: being applied here
        if view.assignment[swarm] == self.holder:
            return True
        since = self._free_since.get(swarm)
        return since is not None and time.monotonic() - since >= self._ttl_ms / 1000

    def may_keep(self, swarm: str) -> bool:
        """Whether this replica, holding `swarm`'s lease, should keep it."""
        view = self.view
        if view is None or swarm not in view.assignment:
            return True
        # The assignment is sticky: a holder keeps what it holds up to its share, so a swarm
        # is handed back only when this replica holds more than its share.
        return view.assignment[swarm] == self.holder

    def share_of(self) -> list[str]:
        """The swarms assigned to this replica."""
        view = self.view
        if view is None:
            return []
        return sorted(s for s, m in view.assignment.items() if m == self.holder)

    # Where a swarm's holder answers.

    async def holder_of(self, swarm: str) -> tuple[str | None, Peer | None]:
        """Who holds `swarm`'s lease now (read live) and where it answers, if it is a live
        replica that advertised an address."""
        raw = await self._client.get(keys.lease(swarm))
        if raw is None:
            return None, None
        holder = raw.decode() if isinstance(raw, bytes) else str(raw)
        found = await self._client.hget(ADDRESSES, holder)
        return holder, _peer(found) if found is not None else None

    # The heartbeat.

    async def beat(self) -> View:
        """Renew this replica's entry and read the registry, the swarm index and the holders."""
        address = json.dumps(
            {"grpc": self.address.grpc, "http": self.address.http}, separators=(",", ":")
        )
        raw = await self._beat(keys=[MEMBERS, ADDRESSES], args=[self.holder, self._ttl_ms, address])
        peers = {_text(raw[i]): _peer(raw[i + 1]) for i in range(0, len(raw), 2)}
        names = sorted(_text(n) for n in await self._client.smembers(keys.SWARMS))
        pipe = self._client.pipeline(transaction=False)
        for name in names:
            pipe.get(keys.lease(name))
        found = await pipe.execute() if names else []
        holders = {
            n: (_text(h) if h is not None else None) for n, h in zip(names, found, strict=True)
        }
        view = View(peers, names, holders, assign(names, peers, holders))
        self._observe(view)
        return view

    def _verdicts(self) -> dict[str, tuple[bool, bool]]:
        return {s: (self.may_take(s), self.may_keep(s)) for s in self._wakes}

    def _observe(self, view: View) -> None:
        now = time.monotonic()
        before = self.view
        verdicts = self._verdicts()
        for name in view.swarms:
            if view.holders.get(name) is None:
                self._free_since.setdefault(name, now)
            else:
                self._free_since.pop(name, None)
        for name in list(self._free_since):
            if name not in view.holders:
                del self._free_since[name]
        self.view = view
        mine = self.share_of()
        if (
            before is None
            or set(before.peers) != set(view.peers)
            or (sorted(s for s, m in before.assignment.items() if m == self.holder) != mine)
        ):
            logs.event(
                log,
                "share_changed",
                holder=self.holder,
                controllers=len(view.peers),
                swarms=len(view.swarms),
                share=len(mine),
            )
        # Only the swarms whose verdict changed are woken: a wake costs their loop a pass.
        for swarm, verdict in self._verdicts().items():
            if verdicts.get(swarm) != verdict:
                self._wakes[swarm].set()
        self.joined.set()

    async def run(self) -> None:
        """Heartbeat until `stop`; a heartbeat that cannot reach Redis waits for it."""
        while not self._stop.is_set():
            if not await self._link.wait_up(self._stop):
                return
            try:
                view = await self.beat()
                if self._on_swarms is not None:
                    await self._on_swarms(view.swarms)
            except Exception as exc:
                unreachable = redis_link.unreachable(exc)
                if unreachable:
                    self._link.suspect()
                else:
                    logs.event(
                        log,
                        "heartbeat_failed",
                        logging.ERROR,
                        holder=self.holder,
                        exception=type(exc).__name__,
                    )
            if await redis_link.wait(self._stop, self.interval_s):
                return

    async def start(self) -> None:
        """Heartbeat in the background (the first one is tried before returning)."""
        if self._task is None:
            self._stop.clear()
            self._task = asyncio.create_task(self.run(), name="controller-heartbeat")

    async def stop(self) -> None:
        """Stop the heartbeat and leave the registry (peers take over this replica's share at
        their next heartbeat, not after the entry expires)."""
        self._stop.set()
        task, self._task = self._task, None
        if task is not None:
            await asyncio.gather(task, return_exceptions=True)
        try:
            await self._leave(keys=[MEMBERS, ADDRESSES], args=[self.holder])
        except Exception as exc:
            if not redis_link.unreachable(exc):
                raise
            # Redis away: the entry expires on its own within a lease time.


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _peer(raw: bytes | str) -> Peer:
    try:
        data = json.loads(_text(raw))
        return Peer(data.get("grpc") or None, data.get("http") or None)
    except (ValueError, AttributeError):
        return Peer(None, None)
