"""Acknowledge only what is durable (issue 23): with `AGENTIHOOKS_REDIS_WAIT_REPLICAS=1`, a
decision, a pause, an outcome, an admission and the events shown to a watcher are answered only
once the master's replica has them; otherwise UNAVAILABLE `not_durable`. A real redis-server
master with a real replica; the replica is cut off as a partition would (`ReplicatedRedis`).
"""

from __future__ import annotations

import pathlib
from collections.abc import AsyncIterator, Iterator

import pytest
import redis.asyncio as aioredis

from services.common import directives, errors, settings
from services.controller.state import durable, keys, reading, records
from tests.integration.controller import harness as h
from tests.integration.controller.harness import SWARM, first, second
from tests.support import ports, redis_server
from tests.support.redis_replicated import ReplicatedRedis

FRESH = records.Choice.FRESH
ONE_REPLICA = settings.RedisWait(replicas=1, timeout_ms=1000)
WAIT_S = 60.0
"""A bound on a failure only: a replica brought back reconnects within a second or two."""


@pytest.fixture
def pair(tmp_path: pathlib.Path) -> Iterator[ReplicatedRedis]:
    running = ReplicatedRedis(tmp_path / "redis")
    try:
        running.start()
        yield running
    finally:
        running.stop()


@pytest.fixture
async def master(pair: ReplicatedRedis) -> AsyncIterator[aioredis.Redis]:
    client = aioredis.Redis.from_url(pair.url)
    try:
        yield client
    finally:
        await client.aclose()


@pytest.fixture
async def replica(pair: ReplicatedRedis) -> AsyncIterator[aioredis.Redis]:
    client = aioredis.Redis.from_url(pair.replica_url)
    try:
        yield client
    finally:
        await client.aclose()


@pytest.fixture
async def waiting(master: aioredis.Redis) -> h.Harness:
    """A swarm applied with a healthy replica; eng-1 and eng-2 failed and wait for a decision."""
    hx = await h.start(master, automation=False, redis_wait=ONE_REPLICA)
    for seat in ("eng-1", "eng-2"):
        hx.runtime.fail(first(seat))
    await hx.recovery.reconcile()
    return hx


async def refused(call: object) -> durable.NotDurable:
    with pytest.raises(durable.NotDurable) as caught:
        await call  # type: ignore[misc]
    assert caught.value.kind is errors.Kind.UNAVAILABLE
    assert caught.value.reason == "not_durable"
    return caught.value


async def decided_on(client: aioredis.Redis, execution: str) -> records.Decision:
    decision = await reading.decision(client, SWARM, execution)
    assert decision is not None and decision.state is records.DecisionState.ACCEPTED, decision
    return decision


async def test_every_acknowledged_call_answers_not_durable_while_the_replica_is_cut_off(
    pair: ReplicatedRedis, waiting: h.Harness, replica: aioredis.Redis
) -> None:
    """Issue 23, "Acknowledge only what is durable": with the replica cut off, a decision, a
    pause, an unpause, an admission, an accepted outcome and the events a watcher would be
    shown are each answered UNAVAILABLE `not_durable`, saying what fell short and which
    setting asks for it, instead of accepted. With the replica healthy the same decision kind
    is answered and the replica holds it when the answer comes."""
    rec = waiting.recovery
    accepted = await rec.restore_decision("eng-1", FRESH, None, records.Operator())
    assert not accepted.repeated
    assert (await decided_on(replica, first("eng-1"))).choice is FRESH
    pair.cut_off()
    why = await refused(rec.restore_decision("eng-2", FRESH, None, records.Operator()))
    assert "within 1000 ms" in why.message
    assert "0 of the 1 replicas AGENTIHOOKS_REDIS_WAIT_REPLICAS asks for" in why.message
    assert "AGENTIHOOKS_REDIS_WAIT_TIMEOUT_MS" in why.message
    await refused(rec.pause())
    await refused(rec.unpause())
    await refused(rec.apply_swarm(h.document(automation=False)))
    await refused(
        rec.report_restore(
            await waiting.worker(second("eng-1")),
            recovery=directives.Continuity.FRESH,
            checkpoint_id=None,
            session_id=None,
            watermark=None,
        )
    )
    await refused(rec.events("0-0"))
    # Not acknowledged is not undone: the master holds the decision all the same.
    await decided_on(waiting.client, first("eng-2"))


async def test_a_repeated_decision_is_acknowledged_only_once_the_replica_has_it(
    pair: ReplicatedRedis, waiting: h.Harness, replica: aioredis.Redis
) -> None:
    """Spec "Repeated and conflicting requests" with issue 23: repeating an accepted choice
    writes nothing, yet it is not answered while the replica cannot confirm the original write
    (the acknowledgement writes and WAITs on its own connection); once the replica is back the
    repeat is answered, with the same decision and replacement, and the replica holds it."""
    rec, operator = waiting.recovery, records.Operator()
    pair.cut_off()
    await refused(rec.restore_decision("eng-1", FRESH, None, operator))
    original = await decided_on(waiting.client, first("eng-1"))
    await refused(rec.restore_decision("eng-1", FRESH, None, operator))
    pair.bring_back()

    async def acknowledged() -> records.Decision:
        try:
            again = await rec.restore_decision("eng-1", FRESH, None, operator)
        except durable.NotDurable as exc:
            raise AssertionError("not acknowledged yet") from exc
        assert again.repeated
        return again.decision

    repeated = await ports.eventually(acknowledged, timeout=WAIT_S)
    assert repeated.replacement_execution_id == original.replacement_execution_id
    # Read at once on the replica: the answer came only after it had the write.
    on_replica = await decided_on(replica, first("eng-1"))
    assert on_replica.replacement_execution_id == second("eng-1")
    assert await reading.execution(replica, SWARM, second("eng-1")) is not None


async def test_an_acknowledgement_never_confirms_a_write_its_master_does_not_hold(
    master: aioredis.Redis,
) -> None:
    """A failover between a write and its acknowledgement may leave the slot on a master that
    never got the write: the acknowledgement checks the write's facts on the master it WAITs
    on and refuses (`not_durable`) when one does not hold, writing nothing there."""
    acks = durable.Durability(master, ONE_REPLICA)
    anchor, paused = keys.acks(SWARM), keys.paused(SWARM)
    await acks.confirm(anchor, [durable.Fact.is_unset(paused)])
    counted = await master.get(anchor)
    why = await refused(acks.confirm(anchor, [durable.Fact.is_set(paused)]))
    assert "no longer holds it" in why.message
    assert await master.get(anchor) == counted


async def test_with_the_default_setting_nothing_waits_and_nothing_is_written(
    redis_client: aioredis.Redis, redis_server: redis_server.RedisServer
) -> None:
    """Issue 23: the replica count defaults to 0 (a single local Redis): acknowledging sends
    nothing to Redis, so no fact is checked and no counter written, even on a Redis with no
    replica; the start check asks nothing either."""
    acks = durable.Durability(redis_client, settings.RedisWait())
    assert not acks.wait.waits
    await acks.confirm(keys.acks(SWARM), [durable.Fact.is_set(keys.paused(SWARM))])
    await durable.check(redis_client, settings.RedisWait())
    assert await redis_client.keys("*") == []


async def test_waitaof_is_refused_on_a_redis_that_does_not_run_it(
    master: aioredis.Redis,
) -> None:
    """`AGENTIHOOKS_REDIS_WAIT_AOF` needs WAITAOF (Redis 7.2 or later): the start check on the
    Debian Redis 7.0 refuses it naming the setting and the server's version, and an
    acknowledgement that asks for it answers `not_durable`, never accepted."""
    info = await master.info("server")
    if tuple(int(n) for n in str(info["redis_version"]).split(".")[:2]) >= (7, 2):
        pytest.skip("this Redis runs WAITAOF")
    wait = settings.RedisWait(aof=True, timeout_ms=300)
    with pytest.raises(durable.Unsupported) as caught:
        await durable.check(master, wait)
    line = str(caught.value)
    assert line.startswith("AGENTIHOOKS_REDIS_WAIT_AOF=true needs WAITAOF (Redis 7.2 or later)")
    assert f"is {info['redis_version']}" in line and "AGENTIHOOKS_REDIS_WAIT_AOF=false" in line
    why = await refused(durable.Durability(master, wait).confirm(keys.acks(SWARM), []))
    assert "WAITAOF" in why.message
