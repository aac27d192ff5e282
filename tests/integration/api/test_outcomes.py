"""Restore outcomes reported over the real ReportRestore client stream (progress, then one
outcome), stored by the real controller on real Redis (spec: "How the replacement restores",
"Hold the task", "Observing recovery")."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import grpc
import pytest
from agentihooks.swarm.v2 import recovery_pb2 as pb
from agentihooks.swarm.v2 import types_pb2

from services.controller.state import reading
from tests.support import controller_server as cs
from tests.support import ports

E2, R2 = "example.eng-2.1", "example.eng-2.2"
SESSION = "0b0c7a1e-1111-2222-3333-444455556666"
NATIVE, RECONSTRUCTED, FRESH = (
    types_pb2.CONTINUITY_NATIVE,
    types_pb2.CONTINUITY_RECONSTRUCTED,
    types_pb2.CONTINUITY_FRESH,
)
ZERO = {"native": 0, "reconstructed": 0, "fresh": 0}


def stream(
    recovery: types_pb2.Continuity = NATIVE,
    checkpoint_id: str = "ckpt-7",
    session_id: str = SESSION,
    watermark: int | None = 412,
) -> Iterator[pb.RestoreReport]:
    """What a restorer sends: its steps' progress, then the one outcome."""
    for step in ("verify", "registration", "native", "source"):
        yield pb.RestoreReport(progress=pb.RestoreProgress(step=step, status="ok"))
    outcome = types_pb2.RestoreOutcome(
        execution_id=R2, recovery=recovery, checkpoint_id=checkpoint_id, session_id=session_id
    )
    if watermark is not None:
        outcome.watermark = watermark
    yield pb.RestoreReport(outcome=outcome)


class Resumed:
    """eng-2's first attempt reported SESSION at archive watermark 400, checkpoint ckpt-7
    (native, record 412) was stored, and after an OOM kill the controller resumed it natively
    as eng-2.2; the fenced attempt's credential was read from its Secret before the fence."""

    def __init__(self, ctl: cs.Controller, fenced_token: str) -> None:
        self.ctl = ctl
        self.fenced_token = fenced_token

    @property
    def token(self) -> str:
        return cs.worker_credential(self.ctl, R2)

    async def report(self, token: str | None = None, **fields: object) -> pb.RestoreReportAck:
        ack: pb.RestoreReportAck = await self.ctl.stub.ReportRestore(
            stream(**fields),  # type: ignore[arg-type]
            metadata=cs.md(token or self.token),
        )
        return ack

    async def nothing_stored(self) -> None:
        assert await reading.outcome(self.ctl.redis, "example", R2) is None
        status = await self.ctl.status()
        task = next(t for t in status.tasks if t.seat == "eng-2")
        assert task.awaiting == "recovery_pending"
        assert json.loads(task.recovery_json)["status"] == "accepted"
        assert dict(status.restore_outcomes_by_type) == ZERO
        card = next(c for c in status.handoffs if c.seat == "eng-2")
        assert (card.continuity, card.decision) == ("pending", "accepted")


@pytest.fixture
async def resumed(controller: cs.Controller) -> Resumed:
    await controller.apply()
    await cs.wait_for_pod(controller, "example.eng-1.1")
    await cs.wait_for_pod(controller, E2)
    fenced_token = cs.worker_credential(controller, E2)
    await controller.stub.ReportCapture(
        pb.ReportCaptureRequest(native_session_id=SESSION, archive_watermark=400),
        metadata=cs.md(fenced_token),
    )
    await cs.put_checkpoint(controller.checkpoint_root, "eng-2")
    controller.fail(E2, cs.terminated("OOMKilled", 137))
    await cs.wait_for_pod(controller, R2)
    return Resumed(controller, fenced_token)


async def test_an_outcome_from_the_replacements_own_credential_is_stored_verified(
    resumed: Resumed,
) -> None:
    """Spec: the controller accepts an outcome only from the replacement's own worker
    credential … when its continuity type, checkpoint and session id equal the accepted
    directive. The stored outcome is marked verified and keeps the fence's archive_watermark
    beside the restored watermark. Once the outcome arrives the controller writes the prior
    value back (awaiting) and stores the outcome on the task's recovery field;
    Recovery.restore_outcomes_by_type counts it; the card shows the continuity type."""
    ctl = resumed.ctl
    before = await ctl.status()
    assert next(t for t in before.tasks if t.seat == "eng-2").awaiting == "recovery_pending"
    ack = await resumed.report()
    assert not ack.repeated
    assert ack.outcome.verified and ack.outcome.execution_id == R2
    assert (ack.outcome.recovery, ack.outcome.checkpoint_id, ack.outcome.session_id) == (
        NATIVE,
        "ckpt-7",
        SESSION,
    )
    assert (ack.outcome.watermark, ack.outcome.archive_watermark) == (412, 400)
    stored = await reading.outcome(ctl.redis, "example", R2)
    assert stored is not None and stored.verified and stored.archive_watermark == 400
    fence = await reading.fence(ctl.redis, "example", E2)
    assert fence is not None and fence.archive_watermark == 400

    status = await ctl.status()
    task = next(t for t in status.tasks if t.seat == "eng-2")
    assert task.awaiting == "worker"
    recovery = json.loads(task.recovery_json)
    assert recovery["status"] == "verified" and recovery["recovery"] == "native"
    assert (recovery["watermark"], recovery["archive_watermark"]) == (412, 400)
    assert recovery["fenced_execution_id"] == E2
    assert dict(status.restore_outcomes_by_type) == {**ZERO, "native": 1}
    card = next(c for c in status.handoffs if c.seat == "eng-2")
    assert (card.continuity, card.decision, card.replacement_execution_id) == (
        "native",
        "accepted",
        R2,
    )
    seat = next(s for s in status.seats if s.seat == "eng-2")
    assert (seat.current_execution_id, seat.state) == (R2, "running")
    metrics = (await ctl.hub.render_metrics()).decode()
    assert 'agentihooks_restore_outcomes_total{swarm="example",type="native"} 1.0' in metrics
    events = await cs.watch(ctl, lambda seen: any(e.kind == "outcome" for e in seen))
    outcome = next(e for e in events if e.kind == "outcome")
    assert (outcome.execution_id, outcome.expected_generation, outcome.observed_generation) == (
        R2,
        2,
        2,
    )


async def test_an_identical_second_report_returns_the_stored_outcome_and_a_different_one_is_refused(
    resumed: Resumed,
) -> None:
    """Spec: a second identical report returns the stored outcome; a different one is refused."""
    first = await resumed.report()
    again = await resumed.report()
    assert again.repeated and again.outcome == first.outcome
    error = await cs.refusal(resumed.report(watermark=413))
    assert error.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert cs.reason_of(error) == "outcome_conflict"
    status = await resumed.ctl.status()
    assert dict(status.restore_outcomes_by_type) == {**ZERO, "native": 1}
    assert await reading.outcome(resumed.ctl.redis, "example", R2) is not None


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        pytest.param({"recovery": RECONSTRUCTED, "session_id": ""}, "recovery", id="continuity"),
        pytest.param(
            {"recovery": FRESH, "checkpoint_id": "", "session_id": "", "watermark": None},
            "recovery",
            id="continuity-fresh",
        ),
        pytest.param({"checkpoint_id": "ckpt-6"}, "checkpoint_id", id="checkpoint"),
        pytest.param({"session_id": "another-session"}, "session_id", id="session-id"),
    ],
)
async def test_an_outcome_that_differs_from_the_directive_is_refused(
    resumed: Resumed, fields: dict[str, Any], field: str
) -> None:
    """Spec: … only when its continuity type, checkpoint and session id equal the accepted
    directive; a restore never reports more (or other) continuity than it delivered. Nothing
    is stored and the task keeps waiting."""
    error = await cs.refusal(resumed.report(**fields))
    assert error.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert cs.reason_of(error) == "outcome_mismatch"
    assert field in (error.details() or "")
    await resumed.nothing_stored()
    # The right report is still accepted afterwards.
    assert (await resumed.report()).outcome.verified


async def test_an_outcome_from_any_other_credential_is_refused(resumed: Resumed) -> None:
    """Spec: the controller accepts an outcome only from the replacement's own worker
    credential: not the fenced attempt's (revoked), not another seat's attempt, not a token
    minted with the same claims but another id, not the operator or a master."""
    ctl = resumed.ctl
    refusals = {
        "fenced attempt": resumed.fenced_token,
        "forged replacement": ctl.worker_token(R2, 2, "eng-2"),
        "operator": cs.OPERATOR_TOKEN,
    }
    for who, token in refusals.items():
        error = await cs.refusal(resumed.report(token))
        assert error.code() == grpc.StatusCode.PERMISSION_DENIED, who
        assert cs.reason_of(error) == "forbidden_scope", who
    # A master credential names no attempt; worker calls carry no swarm to find the master in,
    # so it is refused as unknown (UNAUTHENTICATED) today: see the master-of-another-swarm bug.
    master = await cs.refusal(resumed.report(cs.MASTER_SECRET))
    assert master.code() in (grpc.StatusCode.PERMISSION_DENIED, grpc.StatusCode.UNAUTHENTICATED)
    other_seat = await cs.refusal(resumed.report(cs.worker_credential(ctl, "example.eng-1.1")))
    assert other_seat.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert cs.reason_of(other_seat) == "not_a_replacement"
    await resumed.nothing_stored()
    assert await reading.outcome(ctl.redis, "example", "example.eng-1.1") is None
    assert await reading.outcome(ctl.redis, "example", E2) is None


async def test_an_outcome_is_refused_once_the_replacement_is_no_longer_current(
    resumed: Resumed,
) -> None:
    """Spec: … only while that replacement is still the seat's current attempt."""
    token = resumed.token
    resumed.ctl.fail(R2, cs.terminated("Error", 1))

    async def fenced() -> None:
        assert await reading.fence(resumed.ctl.redis, "example", R2) is not None

    await ports.eventually(fenced, timeout=10)
    error = await cs.refusal(resumed.report(token))
    assert error.code() == grpc.StatusCode.PERMISSION_DENIED
    assert await reading.outcome(resumed.ctl.redis, "example", R2) is None


async def test_a_reported_refusal_leaves_the_decision_accepted(resumed: Resumed) -> None:
    """Spec (Refusals): a restore that cannot deliver its directive stops the launch with a
    reason; it never reports a fresh conversation as resumed, and the accepted decision is left
    in place (Troubleshooting: choosing again returns the same decision)."""
    ctl = resumed.ctl
    ack = await ctl.stub.ReportRestore(
        iter(
            [
                pb.RestoreReport(progress=pb.RestoreProgress(step="verify", status="ok")),
                pb.RestoreReport(refusal=pb.RestoreRefusal(reason="version_changed")),
            ]
        ),
        metadata=cs.md(resumed.token),
    )
    assert not ack.HasField("outcome")
    assert await reading.refusal(ctl.redis, "example", R2) == "version_changed"
    await resumed.nothing_stored()
    again = await ctl.stub.RestoreDecision(
        pb.RestoreDecisionRequest(swarm="example", seat="eng-2", choice=types_pb2.CHOICE_RESUME),
        metadata=cs.OPERATOR,
    )
    assert again.repeated and again.decision.replacement_execution_id == R2


@pytest.mark.parametrize(
    "reports",
    [
        pytest.param([pb.RestoreReport(progress=pb.RestoreProgress(step="verify"))], id="none"),
        pytest.param(
            [pb.RestoreReport(refusal=pb.RestoreRefusal(reason="x")), *list(stream())[-1:]],
            id="two",
        ),
    ],
)
async def test_a_stream_without_exactly_one_outcome_is_malformed(
    resumed: Resumed, reports: list[pb.RestoreReport]
) -> None:
    """The contract (recovery.proto): progress, then exactly one outcome or refusal; anything
    else is malformed and stores nothing."""
    error = await cs.refusal(
        resumed.ctl.stub.ReportRestore(iter(reports), metadata=cs.md(resumed.token))
    )
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    await resumed.nothing_stored()
    assert await reading.refusal(resumed.ctl.redis, "example", R2) is None
