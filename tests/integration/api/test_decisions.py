"""Choosing resume or fresh through the real Recovery gRPC server over real Redis and the
Kubernetes emulator: who may choose, what each choice picks, repeated and conflicting choices,
and requests recorded for the next pass (spec: "Choosing resume or fresh", "Repeated and
conflicting requests")."""

from __future__ import annotations

import asyncio
import io
import json
import logging
from typing import Any

import grpc
import pytest
import redis.asyncio as aioredis
from agentihooks.swarm.v2 import recovery_pb2 as pb
from agentihooks.swarm.v2 import types_pb2

from services.common import logs
from services.controller.state import keys, reading, records
from tests.support import controller_server as cs
from tests.support import ports

E2, R2 = "example.eng-2.1", "example.eng-2.2"
SESSION = "0b0c7a1e-1111-2222-3333-444455556666"
NOT_PENDING = "no recovery decision is pending for this attempt"
NO_CHECKPOINT = "no complete compatible checkpoint to resume from"
RESUME, FRESH = types_pb2.CHOICE_RESUME, types_pb2.CHOICE_FRESH
THIRD_SECRET = "third-swarm-master-credential-55555"
SEAT_LABEL = "agentihooks.io/seat"


def choose(
    choice: types_pb2.Choice,
    *,
    agent: str = "",
    seat: str = "eng-2",
    execution_id: str = "",
) -> pb.RestoreDecisionRequest:
    return pb.RestoreDecisionRequest(
        swarm="example", seat=seat, execution_id=execution_id, choice=choice, agent=agent
    )


async def wait_for_decision(ctl: cs.Controller) -> None:
    """eng-2's first attempt has been fenced, the pass decided to wait, and every release of
    the fence is recorded (the lost Pod's last: a test comparing state before and after a
    call must not see it land in between)."""

    async def decided() -> None:
        decision = await reading.decision(ctl.redis, "example", E2)
        assert decision is not None and decision.state.value == "recovery_pending", decision
        fence = await reading.fence(ctl.redis, "example", E2)
        assert fence is not None, E2
        assert {r.kind for r in fence.releases} == set(records.ReleaseKind), fence.releases

    await ports.eventually(decided, timeout=10)


async def waiting(
    ctl: cs.Controller,
    *,
    session: str | None = SESSION,
    checkpoints: tuple[dict[str, Any], ...] = (),
) -> None:
    """eng-2's first attempt reported `session` (archive watermark 400), its `checkpoints` were
    stored, and it was OOM-killed; restore automation is off, so it awaits a decision."""
    await ctl.apply(cs.document(automation=False))
    await cs.wait_for_pod(ctl, "example.eng-1.1")
    await cs.wait_for_pod(ctl, E2)
    await ctl.stub.ReportCapture(
        pb.ReportCaptureRequest(native_session_id=session or "", archive_watermark=400),
        metadata=cs.md(cs.worker_credential(ctl, E2)),
    )
    for options in checkpoints:
        await cs.put_checkpoint(ctl.checkpoint_root, "eng-2", **options)
    ctl.fail(E2, cs.terminated("OOMKilled", 137))
    await wait_for_decision(ctl)


async def still_waiting(ctl: cs.Controller) -> None:
    """Nothing was admitted: the seat still awaits a decision for its fenced attempt."""
    await ctl.reconcile()
    decision = await reading.decision(ctl.redis, "example", E2)
    assert decision is not None and decision.state.value == "recovery_pending"
    seat = await reading.seat(ctl.redis, "example", "eng-2")
    assert seat is not None and (seat.current_execution_id, seat.state.value) == (
        E2,
        "awaiting_decision",
    )
    assert await reading.execution(ctl.redis, "example", R2) is None
    assert ctl.pod_of(R2) is None
    card = await cs.card(ctl, "eng-2")
    assert card is not None and card.decision == "recovery_pending"


def seat_pods(ctl: cs.Controller, seat: str = "eng-2") -> list[str]:
    return sorted(
        p["metadata"]["labels"]["agentihooks.io/execution"]
        for p in ctl.pods()
        if p["metadata"]["labels"][SEAT_LABEL] == seat
    )


async def launch_record(ctl: cs.Controller, execution_id: str) -> pb.LaunchRecord:
    await cs.wait_for_pod(ctl, execution_id)
    record: pb.LaunchRecord = await ctl.stub.GetLaunchRecord(
        pb.GetLaunchRecordRequest(), metadata=cs.md(cs.worker_credential(ctl, execution_id))
    )
    return record


# Who may choose.


@pytest.mark.parametrize(
    ("token", "agent", "source"),
    [
        pytest.param(cs.OPERATOR_TOKEN, "", types_pb2.DECISION_SOURCE_OPERATOR, id="operator"),
        pytest.param(
            cs.OPERATOR_TOKEN,
            "master@example-1",
            types_pb2.DECISION_SOURCE_OPERATOR,
            id="operator-for-a-master",
        ),
        pytest.param(
            cs.MASTER_SECRET, "master@example-1", types_pb2.DECISION_SOURCE_MASTER, id="master"
        ),
        pytest.param(
            cs.OTHER_SECRET,
            "master@example-2",
            types_pb2.DECISION_SOURCE_MASTER,
            id="second-master",
        ),
    ],
)
async def test_the_operator_and_a_master_bound_to_the_named_agent_may_choose(
    controller: cs.Controller, token: str, agent: str, source: int
) -> None:
    """Spec: only the operator, or a registered master of the swarm whose credential is bound to
    the named agent, can choose."""
    await waiting(controller)
    answer = await controller.stub.RestoreDecision(
        choose(FRESH, agent=agent), metadata=cs.md(token)
    )
    assert not answer.repeated
    assert answer.decision.source == source
    assert answer.decision.agent == (agent or "operator")
    assert answer.decision.replacement_execution_id == R2
    await cs.wait_for_pod(controller, R2)


def _other_swarm_document() -> str:
    """Swarm `other`, whose only master (master@other-1) is not a master of `example`."""
    doc = json.loads(cs.document("other", seats=("ops-1",)))
    doc["masters"] = [{"agent": "master@other-1", "credential": THIRD_SECRET}]
    return json.dumps(doc)


SPOOFS = [
    pytest.param(cs.MASTER_SECRET, "master@example-2", id="wrong-agent"),
    pytest.param(cs.OTHER_SECRET, "master@example-1", id="other-master-naming-master-1"),
    pytest.param(cs.MASTER_SECRET, "", id="master-naming-no-agent"),
    pytest.param(cs.MASTER_SECRET, "Master@Example-1", id="display-name-spoof-case"),
    pytest.param(cs.MASTER_SECRET, "master@example-1 (operator)", id="display-name-spoof-suffix"),
    pytest.param(cs.OTHER_SECRET, "master@ex\u0430mple-1", id="display-name-spoof-homoglyph"),
    pytest.param("worker:eng-1", "master@example-1", id="worker-naming-a-master"),
    pytest.param("worker:eng-1", "", id="worker-credential"),
]


@pytest.mark.parametrize(("token", "agent"), SPOOFS)
async def test_any_other_caller_is_refused_with_forbidden_scope(
    controller: cs.Controller, token: str, agent: str
) -> None:
    """Spec: any other caller is refused with forbidden_scope; the choice is never inferred from
    a display name (a wrong agent, a name that merely looks like a master's, a worker
    credential). Nothing is admitted."""
    await waiting(controller)
    if token == "worker:eng-1":
        token = cs.worker_credential(controller, "example.eng-1.1")
    for call in (controller.stub.RestoreDecision, controller.stub.RequestRestoreDecision):
        error = await cs.refusal(call(choose(FRESH, agent=agent), metadata=cs.md(token)))
        assert error.code() == grpc.StatusCode.PERMISSION_DENIED, error.details()
        assert cs.reason_of(error) == "forbidden_scope"
    assert await reading.requests(controller.redis, "example") == []
    await still_waiting(controller)


async def test_the_fenced_attempts_own_credential_may_not_choose(
    controller: cs.Controller,
) -> None:
    """Spec: a fenced worker keeps no claim, grant or account authority; any other caller is
    refused with forbidden_scope (the fenced attempt's revoked credential)."""
    await controller.apply(cs.document(automation=False))
    await cs.wait_for_pod(controller, E2)
    token = cs.worker_credential(controller, E2)
    controller.fail(E2, cs.terminated("OOMKilled", 137))
    await wait_for_decision(controller)
    error = await cs.refusal(
        controller.stub.RestoreDecision(choose(FRESH, agent="operator"), metadata=cs.md(token))
    )
    assert error.code() == grpc.StatusCode.PERMISSION_DENIED
    await still_waiting(controller)


async def test_a_master_of_another_swarm_is_refused_with_forbidden_scope(
    controller: cs.Controller,
) -> None:
    """Spec: only … a registered master of the swarm … can choose. Any other caller is refused
    with forbidden_scope: a master registered for another swarm holds a valid credential, but
    not for this swarm."""
    await controller.apply(_other_swarm_document())
    await waiting(controller)
    error = await cs.refusal(
        controller.stub.RestoreDecision(
            choose(FRESH, agent="master@other-1"), metadata=cs.md(THIRD_SECRET)
        )
    )
    assert (error.code(), cs.reason_of(error)) == (
        grpc.StatusCode.PERMISSION_DENIED,
        "forbidden_scope",
    ), error.details()
    await still_waiting(controller)


# What resume and fresh pick.


async def test_resume_is_native_when_the_checkpoint_is_native_and_a_session_was_held(
    controller: cs.Controller,
) -> None:
    """Spec: resume picks the newest complete, compatible checkpoint of the fenced attempt.
    Native continuity is chosen when that checkpoint is native and the attempt held a session
    id."""
    await waiting(
        controller,
        checkpoints=({"checkpoint_id": "ckpt-6", "sequence": 6}, {"checkpoint_id": "ckpt-7"}),
    )
    card = await cs.card(controller, "eng-2")
    assert (card.resume_label, card.checkpoint, card.resume_available) == (
        "Resume native",
        "ckpt-7",
        True,
    )
    answer = await controller.stub.RestoreDecision(
        choose(RESUME, agent="master@example-1"), metadata=cs.md(cs.MASTER_SECRET)
    )
    native = types_pb2.RestoreDirective(
        checkpoint_id="ckpt-7",
        recovery=types_pb2.CONTINUITY_NATIVE,
        session_id=SESSION,
        watermark=412,
    )
    assert answer.decision.directive == native
    assert answer.decision.choice == RESUME
    record = await launch_record(controller, R2)
    assert record.directive == native and record.restore_grant
    assert record.restores_from_generation == 1
    assert record.scope.execution_generation == 2
    task = await reading.task(controller.redis, "example", "t-eng-2")
    assert task is not None and task.awaiting == "recovery_pending"
    assert task.recovery is not None and task.recovery["status"] == "accepted"
    assert task.recovery["checkpoint_id"] == "ckpt-7" and task.recovery["recovery"] == "native"


@pytest.mark.parametrize(
    ("session", "checkpoint", "watermark"),
    [
        pytest.param(SESSION, {"session": None, "watermark": 40}, 40, id="context-only-checkpoint"),
        pytest.param(None, {}, 412, id="native-checkpoint-but-no-session-held"),
    ],
)
async def test_resume_is_reconstructed_otherwise(
    controller: cs.Controller, session: str | None, checkpoint: dict[str, Any], watermark: int
) -> None:
    """Spec: otherwise the replacement is reconstructed from context (a context-only checkpoint,
    or a native checkpoint when the attempt never held a session id); the card reads Continue
    from context."""
    await waiting(controller, session=session, checkpoints=(checkpoint,))
    card = await cs.card(controller, "eng-2")
    assert (card.resume_label, card.checkpoint) == ("Continue from context", "ckpt-7")
    answer = await controller.stub.RestoreDecision(choose(RESUME), metadata=cs.OPERATOR)
    reconstructed = types_pb2.RestoreDirective(
        checkpoint_id="ckpt-7", recovery=types_pb2.CONTINUITY_RECONSTRUCTED, watermark=watermark
    )
    assert answer.decision.directive == reconstructed
    # Accepted: nothing is offered any more (no resume label); the card names the checkpoint
    # the accepted directive restores from.
    card = await cs.card(controller, "eng-2")
    assert (card.resume_available, card.resume_label, card.checkpoint) == (False, "", "ckpt-7")
    assert card.reason == f"oom_killed; continuation from context from ckpt-7 at record {watermark}"
    record = await launch_record(controller, R2)
    assert record.directive == reconstructed and not record.directive.session_id


@pytest.mark.parametrize(
    "checkpoints",
    [
        pytest.param((), id="no-checkpoint"),
        pytest.param(({"leave_out_session_files": True},), id="incomplete-checkpoint"),
        pytest.param(({"key": "registry.local/agent-worker:9.9.9"},), id="other-image-tag"),
        pytest.param(({"generation": 2},), id="another-generations-checkpoint"),
    ],
)
async def test_resume_without_a_usable_checkpoint_is_refused_and_the_seat_keeps_waiting(
    controller: cs.Controller, checkpoints: tuple[dict[str, Any], ...]
) -> None:
    """Spec: with no usable checkpoint the request is refused with no complete compatible
    checkpoint to resume from and the seat keeps waiting (then fresh still succeeds)."""
    await waiting(controller, checkpoints=checkpoints)
    card = await cs.card(controller, "eng-2")
    assert (card.checkpoint, card.resume_available) == ("", False)
    error = await cs.refusal(controller.stub.RestoreDecision(choose(RESUME), metadata=cs.OPERATOR))
    assert error.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert error.details() == NO_CHECKPOINT
    await still_waiting(controller)
    answer = await controller.stub.RestoreDecision(choose(FRESH), metadata=cs.OPERATOR)
    assert answer.decision.replacement_execution_id == R2


async def test_fresh_reads_the_tasks_current_text(controller: cs.Controller) -> None:
    """Spec: fresh admits a replacement with no checkpoint. The replacement's task row is read
    from the ledger so it starts from the task's current text (re-applied after the failure)."""
    await waiting(controller, checkpoints=({},))
    applied = await controller.apply(cs.document(automation=False, text="the rewritten task"))
    assert "eng-2" in applied.updated_seats and not applied.admitted_executions
    answer = await controller.stub.RestoreDecision(choose(FRESH), metadata=cs.OPERATOR)
    assert answer.decision.directive == types_pb2.RestoreDirective(
        recovery=types_pb2.CONTINUITY_FRESH
    )
    pod = await cs.wait_for_pod(controller, R2)
    env = cs.worker_env(pod)
    assert env["AGENTIHOOKS_TASK_TEXT"] == "the rewritten task (eng-2)"
    assert (env["AGENTIHOOKS_EXECUTION_ID"], env["AGENTIHOOKS_GENERATION"]) == (R2, "2")
    replacement = await reading.execution(controller.redis, "example", R2)
    assert replacement is not None and replacement.task_text == "the rewritten task (eng-2)"
    record = await launch_record(controller, R2)
    assert record.directive == types_pb2.RestoreDirective(recovery=types_pb2.CONTINUITY_FRESH)
    assert not record.restore_grant and record.restores_from_generation == 1
    task = next(t for t in (await controller.status()).tasks if t.seat == "eng-2")
    assert task.text == "the rewritten task (eng-2)" and task.awaiting == "recovery_pending"


# Repeated and conflicting requests.


async def _state(client: aioredis.Redis) -> dict[str, Any]:
    """The accepted decision, the fence, the replacement (with its directive) and the task row
    as stored."""
    return {
        name: await client.hgetall(key)
        for name, key in (
            ("decision", keys.decision("example", E2)),
            ("fence", keys.fence("example", E2)),
            ("replacement", keys.execution("example", R2)),
            ("fenced", keys.execution("example", E2)),
            ("task", keys.task("example", "t-eng-2")),
            ("seat", keys.seat("example", "eng-2")),
        )
    }


async def _launched(ctl: cs.Controller) -> None:
    async def recorded() -> None:
        replacement = await reading.execution(ctl.redis, "example", R2)
        assert replacement is not None and replacement.launched

    await ports.eventually(recorded, timeout=10)
    await cs.wait_for_pod(ctl, R2)
    await ctl.reconcile()


async def test_repeating_the_accepted_choice_returns_the_same_decision_also_after_a_restart(
    controllers: cs.Controllers,
) -> None:
    """Spec: repeating the accepted choice, including after a controller restart, returns the
    same decision, the same checkpoint (also once a newer one was committed) and the same
    replacement, and admits nothing new."""
    ctl = await controllers.start()
    await waiting(ctl, checkpoints=({},))
    first = await ctl.stub.RestoreDecision(choose(RESUME), metadata=cs.OPERATOR)
    assert not first.repeated
    await _launched(ctl)
    creates = ctl.emulator.calls["create pods"]
    before = await _state(ctl.redis)
    again = await ctl.stub.RestoreDecision(choose(RESUME), metadata=cs.OPERATOR)
    assert again.repeated and again.decision == first.decision
    by_execution = await ctl.stub.RestoreDecision(
        choose(RESUME, seat="", execution_id=E2, agent="master@example-1"),
        metadata=cs.md(cs.MASTER_SECRET),
    )
    assert by_execution.repeated and by_execution.decision == first.decision

    # A newer checkpoint of the fenced attempt, committed meanwhile, changes nothing.
    await cs.put_checkpoint(ctl.checkpoint_root, "eng-2", checkpoint_id="ckpt-9", sequence=9)
    restarted = await controllers.restart(ctl)
    after_restart = await restarted.stub.RestoreDecision(choose(RESUME), metadata=cs.OPERATOR)
    assert after_restart.repeated and after_restart.decision == first.decision
    assert after_restart.decision.directive.checkpoint_id == "ckpt-7"
    await restarted.reconcile()
    assert seat_pods(restarted) == [R2]
    assert restarted.emulator.calls["create pods"] == creates
    assert await _state(restarted.redis) == before
    assert await reading.execution(restarted.redis, "example", "example.eng-2.3") is None


async def test_a_repeat_is_answered_even_while_the_checkpoint_store_cannot_be_listed(
    controller: cs.Controller,
) -> None:
    """Spec: repeating the accepted choice returns the same decision and admits nothing new.
    Issue 22: the accept script is the one check of a repeat or a conflict, so it answers one
    also when the call has no directive to offer it (the store cannot be listed, or holds no
    compatible checkpoint now); a first choice then fails with the store's error, and
    nothing is written."""
    await waiting(controller, checkpoints=({},))
    first = await controller.stub.RestoreDecision(choose(RESUME), metadata=cs.OPERATOR)
    await _launched(controller)
    before = await _state(controller.redis)
    root = controller.checkpoint_root
    moved = root.with_name(root.name + ".away")
    root.rename(moved)
    root.write_text("not a folder: listing the store fails")
    try:
        again = await controller.stub.RestoreDecision(choose(RESUME), metadata=cs.OPERATOR)
        assert again.repeated and again.decision == first.decision
        error = await cs.refusal(
            controller.stub.RestoreDecision(choose(FRESH), metadata=cs.OPERATOR)
        )
        assert (error.code(), error.details()) == (
            grpc.StatusCode.FAILED_PRECONDITION,
            NOT_PENDING,
        )
        assert await _state(controller.redis) == before
    finally:
        root.unlink()
        moved.rename(root)


@pytest.mark.parametrize(
    ("accepted", "conflicting"), [(RESUME, FRESH), (FRESH, RESUME)], ids=["resume", "fresh"]
)
async def test_a_different_choice_is_refused_and_changes_nothing(
    controller: cs.Controller,
    accepted: types_pb2.Choice,
    conflicting: types_pb2.Choice,
) -> None:
    """Spec: a different choice after a decision was accepted is refused with no recovery
    decision is pending for this attempt, and the accepted decision, fence, directive and
    ledger row stay as they were."""
    await waiting(controller, checkpoints=({},))
    await controller.stub.RestoreDecision(choose(accepted), metadata=cs.OPERATOR)
    await _launched(controller)
    before = await _state(controller.redis)
    for token, agent in ((cs.OPERATOR_TOKEN, ""), (cs.MASTER_SECRET, "master@example-1")):
        error = await cs.refusal(
            controller.stub.RestoreDecision(choose(conflicting, agent=agent), metadata=cs.md(token))
        )
        assert error.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert error.details() == NOT_PENDING
    await controller.reconcile()
    assert await _state(controller.redis) == before
    assert seat_pods(controller) == [R2]


async def test_a_choice_for_an_attempt_that_was_never_fenced_is_not_pending(
    controller: cs.Controller,
) -> None:
    """Spec: a decision is accepted once per fenced attempt; a running attempt has none pending
    (and a seat the swarm does not have is not found)."""
    await controller.apply()
    await cs.wait_for_pod(controller, "example.eng-1.1")
    error = await cs.refusal(
        controller.stub.RestoreDecision(choose(FRESH, seat="eng-1"), metadata=cs.OPERATOR)
    )
    assert (error.code(), error.details()) == (grpc.StatusCode.FAILED_PRECONDITION, NOT_PENDING)
    assert seat_pods(controller, "eng-1") == ["example.eng-1.1"]
    unknown = await cs.refusal(
        controller.stub.RestoreDecision(choose(FRESH, seat="nope"), metadata=cs.OPERATOR)
    )
    assert unknown.code() == grpc.StatusCode.NOT_FOUND


async def test_one_hundred_concurrent_identical_decisions_admit_one_replacement(
    controller: cs.Controller,
) -> None:
    """Issue 3 (Must show): 100 concurrent identical RestoreDecision calls for one attempt admit
    one replacement; spec: a decision is accepted once per fenced attempt, and repeating it
    admits nothing new."""
    await waiting(controller)
    answers = await asyncio.gather(
        *(
            controller.stub.RestoreDecision(choose(FRESH, execution_id=E2), metadata=cs.OPERATOR)
            for _ in range(100)
        )
    )
    assert {a.decision.replacement_execution_id for a in answers} == {R2}
    assert sum(not a.repeated for a in answers) == 1
    assert len({a.decision.SerializeToString(deterministic=True) for a in answers}) == 1
    await _launched(controller)
    assert seat_pods(controller) == [R2]
    assert await reading.execution(controller.redis, "example", "example.eng-2.3") is None
    seat = await reading.seat(controller.redis, "example", "eng-2")
    assert seat is not None and (seat.current_execution_id, seat.generation) == (R2, 2)


# Requests recorded for the next pass.


class PassGate:
    """Holds the controller's recovery passes at their start (their first runtime call), so a
    test can see what a call did before any pass ran."""

    def __init__(self, ctl: cs.Controller, monkeypatch: pytest.MonkeyPatch) -> None:
        self._list = ctl.hub.runtime.list_attempts
        self.opened = asyncio.Event()
        self.opened.set()
        self.held = 0
        monkeypatch.setattr(ctl.hub.runtime, "list_attempts", self._gated)

    async def _gated(self, swarm: str) -> Any:
        if not self.opened.is_set():
            self.held += 1
            try:
                await self.opened.wait()
            finally:
                self.held -= 1
        return await self._list(swarm)

    async def close(self) -> None:
        """Close the gate and wait until the loop's next pass is held at it."""
        self.opened.clear()

        async def holding() -> None:
            assert self.held >= 1

        await ports.eventually(holding, timeout=5)

    def open(self) -> None:
        self.opened.set()


async def test_a_request_is_recorded_then_applied_on_the_next_pass_and_dropped(
    controller: cs.Controller, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Spec: for a Kubernetes attempt the command only records the request; the controller
    applies it under its lease on its next recovery pass and then drops the request. Requests
    are deduplicated by attempt and choice."""
    await waiting(controller, checkpoints=({},))
    gate = PassGate(controller, monkeypatch)
    await gate.close()
    recorded = await controller.stub.RequestRestoreDecision(
        choose(RESUME, agent="master@example-1"), metadata=cs.md(cs.MASTER_SECRET)
    )
    assert (recorded.execution_id, recorded.choice, recorded.recorded) == (E2, RESUME, True)
    repeated = await controller.stub.RequestRestoreDecision(
        choose(RESUME, agent="master@example-1"), metadata=cs.md(cs.MASTER_SECRET)
    )
    assert not repeated.recorded
    requests = await reading.requests(controller.redis, "example")
    assert [(r.execution_id, r.choice.value, r.agent) for _, r in requests] == [
        (E2, "resume", "master@example-1")
    ]
    await still_waiting_without_a_pass(controller)

    gate.open()

    async def applied() -> None:
        decision = await reading.decision(controller.redis, "example", E2)
        assert decision is not None and decision.state.value == "accepted"

    await ports.eventually(applied, timeout=10)
    assert await reading.requests(controller.redis, "example") == []
    decision = await reading.decision(controller.redis, "example", E2)
    assert decision is not None and decision.source is not None
    assert (decision.source.value, decision.agent) == ("master", "master@example-1")
    assert decision.directive is not None and decision.directive.recovery.value == "native"
    await cs.wait_for_pod(controller, R2)


async def still_waiting_without_a_pass(ctl: cs.Controller) -> None:
    decision = await reading.decision(ctl.redis, "example", E2)
    assert decision is not None and decision.state.value == "recovery_pending"
    assert await reading.execution(ctl.redis, "example", R2) is None
    assert ctl.pod_of(R2) is None


@pytest.mark.parametrize(
    ("accept_first", "requested", "reason"),
    [
        pytest.param(None, RESUME, NO_CHECKPOINT, id="resume-without-checkpoint"),
        pytest.param(FRESH, RESUME, NOT_PENDING, id="different-choice-after-acceptance"),
    ],
)
async def test_a_refused_request_is_logged_and_dropped(
    controller: cs.Controller,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    accept_first: types_pb2.Choice | None,
    requested: types_pb2.Choice,
    reason: str,
) -> None:
    """Spec: a refused request is logged by the controller as controller: the recovery request
    for EXECUTION was refused: REASON (and dropped; the seat keeps what it had)."""
    await waiting(controller)
    if accept_first is not None:
        await controller.stub.RestoreDecision(choose(accept_first), metadata=cs.OPERATOR)
        await _launched(controller)
    before = await _state(controller.redis)
    gate = PassGate(controller, monkeypatch)
    await gate.close()
    lines = io.StringIO()
    handler = logging.StreamHandler(lines)
    handler.setFormatter(logs.JsonFormatter("controller"))
    logger = logging.getLogger("services.controller.decisions")
    logger.addHandler(handler)
    try:
        with caplog.at_level(logging.WARNING, logger="services.controller.decisions"):
            recorded = await controller.stub.RequestRestoreDecision(
                choose(requested), metadata=cs.OPERATOR
            )
            assert recorded.recorded
            gate.open()

            async def dropped() -> None:
                assert await reading.requests(controller.redis, "example") == []
                assert any("was refused" in r.getMessage() for r in caplog.records)

            await ports.eventually(dropped, timeout=10)
    finally:
        logger.removeHandler(handler)
    expected = f"controller: the recovery request for {E2} was refused: {reason}"
    assert [r.getMessage() for r in caplog.records if "was refused" in r.getMessage()] == [expected]
    logged = [json.loads(line) for line in lines.getvalue().splitlines()]
    assert [entry["message"] for entry in logged if "was refused" in entry["message"]] == [expected]
    assert await _state(controller.redis) == before
    if accept_first is None:
        await still_waiting(controller)
