"""The Decide step through the real recovery pass and Redis (spec: "Decide", "Rollback",
"Limitations", "Configuration")."""

from __future__ import annotations

import pytest
import redis.asyncio as aioredis

from services.common import directives, errors
from services.controller.state import reading, records
from tests.integration.controller import harness as h
from tests.integration.controller.harness import SWARM, first, second


async def fail_with(
    hx: h.Harness,
    *,
    reason: str = "oom_killed",
    session: str | None = "sess-1",
    checkpoint: h.ckpt_records.Summary | None = None,
) -> str:
    e1 = first("eng-1")
    if session is not None:
        await hx.recovery.report_capture(
            await hx.worker(e1), native_session_id=session, archive_watermark=400
        )
    if checkpoint is not None:
        hx.checkpoints.by_execution[e1] = [checkpoint]
    hx.runtime.fail(e1, reason)
    await hx.recovery.reconcile()
    return e1


async def decision_of(hx: h.Harness, e: str) -> records.Decision:
    d = await reading.decision(hx.client, SWARM, e)
    assert d is not None
    return d


async def test_native_resume_without_asking(hx: h.Harness) -> None:
    """Spec: all four conditions hold → resumed natively without asking; one replacement on
    the same seat with the next generation launches with the native directive."""
    e1 = await fail_with(hx, checkpoint=h.summary("ckpt-7"))
    d = await decision_of(hx, e1)
    assert d.state is records.DecisionState.ACCEPTED
    assert d.source is records.DecisionSource.AUTOMATIC
    assert d.directive == directives.Directive(
        "ckpt-7", directives.Continuity.NATIVE, "sess-1", 412
    )
    assert d.replacement_execution_id == second("eng-1") and d.replacement_generation == 2
    seat = await reading.seat(hx.client, SWARM, "eng-1")
    assert seat is not None and seat.current_execution_id == second("eng-1")
    assert sorted(hx.runtime.specs) == [first("eng-1"), second("eng-1"), first("eng-2")]
    replacement = await reading.execution(hx.client, SWARM, second("eng-1"))
    assert replacement is not None and replacement.launched


@pytest.mark.parametrize(
    ("why", "kwargs"),
    [
        ("image_pull", {"reason": "image_pull", "checkpoint": h.summary("ckpt-7")}),
        ("no session held", {"session": None, "checkpoint": h.summary("ckpt-7")}),
        ("context-only newest", {"checkpoint": h.summary("ckpt-7", native=False)}),
        ("other image's checkpoint", {"checkpoint": h.summary("ckpt-7", key="img:old")}),
        ("no checkpoint", {}),
    ],
)
async def test_each_auto_resume_condition_failing_alone_waits(
    hx: h.Harness, why: str, kwargs: dict[str, object]
) -> None:
    """Spec: otherwise the seat's attempt moves to awaiting-decision and the decision stays
    recovery_pending (one condition failing at a time)."""
    e1 = await fail_with(hx, **kwargs)  # type: ignore[arg-type]
    d = await decision_of(hx, e1)
    assert d.state is records.DecisionState.RECOVERY_PENDING, why
    seat = await reading.seat(hx.client, SWARM, "eng-1")
    assert seat is not None and seat.state is records.SeatState.AWAITING_DECISION
    assert second("eng-1") not in hx.runtime.specs
    status = await hx.recovery.status()
    card = status.handoffs[0]
    assert card.decision == "recovery_pending" and card.continuity == "pending"


async def test_automation_off_waits(redis_client: aioredis.Redis) -> None:
    """Spec: restore automation must be on; off, every failure waits for a decision."""
    hx = await h.start(redis_client, automation=False)
    e1 = await fail_with(hx, checkpoint=h.summary("ckpt-7"))
    assert (await decision_of(hx, e1)).state is records.DecisionState.RECOVERY_PENDING


async def test_pause_waits_and_survives_a_restart(hx: h.Harness) -> None:
    """Spec (Rollback): while paused every failure is fenced and released as usual but waits
    for an explicit decision; the pause survives a controller restart."""
    await hx.recovery.pause()
    await hx.restart()  # a new Recovery object and holder
    assert await hx.recovery.paused()
    e1 = await fail_with(hx, checkpoint=h.summary("ckpt-7"))
    fence = await reading.fence(hx.client, SWARM, e1)
    assert fence is not None and {r.kind for r in fence.releases} == set(records.ReleaseKind)
    assert (await decision_of(hx, e1)).state is records.DecisionState.RECOVERY_PENDING
    status = await hx.recovery.status()
    assert status.paused
    card = status.handoffs[0]
    assert card.reason == "oom_killed; native resume from ckpt-7 at record 412"
    assert card.resume_available and card.resume_label == "Resume native"
    # Unpausing does not decide a waiting attempt on its own.
    await hx.recovery.unpause()
    await hx.recovery.reconcile()
    assert (await decision_of(hx, e1)).state is records.DecisionState.RECOVERY_PENDING


async def test_legacy_spawn_replaced_fresh_while_automation_runs(
    redis_client: aioredis.Redis,
) -> None:
    """Spec (Limitations): a superseded legacy spawn is replaced fresh without a choice while
    automation is on and not paused."""
    hx = await h.start(redis_client, legacy=True)
    e1 = await fail_with(hx, checkpoint=h.summary("ckpt-7"))
    d = await decision_of(hx, e1)
    assert d.state is records.DecisionState.ACCEPTED
    assert d.source is records.DecisionSource.LEGACY_SPAWN
    assert d.directive == directives.FRESH
    assert second("eng-1") in hx.runtime.specs


@pytest.mark.parametrize("how", ["paused", "automation off"])
async def test_legacy_spawn_waits_when_paused_or_off(
    redis_client: aioredis.Redis, how: str
) -> None:
    """Spec (Limitations): with automation off or paused a legacy spawn waits like any other."""
    hx = await h.start(redis_client, legacy=True, automation=how != "automation off")
    if how == "paused":
        await hx.recovery.pause()
    e1 = await fail_with(hx)
    assert (await decision_of(hx, e1)).state is records.DecisionState.RECOVERY_PENDING


async def test_pause_set_between_read_and_write_still_waits(hx: h.Harness) -> None:
    """The accept script re-checks the pause key: an automatic decision never lands after the
    switch was set, however the two interleave."""
    hx.checkpoints.by_execution[first("eng-1")] = [h.summary("ckpt-7")]
    original = hx.checkpoints.newest_compatible

    async def pause_meanwhile(scope: records.AttemptScope, key: str):  # type: ignore[no-untyped-def]
        found = await original(scope, key)
        await hx.recovery.pause()
        return found

    hx.checkpoints.newest_compatible = pause_meanwhile  # type: ignore[method-assign]
    e1 = await fail_with(hx)
    assert (await decision_of(hx, e1)).state is records.DecisionState.RECOVERY_PENDING


async def test_without_a_store_every_failure_waits_and_only_fresh_succeeds(
    redis_client: aioredis.Redis,
) -> None:
    """Spec (Configuration): with no checkpoint store configured the controller lists no
    checkpoints, so every failure waits for a decision and only fresh succeeds."""
    hx = await h.start(redis_client, checkpoints=False)
    e1 = await fail_with(hx)
    assert (await decision_of(hx, e1)).state is records.DecisionState.RECOVERY_PENDING
    status = await hx.recovery.status()
    assert not status.handoffs[0].resume_available
    with pytest.raises(errors.Refused, match="no complete compatible checkpoint"):
        await hx.recovery.restore_decision(e1, records.Choice.RESUME, None, records.Operator())
    result = await hx.recovery.restore_decision(e1, records.Choice.FRESH, None, records.Operator())
    assert result.decision.directive == directives.FRESH
