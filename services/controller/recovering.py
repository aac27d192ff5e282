"""The controller core of one swarm: the seat queue it recovers with, and the calls it serves.

Recovery is fence → release → decide → replace → hold, seat by seat, under the swarm's lease
(`reconciling`: one level-based reconcile per seat). Seats are worked from one queue
(`working`, in the shape of client-go's workqueue): the runtime's watch, the resync and decision
calls only bring seats to it; one worker works a seat at a time, a seat brought while queued is
queued once, and a seat brought while it is worked is worked again after. `Recovery.reconcile`
is one pass: a resync (`resyncing`: the runtime listed, the recorded state read) that brings
every seat with work, then waits for that work. The loop that holds the lease, keeps the queue
running and feeds it from the watch is `holding`.

Each step is idempotent and recorded, so a controller killed between any two writes and
restarted finishes the work without doing any of it twice. A controller that lost its lease
changes nothing: its work stops at the first refused write.

What a seat's reconcile does about refused restores and attempts missing from the list is in
`reconciling`; about offers under a new worker image, in `offering`. The switches and the calls
that pass straight through to one module are in `calls` (a base of `Recovery`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Iterable

from services.common import errors, logs, redis_link, settings
from services.controller import (
    acknowledging,
    calls,
    decisions,
    holding,
    losing,
    losses,
    observations,
    offering,
    pacing,
    reconciling,
    replacing,
    resyncing,
    sessions,
    sharing,
    working,
)
from services.controller.pods import runtime as pods
from services.controller.state import (
    codec,
    durable,
    keys,
    leasing,
    records,
    scripting,
    swarm_status,
    writing,
)

log = logging.getLogger("services.controller.recovery")

CONCURRENT_SEATS = 32
"""How many seats are worked on at once."""

CLAIMED_SEATS = 4 * CONCURRENT_SEATS
"""How many seats the workers take from the queue at most (read together, worked as they can)."""

MISSING_PASSES = reconciling.MISSING_PASSES

PassReport = observations.PassReport


class Recovery(calls.Calls):
    """The controller core of one swarm: its seat queue, passes, decisions, outcomes and status.

    Args:
        client: Redis.
        swarm: The swarm this controller recovers.
        runtime: Where the swarm's workers run.
        grant_key: The key grants and worker credentials are signed with.
        worker_image: The current worker image: the checkpoint compatibility key.
        checkpoints: Where checkpoints are listed; None: no store is configured.
        holder: This controller's lease holder id (fresh per process start by default).
        lease_ttl_ms: The lease's time to live.
        store_addr: The checkpoint-store address for launch records.
        entry_point: Put before the swarm's command when launching.
        scripts: A shared script runner (tests pass one with a crash hook).
        clock: Seconds since the epoch.
        link: Whether Redis answers (shared by a process's swarms); its own by default.
        share: Which swarm leases this replica may take or keep, when controllers share the
            swarms (`sharing.Sharing`); None: it takes every lease it can.
        redis_wait: How durable a write must be before a call is answered accepted (see
            `acknowledging`); by default nothing is waited for.
        renewals: Who renews the lease (a process renews all its swarms' leases together);
            its own by default.
        pacer: What spaces the resyncs nobody asked for across a process's swarms
            (`pacing`); None: every `interval_s`.
    """

    def __init__(
        self,
        client: redis_link.Client,
        swarm: str,
        runtime: pods.PodRuntime,
        *,
        grant_key: str,
        worker_image: str,
        checkpoints: replacing.CheckpointSource | None = None,
        holder: str | None = None,
        lease_ttl_ms: int = 10_000,
        store_addr: str | None = None,
        entry_point: tuple[str, ...] = (),
        scripts: scripting.Scripts | None = None,
        clock: writing.Clock = time.time,
        link: redis_link.RedisLink | None = None,
        share: sharing.Sharing | None = None,
        redis_wait: settings.RedisWait | None = None,
        renewals: leasing.Renewals | None = None,
        pacer: pacing.Pacer | None = None,
    ) -> None:
        self.client = client
        self.durability = durable.Durability(client, redis_wait or settings.RedisWait())
        self.link = link or redis_link.RedisLink(client)
        self.share = share
        # Set when the runtime's backend (the Kubernetes API) answers again after it did not:
        # a pass that failed on it waits for this rather than for its whole backoff.
        self.runtime_back = asyncio.Event()
        if isinstance(runtime, pods.Reachable):
            runtime.subscribe(self._runtime_changed)
        self.swarm = swarm
        self.runtime = runtime
        self.scripts = scripts or scripting.Scripts(client)
        # Worked out now rather than on the first failure's path: the scripts' layouts and the
        # records' readers (once per process; a later swarm finds them done).
        scripting.prepare()
        codec.prepare()
        self.lease = leasing.Lease(
            self.scripts,
            swarm,
            holder or leasing.new_holder(),
            ttl_ms=lease_ttl_ms,
            renewals=renewals,
        )
        self.pacer = pacer
        self.writer = writing.Writer(self.lease, clock=clock)
        self.ctx = replacing.Context(
            client=client,
            writer=self.writer,
            runtime=runtime,
            checkpoints=checkpoints or replacing.NoCheckpoints(),
            grant_key=grant_key,
            worker_image=worker_image,
            store_addr=store_addr,
            entry_point=entry_point,
        )
        self.reconciler = reconciling.Reconciler(self.ctx, self.lease)
        self.seats = sessions.Seats(self._session, stop_s=holding.HELPER_STOP_S)
        self.loss: losses.Loss | None = None
        """What Redis lost of the swarm's state, while it is lost (`losing`)."""
        self.on_loss: Callable[[], Awaitable[None]] | None = None
        """Called when `loss` is set or cleared (the hub: readiness, health)."""

    @property
    def events_written(self) -> int:
        """How many telemetry events this process wrote to the swarm's stream (the Kubernetes
        Events relay reads it only when this moved)."""
        return self.writer.events_written

    def _session(self) -> working.Session:
        return working.Session(
            self.client,
            self.swarm,
            self.reconciler.seat,
            concurrency=CONCURRENT_SEATS,
            claim=CLAIMED_SEATS,
        )

    def _runtime_changed(self, available: bool) -> None:
        if available:
            self.runtime_back.set()

    # Passes.

    async def reconcile(self) -> PassReport:
        """One recovery pass: resync (the runtime listed, the recorded state read), bring every
        seat with work to the queue, and wait for the seats nobody else was waiting for.

        Returns:
            What the pass did; `lease_lost` when it stopped because the lease was lost (then
            it wrote nothing after the loss), `standby` when this controller holds no lease.
        """
        started = time.monotonic()
        report = PassReport()
        if not self.lease.is_held():
            report.standby = True
            await losing.let_go(self)
            return report
        try:
            async with self.seats.using() as session:
                seen = await resyncing.resync(self.ctx, self.lease.scripts, session.known())
                if self.loss is not None:
                    await losing.recovered(self)
                await working.collect(session.bring(seen, working.Wait.NEW), report)
        except scripting.LeaseLost:
            report.lease_lost = True
        except losses.StateLost as found:
            await losing.handle(self, found)
        if report.lease_lost:
            logs.event(
                log,
                "pass_stopped",
                logging.WARNING,
                swarm=self.swarm,
                reason="lease_lost",
                holder=self.lease.holder,
            )
        report.seconds = time.monotonic() - started
        return report

    async def recover_failed(self, attempts: Iterable[pods.Attempt]) -> PassReport:
        """What the watch does with attempts it saw fail: bring their seats to the queue (each
        fenced from the event, nothing listed), here also waiting for that work.

        What this misses (a write that failed, a seat whose attempt was already superseded)
        the next resync finds, as it would without a watch.
        """
        started = time.monotonic()
        report = PassReport(watched=True)
        if not self.lease.is_held():
            report.standby = True
            return report
        try:
            async with self.seats.using() as session:
                seen = observations.failures(self.swarm, attempts, watched=True)
                await working.collect(session.bring(seen, working.Wait.NEW), report)
        except scripting.LeaseLost:
            report.lease_lost = True
        report.seconds = time.monotonic() - started
        return report

    async def recover_seat(
        self, name: str, admitted: observations.Admitted | None = None
    ) -> PassReport:
        """Bring one seat to the queue and wait for its next work (after a decision call: its
        replacement launched, from `admitted` when the call admitted it now); nothing when
        this controller holds no lease (its holder's queue finds the seat)."""
        report = PassReport()
        if not self.lease.is_held():
            report.standby = True
            return report
        async with self.seats.using() as session:
            seen = observations.Seen(admitted=admitted)
            await working.collect(session.bring({name: seen}, working.Wait.NEXT), report)
        return report

    async def run(
        self,
        stop: asyncio.Event,
        *,
        interval_s: float = 2.0,
        on_pass: holding.OnPass | None = None,
    ) -> None:
        """Wait for the lease as a standby, then recover while holding it, until `stop` is set
        (see `holding`). Passes run when the runtime's watch asks for one and at least every
        `interval_s`; seats the watch saw fail are worked at once. `on_pass` sees each pass's
        report, and the report of work no pass waited for (metrics)."""
        await holding.run(self, stop, interval_s, on_pass)

    # Calls the API layer makes that work through the seat queue or the reconciler (the
    # switches and the calls that pass straight through to one module are `calls.Calls`).

    async def restore_decision(
        self,
        execution_or_seat: str,
        choice: records.Choice,
        agent: str | None,
        caller: records.Principal,
    ) -> decisions.Result:
        """Choose resume or fresh now (see `decisions.restore_decision`); returns once the
        decision is durable (`acknowledging`), a repeated one too."""
        result = await decisions.restore_decision(
            self.ctx, execution_or_seat, choice, agent, caller
        )
        seat = keys.seat_of(result.decision.execution_id)
        if seat is not None:
            # The replacement is launched by the seat's worker, before the caller is answered
            # (from what the accept script returned, when accepted now).
            await self.recover_seat(seat, result.admitted)
        await acknowledging.decided(self.durability, self.swarm, result.decision)
        return result

    async def current_offer(self, fence: records.Fence) -> records.Offer | None:
        """The offer of a fenced attempt under the controller's current compatibility key: what
        `resume` would pick now (the same listing `decisions.choose` reads)."""
        return await offering.current_offer(self.ctx, fence)

    async def _card_offer(self, fence: records.Fence) -> records.Offer | None:
        """`current_offer` for a card whose recorded offer is not current. A read must not fail
        on the checkpoint store: when it cannot be listed the card offers nothing (only fresh),
        never more than resume would deliver."""
        try:
            return await self.current_offer(fence)
        except Exception as exc:
            logs.event(
                log,
                "card_offer_unavailable",
                logging.WARNING,
                swarm=self.swarm,
                execution_id=fence.execution_id,
                exception=type(exc).__name__,
            )
            return None

    async def status(self) -> swarm_status.SwarmStatus:
        """Tasks, seats, handoff cards, pause state and counters (a read: no lease needed).

        Each card's offer is the one under this controller's current compatibility key: the
        recorded offer when it was worked out under that key, else worked out again now.

        Raises:
            errors.Unavailable: `state_lost` while Redis lost the swarm's state (`losing`).
        """
        await losing.refuse_if_lost(self)
        return await swarm_status.status(
            self.client, self.swarm, self.ctx.worker_image, reoffer=self._card_offer
        )


def refusal_of(exc: BaseException) -> errors.Refusal | None:
    """The refusal a core call raised, the one place that says it for the controller's API
    layers: a refusal as it is, LeaseLost as `Unavailable` (a standby writes nothing and
    answers UNAVAILABLE) and an unreachable Redis as `Unavailable` (`redis_unavailable`);
    None for anything else (a fault: 500 / INTERNAL)."""
    if isinstance(exc, scripting.LeaseLost):
        return errors.Unavailable("not_leader", "this controller does not hold the lease")
    if isinstance(exc, errors.Refusal):
        return exc
    return redis_link.unavailable() if redis_link.unreachable(exc) else None
