"""The seat queue in the controller's loop, on real Redis (issue 22: the watch, the resync and
decision calls only bring seats to one queue; "come back later" is a requeue; a seat touched
while being worked is worked again after, unless nothing new was seen)."""

from __future__ import annotations

import asyncio
import collections
from typing import Any

import redis.asyncio as aioredis

from services.controller.pods import runtime as pods
from services.controller.state import keys, reading, records
from tests.integration.controller import harness as h
from tests.integration.controller.harness import SWARM, first, second
from tests.support import ports


class Counted:
    """Wraps the reconcile: counts each seat's works and can hold one seat's work."""

    def __init__(self, reconcile: Any) -> None:
        self._reconcile = reconcile
        self.worked: collections.Counter[str] = collections.Counter()
        self.hold: dict[str, asyncio.Event] = {}
        self.entered: collections.defaultdict[str, asyncio.Event] = collections.defaultdict(
            asyncio.Event
        )

    async def __call__(self, name: str, *rest: Any) -> None:
        self.worked[name] += 1
        self.entered[name].set()
        if name in self.hold:
            await self.hold[name].wait()
        await self._reconcile(name, *rest)


async def looping(
    client: aioredis.Redis, *, legacy: bool = True, interval_s: float = 600.0
) -> tuple[h.Harness, h.WatchedRuntime, Counted, asyncio.Event, asyncio.Task[None], list[Any]]:
    """A swarm applied, then its loop running on a fed watch: resyncs only when the watch
    asks (or every `interval_s`). Returns the parts and the reports the loop saw."""
    hx = await h.start(client, legacy=legacy)
    await hx.recovery.reconcile()  # settled
    runtime = h.WatchedRuntime()
    runtime.attempts, runtime.specs = hx.runtime.attempts, hx.runtime.specs
    await hx.recovery.lease.release()
    hx.runtime = runtime
    hx.recovery = h.new_recovery(client, runtime, hx.checkpoints)
    counted = Counted(hx.recovery.reconciler.seat)
    hx.recovery.reconciler.seat = counted  # type: ignore[method-assign]
    stop, reports = asyncio.Event(), []
    loop = asyncio.create_task(hx.recovery.run(stop, interval_s=interval_s, on_pass=reports.append))

    async def holding() -> None:
        assert hx.recovery.lease.is_held() and hx.recovery.seats.session is not None

    await ports.eventually(holding)
    return hx, runtime, counted, stop, loop, reports


async def test_a_failed_step_brings_its_seat_back_after_its_backoff(
    redis_client: aioredis.Redis,
) -> None:
    """A step that fails (the runtime refuses the launch for a while) does not wait for the
    next resync: the seat comes back after its own backoff and its replacement is launched
    then; that work is reported as work no pass waited for, not as a pass."""
    _, runtime, counted, stop, loop, reports = await looping(redis_client)
    try:
        runtime.fail_launch = True
        runtime.fail(first("eng-1"))
        runtime.changes.put_nowait(pods.Change(failed=(runtime.attempts[first("eng-1")],)))

        async def refused() -> None:
            assert runtime.launch_calls.count(second("eng-1")) >= 1

        await ports.eventually(refused)
        passes = sum(1 for r in reports if not (r.watched or r.queued))
        runtime.fail_launch = False

        async def launched() -> None:
            found = await reading.execution(redis_client, SWARM, second("eng-1"))
            assert found is not None and found.launched

        await ports.eventually(launched, timeout=10)
        assert sum(1 for r in reports if not (r.watched or r.queued)) == passes  # no resync
        assert any(r.watched and r.errors == ["eng-1"] for r in reports), reports
        assert any((r.watched or r.queued) and r.launched == [second("eng-1")] for r in reports), (
            reports
        )
        assert counted.worked["eng-1"] >= 2
    finally:
        stop.set()
        await loop


async def test_a_resync_that_sees_nothing_new_leaves_a_seat_being_worked_to_its_worker(
    redis_client: aioredis.Redis,
) -> None:
    """While the watch's failure of eng-1 is being worked on, a resync lists the same failure:
    the seat is not queued again (worked once); a failure the list shows of another seat is
    brought and worked (once)."""
    hx, runtime, counted, stop, loop, _ = await looping(redis_client)
    try:
        gate = counted.hold["eng-1"] = asyncio.Event()
        runtime.fail(first("eng-1"))
        runtime.changes.put_nowait(pods.Change(failed=(runtime.attempts[first("eng-1")],)))
        await asyncio.wait_for(counted.entered["eng-1"].wait(), 5)
        runtime.fail(first("eng-2"))
        report = await hx.recovery.reconcile()  # a pass beside the loop's, as a resync
        assert report.fenced == [first("eng-2")] and report.launched == [second("eng-2")]
        gate.set()

        async def replaced() -> None:
            found = await reading.execution(redis_client, SWARM, second("eng-1"))
            assert found is not None and found.launched

        await ports.eventually(replaced)
        session = hx.recovery.seats.session
        assert session is not None
        await asyncio.wait_for(session.queue.idle(), 5)
        assert counted.worked["eng-1"] == 1 and counted.worked["eng-2"] == 1, counted.worked
        assert runtime.launch_calls.count(second("eng-1")) == 1
    finally:
        stop.set()
        await loop


async def test_a_decision_call_is_answered_once_the_seats_worker_launched_its_replacement(
    redis_client: aioredis.Redis,
) -> None:
    """Spec, "Choosing resume or fresh": a decision admits one replacement. With the loop
    running, the call accepts under the lease and brings the seat to the queue; its worker
    launches the replacement before the call is answered, and the seat is worked by that
    worker alone."""
    hx, runtime, counted, stop, loop, _ = await looping(redis_client, legacy=False)
    try:
        runtime.fail(first("eng-1"))
        runtime.changes.put_nowait(pods.Change(failed=(runtime.attempts[first("eng-1")],)))

        async def waiting() -> None:
            seat = await reading.seat(redis_client, SWARM, "eng-1")
            assert seat is not None and seat.state is records.SeatState.AWAITING_DECISION

        await ports.eventually(waiting)
        before = counted.worked["eng-1"]
        result = await hx.recovery.restore_decision(
            "eng-1", records.Choice.FRESH, None, records.Operator()
        )
        assert result.decision.replacement_execution_id == second("eng-1")
        assert runtime.launch_calls.count(second("eng-1")) == 1
        assert counted.worked["eng-1"] == before + 1
        assert not await redis_client.exists(
            keys.execution(SWARM, keys.execution_id(SWARM, "eng-1", 3))
        )
    finally:
        stop.set()
        await loop
