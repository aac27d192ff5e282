"""A missing or restarting Redis is a state, not a crash: the controller core on a real
redis-server that is killed (SIGKILL) and started again on the same port with its data (AOF,
synced before each answer), with the fake runtime. No mocks of Redis.

The controller as a process, the Kubernetes API emulator and the checkpoint store are in
tests/e2e/test_redis_outage.py and tests/e2e/test_store_redis_outage.py.
"""

from __future__ import annotations

import asyncio
import collections
import logging
from collections.abc import AsyncIterator, Mapping
from typing import Any

import pytest
import redis.asyncio as aioredis

from services.common import errors, redis_link
from services.controller import hub as hubs
from services.controller import recovering, telemetry
from services.controller.pods import runtime as pods
from services.controller.state import keys, reading, records
from tests.integration.controller import harness as h
from tests.integration.controller.harness import SWARM, first, second
from tests.support import ports
from tests.support.redis_server import RestartableRedis

SEATS = ("eng-1", "eng-2", "eng-3")
OPERATOR_TOKEN = "operator-token-" + "o" * 24


def events(caplog: pytest.LogCaptureFixture, name: str) -> list[dict[str, Any]]:
    """The fields of every logged event line called `name`."""
    out = []
    for record in caplog.records:
        fields = getattr(record, "fields", None) or {}
        if fields.get("event") == name:
            out.append(dict(fields))
    return out


@pytest.fixture
async def outage_client(restartable_redis: RestartableRedis) -> AsyncIterator[aioredis.Redis]:
    """A client of a started restartable Redis, configured as the services configure theirs
    (`redis_link.connect`: a few quick retries absorb a pooled connection the restart broke)."""
    await asyncio.to_thread(restartable_redis.start)
    client = redis_link.connect(restartable_redis.url)
    try:
        yield client
    finally:
        await client.aclose()


async def test_acquiring_a_lease_its_holder_still_has_keeps_the_epoch(
    redis_client: aioredis.Redis,
) -> None:
    """A lease that still names this holder (an acquisition whose reply was lost, an outage
    shorter than the TTL) is the same acquisition: the same epoch, no new one; another holder
    still cannot take it, and once it is gone the next acquisition has a new epoch."""
    a = h.new_recovery(redis_client, h.FakeRuntime(), None)
    b = h.new_recovery(redis_client, h.FakeRuntime(), None)
    assert await a.lease.acquire() and a.lease.epoch == 1
    assert await a.lease.acquire() and a.lease.epoch == 1
    assert (await redis_client.get(keys.epoch(SWARM))) == b"1"
    assert not await b.lease.acquire()
    await redis_client.delete(keys.lease(SWARM))
    assert await b.lease.acquire() and b.lease.epoch == 2
    assert not await a.lease.acquire()
    assert not await a.lease.renew() and a.lease.lost.is_set()


async def test_epochs_never_go_backwards_when_redis_lost_its_epoch_key(
    redis_client: aioredis.Redis,
) -> None:
    """Issue 23: Redis restarted empty starts a swarm's epoch over at 1. An acquisition is
    past every epoch its holder held and past the floor it is given (the newest epoch a worker
    Pod was launched under): a new one strictly, a resumed one only when it fell below."""
    a = h.new_recovery(redis_client, h.FakeRuntime(), None)
    assert await a.lease.acquire() and a.lease.epoch == 1
    await redis_client.delete(keys.lease(SWARM))
    assert await a.lease.acquire() and a.lease.epoch == 2
    await redis_client.flushall()  # restarted empty: no lease, no epoch
    assert await a.lease.acquire() and a.lease.epoch == 3
    assert (await redis_client.get(keys.epoch(SWARM))) == b"3"
    # Another controller, restarted too, knows only what the Pods say: launched under 7.
    await redis_client.flushall()
    b = h.new_recovery(redis_client, h.FakeRuntime(), None)
    assert await b.lease.acquire(floor=7) and b.lease.epoch == 8
    # Resumed (the lease still names b): the same epoch, unless the floor passed it.
    assert await b.lease.acquire(floor=8) and b.lease.epoch == 8
    await redis_client.set(keys.epoch(SWARM), 2)  # an older copy of the epoch key
    assert await b.lease.acquire() and b.lease.epoch == 9
    assert (await redis_client.get(keys.epoch(SWARM))) == b"9"
    assert await b.lease.renew()


async def test_a_renewal_that_cannot_reach_redis_interrupts_one_refused_loses(
    restartable_redis: RestartableRedis,
    outage_client: aioredis.Redis,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The renewer tells the two failures apart. Redis unreachable: `interrupted` (the holder
    stops working and acquires again once Redis answers), not `lost`, and renewing goes on,
    one line per try naming AGENTIHOOKS_REDIS_URL. Refused as lease_lost (another holder now):
    `lost`, at once."""
    caplog.set_level(logging.INFO)
    recovery = h.new_recovery(outage_client, h.FakeRuntime(), None, ttl_ms=1500)
    lease = recovery.lease
    assert await lease.acquire()
    async with lease.renewing():
        restartable_redis.kill()

        async def interrupted() -> None:
            assert lease.interrupted.is_set()

        await ports.eventually(interrupted)
        assert not lease.lost.is_set()
        failed = events(caplog, "lease_renew_failed")
        assert failed and all(f["variable"] == redis_link.VARIABLE for f in failed), failed
        assert all(f["exception"] == "ConnectionError" for f in failed), failed
        await asyncio.to_thread(restartable_redis.start)
        # Another controller holds the lease now: the next renewal is refused, lost at once.
        await outage_client.set(keys.lease(SWARM), "controller-other")

        async def lost() -> None:
            assert lease.lost.is_set()

        await ports.eventually(lost)
    assert not lease.is_held()
    assert events(caplog, "lease_lost")


class KillAt:
    """A script hook: SIGKILL Redis right after the first write whose status is `status` came
    back (the write happened and is on disk; what the pass does next finds Redis gone)."""

    def __init__(self, redis: RestartableRedis, status: str) -> None:
        self.redis = redis
        self.status = status
        self.fired = False

    def __call__(self, name: str, reply: Mapping[str, Any]) -> None:
        if not self.fired and reply.get("status") == self.status:
            self.fired = True
            self.redis.kill()


def release_writes(redis: RestartableRedis, swarm: str) -> collections.Counter[tuple[str, str]]:
    """(fence key, release field) of every release recorded in a fence, from the AOF."""
    found: collections.Counter[tuple[str, str]] = collections.Counter()
    for words in redis.writes():
        if words[0].upper() == "HSET" and ":fence:" in words[1] and "{" + swarm + "}" in words[1]:
            for field in words[2::2]:
                if field.startswith("release:"):
                    found[(words[1], field)] += 1
    return found


def revocation_writes(redis: RestartableRedis, swarm: str) -> collections.Counter[str]:
    """Every revocation key set, from the AOF."""
    return collections.Counter(
        words[1]
        for words in redis.writes()
        if words[0].upper() == "SET" and words[1].startswith(keys.revoked(swarm, ""))
    )


async def recovered(client: aioredis.Redis, seats: tuple[str, ...]) -> None:
    """Each seat runs its replacement (generation 2), launched, and the lost attempt's Pod is
    removed (the seat waits for the replacement's outcome report from here on)."""
    for name in seats:
        seat = await reading.seat(client, SWARM, name)
        assert seat is not None and seat.current_execution_id == second(name), seat
        replacement = await reading.execution(client, SWARM, second(name))
        assert replacement is not None and replacement.launched, name
        fence = await reading.fence(client, SWARM, first(name))
        assert fence is not None and fence.released(records.ReleaseKind.POD), name


async def test_the_loop_waits_through_a_redis_restart_mid_recovery_and_does_everything_once(
    restartable_redis: RestartableRedis,
    outage_client: aioredis.Redis,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Three seats fail at once; Redis is SIGKILLed right after the first decision was written
    and started again (same port, same data) once the loop said it is waiting. The loop does
    not die: it logs one line, waits, acquires the lease again and finishes. Afterwards each
    seat has exactly one replacement, launched once; each lost attempt one fence whose every
    release was done once (the AOF is the witness), one decision and one fence event; and the
    loop goes on: a later failure is replaced too."""
    caplog.set_level(logging.INFO)
    client = outage_client
    hx = await h.start(client, legacy=True, seats=SEATS)
    await hx.recovery.lease.release()
    killer = KillAt(restartable_redis, "accepted")
    loop_recovery = h.new_recovery(client, hx.runtime, hx.checkpoints, hook=killer, ttl_ms=3000)
    stop = asyncio.Event()
    loop = asyncio.create_task(loop_recovery.run(stop, interval_s=0.05))
    try:
        for name in SEATS:
            hx.runtime.fail(first(name))

        async def waiting() -> None:
            assert killer.fired
            assert events(caplog, "swarm_loop_interrupted")
            assert events(caplog, "redis_unavailable")

        await ports.eventually(waiting)
        assert not loop.done()
        interrupted = events(caplog, "swarm_loop_interrupted")
        assert all(i["variable"] == redis_link.VARIABLE for i in interrupted), interrupted
        await asyncio.to_thread(restartable_redis.start)
        await ports.eventually(lambda: recovered(client, SEATS))
        # Exactly one replacement per seat, created once; no third generation.
        assert sorted(hx.runtime.specs) == sorted(
            [first(s) for s in SEATS] + [second(s) for s in SEATS]
        )
        for name in SEATS:
            assert hx.runtime.launch_calls.count(second(name)) >= 1
            decision = await reading.decision(client, SWARM, first(name))
            assert decision is not None and decision.replacement_execution_id == second(name)
        fences = {
            (keys.fence(SWARM, first(s)), f"release:{k.value}")
            for s in SEATS
            for k in records.ReleaseKind
        }
        assert release_writes(restartable_redis, SWARM) == dict.fromkeys(fences, 1)
        revoked = revocation_writes(restartable_redis, SWARM)
        assert revoked and set(revoked.values()) == {1}, revoked
        seen = collections.Counter(
            (e.kind, e.execution_id) for e in await telemetry.read(client, SWARM, count=1000)
        )
        for name in SEATS:
            assert seen[("fence", first(name))] == 1, seen
            assert seen[("recovery", first(name))] == 1, seen
        # The loop runs on: a later failure is fenced and, once chosen, replaced as well.
        hx.runtime.fail(second("eng-1"))

        async def fenced_again() -> None:
            assert await reading.fence(client, SWARM, second("eng-1")) is not None

        await ports.eventually(fenced_again)
        await loop_recovery.restore_decision(
            "eng-1", records.Choice.FRESH, None, records.Operator()
        )
        third = keys.execution_id(SWARM, "eng-1", 3)

        async def replaced_again() -> None:
            execution = await reading.execution(client, SWARM, third)
            assert execution is not None and execution.launched

        await ports.eventually(replaced_again)
        assert loop_recovery.lease.is_held()
        assert events(caplog, "redis_available")
    finally:
        stop.set()
        await asyncio.wait_for(loop, ports.MIN_DEADLINE_S)


class Failing(h.FakeRuntime):
    """The fake runtime whose list fails `failures` times first (an API server hiccup)."""

    def __init__(self, failures: int) -> None:
        super().__init__()
        self.failures = failures

    async def list_attempts(self, swarm: str) -> list[pods.Attempt]:
        if self.failures > 0:
            self.failures -= 1
            raise RuntimeError("the list failed")
        return await super().list_attempts(swarm)


async def test_a_loop_that_fails_for_another_reason_is_logged_and_goes_on(
    redis_client: aioredis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    """No task dies silently: a pass that fails outside any seat (here the runtime's list) is
    logged as pass_failed with a backoff, and the loop carries on under the same lease."""
    caplog.set_level(logging.INFO)
    hx = await h.start(redis_client, legacy=True)
    runtime = Failing(2)
    runtime.attempts, runtime.specs = hx.runtime.attempts, hx.runtime.specs
    await hx.recovery.lease.release()
    recovery = h.new_recovery(redis_client, runtime, hx.checkpoints, ttl_ms=3000)
    stop = asyncio.Event()
    loop = asyncio.create_task(recovery.run(stop, interval_s=0.05))
    try:
        runtime.fail(first("eng-1"))
        await ports.eventually(lambda: recovered(redis_client, ("eng-1",)))
        failed = events(caplog, "pass_failed")
        assert [f["exception"] for f in failed] == ["RuntimeError", "RuntimeError"], failed
        assert [f["retry_in_s"] for f in failed] == [0.5, 1.0], failed
        assert [a["epoch"] for a in events(caplog, "lease_acquired")][-1] == recovery.lease.epoch
        assert len(events(caplog, "lease_acquired")) == 2  # the harness's, then this loop's once
    finally:
        stop.set()
        await asyncio.wait_for(loop, ports.MIN_DEADLINE_S)


class WatchFailsFirst(h.FakeRuntime):
    """The fake runtime whose first watch fails at once; the next one reports a failure."""

    def __init__(self) -> None:
        super().__init__()
        self.watches = 0
        self.report: pods.Attempt | None = None
        self.reported = asyncio.Event()

    async def watch(self, swarm: str) -> AsyncIterator[pods.Change]:
        self.watches += 1
        if self.watches == 1:
            raise RuntimeError("the watch failed")
        await self.reported.wait()
        assert self.report is not None
        yield pods.Change(failed=(self.report,))
        await asyncio.Event().wait()


async def test_a_watch_that_fails_is_logged_and_followed_again(
    redis_client: aioredis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    """The watch helper does not die silently: its failure is logged (watch_failed) and it is
    followed again after a backoff; its reports then reach the seat queue."""
    caplog.set_level(logging.INFO)
    hx = await h.start(redis_client, legacy=True)
    runtime = WatchFailsFirst()
    runtime.attempts, runtime.specs = hx.runtime.attempts, hx.runtime.specs
    await hx.recovery.lease.release()
    recovery = h.new_recovery(redis_client, runtime, hx.checkpoints, ttl_ms=3000)
    stop = asyncio.Event()
    # Passes far apart: the failure is recovered from the watch's report.
    loop = asyncio.create_task(recovery.run(stop, interval_s=600))
    try:

        async def followed_again() -> None:
            assert runtime.watches >= 2

        await ports.eventually(followed_again)
        failed = events(caplog, "watch_failed")
        assert failed and failed[0]["exception"] == "RuntimeError", failed
        runtime.fail(first("eng-1"))
        runtime.report = runtime.attempts[first("eng-1")]
        runtime.reported.set()
        await ports.eventually(lambda: recovered(redis_client, ("eng-1",)))
    finally:
        stop.set()
        await asyncio.wait_for(loop, ports.MIN_DEADLINE_S)


def new_hub(client: aioredis.Redis, runtime: h.FakeRuntime) -> hubs.Hub:
    return hubs.Hub(
        client,
        runtime,
        grant_key=h.GRANT_KEY,
        operator_token=OPERATOR_TOKEN,
        worker_image=h.IMAGE,
        checkpoints=None,
        lease_ttl_ms=3000,
        pass_interval_s=0.05,
    )


async def test_a_hub_started_without_redis_serves_unready_and_starts_work_when_it_answers(
    restartable_redis: RestartableRedis, caplog: pytest.LogCaptureFixture
) -> None:
    """A swarm is applied, Redis stops (its data kept), and a new controller process starts
    without it: `start` returns, the hub is not ready (`redis_unavailable`), a caller whose
    credential needs Redis is refused with UNAVAILABLE. Once Redis answers the hub finds the
    swarm by itself, takes its lease, is ready, and replaces a failed worker."""
    caplog.set_level(logging.INFO)
    await asyncio.to_thread(restartable_redis.start)
    client = redis_link.connect(restartable_redis.url)
    try:
        hx = await h.start(client, legacy=True)
        await hx.recovery.lease.release()
        await asyncio.to_thread(restartable_redis.stop)
        hub = new_hub(client, hx.runtime)
        try:
            await hub.start()
            assert not hub.ready()
            reason = hub.not_ready()
            assert reason is not None and reason.reason == redis_link.REASON
            # A caller whose credential needs Redis to check (a master's) is not let through:
            # the error answers UNAVAILABLE `redis_unavailable`.
            with pytest.raises(redis_link.UNREACHABLE) as refused:
                await hub.principal(h.MASTER_SECRET, SWARM)
            unavailable = recovering.refusal_of(refused.value)
            assert isinstance(unavailable, errors.Unavailable)
            assert unavailable.reason == redis_link.REASON
            assert hub.recoveries == {}
            lines = events(caplog, "redis_unavailable")
            assert lines and lines[0]["variable"] == redis_link.VARIABLE, lines
            assert lines[0]["address"] == f"127.0.0.1:{restartable_redis.port}"
            await asyncio.to_thread(restartable_redis.start)

            async def working() -> None:
                assert hub.ready(), hub.not_ready()

            await ports.eventually(working)
            assert isinstance(await hub.principal(OPERATOR_TOKEN, SWARM), records.Operator)
            hx.runtime.fail(first("eng-2"))
            await ports.eventually(lambda: recovered(client, ("eng-2",)))
        finally:
            await hub.stop()
    finally:
        await client.aclose()


async def test_the_hub_restarts_a_loop_that_ended(
    redis_client: aioredis.Redis,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A swarm loop that ends although nothing stopped it (it should not: it handles Redis and
    other failures itself) is logged as swarm_loop_ended and started again by the hub."""
    caplog.set_level(logging.INFO)
    hx = await h.start(redis_client, legacy=True)
    await hx.recovery.lease.release()
    real_run = recovering.Recovery.run
    calls: list[int] = []

    async def run_once_broken(self: recovering.Recovery, *args: Any, **kwargs: Any) -> None:
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("broken")
        await real_run(self, *args, **kwargs)

    monkeypatch.setattr(recovering.Recovery, "run", run_once_broken)
    hub = new_hub(redis_client, hx.runtime)
    try:
        await hub.start()
        hx.runtime.fail(first("eng-1"))
        await ports.eventually(lambda: recovered(redis_client, ("eng-1",)))
        ended = events(caplog, "swarm_loop_ended")
        assert [(e["swarm"], e["exception"]) for e in ended] == [(SWARM, "RuntimeError")], ended
        assert len(calls) == 2
    finally:
        await hub.stop()
