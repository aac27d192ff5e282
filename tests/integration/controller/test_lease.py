"""The controller lease (DESIGN 3; spec: "every write runs under the controller's lease, so a
controller that lost its lease changes nothing")."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import threading
import time
from collections.abc import Awaitable, Callable

import pytest
import redis.asyncio as aioredis

from services.common import redis_link
from services.controller.state import keys, leasing, reading, records, scripting
from tests.integration.controller import harness as h
from tests.integration.controller.harness import SWARM, first, second
from tests.integration.controller.test_decisions import snapshot
from tests.support.redis_server import RedisServer


async def eventually(check: Callable[[], Awaitable[bool]], timeout: float = 5.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not await check():
        if asyncio.get_running_loop().time() > deadline:
            pytest.fail("condition not reached in time")
        await asyncio.sleep(0.02)


async def test_each_acquisition_has_its_own_epoch(redis_client: aioredis.Redis) -> None:
    """DESIGN 3: SET lease HOLDER NX PX ttl, with an epoch from INCR on every acquisition."""
    rt = h.FakeRuntime()
    # TTLs leave room for a loaded machine: the checks between acquisitions must not outlast them.
    a = h.new_recovery(redis_client, rt, None, ttl_ms=1500)
    b = h.new_recovery(redis_client, rt, None, ttl_ms=1500)
    assert await a.lease.acquire() and a.lease.epoch == 1
    assert not await b.lease.acquire()
    assert (await redis_client.get(keys.lease(SWARM))).decode() == a.lease.holder
    await asyncio.sleep(1.6)
    assert not a.lease.is_held()
    assert await b.lease.acquire() and b.lease.epoch == 2
    assert not await a.lease.renew()
    assert a.lease.lost.is_set()
    assert await b.lease.renew()


async def test_renewer_keeps_the_lease_past_its_ttl(redis_client: aioredis.Redis) -> None:
    """A holder that renews keeps the lease; a clean stop gives it up for a standby at once."""
    a = h.new_recovery(redis_client, h.FakeRuntime(), None, ttl_ms=1500)
    assert await a.lease.acquire()
    async with a.lease.renewing():
        await asyncio.sleep(3.2)
        assert a.lease.is_held()
        assert await redis_client.get(keys.lease(SWARM)) is not None
    await a.lease.release()
    assert await redis_client.get(keys.lease(SWARM)) is None


async def test_a_controller_that_loses_its_lease_mid_pass_changes_nothing(
    redis_client: aioredis.Redis,
) -> None:
    """Issue 3 (lease test): two controllers; one loses its lease mid-pass; the stale one's
    writes are all refused and the Redis contents show none of them."""
    hx = await h.start(redis_client)
    a = hx.recovery
    b = h.new_recovery(redis_client, hx.runtime, hx.checkpoints)
    await a.report_capture(
        await hx.worker(first("eng-1")), native_session_id="sess-1", archive_watermark=400
    )
    hx.checkpoints.by_execution[first("eng-1")] = [h.summary("ckpt-7")]
    hx.runtime.fail(first("eng-1"))
    hx.runtime.fail(first("eng-2"))
    original = hx.checkpoints.newest_compatible
    handed: list[asyncio.Task[dict[bytes, object]]] = []

    async def hand_over(scope: records.AttemptScope, key: str):  # type: ignore[no-untyped-def]
        # The lease expires under A (a long GC pause, a partition) and B takes over, while A
        # decides on eng-1. Seats are recovered concurrently: the hand-over is a task of its
        # own, so it completes even when A's pass cancels this seat (another seat hit the lost
        # lease first).
        if scope.seat == "eng-1" and not handed:
            handed.append(asyncio.ensure_future(take_over()))
            await asyncio.shield(handed[0])
        return await original(scope, key)

    async def take_over() -> dict[bytes, object]:
        await redis_client.delete(keys.lease(SWARM))
        assert await b.lease.acquire()
        return await snapshot(redis_client)

    hx.checkpoints.newest_compatible = hand_over  # type: ignore[method-assign]
    assert a.lease.is_held()  # A's local view still says it holds the lease
    report = await a.reconcile()
    assert report.lease_lost and handed
    at_handover = await handed[0]
    assert at_handover and await snapshot(redis_client) == at_handover
    # Every other write A tries now is refused too, and changes nothing.
    for write in (
        a.pause(),
        a.restore_decision("eng-1", records.Choice.FRESH, None, records.Operator()),
        a.request_restore_decision("eng-1", records.Choice.FRESH, None, records.Operator()),
        a.apply_swarm(h.document(text="stale")),
    ):
        with pytest.raises(scripting.LeaseLost):
            await write
    assert await snapshot(redis_client) == at_handover
    # B, the holder, finishes the recovery.
    hx.checkpoints.newest_compatible = original  # type: ignore[method-assign]
    report = await b.reconcile()
    assert not report.lease_lost and first("eng-1") in report.accepted
    d = await reading.decision(redis_client, SWARM, first("eng-1"))
    assert d is not None and d.controller_epoch == b.lease.epoch


async def test_a_standby_writes_nothing(hx: h.Harness) -> None:
    """DESIGN 3: only the lease holder writes; a standby's pass does nothing and a decision
    sent to it is refused (UNAVAILABLE) with nothing written."""
    standby = h.new_recovery(hx.client, hx.runtime, hx.checkpoints)
    hx.runtime.fail(first("eng-1"))
    before = await snapshot(hx.client)
    assert (await standby.reconcile()).standby
    with pytest.raises(scripting.LeaseLost):
        await standby.unpause()
    assert await snapshot(hx.client) == before
    from services.controller import recovering

    refusal = recovering.refusal_of(scripting.LeaseLost("x"))
    assert refusal is not None and refusal.kind.value == "unavailable"


async def test_run_loop_takes_the_lease_and_reacts_to_failures(
    redis_client: aioredis.Redis,
) -> None:
    """A controller waits as standby, takes the lease when free, runs passes and stops
    cleanly, giving the lease up."""
    hx = await h.start(redis_client)
    await hx.recovery.lease.release()
    runner = h.new_recovery(redis_client, hx.runtime, hx.checkpoints, ttl_ms=600)
    stop = asyncio.Event()
    task = asyncio.create_task(runner.run(stop, interval_s=0.05))
    hx.runtime.fail(first("eng-1"))

    async def fenced() -> bool:
        return await reading.fence(redis_client, SWARM, first("eng-1")) is not None

    await eventually(fenced)
    stop.set()
    await asyncio.wait_for(task, 120)
    assert await redis_client.get(keys.lease(SWARM)) is None
    assert second("eng-1") not in hx.runtime.specs  # no checkpoint: it waits for a decision


async def test_one_round_renews_every_lease_of_a_process(redis_client: aioredis.Redis) -> None:
    """Issue 23 (part 4): the leases of a process are renewed together, one round (one task,
    one pipeline) every third of the lease time, and each keeps its lease past its TTL; a
    lease another holder took meanwhile is lost alone, the others go on."""
    scripts = scripting.Scripts(redis_client)
    renewals = leasing.Renewals(scripts, 1500)
    leases = [
        leasing.Lease(scripts, f"swarm-{i}", f"controller-{i}", ttl_ms=1500, renewals=renewals)
        for i in range(40)
    ]
    assert all([await lease.acquire() for lease in leases])
    async with contextlib.AsyncExitStack() as stack:
        for lease in leases:
            await stack.enter_async_context(lease.renewing())
        assert renewals.held == 40
        renewers = [t for t in asyncio.all_tasks() if t.get_name().startswith("lease-renew")]
        assert len(renewers) == 1, [t.get_name() for t in renewers]
        await asyncio.sleep(3.2)
        assert all(lease.is_held() for lease in leases)
        assert renewals.slack_s is not None and 0 < renewals.slack_s < 1.5
        # Another controller took swarm-7's lease: only that one is lost, at the next round.
        await redis_client.set(keys.lease("swarm-7"), "controller-other")

        async def lost() -> bool:
            return leases[7].lost.is_set()

        await eventually(lost)
        assert [i for i, lease in enumerate(leases) if lease.lost.is_set()] == [7]
        await asyncio.sleep(1.0)
        assert all(lease.is_held() for i, lease in enumerate(leases) if i != 7)
    # Left: the rounds end, nothing is renewed any more.
    assert renewals.held == 0
    await asyncio.sleep(0)
    assert not [t for t in asyncio.all_tasks() if t.get_name() == "lease-renewals"]


async def test_renewals_on_their_own_thread_keep_leases_while_the_loop_is_blocked(
    redis_server: RedisServer, redis_client: aioredis.Redis
) -> None:
    """Issue 23 (part 4): the controller process renews on a thread with a Redis client of its
    own, so an event loop held up longer than the lease time (thousands of swarms starting, a
    list of tens of thousands of Pods parsed) loses no lease: Redis still names the holder
    after the loop was blocked for twice the TTL, and nothing was marked lost."""
    scripts = scripting.Scripts(redis_client)
    renewals = leasing.Renewals(
        scripts, 1500, connect=functools.partial(redis_link.connect, redis_server.url)
    )
    leases = [
        leasing.Lease(scripts, f"swarm-{i}", "controller-t", ttl_ms=1500, renewals=renewals)
        for i in range(20)
    ]
    assert all([await lease.acquire() for lease in leases])
    try:
        async with contextlib.AsyncExitStack() as stack:
            for lease in leases:
                await stack.enter_async_context(lease.renewing())
            time.sleep(3.0)  # noqa: ASYNC251 - the loop held up on purpose, twice the lease time
            for i in range(20):
                assert await redis_client.get(keys.lease(f"swarm-{i}")) == b"controller-t"
            await asyncio.sleep(0.1)  # what the thread told the loop is heard now
            assert not any(lease.lost.is_set() for lease in leases)
            assert all(lease.is_held() for lease in leases)
            assert renewals.slack_s is not None and renewals.slack_s > 0
    finally:
        await renewals.close()
    assert not any(t.name == "lease-renewals" for t in threading.enumerate())


async def test_a_round_after_redis_forgot_its_scripts_loads_them_once(
    redis_client: aioredis.Redis,
) -> None:
    """Redis restarted or failed over forgets its scripts: a round's renewals answer NOSCRIPT,
    the script is loaded once and the round's calls are sent again together; every lease is
    renewed in that same round."""
    scripts = scripting.Scripts(redis_client)
    renewals = leasing.Renewals(scripts, 1500)
    leases = [
        leasing.Lease(scripts, f"swarm-{i}", "controller-s", ttl_ms=1500, renewals=renewals)
        for i in range(30)
    ]
    assert all([await lease.acquire() for lease in leases])
    async with contextlib.AsyncExitStack() as stack:
        for lease in leases:
            await stack.enter_async_context(lease.renewing())
        await redis_client.script_flush()
        before = await redis_client.info("commandstats")
        await renewals.round(scripts)
        after = await redis_client.info("commandstats")
        loads = after.get("cmdstat_script|load", {}).get("calls", 0) - before.get(
            "cmdstat_script|load", {}
        ).get("calls", 0)
        assert loads == 1
        assert renewals.slack_s is not None and renewals.slack_s > 0
        assert not any(lease.lost.is_set() or lease.interrupted.is_set() for lease in leases)
        for i in range(30):
            assert 0 < await redis_client.pttl(keys.lease(f"swarm-{i}")) <= 1500
