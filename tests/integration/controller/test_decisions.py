"""Choosing resume or fresh, repeated and conflicting requests, recorded requests (spec:
"Choosing resume or fresh", "Repeated and conflicting requests"), called on the recovery core.

The scenarios an operator sees through the Recovery gRPC service are in
tests/integration/api/test_decisions.py. These are the ones only the core shows: a refusal
writes nothing at all (the whole database before and after, which a running controller's own
passes would blur), principals the transport never builds are refused too, the grants a launch
record carries, how many launches, events and applied requests one decision makes."""

from __future__ import annotations

import asyncio

import pytest
import redis.asyncio as aioredis

from services.common import directives, errors, revocations, tokens
from services.controller.state import reading, records
from tests.integration.controller import harness as h
from tests.integration.controller.harness import SWARM, first, second

C = directives.Continuity
RESUME, FRESH = records.Choice.RESUME, records.Choice.FRESH
NOT_PENDING = "no recovery decision is pending for this attempt"


@pytest.fixture
async def waiting(redis_client: aioredis.Redis) -> h.Harness:
    """eng-1's first attempt held session sess-1 and failed; automation is off, so it waits."""
    hx = await h.start(redis_client, automation=False)
    e1 = first("eng-1")
    await hx.recovery.report_capture(
        await hx.worker(e1), native_session_id="sess-1", archive_watermark=400
    )
    hx.runtime.fail(e1)
    await hx.recovery.reconcile()
    return hx


async def snapshot(client: aioredis.Redis) -> dict[bytes, object]:
    """Every key of the database with its value (the event stream by length)."""
    out: dict[bytes, object] = {}
    for key in await client.keys("*"):
        kind = (await client.type(key)).decode()
        if kind == "hash":
            out[key] = await client.hgetall(key)
        elif kind == "string":
            out[key] = await client.get(key)
        elif kind == "stream":
            out[key] = await client.xlen(key)
        elif kind == "zset":
            out[key] = await client.zrange(key, 0, -1, withscores=True)
        elif kind == "set":
            out[key] = await client.smembers(key)
    return out


# Who may choose.


@pytest.mark.parametrize(
    ("caller", "agent"),
    [
        ("other master naming master@example-1", "master@example-1"),
        ("display-name spoof", "master@example-1"),
        ("master of another swarm", "master@example-1"),
        ("no agent named", None),
        ("worker credential", "master@example-1"),
    ],
)
async def test_everyone_else_is_refused_forbidden_scope(
    waiting: h.Harness, caller: str, agent: str | None
) -> None:
    """Spec: any other caller is refused with forbidden_scope; the choice is never inferred
    from a display name."""
    principal: records.Principal
    if caller == "other master naming master@example-1":
        principal = waiting.master("master@example-2", h.OTHER_SECRET)
    elif caller == "display-name spoof":
        # Claims the agent name with a credential that is not bound to it.
        principal = records.Master(SWARM, "master@example-1", tokens.hash_secret("guess" * 5))
    elif caller == "master of another swarm":
        principal = records.Master("other", "master@example-1", tokens.hash_secret(h.MASTER_SECRET))
    elif caller == "no agent named":
        principal = waiting.master()
    else:
        principal = await waiting.worker(first("eng-2"))
    before = await snapshot(waiting.client)
    for call in (waiting.recovery.restore_decision, waiting.recovery.request_restore_decision):
        with pytest.raises(errors.ForbiddenScope) as caught:
            await call("eng-1", FRESH, agent, principal)
        assert caught.value.reason == "forbidden_scope"
    assert await snapshot(waiting.client) == before


async def test_unregistered_master_is_refused(waiting: h.Harness) -> None:
    """A master removed from the swarm document (re-applied) can no longer choose."""
    await waiting.recovery.apply_swarm(h.document(automation=False, masters=()))
    with pytest.raises(errors.ForbiddenScope):
        await waiting.recovery.restore_decision(
            "eng-1", FRESH, "master@example-1", waiting.master()
        )


# What each choice picks.


async def test_resume_refused_without_checkpoint_and_seat_keeps_waiting(
    waiting: h.Harness,
) -> None:
    """Spec: with no usable checkpoint the request is refused with `no complete compatible
    checkpoint to resume from` and the seat keeps waiting."""
    waiting.checkpoints.by_execution[first("eng-1")] = [h.summary("ckpt-7", key="img:0")]
    before = await snapshot(waiting.client)
    with pytest.raises(errors.Refused) as caught:
        await waiting.recovery.restore_decision("eng-1", RESUME, None, records.Operator())
    assert caught.value.message == "no complete compatible checkpoint to resume from"
    assert await snapshot(waiting.client) == before
    seat = await reading.seat(waiting.client, SWARM, "eng-1")
    assert seat is not None and seat.state is records.SeatState.AWAITING_DECISION


async def test_launch_record_grants_read_fenced_scope_and_write_own(waiting: h.Harness) -> None:
    """Spec (Replace): the replacement's restore grant reads the fenced attempt's scope, its
    capture grant writes its own; the directive is the accepted one."""
    waiting.checkpoints.by_execution[first("eng-1")] = [h.summary("ckpt-7")]
    await waiting.recovery.restore_decision("eng-1", RESUME, None, records.Operator())
    record = await waiting.recovery.launch_record(await waiting.worker(second("eng-1")))
    assert record.restores_from_generation == 1
    rev = revocations.RedisRevocations(waiting.client)
    assert record.restore_grant is not None
    restore = await tokens.check_grant(h.GRANT_KEY, record.restore_grant, rev)
    capture = await tokens.check_grant(h.GRANT_KEY, record.capture_grant, rev)
    assert (restore.execution_id, restore.execution_generation) == (first("eng-1"), 1)
    assert restore.rights == {tokens.Right.READ}
    assert (capture.execution_id, capture.execution_generation) == (second("eng-1"), 2)
    assert capture.rights == {tokens.Right.READ, tokens.Right.WRITE}


# Repeated and conflicting.


async def test_a_different_choice_after_acceptance_is_refused(waiting: h.Harness) -> None:
    """Spec: a different choice after a decision was accepted is refused with `no recovery
    decision is pending for this attempt`, and the accepted decision, fence, directive and
    ledger row stay as they were."""
    waiting.checkpoints.by_execution[first("eng-1")] = [h.summary("ckpt-7")]
    await waiting.recovery.restore_decision("eng-1", RESUME, None, records.Operator())
    before = await snapshot(waiting.client)
    with pytest.raises(errors.Refused) as caught:
        await waiting.recovery.restore_decision("eng-1", FRESH, None, records.Operator())
    assert caught.value.message == NOT_PENDING
    assert await snapshot(waiting.client) == before


async def test_100_concurrent_identical_decisions_admit_one_replacement(
    waiting: h.Harness,
) -> None:
    """Issue 3: 100 concurrent identical RestoreDecision calls for one attempt admit exactly one
    replacement (the Lua script is the arbiter)."""
    waiting.checkpoints.by_execution[first("eng-1")] = [h.summary("ckpt-7")]
    results = await asyncio.gather(
        *(
            waiting.recovery.restore_decision(
                first("eng-1"), RESUME, "master@example-1", waiting.master()
            )
            for _ in range(100)
        )
    )
    assert sum(not r.repeated for r in results) == 1
    assert len({r.decision for r in results}) == 1
    assert waiting.runtime.launch_calls.count(second("eng-1")) == 1
    executions = [k for k in await waiting.client.keys("*:execution:*")]
    assert len(executions) == 3  # two first attempts and one replacement
    events = [
        e
        for e in await waiting.recovery.events()
        if e.kind == "recovery" and e.detail.get("decision") == "accepted"
    ]
    assert len(events) == 1


# Recorded requests.


async def test_request_recorded_then_applied_next_pass_then_dropped(waiting: h.Harness) -> None:
    """Spec: for a Kubernetes attempt the command only records the request; the controller
    applies it under its lease on its next recovery pass and then drops the request. Requests
    are deduplicated by attempt and choice."""
    rec = waiting.recovery
    first_call = await rec.request_restore_decision("eng-1", FRESH, None, records.Operator())
    again = await rec.request_restore_decision(first("eng-1"), FRESH, None, records.Operator())
    assert first_call.recorded and not again.recorded
    assert second("eng-1") not in waiting.runtime.specs
    assert len(await reading.requests(waiting.client, SWARM)) == 1
    report = await rec.reconcile()
    assert report.requests_applied == 1
    assert await reading.requests(waiting.client, SWARM) == []
    d = await reading.decision(waiting.client, SWARM, first("eng-1"))
    assert d is not None and d.state is records.DecisionState.ACCEPTED
    assert second("eng-1") in waiting.runtime.specs
    # A request repeating the accepted choice is applied as a repeat and dropped.
    await rec.request_restore_decision("eng-1", FRESH, None, records.Operator())
    assert (await rec.reconcile()).requests_applied == 1
    assert await reading.requests(waiting.client, SWARM) == []
