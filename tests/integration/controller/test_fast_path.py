"""The watch's path (`Recovery.recover_failed`: the seats of attempts the watch saw fail, brought
to the seat queue) on real Redis: the steps of a listing pass for those seats, without a list,
and safe beside a listing pass (one worker per seat; a seat queued is queued once)."""

from __future__ import annotations

import asyncio
import collections
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import redis.asyncio as aioredis

from services.controller.pods import classifying
from services.controller.pods import runtime as pods
from services.controller.state import keys, reading, records
from tests.integration.controller import harness as h
from tests.integration.controller.harness import SWARM, first, second
from tests.support import ports

OOM = classifying.FailureReason.OOM_KILLED


class Lists(h.FakeRuntime):
    """The fake runtime, counting list calls; a list can be held open to let a fast path
    overtake it."""

    def __init__(self) -> None:
        super().__init__()
        self.lists = 0
        self.hold: asyncio.Event | None = None
        self.listed = asyncio.Event()

        # When set, a launch waits for it (after announcing itself in `launching`).
        self.launch_hold: asyncio.Event | None = None
        self.launching: collections.defaultdict[str, asyncio.Event] = collections.defaultdict(
            asyncio.Event
        )

    async def launch(self, spec: pods.LaunchSpec) -> None:
        self.launching[spec.execution_id].set()
        if self.launch_hold is not None:
            await self.launch_hold.wait()
        await super().launch(spec)

    async def list_attempts(self, swarm: str) -> list[pods.Attempt]:
        self.lists += 1
        listing = await super().list_attempts(swarm)
        self.listed.set()
        if self.hold is not None:
            await self.hold.wait()
        return listing


class Tally:
    def __init__(self) -> None:
        self.writes: collections.Counter[str] = collections.Counter()

    def __call__(self, name: str, reply: Any) -> None:
        if reply.get("status") in ("fenced", "accepted", "launched"):
            self.writes[str(reply["status"])] += 1
        # Releases a write recorded: the release script's, the fence's (authority) and the
        # replacement's launch (the lost attempt's Pod).
        if (name, reply.get("status")) in (
            ("release", "released"),
            ("fence", "fenced"),
        ) or name == "launched":
            for kind in filter(None, str(reply.get("kind", "")).split(",")):
                self.writes[f"release:{kind}"] += 1


async def started(client: aioredis.Redis, **doc: Any) -> tuple[h.Harness, Lists, Tally]:
    """Legacy spawns (replaced fresh without a choice), on a counting runtime."""
    hx = await h.start(client, legacy=True, **doc)
    runtime, tally = Lists(), Tally()
    runtime.attempts, runtime.specs = hx.runtime.attempts, hx.runtime.specs
    hx.runtime = runtime
    await client.delete(keys.lease(SWARM))
    hx.recovery = h.new_recovery(client, runtime, hx.checkpoints, hook=tally)
    assert await hx.recovery.lease.acquire()
    return hx, runtime, tally


async def once_each(hx: h.Harness, tally: Tally) -> None:
    """One fence, each release once, one decision, one replacement launched once."""
    assert tally.writes["fenced"] == 1, tally.writes
    assert tally.writes["accepted"] == 1, tally.writes
    assert tally.writes["launched"] == 1, tally.writes
    for kind in records.ReleaseKind:
        assert tally.writes[f"release:{kind.value}"] == 1, tally.writes
    assert hx.runtime.launch_calls.count(second("eng-1")) == 1
    assert [a for a in hx.runtime.attempts if a.startswith(f"{SWARM}.eng-1.")] == [second("eng-1")]
    seat = await reading.seat(hx.client, SWARM, "eng-1")
    assert seat is not None and seat.current_execution_id == second("eng-1")


async def test_recover_failed_does_a_whole_recovery_without_listing(
    redis_client: aioredis.Redis,
) -> None:
    """Fence, release, decide, replace and the lost Pod's removal, from the attempt the watch
    handed over: no list call."""
    hx, runtime, tally = await started(redis_client)
    runtime.fail(first("eng-1"), "oom_killed")
    report = await hx.recovery.recover_failed([runtime.attempts[first("eng-1")]])
    assert report.watched and report.fenced == [first("eng-1")]
    assert report.accepted == [first("eng-1")] and report.launched == [second("eng-1")]
    assert runtime.lists == 0
    assert runtime.remove_calls == [first("eng-1")]
    await once_each(hx, tally)
    fence = await reading.fence(redis_client, SWARM, first("eng-1"))
    assert fence is not None and fence.reason == "oom_killed"


async def test_a_stale_report_from_the_watch_changes_nothing(redis_client: aioredis.Redis) -> None:
    """Only the current attempt of a seat can be fenced: a failure of another swarm's or a
    superseded attempt the watch handed over is left alone."""
    hx, _, tally = await started(redis_client)
    stale = pods.Attempt(SWARM, "eng-1", "example.eng-1.0", 0, OOM, alive=False)
    other = pods.Attempt("other", "eng-1", first("eng-1"), 1, OOM, alive=False)
    report = await hx.recovery.recover_failed([stale, other])
    assert report.fenced == [] and report.launched == []
    assert tally.writes == {}
    assert await reading.fence(redis_client, SWARM, first("eng-1")) is None


async def test_the_fast_path_beside_a_listing_pass_does_everything_once(
    redis_client: aioredis.Redis,
) -> None:
    """A listing pass that listed the failure and the fast path for the same failure, at once:
    the seat is worked on by one at a time, and the pass skips a seat the fast path overtook."""
    hx, runtime, tally = await started(redis_client)
    runtime.fail(first("eng-1"), "evicted")
    runtime.hold = asyncio.Event()
    listing = asyncio.create_task(hx.recovery.reconcile())
    await runtime.listed.wait()  # the pass holds a list that shows the failure
    fast = await hx.recovery.recover_failed([runtime.attempts[first("eng-1")]])
    runtime.hold.set()
    slow = await listing
    assert fast.fenced == [first("eng-1")] and fast.launched == [second("eng-1")]
    assert slow.fenced == [] and slow.launched == [] and not slow.errors
    await once_each(hx, tally)
    # The next pass finds nothing left to do.
    again = await hx.recovery.reconcile()
    assert not (again.fenced or again.accepted or again.launched or again.errors)
    await once_each(hx, tally)


async def test_a_listing_pass_leaves_the_seats_queued_for_the_fast_path_to_it(
    redis_client: aioredis.Redis, monkeypatch: Any
) -> None:
    """The seat queue works one seat at a time here and is held in its first seat's launch;
    a listing pass meanwhile leaves the other failed seat, still queued, to the queue (no seat
    is worked on twice, and the pass does not wait behind the queue). Once the queue is done,
    its seats are the passes' again: a later failure of the same seat is fenced by a listing
    pass."""
    from services.controller import recovering

    monkeypatch.setattr(recovering, "CONCURRENT_SEATS", 1)
    hx, runtime, tally = await started(redis_client)
    for seat in ("eng-1", "eng-2"):
        runtime.fail(first(seat), "application_exit")
    runtime.launch_hold = asyncio.Event()
    failed = [runtime.attempts[first(s)] for s in ("eng-1", "eng-2")]
    fast = asyncio.create_task(hx.recovery.recover_failed(failed))
    await runtime.launching[second("eng-1")].wait()  # in eng-1's launch; eng-2 waits its turn
    listing = asyncio.create_task(hx.recovery.reconcile())
    twice = asyncio.create_task(runtime.launching[second("eng-2")].wait())
    await asyncio.wait({listing, twice}, return_when=asyncio.FIRST_COMPLETED)
    assert listing.done() and not twice.done(), "the pass worked on the fast path's seat"
    twice.cancel()
    slow = listing.result()
    assert slow.fenced == [] and slow.launched == [] and not slow.errors, slow
    runtime.launch_hold.set()
    done = await fast
    assert sorted(done.launched) == [second("eng-1"), second("eng-2")], done
    assert tally.writes["fenced"] == 2 and tally.writes["launched"] == 2, tally.writes
    for seat in ("eng-1", "eng-2"):
        assert runtime.launch_calls.count(second(seat)) == 1
    await hx.recovery.reconcile()  # the lost Pods' removal and the settling, if any is left
    runtime.fail(second("eng-2"), "oom_killed")
    later = await hx.recovery.reconcile()
    assert later.fenced == [second("eng-2")], later


async def test_a_listing_pass_leaves_a_failure_waiting_in_the_queue_to_the_queue(
    redis_client: aioredis.Redis, monkeypatch: Any
) -> None:
    """A failure the watch brought that waits in the seat queue for a worker (the one worker
    busy with another seat) is the queue's already: a listing pass does not recover that seat
    (in a storm it did, so the seat was worked on twice). Taken by the worker, it is recovered
    once."""
    from services.controller import recovering

    monkeypatch.setattr(recovering, "CONCURRENT_SEATS", 1)
    hx, runtime, tally = await started(redis_client, seats=("eng-1", "eng-2", "eng-3"))
    await hx.recovery.reconcile()  # every seat settled
    # The one worker is kept busy: eng-3's attempt is recorded as not launched (as after a
    # relaunch) and its launch is held.
    await redis_client.hset(keys.execution(SWARM, first("eng-3")), "launched", "0")
    runtime.attempts.pop(first("eng-3"))
    runtime.launch_hold = asyncio.Event()
    busy = asyncio.create_task(hx.recovery.recover_seat("eng-3"))
    await runtime.launching[first("eng-3")].wait()
    runtime.fail(first("eng-1"), "application_exit")
    fast = asyncio.create_task(hx.recovery.recover_failed([runtime.attempts[first("eng-1")]]))

    async def waiting_in_the_queue() -> None:
        session = hx.recovery.seats.session
        assert session is not None and session.queue.holds("eng-1")

    await ports.eventually(waiting_in_the_queue)
    listing = await hx.recovery.reconcile()
    assert listing.fenced == [] and listing.launched == [], listing
    assert tally.writes["fenced"] == 0, tally.writes
    runtime.launch_hold.set()
    await busy
    done = await fast
    assert done.fenced == [first("eng-1")] and done.launched == [second("eng-1")], done
    assert tally.writes["fenced"] == 1 and runtime.launch_calls.count(second("eng-1")) == 1
    runtime.fail(first("eng-2"), "oom_killed")
    later = await hx.recovery.reconcile()  # nothing waits for eng-2: the pass's own
    assert later.fenced == [first("eng-2")], later


async def test_a_listing_pass_and_the_fast_path_racing_on_every_seat(
    redis_client: aioredis.Redis,
) -> None:
    """Both seats fail; passes and fast paths run at once, many times: every seat is recovered
    exactly once."""
    hx, runtime, tally = await started(redis_client)
    for seat in ("eng-1", "eng-2"):
        runtime.fail(first(seat), "application_exit")
    failed = [runtime.attempts[first(s)] for s in ("eng-1", "eng-2")]
    await asyncio.gather(
        *(hx.recovery.reconcile() for _ in range(3)),
        *(hx.recovery.recover_failed(failed) for _ in range(3)),
    )
    assert tally.writes["fenced"] == 2 and tally.writes["launched"] == 2, tally.writes
    for kind in records.ReleaseKind:
        assert tally.writes[f"release:{kind.value}"] == 2, tally.writes
    for seat in ("eng-1", "eng-2"):
        assert runtime.launch_calls.count(second(seat)) == 1


async def test_a_lost_lease_stops_the_fast_path_writing(redis_client: aioredis.Redis) -> None:
    """Every write under the lease: a controller whose lease another took writes nothing from
    the watch either."""
    hx, runtime, tally = await started(redis_client)
    runtime.fail(first("eng-1"), "oom_killed")
    await redis_client.set(keys.lease(SWARM), "someone-else")
    report = await hx.recovery.recover_failed([runtime.attempts[first("eng-1")]])
    assert report.lease_lost and report.fenced == []
    assert tally.writes == {}
    assert await reading.fence(redis_client, SWARM, first("eng-1")) is None


async def test_a_stuck_fast_path_does_not_stall_the_listing_pass(
    redis_client: aioredis.Redis,
) -> None:
    """A watch-event recovery stuck on a slow runtime call holds up only its own seat: a
    listing pass gives way for a moment, then recovers the other seat and returns."""
    hx, runtime, tally = await started(redis_client)
    gate = asyncio.Event()
    launch = runtime.launch

    async def slow_launch(spec: pods.LaunchSpec) -> None:
        if spec.execution_id == second("eng-1"):
            await gate.wait()
        await launch(spec)

    runtime.launch = slow_launch  # type: ignore[method-assign]
    runtime.fail(first("eng-1"), "oom_killed")
    stuck = asyncio.create_task(hx.recovery.recover_failed([runtime.attempts[first("eng-1")]]))
    await asyncio.sleep(0.2)
    runtime.fail(first("eng-2"), "oom_killed")
    report = await asyncio.wait_for(hx.recovery.reconcile(), timeout=5)
    assert report.fenced == [first("eng-2")] and report.launched == [second("eng-2")]
    assert not stuck.done()
    gate.set()
    fast = await stuck
    assert fast.launched == [second("eng-1")]
    assert tally.writes["fenced"] == 2 and tally.writes["launched"] == 2


async def test_stopping_the_loop_ends_a_fast_path_that_swallowed_its_cancellation(
    redis_client: aioredis.Redis,
) -> None:
    """Some client libraries lose a task's cancellation inside a call. A recovery from the
    watch that was cancelled that way still ends when the loop stops: nothing is left running
    (the suite fails any test that leaves a task behind)."""
    hx, runtime, _ = await started(redis_client)
    runtime.fail(first("eng-1"), "oom_killed")
    failed = runtime.attempts[first("eng-1")]
    in_launch = asyncio.Event()
    launch = runtime.launch

    async def swallowing_launch(spec: pods.LaunchSpec) -> None:
        in_launch.set()
        with contextlib.suppress(asyncio.CancelledError):  # lost, as a careless library would
            await asyncio.Event().wait()
        await launch(spec)

    async def watch(swarm: str) -> AsyncIterator[pods.Change]:
        yield pods.Change(failed=(failed,))
        await asyncio.Event().wait()

    runtime.launch = swallowing_launch  # type: ignore[method-assign]
    runtime.watch = watch  # type: ignore[method-assign]
    await hx.recovery.lease.release()  # the loop takes it itself
    stop = asyncio.Event()
    loop = asyncio.create_task(hx.recovery.run(stop, interval_s=60))
    await asyncio.wait_for(in_launch.wait(), 5)
    stop.set()
    await asyncio.wait_for(loop, 120)
    assert runtime.launch_calls == [second("eng-1")]
