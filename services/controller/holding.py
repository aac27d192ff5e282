"""The swarm's loop: wait for the lease as a standby, then, while holding it, keep the seat
queue running, feed it from the runtime's watch and resync every interval.

While the lease is held one `working.Session` runs the seat queue. The watch only brings
seats: an attempt whose own worker status shows a failure brings its seat at once (fenced from
the event, nothing listed); everything else the watch sees (a Pod deleted from under the
runtime, a node going NotReady, an image pull's grace running out) asks for a resync. A resync
(`Recovery.reconcile`) runs when asked and at least every interval.

Nothing ends the loop but `stop`. When Redis stops answering (a pass, a seat's work, the lease
renewer or the link's own ping sees it) the loop logs one line (`swarm_loop_interrupted`),
waits with a backoff until Redis answers again, acquires the lease again (the same epoch when it
survived, a new one when it expired) and goes on: every write is an idempotent script under the
lease, so the work that follows finishes what the interrupted work started, once. A pass that
fails otherwise is logged (`pass_failed`) and tried again after a backoff, under the same lease;
anything else that goes wrong is logged (`swarm_loop_failed`) and retried like an interruption.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from services.common import logs, redis_link, waiting
from services.controller import losing, observations, pacing, working
from services.controller.pods import runtime as pods
from services.controller.state import scripting

if TYPE_CHECKING:
    from services.controller import recovering

log = logging.getLogger("services.controller.recovery")

HELPER_STOP_S = 10.0
"""How long stopping waits for the watch and the seats being worked to end."""

RESYNC_GAP_S = 0.5
"""While the seat queue has work, the shortest time between a resync and the next."""

OnPass = Callable[[observations.PassReport], None]


class Interrupted(Exception):
    """The holder stopped because Redis stopped answering (seen by a worker or the link)."""

    def __init__(self, cause: str) -> None:
        super().__init__(cause)
        self.cause = cause


async def run(
    recovery: recovering.Recovery,
    stop: asyncio.Event,
    interval_s: float,
    on_pass: OnPass | None,
) -> None:
    """`Recovery.run`: the loop, until `stop` is set."""
    backoff = redis_link.Backoff()
    await recovery.link.start()
    try:
        while not stop.is_set():
            try:
                if await _hold(recovery, stop, interval_s, on_pass):
                    backoff.reset()
                continue
            except Exception as exc:
                failure: BaseException = exc
            delay = backoff.next()
            unreachable = isinstance(failure, Interrupted) or redis_link.unreachable(failure)
            if unreachable:
                recovery.link.suspect()
            logs.event(
                log,
                "swarm_loop_interrupted" if unreachable else "swarm_loop_failed",
                logging.WARNING if unreachable else logging.ERROR,
                swarm=recovery.swarm,
                holder=recovery.lease.holder,
                exception=(
                    failure.cause if isinstance(failure, Interrupted) else type(failure).__name__
                ),
                retry_in_s=delay,
                **({"variable": redis_link.VARIABLE} if unreachable else {}),
            )
            if await redis_link.wait(stop, delay):
                break
            if unreachable and not await recovery.link.wait_up(stop):
                break
    finally:
        await _release(recovery)
        await recovery.link.stop()


async def _release(recovery: recovering.Recovery) -> None:
    """Give the lease up on a clean stop; with Redis unreachable it expires on its own."""
    try:
        await recovery.lease.release()
    except Exception as exc:
        recovery.lease.forget()
        logs.event(
            log,
            "lease_release_failed",
            logging.WARNING,
            swarm=recovery.swarm,
            holder=recovery.lease.holder,
            exception=type(exc).__name__,
        )


async def _hold(
    recovery: recovering.Recovery, stop: asyncio.Event, interval_s: float, on_pass: OnPass | None
) -> bool:
    """Acquire the lease (or wait a while as a standby) and work while holding it.

    Returns True when it ended after at least one finished pass or as a standby (nothing went
    wrong), False when the lease was lost before. Raises what interrupted it: a Redis error, or
    `Interrupted` when the renewer, a worker or the link saw Redis go.
    """
    lease, link, share, swarm = recovery.lease, recovery.link, recovery.share, recovery.swarm
    if link.down.is_set():
        raise Interrupted("redis_unavailable")
    shared: tuple[asyncio.Event, ...] = ()
    if share is not None:
        shared = (share.wake(swarm),)
        shared[0].clear()
    if (share is not None and not share.may_take(swarm)) or not await lease.acquire():
        # A standby: woken by a heartbeat (the share may have changed), else polled. A loss
        # it found while it held the lease is the new holder's to say now.
        await losing.let_go(recovery)
        await waiting.first((stop, link.down, *shared), lease.ttl_ms / 3000)
        return True
    relist = asyncio.Event()
    passed = handing_back = runtime_down = False
    retries = redis_link.Backoff()
    try:
        # Renewed from the moment it is held, and through the seats' stop (their work still
        # writes under it): the renewals' round must never wait for this swarm's start.
        async with lease.renewing(), recovery.seats.holding(on_pass) as session:
            watch = asyncio.create_task(
                _follow(recovery, session, relist, stop), name=f"recovery-watch-{swarm}"
            )
            try:
                if recovery.pacer is not None:
                    # The first resync waits for its turn too: a controller taking
                    # thousands of swarms at once must not saturate itself (the watch
                    # brings failures meanwhile).
                    await waiting.first(
                        (session.halted, stop, lease.lost, lease.interrupted, link.down,
                         *shared),
                        recovery.pacer.delay(),
                    )  # fmt: skip
                while not stop.is_set() and not lease.lost.is_set():
                    _check_interrupted(recovery, session)
                    if session.failure is not None:
                        # A seat's write found the lease lost (between passes).
                        logs.event(
                            log,
                            "pass_stopped",
                            logging.WARNING,
                            swarm=swarm,
                            reason="lease_lost",
                            holder=lease.holder,
                        )
                        break
                    if share is not None and not share.may_keep(swarm):
                        handing_back = True
                        break
                    for event in (relist, *shared):
                        event.clear()
                    wakes = (
                        session.halted,
                        stop,
                        lease.lost,
                        lease.interrupted,
                        link.down,
                        *shared,
                    )
                    try:
                        report = await recovery.reconcile()
                    except pods.PodsUnavailable as exc:
                        # The Kubernetes API does not answer: the runtime logs one line per
                        # step of its own backoff; the pass is tried again when it answers.
                        delay = retries.next()
                        if not runtime_down:
                            runtime_down = True
                            logs.event(
                                log,
                                "swarm_loop_interrupted",
                                logging.WARNING,
                                swarm=swarm,
                                holder=lease.holder,
                                dependency="kubernetes",
                                exception=type(exc).__name__,
                                retry_in_s=delay,
                            )
                        recovery.runtime_back.clear()
                        await waiting.first((*wakes, recovery.runtime_back), delay)
                        continue
                    except Exception as exc:
                        if redis_link.unreachable(exc):
                            raise
                        # Not Redis (the runtime's list, a surprise): the lease is kept and
                        # the pass is tried again after a backoff, the watch's cue aside.
                        delay = retries.next()
                        logs.event(
                            log,
                            "pass_failed",
                            logging.ERROR,
                            swarm=swarm,
                            exception=type(exc).__name__,
                            retry_in_s=delay,
                        )
                        await waiting.first(wakes, delay)
                        continue
                    retries.reset()
                    if runtime_down:
                        runtime_down = False
                        logs.event(log, "swarm_loop_resumed", swarm=swarm, dependency="kubernetes")
                    if on_pass is not None:
                        on_pass(report)
                    if report.lease_lost:
                        break
                    passed = True
                    await _between_passes(session, relist, wakes, interval_s, recovery.pacer)
            finally:
                stuck = await waiting.cancel([watch], timeout=HELPER_STOP_S)
                if stuck:
                    logs.event(
                        log,
                        "helper_stop_timeout",
                        logging.WARNING,
                        swarm=swarm,
                        helper=watch.get_name(),
                    )
                elif not watch.cancelled():
                    watch.exception()  # retrieved: the watch logs its own failures
    except BaseException:
        # Interrupted: whatever the lease's local view says, this holder works no more under
        # it until it acquired it again.
        lease.forget()
        raise
    if handing_back:
        # Another live replica should hold this swarm (this one holds more than its share):
        # released once nothing of this holder's runs, so the new owner takes it at once.
        await lease.release()
        logs.event(log, "lease_handed_back", swarm=swarm, holder=lease.holder)
    return passed or handing_back


async def _between_passes(
    session: working.Session,
    relist: asyncio.Event,
    wakes: tuple[asyncio.Event, ...],
    interval_s: float,
    pacer: pacing.Pacer | None,
) -> None:
    """Wait for the next resync: asked for by the watch, at the latest after `interval_s`,
    and, when nobody asked, at the swarm's turn among the process's swarms (`pacing`: taken
    with the interval, so an idle swarm waits once).

    While the queue has work, a resync would mostly read again what the queue is on (it reads
    every attention seat the queue does not hold: in a storm, each seat already replaced and
    awaiting its report). So what asks for one in the first `RESYNC_GAP_S` waits for the gap
    and is coalesced (a storm's relists come by the dozen), and the periodic resync, which no
    one asked for, waits for the queue to run dry, at most one more interval."""
    loop = asyncio.get_running_loop()
    started = loop.time()
    if not session.busy:
        wait_s = interval_s if pacer is None else pacer.delay(after=interval_s)
        await waiting.first((relist, *wakes), wait_s)
    else:
        await waiting.first(wakes, min(RESYNC_GAP_S, interval_s))
        await waiting.first((relist, *wakes), max(0.0, interval_s - (loop.time() - started)))
        if not relist.is_set():
            await waiting.first((relist, session.queue.idle_event, *wakes), interval_s)
        if pacer is not None and not _woken(relist, wakes):
            await waiting.first((relist, *wakes), pacer.delay())
    if pacer is not None and relist.is_set() and not any(event.is_set() for event in wakes):
        # Asked for: at once, unless thousands of swarms were asked together.
        await waiting.first(wakes, pacer.asked())


def _woken(relist: asyncio.Event, wakes: tuple[asyncio.Event, ...]) -> bool:
    return relist.is_set() or any(event.is_set() for event in wakes)


def _check_interrupted(recovery: recovering.Recovery, session: working.Session) -> None:
    failure = session.failure
    if failure is not None and not isinstance(failure, scripting.LeaseLost):
        raise Interrupted(type(failure).__name__)
    if recovery.lease.interrupted.is_set() or recovery.link.down.is_set():
        raise Interrupted("redis_unavailable")


async def _follow(
    recovery: recovering.Recovery,
    session: working.Session,
    relist: asyncio.Event,
    stop: asyncio.Event,
) -> None:
    """Follow the runtime's watch: a failure brings its seat, anything else asks for a resync.
    When the watch fails or ends, log it and follow it again after a backoff (a resync is asked
    for first: what happened meanwhile was not seen). A watch that fails only costs
    promptness: resyncs still run every interval."""
    backoff = redis_link.Backoff()
    while not stop.is_set() and session.failure is None:
        failure: str | None = None
        try:
            async for change in recovery.runtime.watch(recovery.swarm):
                if change.relist:
                    relist.set()
                # While the swarm's state is lost, a failure is left to the resync that finds
                # the state back: a fence now would be refused by what Redis does not hold.
                if change.failed and session.failure is None and recovery.loss is None:
                    session.bring(
                        observations.failures(recovery.swarm, change.failed, watched=True)
                    )
                backoff.reset()
        except Exception as exc:
            failure = type(exc).__name__
        if stop.is_set() or session.failure is not None:
            return
        delay = backoff.next()
        logs.event(
            log,
            "watch_failed" if failure else "watch_ended",
            logging.WARNING,
            swarm=recovery.swarm,
            exception=failure,
            retry_in_s=delay,
        )
        await asyncio.sleep(delay)
        relist.set()
