"""The swarms this controller process serves: one `Recovery` per swarm, each under its own lease.

A controller runs every known swarm's recovery loop: it waits as a standby until it holds that
swarm's lease, then runs passes. Every replica serves reads; writes go through the swarm's
`Recovery`, which refuses them (UNAVAILABLE) on a replica that does not hold the lease.

Redis may be missing or restarting: that is a state, not a crash. The hub follows it with a
`RedisLink` (one JSON line per retry step, with a backoff); while Redis does not answer, calls
that need it answer UNAVAILABLE (`redis_unavailable`) and the hub is not ready. Swarms already
applied are found once Redis answers (`discovering`; also when the process started without it),
and each swarm's loop is supervised: a loop that ends for any reason but a stop is logged and
restarted.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from services.common import errors, logs, redis_link, settings, waiting
from services.controller import (
    authorizing,
    discovering,
    losses,
    metrics,
    pacing,
    recovering,
    relaying,
    replacing,
    sharing,
)
from services.controller.pods import runtime as pods
from services.controller.state import keys, leasing, reading, records, scripting

log = logging.getLogger("services.controller.hub")

RecoveryFactory = Callable[[str], recovering.Recovery]

LOOPS_STOP_S = 10.0
"""How long a stop waits for the swarms' loops to end on their own before cancelling them."""


class NotHolder(errors.Unavailable):
    """A write reached a replica that does not hold the swarm's lease: forwarded to the holder
    when it can be, else answered `not_leader` with where the holder answers."""

    def __init__(self, swarm: str, message: str | None = None) -> None:
        super().__init__(
            "not_leader", message or f"this controller does not hold the lease of swarm {swarm}"
        )
        self.swarm = swarm
        self.request: Any = None
        """What to forward when it is not the call's request (a client stream's messages)."""


class Hub:
    """Every swarm's `Recovery`, their loops, and who a caller is (`principals`).

    Args:
        client: Redis.
        runtime: Where workers run (shared by every swarm).
        grant_key: Signs grants and worker credentials.
        operator_token: The operator's token.
        worker_image: The current worker image: the checkpoint compatibility key.
        checkpoints: Where checkpoints are listed (None: no store configured).
        holder: This process's lease holder id.
        lease_ttl_ms: Each swarm lease's time to live.
        pass_interval_s: The longest wait between two passes.
        store_addr: The checkpoint-store address written into launch records.
        entry_point: The worker entry point put before each swarm's command.
        link: Whether Redis answers (one per process); the hub's own by default.
        redis_wait: How durable a write must be before a call is answered accepted.
        resync_rate: At most how many resyncs nobody asked for run a second, across every
            swarm (`pacing`).
        renewal_connect: Makes a Redis client for the lease renewals' own thread (the
            process gives it; see `leasing.Renewals`); None: renewals run on the loop.
    """

    def __init__(
        self,
        client: redis_link.Client,
        runtime: pods.PodRuntime,
        *,
        grant_key: str,
        operator_token: str,
        worker_image: str,
        checkpoints: replacing.CheckpointSource | None = None,
        holder: str | None = None,
        lease_ttl_ms: int = 10_000,
        pass_interval_s: float = 2.0,
        store_addr: str | None = None,
        entry_point: tuple[str, ...] = (),
        runtime_name: str = "local",
        link: redis_link.RedisLink | None = None,
        redis_wait: settings.RedisWait | None = None,
        resync_rate: float = pacing.RATE,
        renewal_connect: Callable[[], redis_link.Client] | None = None,
    ) -> None:
        self.client = client
        self.link = link or redis_link.RedisLink(client)
        self.runtime = runtime
        self.runtime_name = runtime_name
        self._grant_key = grant_key
        self._worker_image = worker_image
        self._checkpoints = checkpoints
        self.holder = holder or leasing.new_holder()
        self._lease_ttl_ms = lease_ttl_ms
        self._interval_s = pass_interval_s
        self._store_addr = store_addr
        self._entry_point = entry_point
        self._redis_wait = redis_wait
        # Shared by every swarm: one script registry, one round of lease renewals, one pace
        # for the resyncs nobody asked for (what keeps thousands of idle swarms cheap).
        self.scripts = scripting.Scripts(client)
        self.renewals = leasing.Renewals(self.scripts, lease_ttl_ms, connect=renewal_connect)
        self.pacer = pacing.Pacer(resync_rate)
        self.principals = authorizing.Principals(
            client, operator_token=operator_token, grant_key=grant_key
        )
        self._recoveries: dict[str, recovering.Recovery] = {}
        self._loops: dict[str, asyncio.Task[None]] = {}
        self._following = False
        self._stop = asyncio.Event()
        self._discovery = discovering.Discovery(
            client, runtime, self.link, self._stop, found=self._found
        )
        self._lock = asyncio.Lock()
        self.metrics = metrics.Metrics()
        self._loss_subscribers: list[Callable[[bool], Awaitable[None]]] = []
        self.link.subscribe(self._redis_changed)
        if isinstance(runtime, pods.Reachable):
            runtime.subscribe(self._runtime_changed)
        self.sharing = sharing.Sharing(
            client, self.holder, ttl_ms=lease_ttl_ms, link=self.link, on_swarms=self._found
        )
        self.relay = relaying.Relay(runtime, self.holder, lambda: self._recoveries)

    async def _redis_changed(self, available: bool) -> None:
        self.metrics.redis_available.set(1.0 if available else 0.0)

    async def _runtime_changed(self, available: bool) -> None:
        self.metrics.kubernetes_available.set(1.0 if available else 0.0)

    # Swarms.

    def _new(self, swarm: str) -> recovering.Recovery:
        recovery = recovering.Recovery(
            self.client,
            swarm,
            self.runtime,
            grant_key=self._grant_key,
            worker_image=self._worker_image,
            checkpoints=self._checkpoints,
            holder=self.holder,
            lease_ttl_ms=self._lease_ttl_ms,
            store_addr=self._store_addr,
            entry_point=self._entry_point,
            link=self.link,
            share=self.sharing,
            redis_wait=self._redis_wait,
            scripts=self.scripts,
            renewals=self.renewals,
            pacer=self.pacer,
        )
        recovery.on_loss = self._loss_changed
        return recovery

    def on_loss(self, subscriber: Callable[[bool], Awaitable[None]]) -> None:
        """Call `subscriber` (with whether any swarm's state is lost) whenever a swarm's
        recovery state is found lost or back: readiness and health change with it."""
        self._loss_subscribers.append(subscriber)

    async def _loss_changed(self) -> None:
        lost = self.lost_swarms()
        for subscriber in self._loss_subscribers:
            await subscriber(bool(lost))

    def lost_swarms(self) -> list[str]:
        """The swarms whose recovery state Redis lost (see `losses`), sorted."""
        return sorted(s for s, r in self._recoveries.items() if r.loss is not None)

    async def recovery(self, swarm: str, *, create: bool = False) -> recovering.Recovery:
        """The swarm's `Recovery`; its loop is started on first use.

        Raises:
            errors.NotFound: the swarm was never applied (and `create` is False).
        """
        if not keys.is_name(swarm):
            raise errors.Malformed("malformed", "the swarm name is not valid")
        async with self._lock:
            found = self._recoveries.get(swarm)
            if found is not None:
                return found
            if not create and not await reading.swarm_exists(self.client, swarm):
                # The name passed `is_name`: safe to repeat, and what the caller needs to see.
                raise errors.NotFound("swarm_not_found", f"no such swarm: {swarm}")
            recovery = self._new(swarm)
            self._recoveries[swarm] = recovery
            self._loops[swarm] = asyncio.create_task(
                self._supervise(recovery), name=f"recovery-{swarm}"
            )
            logs.event(log, "swarm_loop_started", swarm=swarm, holder=self.holder)
            return recovery

    async def _supervise(self, recovery: recovering.Recovery) -> None:
        """Run the swarm's loop until the hub stops; a loop that ends otherwise (it should
        not: it handles Redis outages and failures itself) is logged and started again."""
        backoff = redis_link.Backoff()
        while not self._stop.is_set():
            failure: str | None = None
            try:
                await recovery.run(
                    self._stop,
                    interval_s=self._interval_s,
                    on_pass=functools.partial(self.metrics.observe, recovery.swarm),
                )
            except Exception as exc:
                failure = type(exc).__name__
            if self._stop.is_set():
                return
            delay = backoff.next()
            logs.event(
                log,
                "swarm_loop_ended",
                logging.ERROR,
                swarm=recovery.swarm,
                holder=self.holder,
                exception=failure,
                restart_in_s=delay,
            )
            await redis_link.wait(self._stop, delay)

    async def start(self) -> None:
        """Follow Redis and start the loop of every swarm already applied.

        Waits for Redis no longer than its first ping's answer: when it does not answer, the
        swarms are found once it does (meanwhile the process serves, not ready, and calls
        answer UNAVAILABLE)."""
        if not self._following:
            self._following = True
            await self.link.start()
            await self.sharing.start()
            self.relay.start()
        await self._discovery.start()

    async def _found(self, swarms: Iterable[str]) -> None:
        """Start the loop of every swarm not known here yet (applied on another replica, or
        one whose workers run): the names come from the swarm index or the runtime, so they
        are not looked up again."""
        for swarm in swarms:
            if swarm not in self._recoveries and keys.is_name(swarm):
                await self.recovery(swarm, create=True)

    async def stop(self) -> None:
        """Stop every loop and release the leases this process holds."""
        self._stop.set()
        await self._discovery.stop()
        loops = list(self._loops.values())
        if loops:
            # Each loop ends at `_stop` once its pass is over. Not `await loop` under a
            # timeout: that would forward the timeout's cancellation to the loop and wait for
            # it to end, for ever if the loop lost it (see `waiting.cancel`).
            await asyncio.wait(loops, timeout=LOOPS_STOP_S)
        await waiting.cancel(loops)
        await self.renewals.close()
        if self._following:
            self._following = False
            await self.relay.stop()
            await self.sharing.stop()
            await self.link.stop()

    @property
    def recoveries(self) -> dict[str, recovering.Recovery]:
        """The swarms this process serves (a copy)."""
        return dict(self._recoveries)

    async def render_metrics(self) -> bytes:
        """The Prometheus exposition, with Redis-backed figures read now (the last ones read
        while Redis does not answer: the process's own counters are served all the same)."""
        try:
            self.metrics.leases(self.renewals)
            if self.link.available is not False:
                await self.metrics.refresh(self.client, self.recoveries)
        except Exception as exc:
            if not redis_link.unreachable(exc):
                raise
            self.link.suspect()
        return self.metrics.render()

    def runtime_down(self) -> bool:
        """Whether the runtime's backend (the Kubernetes API) is known not to answer: no
        recovery can be done then, though decisions and reports are still recorded."""
        return isinstance(self.runtime, pods.Reachable) and self.runtime.api_available is False

    def serving(self) -> bool:
        """What gRPC health reports: Redis answers, the runtime's backend is not down and no
        swarm's recovery state is lost."""
        return (
            self.link.available is not False and not self.runtime_down() and not self.lost_swarms()
        )

    def holds_lease(self, swarm: str) -> bool:
        recovery = self._recoveries.get(swarm)
        return recovery is not None and recovery.lease.is_held()

    def ready(self) -> bool:
        """Ready (for /readyz) when this replica serves: Redis answers and it has joined its
        peers. Holding leases is not asked: every replica answers every call, forwarding a
        write to the replica that holds the swarm's lease."""
        return self.not_ready() is None

    def not_ready(self) -> errors.Unavailable | None:
        """Why this replica is not ready (`redis_unavailable`, `kubernetes_unavailable`,
        `state_lost`, `starting`), or None."""
        if self.link.available is False:
            return redis_link.unavailable()
        if self.runtime_down():
            return errors.Unavailable(
                "kubernetes_unavailable",
                "the Kubernetes API does not answer: no worker can be listed, replaced or"
                " removed; try again later",
            )
        if lost := self.lost_swarms():
            return errors.Unavailable(
                losses.REASON,
                f"the recovery state of swarm {', '.join(lost)} was lost (Redis came back"
                " without it or older): its failures are not recovered until it is back;"
                " see the controller's state_lost line and `agentihooks swarm SWARM status`",
            )
        if self.sharing.running and not self.sharing.joined.is_set():
            return errors.Unavailable("starting", "the controller has not joined its peers yet")
        return None

    async def holder_elsewhere(self, swarm: str) -> sharing.Peer | None:
        """Where another live replica that holds `swarm`'s lease answers; None when this one
        holds it, nobody does, or the holder advertised no address."""
        if self.holds_lease(swarm):
            return None
        holder, peer = await self.sharing.holder_of(swarm)
        if holder is None or holder == self.holder:
            return None
        return peer

    async def wait_until_leader(self, swarm: str, timeout: float = 10.0) -> None:
        """Wait until this process holds `swarm`'s lease (used after applying a new swarm)."""
        recovery = await self.recovery(swarm, create=True)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while not recovery.lease.is_held():
            if loop.time() > deadline:
                raise errors.Unavailable("not_leader", "this controller does not hold the lease")
            await asyncio.sleep(0.02)

    # Callers.

    async def principal(self, token: str | None, swarm: str | None) -> records.Principal:
        """Who holds `token` (see `authorizing.Principals.resolve`); a call resolves its
        credential once through `principals.caller`."""
        return await self.principals.resolve(token, swarm)
