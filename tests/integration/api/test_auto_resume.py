"""Decide, over the real Recovery gRPC server, real Redis and the Kubernetes emulator: the
controller resumes natively without asking exactly when the spec's four conditions hold, the
pause switch (and its survival of a restart), and the legacy-spawn exception (spec: "Decide",
"Rollback", "Limitations")."""

from __future__ import annotations

import datetime
import json
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from agentihooks.swarm.v2 import recovery_pb2 as pb
from agentihooks.swarm.v2 import types_pb2

from services.controller.state import reading
from tests.support import controller_server as cs
from tests.support import ports

E2, R2 = "example.eng-2.1", "example.eng-2.2"
SESSION = "0b0c7a1e-1111-2222-3333-444455556666"
OTHER_IMAGE = "registry.local/agent-worker:1.5.0"
SEAT, EXECUTION = "agentihooks.io/seat", "agentihooks.io/execution"


async def capture(ctl: cs.Controller, execution_id: str, session: str | None = SESSION) -> None:
    """The running attempt reports its session and archive watermark with its own credential."""
    await ctl.stub.ReportCapture(
        pb.ReportCaptureRequest(
            native_session_id=session or "", archive_watermark=400, checkpoint_id="ckpt-7"
        ),
        metadata=cs.md(cs.worker_credential(ctl, execution_id)),
    )


async def launched(ctl: cs.Controller, doc: str | None = None) -> None:
    await ctl.apply(doc)
    await cs.wait_for_pod(ctl, "example.eng-1.1")
    await cs.wait_for_pod(ctl, E2)


async def pending_card(ctl: cs.Controller) -> Any:
    """The card once the pass decided to wait (the decision record reads recovery_pending);
    no replacement was launched, and another pass launches none either."""

    async def decided() -> None:
        decision = await reading.decision(ctl.redis, "example", E2)
        assert decision is not None and decision.state.value == "recovery_pending", decision

    await ports.eventually(decided, timeout=10)
    await ctl.reconcile()
    card = await cs.card(ctl, "eng-2")
    assert card is not None and card.decision == "recovery_pending", card
    status = await ctl.status()
    seat = next(s for s in status.seats if s.seat == "eng-2")
    assert (seat.current_execution_id, seat.state) == (E2, "awaiting_decision")
    assert next(t for t in status.tasks if t.seat == "eng-2").awaiting == "recovery_pending"
    assert ctl.pod_of(R2) is None
    return card


async def accepted_card(ctl: cs.Controller) -> Any:
    async def accepted() -> Any:
        card = await cs.card(ctl, "eng-2")
        assert card is not None and card.decision == "accepted", card
        return card

    return await ports.eventually(accepted, timeout=10)


async def test_all_four_conditions_resume_natively_without_asking(
    controller: cs.Controller,
) -> None:
    """Spec (Decide): the controller resumes natively without asking when restore automation is
    on and not paused, the reason is not image_pull, the attempt held a native session id, and
    the newest complete checkpoint compatible with the current worker image is a native one.
    The directive names that checkpoint and the session the attempt reported."""
    await launched(controller)
    await capture(controller, E2)
    await cs.put_checkpoint(controller.checkpoint_root, "eng-2", checkpoint_id="ckpt-6", sequence=6)
    await cs.put_checkpoint(controller.checkpoint_root, "eng-2", checkpoint_id="ckpt-7", sequence=7)
    # Newer, but captured under another worker image tag: not compatible, never chosen.
    await cs.put_checkpoint(
        controller.checkpoint_root, "eng-2", checkpoint_id="ckpt-9", sequence=9, key=OTHER_IMAGE
    )
    controller.fail(E2, cs.terminated("OOMKilled", 137))

    card = await accepted_card(controller)
    assert (card.replacement_execution_id, card.checkpoint, card.continuity) == (
        R2,
        "ckpt-7",
        "pending",
    )
    assert card.reason == "oom_killed; native resume from ckpt-7 at record 412"
    await cs.wait_for_pod(controller, R2)
    record = await controller.stub.GetLaunchRecord(
        pb.GetLaunchRecordRequest(), metadata=cs.md(cs.worker_credential(controller, R2))
    )
    assert record.directive == types_pb2.RestoreDirective(
        checkpoint_id="ckpt-7",
        recovery=types_pb2.CONTINUITY_NATIVE,
        session_id=SESSION,
        watermark=412,
    )
    assert record.restores_from_generation == 1 and record.restore_grant
    # Nobody was asked: the decision's source is automatic (a repeat returns it unchanged).
    again = await controller.stub.RestoreDecision(
        pb.RestoreDecisionRequest(swarm="example", seat="eng-2", choice=types_pb2.CHOICE_RESUME),
        metadata=cs.OPERATOR,
    )
    assert again.repeated
    assert again.decision.source == types_pb2.DECISION_SOURCE_AUTOMATIC
    assert again.decision.replacement_execution_id == R2
    task = next(t for t in (await controller.status()).tasks if t.seat == "eng-2")
    recovery = json.loads(task.recovery_json)
    assert recovery["status"] == "accepted" and recovery["recovery"] == "native"
    assert (recovery["checkpoint_id"], recovery["session_id"]) == ("ckpt-7", SESSION)
    assert task.awaiting == "recovery_pending"
    seat_pods = [p for p in controller.pods() if p["metadata"]["labels"][SEAT] == "eng-2"]
    assert [p["metadata"]["labels"][EXECUTION] for p in seat_pods] == [R2]
    assert controller.pod_of(E2) is None


async def test_the_native_directive_names_the_session_the_attempt_reported(
    controller: cs.Controller,
) -> None:
    """Spec (Fence, Replace): the fence records the native session id the attempt held (as it
    reported it with its own worker credential) and a native directive carries that session id:
    when the checkpoint holds another session the restorer refuses it (conversation_mismatch)
    rather than the controller resuming some other conversation."""
    await launched(controller)
    await capture(controller, E2, "session-the-attempt-held")
    await cs.put_checkpoint(controller.checkpoint_root, "eng-2", session="another-session")
    controller.fail(E2, cs.terminated("OOMKilled", 137))
    await accepted_card(controller)
    fence = await reading.fence(controller.redis, "example", E2)
    assert fence is not None and fence.native_session_id == "session-the-attempt-held"
    await cs.wait_for_pod(controller, R2)
    record = await controller.stub.GetLaunchRecord(
        pb.GetLaunchRecordRequest(), metadata=cs.md(cs.worker_credential(controller, R2))
    )
    assert record.directive.recovery == types_pb2.CONTINUITY_NATIVE
    assert record.directive.session_id == "session-the-attempt-held"


Setup = Callable[[cs.Controller], Awaitable[None]]


async def _native_checkpoint(ctl: cs.Controller) -> None:
    await cs.put_checkpoint(ctl.checkpoint_root, "eng-2")


async def _paused(ctl: cs.Controller) -> None:
    state = await ctl.stub.PauseRecovery(
        pb.PauseRecoveryRequest(swarm="example"), metadata=cs.OPERATOR
    )
    assert state.paused
    await _native_checkpoint(ctl)


async def _newest_context_only(ctl: cs.Controller) -> None:
    await _native_checkpoint(ctl)
    await cs.put_checkpoint(
        ctl.checkpoint_root, "eng-2", checkpoint_id="ckpt-8", sequence=8, session=None
    )


async def _other_image_only(ctl: cs.Controller) -> None:
    await cs.put_checkpoint(ctl.checkpoint_root, "eng-2", key=OTHER_IMAGE)


OOM = cs.terminated("OOMKilled", 137)
STUCK_PULLING = cs.image_pull(datetime.datetime.now(datetime.UTC) - datetime.timedelta(minutes=3))
NATIVE_OFFER = (
    "ckpt-7",
    True,
    "Resume native",
    "oom_killed; native resume from ckpt-7 at record 412",
)
CONTEXT_OFFER = "Continue from context"


@pytest.mark.parametrize(
    ("automation", "setup", "session", "failure", "offer"),
    [
        pytest.param(False, _native_checkpoint, SESSION, OOM, NATIVE_OFFER, id="automation-off"),
        pytest.param(True, _paused, SESSION, OOM, NATIVE_OFFER, id="paused"),
        pytest.param(
            True,
            _native_checkpoint,
            SESSION,
            STUCK_PULLING,
            (
                "ckpt-7",
                True,
                "Resume native",
                "image_pull; native resume from ckpt-7 at record 412",
            ),
            id="image-pull",
        ),
        pytest.param(
            True,
            _native_checkpoint,
            None,
            OOM,
            (
                "ckpt-7",
                True,
                CONTEXT_OFFER,
                "oom_killed; continuation from context from ckpt-7 at record 412",
            ),
            id="no-native-session",
        ),
        pytest.param(
            True,
            _newest_context_only,
            SESSION,
            OOM,
            (
                "ckpt-8",
                True,
                CONTEXT_OFFER,
                "oom_killed; continuation from context from ckpt-8 at record 412",
            ),
            id="newest-compatible-context-only",
        ),
        pytest.param(
            True,
            _other_image_only,
            SESSION,
            OOM,
            ("", False, "", "oom_killed"),
            id="checkpoint-of-another-image-tag",
        ),
    ],
)
async def test_each_condition_failing_on_its_own_waits_for_a_decision(
    controller: cs.Controller,
    automation: bool,
    setup: Setup,
    session: str | None,
    failure: dict[str, Any],
    offer: tuple[str, bool, str, str],
) -> None:
    """Spec (Decide): otherwise the seat's attempt moves to awaiting-decision and the decision
    stays recovery_pending until the master or operator chooses. Each of the four conditions
    fails on its own (automation off in the document; paused through PauseRecovery; image_pull;
    no native session id; newest compatible checkpoint context-only); a checkpoint of another
    worker image tag is not offered at all (spec: Checkpoints are offered only when they were
    captured under the same compatibility key as the controller's current worker image tag)."""
    await launched(controller, cs.document(automation=automation))
    await capture(controller, E2, session)
    await setup(controller)
    controller.fail(E2, failure)
    card = await pending_card(controller)
    assert (card.checkpoint, card.resume_available, card.resume_label, card.reason) == offer
    assert card.replacement_execution_id == "" and card.continuity == "pending"


async def test_pause_survives_a_controller_restart(controllers: cs.Controllers) -> None:
    """Spec (Rollback): the pause switch is stored as the swarm's recovery-paused key in Redis;
    while paused every failure is fenced and released as usual but waits for an explicit
    decision, and the pause survives a controller restart."""
    first = await controllers.start()
    await launched(first)
    await capture(first, E2)
    await _paused(first)
    second = await controllers.restart(first)
    status = await second.status()
    assert status.paused and status.controller_epoch >= 2
    second.fail(E2, OOM)
    card = await pending_card(second)
    assert card.resume_label == "Resume native"
    fence = await reading.fence(second.redis, "example", E2)
    assert fence is not None
    assert {r.kind.value for r in fence.releases} == {
        "launch_grant",
        "store_grants",
        "account_slot",
        "pod",
    }
    # Unpausing does not launch on its own what already waits: the explicit decision does.
    await second.stub.UnpauseRecovery(
        pb.PauseRecoveryRequest(swarm="example"), metadata=cs.OPERATOR
    )
    await second.reconcile()
    assert second.pod_of(R2) is None
    assert (await cs.card(second, "eng-2")).decision == "recovery_pending"


async def test_only_the_operator_sets_the_pause_switch(controller: cs.Controller) -> None:
    """Spec (Rollback): the switch is set through Recovery.pause; DESIGN: PauseRecovery is the
    operator's (a master or worker is refused with forbidden_scope)."""
    await launched(controller)
    for token in (cs.MASTER_SECRET, cs.worker_credential(controller, E2)):
        error = await cs.refusal(
            controller.stub.PauseRecovery(
                pb.PauseRecoveryRequest(swarm="example"), metadata=cs.md(token)
            )
        )
        assert cs.reason_of(error) == "forbidden_scope"
    assert not (await controller.status()).paused


async def test_legacy_spawn_is_replaced_fresh_without_a_choice(controller: cs.Controller) -> None:
    """Spec (Limitations): a spawn superseded as a legacy specification is replaced fresh
    without a choice while automation is on and not paused."""
    await launched(controller, cs.document(legacy=True))
    await capture(controller, E2)
    await _native_checkpoint(controller)
    controller.fail(E2, cs.terminated("Error", 1))
    card = await accepted_card(controller)
    assert card.replacement_execution_id == R2 and card.checkpoint == ""
    await cs.wait_for_pod(controller, R2)
    record = await controller.stub.GetLaunchRecord(
        pb.GetLaunchRecordRequest(), metadata=cs.md(cs.worker_credential(controller, R2))
    )
    assert record.directive == types_pb2.RestoreDirective(recovery=types_pb2.CONTINUITY_FRESH)
    assert not record.restore_grant
    events = await cs.watch(
        controller,
        lambda seen: any(json.loads(e.detail_json).get("decision") == "accepted" for e in seen),
    )
    accepted = [e for e in events if json.loads(e.detail_json).get("decision") == "accepted"]
    assert json.loads(accepted[0].detail_json)["source"] == "legacy_spawn"


async def test_legacy_spawn_waits_when_paused(controller: cs.Controller) -> None:
    """Spec (Limitations): with automation off or paused a legacy spawn waits like any other
    failure."""
    await launched(controller, cs.document(legacy=True))
    await controller.stub.PauseRecovery(
        pb.PauseRecoveryRequest(swarm="example"), metadata=cs.OPERATOR
    )
    controller.fail(E2, cs.terminated("Error", 1))
    card = await pending_card(controller)
    assert card.failure == "application_exit"


async def test_legacy_spawn_waits_when_automation_is_off(controller: cs.Controller) -> None:
    """Spec (Limitations): with automation off … it waits like any other failure."""
    await launched(controller, cs.document(legacy=True, automation=False))
    controller.fail(E2, cs.terminated("Error", 1))
    await pending_card(controller)
