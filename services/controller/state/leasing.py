"""The swarm's controller lease: one active writer per swarm, standbys wait.

Acquiring is `SET …:lease HOLDER NX PX ttl` with `INCR …:epoch`, both in one script, so every
acquisition has its own epoch. Acquiring a lease that already names this holder (an acquisition
whose reply was lost, or a Redis outage shorter than the TTL) returns the epoch it holds, so
after an outage the controller carries on under the same epoch when its lease survived and takes
a new one when it expired. Renewal and release run through the guarded script runner: they
succeed only while the lease still names this holder and epoch. Correctness never rests on this
object's local view (`is_held`): every write re-checks the lease in Redis.

A process renews all the leases it works under together (`Renewals`: one pipelined round every
third of the TTL), and tells two failures apart. A renewal refused as `lease_lost` (another
holder or epoch now) sets `lost`: the holder stops at once and goes back to acquiring. A renewal
that could not reach Redis sets `interrupted` and rounds go on at their pace (the lease may
still be ours when Redis answers again); the holder stops its work, waits for Redis and acquires
again.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import functools
import logging
import secrets
import threading
import time
from collections.abc import AsyncIterator, Callable
from typing import Any, TypeVar

from services.common import logs, redis_link
from services.controller.state import housekeeping, keys, scripting

S = TypeVar("S", bound=enum.StrEnum)

log = logging.getLogger("services.controller.lease")


def new_holder() -> str:
    """A holder id unique to this process and start: a restarted controller is a new holder."""
    return f"controller-{secrets.token_hex(8)}"


class Lease:
    """One controller's claim on one swarm's lease.

    Args:
        scripts: The script runner.
        swarm: The swarm.
        holder: This controller's holder id (fresh per process start).
        ttl_ms: How long the lease lives without renewal.
        renewals: The process's renewal rounds; its own by default.
    """

    def __init__(
        self,
        scripts: scripting.Scripts,
        swarm: str,
        holder: str,
        *,
        ttl_ms: int = 10_000,
        renewals: Renewals | None = None,
    ) -> None:
        self.scripts = scripts
        self.renewals = renewals or Renewals(scripts, ttl_ms)
        """Who renews this lease while it is worked under (a process shares one)."""
        self.swarm = swarm
        self.holder = holder
        self.ttl_ms = ttl_ms
        self.epoch: int | None = None
        self._valid_until = 0.0
        self.lost = asyncio.Event()
        self.interrupted = asyncio.Event()
        """Set when a renewal could not reach Redis (cleared by the next acquisition)."""

    @property
    def keys(self) -> tuple[str, str]:
        """The lease key and the epoch key (the first two keys of every guarded script)."""
        return keys.lease(self.swarm), keys.epoch(self.swarm)

    async def run(self, call: scripting.Call[S]) -> scripting.Reply[S]:
        """Run a guarded script under this lease (see `scripting.Scripts.run`)."""
        return await self.scripts.run(
            call, holder=self.holder, epoch=self.epoch, lease_keys=self.keys
        )

    def is_held(self) -> bool:
        """This controller's local view: acquired and renewed within the last TTL."""
        return self.epoch is not None and time.monotonic() < self._valid_until

    async def acquire(self, floor: int = 0) -> bool:
        """Try once to take the lease; True when this controller now holds it (new epoch).

        Epochs never go backwards, even when Redis lost its epoch key: a new acquisition's
        epoch is past `floor` (the newest epoch a worker Pod of the swarm was launched under,
        when the caller knows one) and past every epoch this object held; a resumed one (the
        lease still names this holder) keeps its epoch unless that is below them, and then
        moves past them."""
        started = time.monotonic()
        floor = max(floor, self.epoch or 0)
        acquired = await self.scripts.read(
            housekeeping.LeaseAcquire(
                *self.keys, holder=self.holder, ttl_ms=self.ttl_ms, floor=floor
            )
        )
        if acquired is None:
            return False
        epoch = int(acquired)
        resumed = epoch == self.epoch
        self.epoch = epoch
        self._valid_until = started + self.ttl_ms / 1000
        self.lost.clear()
        self.interrupted.clear()
        logs.event(
            log,
            "lease_acquired",
            swarm=self.swarm,
            holder=self.holder,
            epoch=epoch,
            resumed=resumed,
        )
        return True

    async def renew(self) -> bool:
        """Extend the lease while it still names this holder and epoch; False once lost."""
        started = time.monotonic()
        try:
            await self.run(housekeeping.LeaseRenew(ttl_ms=self.ttl_ms))
        except scripting.LeaseLost:
            self._mark_lost()
            return False
        self._valid_until = started + self.ttl_ms / 1000
        return True

    async def release(self) -> None:
        """Give the lease up (on a clean stop) so a standby takes over at once."""
        with contextlib.suppress(scripting.LeaseLost):
            await self.run(housekeeping.LeaseRelease())
        self._mark_lost()

    def _mark_lost(self) -> None:
        if self.epoch is not None and not self.lost.is_set():
            logs.event(
                log,
                "lease_lost",
                logging.WARNING,
                swarm=self.swarm,
                holder=self.holder,
                epoch=self.epoch,
            )
        self._valid_until = 0.0
        self.lost.set()

    def forget(self) -> None:
        """Drop the local view (the holder stopped working under it; Redis is not asked)."""
        self._valid_until = 0.0

    @contextlib.asynccontextmanager
    async def renewing(self) -> AsyncIterator[Lease]:
        """Keep the lease renewed while the block runs: in `renewals`' rounds, every third of
        the TTL. Once the block is left no renewal of this lease is sent or in flight."""
        async with self.renewals.keeping(self):
            yield self


class Renewals:
    """Renews every lease a process holds together: one round of `lease_renew` scripts in one
    pipeline every third of the lease time, so a thousand swarms cost one round trip (per Redis
    node) and one task, not a thousand of each.

    With `connect` (the controller process gives it), rounds run on a thread of their own with
    a Redis client of their own: nothing the event loop does (thousands of swarms starting, a
    list of tens of thousands of Pods parsed, a storm of passes) can hold a renewal back, since
    the interpreter hands the thread its turn every few milliseconds. Without it (a `Recovery`
    on its own, in tests) rounds run as a task on the loop.

    A renewal refused as `lease_lost` sets that lease's `lost`; a round that could not reach
    Redis sets `interrupted` on every lease it could not renew and says so in one
    `lease_renew_failed` line, and rounds go on at their pace. When the pipeline fails as a
    whole, each lease is renewed on its own (a Cluster node away must not cost the leases on
    the others).

    `slack_s` is how much lease time the lowest lease had left when the latest round confirmed
    its renewal (the lease time less the gap between two renewals): renewals held back show
    here first, long before a lease is lost.

    Args:
        scripts: The script runner (rounds on the loop use it).
        ttl_ms: The lease time of the leases it renews.
        connect: Makes the Redis client of the rounds' own thread; None: rounds on the loop.
    """

    def __init__(
        self,
        scripts: scripting.Scripts,
        ttl_ms: int,
        *,
        connect: Callable[[], redis_link.Client] | None = None,
    ) -> None:
        self.scripts = scripts
        self.ttl_ms = ttl_ms
        self._connect = connect
        self._leases: dict[Lease, None] = {}
        self._lock = threading.Lock()  # `_leases` is read by the rounds' thread
        self._in_flight: frozenset[Lease] = frozenset()
        self._idle = threading.Event()  # no round in flight
        self._idle.set()
        self._task: asyncio.Task[None] | None = None
        self._empty = asyncio.Event()
        self._thread: threading.Thread | None = None
        self._halt = threading.Event()
        self.slack_s: float | None = None
        """The lowest lease time left when the latest round confirmed a renewal (seconds)."""

    @property
    def interval_s(self) -> float:
        return self.ttl_ms / 3000

    @property
    def held(self) -> int:
        """How many leases are being renewed."""
        return len(self._leases)

    @contextlib.asynccontextmanager
    async def keeping(self, lease: Lease) -> AsyncIterator[None]:
        """Renew `lease` in every round while the block runs."""
        with self._lock:
            self._leases[lease] = None
        self._empty.clear()
        self._start()
        try:
            yield
        finally:
            with self._lock:
                self._leases.pop(lease, None)
                in_flight = lease in self._in_flight
            if in_flight:
                # Its renewal was sent: wait for the answer so that none is in flight once the
                # holder gives the lease up (release, or stop working under it).
                await asyncio.to_thread(self._idle.wait, self.ttl_ms / 1000)
            if not self._leases:
                self._empty.set()
                task = self._task
                if task is not None and task is not asyncio.current_task():
                    # Nothing left to renew: the rounds end now, not at their next tick.
                    with contextlib.suppress(TimeoutError):
                        async with asyncio.timeout(self.ttl_ms / 1000):
                            await asyncio.shield(task)

    def _start(self) -> None:
        if self._connect is None:
            if self._task is None:
                self._task = asyncio.create_task(self._run(), name="lease-renewals")
        elif self._thread is None:
            loop = asyncio.get_running_loop()
            self._halt.clear()
            self._thread = threading.Thread(
                target=asyncio.run,
                args=(self._run_thread(loop),),
                name="lease-renewals",
                daemon=True,
            )
            self._thread.start()

    async def close(self) -> None:
        """Stop the rounds' thread (a hub that stops)."""
        thread, self._thread = self._thread, None
        if thread is not None:
            self._halt.set()
            await asyncio.to_thread(thread.join, self.ttl_ms / 1000)

    async def _run(self) -> None:
        try:
            while self._leases:
                if await redis_link.wait(self._empty, self.interval_s):
                    break
                await self.round(self.scripts, _at_once)
        finally:
            self._task = None

    async def _run_thread(self, loop: asyncio.AbstractEventLoop) -> None:
        assert self._connect is not None
        client = self._connect()
        scripts = scripting.Scripts(client)
        try:
            while not self._halt.wait(self.interval_s):
                await self.round(scripts, functools.partial(_post, loop))
        finally:
            await client.aclose()

    async def round(self, scripts: scripting.Scripts, tell: _Teller | None = None) -> None:
        """Renew every lease held now, once (through `scripts`); what leases and logs learn
        is told on their loop through `tell`."""
        tell = tell or _at_once
        with self._lock:
            leases = tuple(self._leases)
            self._in_flight = frozenset(leases)
            self._idle.clear()
        if not leases:
            self._idle.set()
            return
        started = time.monotonic()
        slack: float | None = None
        settled: list[tuple[Lease, Any]] = []
        try:
            results = await self._renew(scripts, leases)
            now = time.monotonic()
            # Under the lock, and before the round counts as done: a lease let go meanwhile is
            # left as its holder left it (never valid again after it forgot it).
            with self._lock:
                for lease, result in zip(leases, results, strict=True):
                    if lease not in self._leases:
                        continue
                    if isinstance(result, Exception):
                        settled.append((lease, result))
                        continue
                    left = lease._valid_until - now
                    slack = left if slack is None else min(slack, left)
                    lease._valid_until = started + lease.ttl_ms / 1000
        finally:
            with self._lock:
                self._in_flight = frozenset()
                self._idle.set()
        if slack is not None:
            self.slack_s = slack
        failed: list[tuple[Lease, Exception]] = []
        for lease, result in settled:
            if isinstance(result, scripting.LeaseLost):
                tell(lease._mark_lost)
            else:
                failed.append((lease, result))
                tell(lease.interrupted.set)
        if failed:
            tell(functools.partial(self._log_failed, failed))

    async def _renew(self, scripts: scripting.Scripts, leases: tuple[Lease, ...]) -> list[Any]:
        calls: list[scripting.Guarded[housekeeping.Renewed]] = [
            (housekeeping.LeaseRenew(ttl_ms=lease.ttl_ms), lease.holder, lease.epoch, lease.keys)
            for lease in leases
        ]
        with contextlib.suppress(Exception):
            return await scripts.run_all(calls)
        # The pipeline failed as a whole: each on its own (bounded), so what answers renews.
        gate = asyncio.Semaphore(_ONE_BY_ONE)

        async def one(call: scripting.Guarded[housekeeping.Renewed]) -> Any:
            async with gate:
                renew, holder, epoch, lease_keys = call
                return await scripts.run(renew, holder=holder, epoch=epoch, lease_keys=lease_keys)

        return list(await asyncio.gather(*map(one, calls), return_exceptions=True))

    def _log_failed(self, failed: list[tuple[Lease, Exception]]) -> None:
        # One line per round, however many leases: Redis unreachable (or a surprise). Their
        # holders stop working and acquire again once Redis answers; rounds go on meanwhile.
        exc = failed[0][1]
        reachable = not redis_link.unreachable(exc)
        lease = failed[0][0]
        one = {"swarm": lease.swarm, "epoch": lease.epoch} if len(failed) == 1 else {}
        logs.event(
            log,
            "lease_renew_failed",
            logging.ERROR if reachable else logging.WARNING,
            holder=lease.holder,
            **one,
            leases=len(failed),
            exception=type(exc).__name__,
            retry_in_s=round(self.interval_s, 3),
            **({} if reachable else {"variable": redis_link.VARIABLE}),
        )


_Teller = Callable[[Callable[[], object]], object]
"""Runs a callback on the leases' loop: at once when the round runs on it, else posted."""


def _at_once(callback: Callable[[], object]) -> None:
    callback()


def _post(loop: asyncio.AbstractEventLoop, callback: Callable[[], object]) -> None:
    # The loop may have closed under the thread (a process ending without a clean stop).
    with contextlib.suppress(RuntimeError):
        loop.call_soon_threadsafe(callback)


_ONE_BY_ONE = 64
"""How many leases are renewed at once when a round's pipeline failed as a whole."""
