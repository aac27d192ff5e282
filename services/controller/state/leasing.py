"""The swarm's controller lease: one active writer per swarm, standbys wait.

Acquiring is `SET …:lease HOLDER NX PX ttl` with `INCR …:epoch`, both in one script, so every
acquisition has its own epoch. Acquiring a lease that already names this holder (an acquisition
whose reply was lost, or a Redis outage shorter than the TTL) returns the epoch it holds, so
after an outage the controller carries on under the same epoch when its lease survived and takes
a new one when it expired. Renewal and release run through the guarded script runner: they
succeed only while the lease still names this holder and epoch. Correctness never rests on this
object's local view (`is_held`): every write re-checks the lease in Redis.

The renewer tells two failures apart. A renewal refused as `lease_lost` (another holder or epoch
now) sets `lost`: the holder stops at once and goes back to acquiring. A renewal that could not
reach Redis sets `interrupted` and keeps renewing at its pace (the lease may still be ours when
Redis answers again); the holder stops its work, waits for Redis and acquires again.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
import secrets
import time
from collections.abc import AsyncIterator
from typing import TypeVar

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
    """

    def __init__(
        self, scripts: scripting.Scripts, swarm: str, holder: str, *, ttl_ms: int = 10_000
    ) -> None:
        self.scripts = scripts
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

    async def _renew_forever(self, stop: asyncio.Event) -> None:
        interval = self.ttl_ms / 3000
        while not stop.is_set():
            if await redis_link.wait(stop, interval):
                return
            try:
                if not await self.renew():
                    return  # lease_lost: `lost` is set, the holder stops at once
            except Exception as exc:
                # Redis unreachable (or a surprise): the holder stops its work and acquires
                # again once Redis answers; renewing goes on meanwhile (at this pace, one line
                # each), and the local view expires on its own.
                reachable = not redis_link.unreachable(exc)
                logs.event(
                    log,
                    "lease_renew_failed",
                    logging.ERROR if reachable else logging.WARNING,
                    swarm=self.swarm,
                    holder=self.holder,
                    epoch=self.epoch,
                    exception=type(exc).__name__,
                    retry_in_s=round(interval, 3),
                    **({} if reachable else {"variable": redis_link.VARIABLE}),
                )
                self.interrupted.set()

    @contextlib.asynccontextmanager
    async def renewing(self) -> AsyncIterator[Lease]:
        """Renew in the background while the block runs (every third of the TTL)."""
        # The renewer is stopped by an event, not only by cancellation: a cancellation that lands
        # inside a Redis command can be lost by the client, and the renewer would then go on
        # renewing a lease the controller is giving up.
        stop = asyncio.Event()
        task = asyncio.create_task(self._renew_forever(stop), name=f"lease-renewer-{self.swarm}")
        try:
            yield self
        finally:
            stop.set()
            try:
                async with asyncio.timeout(self.ttl_ms / 1000):
                    await asyncio.shield(task)
            except TimeoutError:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
