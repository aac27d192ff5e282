"""The swarm's controller lease: one active writer per swarm, standbys wait.

Acquiring is `SET …:lease HOLDER NX PX ttl` with `INCR …:epoch`, both in one script, so every
acquisition has its own epoch. Renewal and release run through the guarded script runner: they
succeed only while the lease still names this holder and epoch. Correctness never rests on this
object's local view (`is_held`): every write re-checks the lease in Redis.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import time
from collections.abc import AsyncIterator

from redis import exceptions as redis_errors

from services.common import logs
from services.controller.state import keys, scripting

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

    @property
    def keys(self) -> tuple[str, str]:
        """The lease key and the epoch key (the first two keys of every guarded script)."""
        return keys.lease(self.swarm), keys.epoch(self.swarm)

    def is_held(self) -> bool:
        """This controller's local view: acquired and renewed within the last TTL."""
        return self.epoch is not None and time.monotonic() < self._valid_until

    async def acquire(self) -> bool:
        """Try once to take the lease; True when this controller now holds it (new epoch)."""
        started = time.monotonic()
        epoch = await self.scripts.acquire(*self.keys, self.holder, self.ttl_ms)
        if epoch is None:
            return False
        self.epoch = epoch
        self._valid_until = started + self.ttl_ms / 1000
        self.lost.clear()
        logs.event(log, "lease_acquired", swarm=self.swarm, holder=self.holder, epoch=epoch)
        return True

    async def renew(self) -> bool:
        """Extend the lease while it still names this holder and epoch; False once lost."""
        started = time.monotonic()
        try:
            await self.scripts.run(
                "lease_renew",
                holder=self.holder,
                epoch=self.epoch,
                keys=self.keys,
                args=[self.ttl_ms],
            )
        except scripting.LeaseLost:
            self._mark_lost()
            return False
        self._valid_until = started + self.ttl_ms / 1000
        return True

    async def release(self) -> None:
        """Give the lease up (on a clean stop) so a standby takes over at once."""
        with contextlib.suppress(scripting.LeaseLost):
            await self.scripts.run(
                "lease_release", holder=self.holder, epoch=self.epoch, keys=self.keys, args=[]
            )
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

    async def _renew_forever(self, stop: asyncio.Event) -> None:
        interval = self.ttl_ms / 3000
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), interval)
            if stop.is_set():
                return
            try:
                if not await self.renew():
                    return
            except (OSError, redis_errors.ConnectionError, redis_errors.TimeoutError) as exc:
                # Redis unreachable: keep trying; the local view expires on its own.
                logs.event(
                    log,
                    "lease_renew_failed",
                    logging.WARNING,
                    swarm=self.swarm,
                    exception=type(exc).__name__,
                )

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
                await asyncio.wait_for(asyncio.shield(task), self.ttl_ms / 1000)
            except TimeoutError:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
