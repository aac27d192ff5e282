"""Restore outcomes and capture reports (spec: "How the replacement restores", "Hold the
task", "Observing recovery")."""

from __future__ import annotations

import pytest
import redis.asyncio as aioredis

from services.common import directives, errors, tokens
from services.controller.state import reading, records
from tests.integration.controller import harness as h
from tests.integration.controller.harness import SWARM, first, second

C = directives.Continuity
NATIVE = {"recovery": C.NATIVE, "checkpoint_id": "ckpt-7", "session_id": "sess-1", "watermark": 412}


async def resume(client: aioredis.Redis, *, pod_stays: bool = False) -> h.Harness:
    """eng-1 failed after capturing sess-1 at watermark 400; it was resumed natively from
    ckpt-7 (record 412) and its replacement is running (with `pod_stays`, the lost Pod could
    not be removed yet)."""
    hx = await h.start(client)
    e1 = first("eng-1")
    await hx.recovery.report_capture(
        await hx.worker(e1), native_session_id="sess-1", archive_watermark=400
    )
    hx.checkpoints.by_execution[e1] = [h.summary("ckpt-7")]
    hx.runtime.fail(e1)
    hx.runtime.fail_remove = pod_stays
    await hx.recovery.reconcile()
    assert second("eng-1") in hx.runtime.specs
    return hx


@pytest.fixture
async def resumed(redis_client: aioredis.Redis) -> h.Harness:
    return await resume(redis_client)


async def test_outcome_accepted_restores_awaiting_and_counts(resumed: h.Harness) -> None:
    """Spec: the outcome is stored marked verified with the fence's archive_watermark beside the
    restored watermark; the prior awaiting is written back, the outcome stored on the task's
    recovery field and counted in restore_outcomes_by_type."""
    rec = resumed.recovery
    r = await rec.report_restore(await resumed.worker(second("eng-1")), **NATIVE)
    assert not r.repeated and r.outcome.verified
    assert (r.outcome.watermark, r.outcome.archive_watermark) == (412, 400)
    task = await reading.task(resumed.client, SWARM, "t-eng-1")
    assert task is not None and task.awaiting == "worker" and not task.held
    assert task.recovery is not None and task.recovery["status"] == "verified"
    assert task.recovery["archive_watermark"] == 400 and task.recovery["watermark"] == 412
    assert await rec.restore_outcomes_by_type() == {"native": 1, "reconstructed": 0, "fresh": 0}
    card = (await rec.status()).handoffs[0]
    assert card.continuity == "native" and card.decision == "accepted"
    events = [e for e in await rec.events() if e.kind == "outcome"]
    assert len(events) == 1 and events[0].expected_generation == 2


async def test_the_outcome_closes_the_recovery_without_waiting_for_a_pass(
    resumed: h.Harness,
) -> None:
    """Once the outcome is stored, with the lost Pod removed and the replacement launched,
    nothing is left for the seat: the same write takes it off the pass's attention set, and
    the next pass writes nothing for it."""
    assert await reading.attention(resumed.client, SWARM) == ["eng-1"]
    await resumed.recovery.report_restore(await resumed.worker(second("eng-1")), **NATIVE)
    assert await reading.attention(resumed.client, SWARM) == []
    seat = await reading.seat(resumed.client, SWARM, "eng-1")
    assert seat is not None and seat.state is records.SeatState.RUNNING
    writes: list[str] = []
    resumed.recovery.scripts.after_write = lambda name, reply: writes.append(name)
    await resumed.recovery.reconcile()
    assert writes == []


async def test_an_outcome_before_the_lost_pod_is_removed_leaves_the_seat_to_the_pass(
    redis_client: aioredis.Redis,
) -> None:
    """A Pod the runtime could not remove yet keeps the seat on the attention set after the
    outcome; the next pass removes it and settles the seat."""
    hx = await resume(redis_client, pod_stays=True)
    e1 = first("eng-1")
    await hx.recovery.report_restore(await hx.worker(second("eng-1")), **NATIVE)
    assert await reading.attention(redis_client, SWARM) == ["eng-1"]
    hx.runtime.fail_remove = False
    await hx.recovery.reconcile()
    assert await reading.attention(redis_client, SWARM) == []
    fence = await reading.fence(redis_client, SWARM, e1)
    assert fence is not None and fence.released(records.ReleaseKind.POD)


async def test_identical_second_report_returns_stored_and_different_is_refused(
    resumed: h.Harness,
) -> None:
    """Spec: a second identical report returns the stored outcome; a different one is
    refused."""
    worker = await resumed.worker(second("eng-1"))
    stored = await resumed.recovery.report_restore(worker, **NATIVE)
    again = await resumed.recovery.report_restore(worker, **NATIVE)
    assert again.repeated and again.outcome == stored.outcome
    with pytest.raises(errors.Refused, match="different outcome"):
        await resumed.recovery.report_restore(worker, **{**NATIVE, "watermark": 413})
    assert await resumed.recovery.restore_outcomes_by_type() == {
        "native": 1,
        "reconstructed": 0,
        "fresh": 0,
    }


@pytest.mark.parametrize(
    ("field", "change"),
    [
        ("recovery", {"recovery": C.RECONSTRUCTED, "session_id": None}),
        (
            "recovery",
            {"recovery": C.FRESH, "checkpoint_id": None, "session_id": None, "watermark": None},
        ),
        ("checkpoint_id", {"checkpoint_id": "ckpt-6"}),
        ("session_id", {"session_id": "sess-2"}),
    ],
)
async def test_outcome_that_differs_from_the_directive_is_refused(
    resumed: h.Harness, field: str, change: dict[str, object]
) -> None:
    """Spec: accepted only when its continuity type, checkpoint and session id equal the
    accepted directive; a restore never reports more continuity than it delivered."""
    with pytest.raises(errors.Refused) as caught:
        await resumed.recovery.report_restore(
            await resumed.worker(second("eng-1")), **{**NATIVE, **change}
        )  # type: ignore[arg-type]
    assert caught.value.reason == "outcome_mismatch" and field in caught.value.message
    assert await reading.outcome(resumed.client, SWARM, second("eng-1")) is None
    task = await reading.task(resumed.client, SWARM, "t-eng-1")
    assert task is not None and task.awaiting == "recovery_pending"


async def test_outcome_only_from_the_replacements_own_credential(resumed: h.Harness) -> None:
    """Spec: the controller accepts an outcome only from the replacement's own worker
    credential (not the operator, not another attempt, not the fenced one)."""
    for caller in (records.Operator(), resumed.master(), await resumed.worker(first("eng-2"))):
        with pytest.raises(errors.Refusal):
            await resumed.recovery.report_restore(caller, **NATIVE)
    assert await reading.outcome(resumed.client, SWARM, second("eng-1")) is None


async def test_zombie_fenced_attempt_is_refused_everything(resumed: h.Harness) -> None:
    """Issue 3 (zombie): the fenced attempt keeps running after its replacement is admitted and
    tries to report a capture and an outcome; every call is refused and nothing it sent is
    stored."""
    token = resumed.runtime.specs[first("eng-1")].worker_credential
    zombie = records.Worker(
        await tokens.check_worker_credential(h.GRANT_KEY, token, _NoRevocations())
    )
    before = await reading.execution(resumed.client, SWARM, first("eng-1"))
    with pytest.raises(errors.ForbiddenScope):
        await resumed.recovery.report_capture(zombie, native_session_id="z", archive_watermark=9)
    with pytest.raises(errors.ForbiddenScope):
        await resumed.recovery.report_restore(zombie, **NATIVE)
    with pytest.raises(errors.ForbiddenScope):
        await resumed.recovery.report_refusal(zombie, "corrupt_object")
    assert await reading.execution(resumed.client, SWARM, first("eng-1")) == before
    assert await reading.outcome(resumed.client, SWARM, first("eng-1")) is None


class _NoRevocations:
    """Lets the test present a revoked credential to the core, as a compromised API layer
    would: the core itself still refuses it."""

    async def is_revoked(self, swarm: str, token_id: str) -> bool:
        return False

    async def revoke(self, swarm: str, token_id: str, expires_at: int) -> None:
        return None


async def test_outcome_refused_once_the_replacement_is_no_longer_current(
    resumed: h.Harness,
) -> None:
    """Spec: only while that replacement is still the seat's current attempt."""
    worker = await resumed.worker(second("eng-1"))
    resumed.runtime.fail(second("eng-1"), "node_lost")
    await resumed.recovery.reconcile()
    with pytest.raises(errors.ForbiddenScope):
        await resumed.recovery.report_restore(worker, **NATIVE)


async def test_reported_refusal_keeps_the_decision_accepted(resumed: h.Harness) -> None:
    """Spec (Refusals, Troubleshooting): a restore that cannot deliver stops with a reason; the
    decision stays accepted and the task keeps waiting; the refusal is kept for status."""
    rec = resumed.recovery
    await rec.report_refusal(await resumed.worker(second("eng-1")), "version_changed")
    d = await reading.decision(resumed.client, SWARM, first("eng-1"))
    assert d is not None and d.state is records.DecisionState.ACCEPTED
    task = await reading.task(resumed.client, SWARM, "t-eng-1")
    assert task is not None and task.awaiting == "recovery_pending"
    card = (await rec.status()).handoffs[0]
    assert card.refusal == "version_changed" and card.continuity == "pending"
    # Choosing again returns the same decision.
    again = await rec.restore_decision("eng-1", records.Choice.RESUME, None, records.Operator())
    assert again.repeated and again.decision == d


async def test_a_first_attempt_has_no_restore_to_report(hx: h.Harness) -> None:
    """Only a replacement reports a restore outcome."""
    with pytest.raises(errors.Refused) as caught:
        await hx.recovery.report_restore(
            await hx.worker(first("eng-1")),
            recovery=C.FRESH,
            checkpoint_id=None,
            session_id=None,
            watermark=None,
        )
    assert caught.value.reason == "not_a_replacement"


async def test_capture_from_the_running_attempt_is_stored(hx: h.Harness) -> None:
    """Spec (ReportCapture): a running attempt reports its native session id and archive
    watermark, which a later fence records."""
    await hx.recovery.report_capture(
        await hx.worker(first("eng-1")),
        native_session_id="s",
        archive_watermark=5,
        checkpoint_id="ckpt-1",
    )
    held = await reading.execution(hx.client, SWARM, first("eng-1"))
    assert held is not None
    assert (held.native_session_id, held.archive_watermark, held.captured_checkpoint_id) == (
        "s",
        5,
        "ckpt-1",
    )
