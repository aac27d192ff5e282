"""The cluster is a second witness (issue 23, point 2), on real Redis: a decision Redis lost
(a failover that dropped its newest writes) is written back from the replacement's worker,
once, under the lease; generations never go backwards, and a controller killed around that
write finishes without doing anything twice."""

from __future__ import annotations

import dataclasses
import logging

import pytest
import redis.asyncio as aioredis

from services.common import errors
from services.controller import witnesses, witnessing
from services.controller.pods import runtime as pods
from services.controller.state import keys, reading, records, scripting
from tests.integration.controller import harness as h
from tests.integration.controller.harness import SWARM, first, second

E1, R1 = first("eng-1"), second("eng-1")
NOT_PENDING = "no recovery decision is pending for this attempt"
Snapshot = dict[bytes, tuple[bytes, int]]


async def dump(client: aioredis.Redis) -> Snapshot:
    """Every key of the swarm but its lease and epoch, DUMPed."""
    kept: Snapshot = {}
    for key in await client.keys(f"agentihooks:{{{SWARM}}}:*"):
        if key.decode() not in (keys.lease(SWARM), keys.epoch(SWARM)):
            dumped = await client.dump(key)
            assert dumped is not None
            kept[key] = (dumped, max(await client.pttl(key), 0))
    return kept


async def values(client: aioredis.Redis) -> dict[bytes, bytes]:
    """The swarm's keys and values (not their TTLs, which count down): what a write changes."""
    return {key: dumped for key, (dumped, _) in (await dump(client)).items()}


async def roll_back(client: aioredis.Redis, to: Snapshot) -> None:
    """The swarm's state as `to` held it (the lease and epoch kept): a failover that lost
    every write since."""
    pipe = client.pipeline(transaction=True)
    for key in await client.keys(f"agentihooks:{{{SWARM}}}:*"):
        if key.decode() not in (keys.lease(SWARM), keys.epoch(SWARM)):
            pipe.delete(key)
    for key, (dumped, ttl) in to.items():
        pipe.restore(key, ttl, dumped, replace=True)
    await pipe.execute()


async def lost_decision(client: aioredis.Redis, **doc: object) -> h.Harness:
    """eng-1 failed (OOM), the operator chose resume, the replacement runs and the lost Pod is
    gone; then Redis went back to before the failure."""
    hx = await h.start(client, automation=False, **doc)
    before = await dump(client)
    hx.checkpoints.by_execution[E1] = [h.summary("ckpt-7")]
    hx.runtime.fail(E1)
    await hx.recovery.reconcile()
    result = await hx.recovery.restore_decision(
        "eng-1", records.Choice.RESUME, None, records.Operator()
    )
    assert result.decision.replacement_execution_id == R1
    await hx.recovery.reconcile()
    listed = {a.execution_id for a in await hx.runtime.list_attempts(SWARM)}
    assert listed == {first("eng-2"), R1}
    await roll_back(client, before)
    return hx


async def test_a_pass_writes_the_lost_decision_back_once(redis_client: aioredis.Redis) -> None:
    """The first pass after the loss restores the decision from the replacement's worker: the
    seat at generation 2, the fence with its true reason, the decision as accepted, no Pod
    launched or removed again, no fence `evicted`; a different choice is then refused; the
    next passes write nothing."""
    hx = await lost_decision(redis_client)
    launches = list(hx.runtime.launch_calls)
    report = await hx.recovery.reconcile()
    assert report.restored == [R1]
    assert report.fenced == [] and report.pending == [] and report.missing == []
    seat = await reading.seat(redis_client, SWARM, "eng-1")
    assert seat is not None
    assert (seat.current_execution_id, seat.generation, seat.state) == (
        R1,
        2,
        records.SeatState.REPLACING,
    )
    fence = await reading.fence(redis_client, SWARM, E1)
    assert fence is not None and fence.reason == "oom_killed"
    assert all(fence.released(kind) for kind in records.AUTHORITY_RELEASES)
    decision = await reading.decision(redis_client, SWARM, E1)
    assert decision is not None and decision.state is records.DecisionState.ACCEPTED
    assert decision.choice is records.Choice.RESUME
    assert decision.replacement_execution_id == R1
    assert hx.runtime.launch_calls == launches
    # The replacement's own credential works again (its record is back); the lost one's is
    # revoked again.
    worker = await hx.worker(R1)
    record = await hx.recovery.launch_record(worker)
    assert record.directive.checkpoint_id == "ckpt-7"
    with pytest.raises(errors.Refused) as caught:
        await hx.recovery.restore_decision("eng-1", records.Choice.FRESH, None, records.Operator())
    assert caught.value.message == NOT_PENDING
    again = await hx.recovery.restore_decision(
        "eng-1", records.Choice.RESUME, None, records.Operator()
    )
    assert again.repeated and again.decision.replacement_execution_id == R1
    events = [e for e in await hx.recovery.events() if e.detail.get("action") == "restore_from_pod"]
    assert len(events) == 1 and events[0].detail["reason"] == "oom_killed"
    later = await hx.recovery.reconcile()
    assert later.restored == [] and later.fenced == [] and later.launched == []
    task = await reading.task(redis_client, SWARM, "t-eng-1")
    assert task is not None and task.awaiting == records.RECOVERY_PENDING
    slots = await redis_client.hgetall(keys.slots(SWARM))
    assert R1.encode() in slots and E1.encode() not in slots


@pytest.mark.parametrize("crash_at", [1, 2])
async def test_a_controller_killed_around_the_write_back_does_nothing_twice(
    redis_client: aioredis.Redis, crash_at: int
) -> None:
    """A controller killed right after its Nth write of the pass (the write back first) and
    restarted finishes: one write back, one event, the Pod neither launched nor fenced."""
    hx = await lost_decision(redis_client)
    crash = h.CrashAfter(crash_at)
    await hx.restart(crash)
    with pytest.raises(h.Crash):
        await hx.recovery.reconcile()
    tally = h.CrashAfter()
    await hx.restart(tally)
    for _ in range(3):
        await hx.recovery.reconcile()
    done = crash.done + tally.done
    assert done["restore::restored"] == 1
    assert not any(k.startswith("fence:") for k in done)
    assert not any(k.startswith("accept:") for k in done)
    events = [e for e in await hx.recovery.events() if e.detail.get("action") == "restore_from_pod"]
    assert len(events) == 1
    seat = await reading.seat(redis_client, SWARM, "eng-1")
    assert seat is not None and (seat.current_execution_id, seat.generation) == (R1, 2)


async def test_generations_never_go_backwards(redis_client: aioredis.Redis) -> None:
    """A Pod of a generation the seat has reached or passed is not written back (`known`),
    and writes nothing: with nothing lost (or a replacement launched but not yet recorded as
    launched), a witness changes nothing."""
    hx = await lost_decision(redis_client)
    await hx.recovery.reconcile()  # restored
    attempt = hx.runtime.attempts[R1]
    before = await values(redis_client)
    tally = h.CrashAfter()
    await hx.restart(tally)
    assert await witnessing.restore(hx.recovery.ctx, attempt) == "known"
    assert tally.count == 0  # not even a guarded call that writes nothing
    execution = witnesses.decode(attempt.witness or "")
    assert execution is not None
    older = dataclasses.replace(
        attempt,
        witness=witnesses.encode(
            dataclasses.replace(
                execution,
                execution_id=records.ExecutionId(E1),
                generation=1,
                restores_from_generation=0,
            )
        ),
    )
    assert await witnessing.restore(hx.recovery.ctx, older) == "unreadable"
    assert await values(redis_client) == before


async def test_a_witness_that_skips_a_generation_is_not_guessed(
    redis_client: aioredis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    """Redis lost more than the one step a Pod witnesses (the seat two generations behind):
    nothing is written, the controller says so."""
    hx = await lost_decision(redis_client)
    attempt = hx.runtime.attempts[R1]
    execution = witnesses.decode(attempt.witness or "")
    assert execution is not None
    third = dataclasses.replace(
        execution,
        execution_id=records.ExecutionId(keys.execution_id(SWARM, "eng-1", 3)),
        generation=3,
        restores_from_execution=records.ExecutionId(R1),
        restores_from_generation=2,
    )
    skipping = dataclasses.replace(
        attempt,
        execution_id=third.execution_id,
        generation=3,
        witness=witnesses.encode(third),
    )
    before = await values(redis_client)
    caplog.set_level(logging.WARNING, logger="services.controller.recovery")
    assert await witnessing.restore(hx.recovery.ctx, skipping) == "diverged"
    assert await values(redis_client) == before
    assert any("decision_not_restored" in r.getMessage() for r in caplog.records)


async def test_a_controller_without_the_lease_writes_nothing_back(
    redis_client: aioredis.Redis,
) -> None:
    """Every write under the lease: a controller whose epoch moved on writes nothing."""
    hx = await lost_decision(redis_client)
    before = await values(redis_client)
    await redis_client.incr(keys.epoch(SWARM))
    with pytest.raises(scripting.LeaseLost):
        await witnessing.restore(hx.recovery.ctx, hx.runtime.attempts[R1])
    assert await values(redis_client) == before


async def test_the_runtime_lists_the_witness_it_launched_with(redis_client: aioredis.Redis) -> None:
    """The replacement's spec carries the decision; a first attempt carries none (every
    attempt carries its identity: `pod_identities`)."""
    hx = await lost_decision(redis_client)
    assert pods.ANNOTATION_DECISION in hx.runtime.specs[R1].annotations
    assert set(hx.runtime.specs[first("eng-2")].annotations) == {pods.ANNOTATION_ATTEMPT}
