"""The cluster is a second witness (issue 23, point 2), over the real Recovery gRPC server, real
Redis and the Kubernetes API emulator: every replacement Pod carries, in its annotations, the
decision that admitted it."""

from __future__ import annotations

import json
import pathlib
import sys
from typing import Any

from agentihooks.swarm.v2 import recovery_pb2 as pb
from agentihooks.swarm.v2 import types_pb2

from services.common import directives
from services.controller import replacing, witnesses
from services.controller.pods import local
from services.controller.pods import runtime as pods
from services.controller.state import keys, reading, records
from tests.support import controller_server as cs
from tests.support import ports

SEAT = "eng-2"
FIRST, SECOND = f"example.{SEAT}.1", f"example.{SEAT}.2"
SESSION = "0b0c7a1e-1111-2222-3333-444455556666"
TEXT = "build the thing"


def witness_of(pod: dict[str, Any]) -> dict[str, Any]:
    annotations = pod["metadata"].get("annotations") or {}
    witness: dict[str, Any] = json.loads(annotations[pods.ANNOTATION_DECISION])
    return witness


async def test_a_replacement_pod_carries_the_operators_decision(
    controller: cs.Controller,
) -> None:
    """Issue 23: the replacement Pod carries the choice, who chose, the continuity, the
    fence's reason and epoch, and the seat and generation it replaces; its first attempt
    carries none. No credential, no task text."""
    ctl = controller
    await ctl.apply(cs.document(seats=(SEAT,), automation=False))
    first = await cs.wait_for_pod(ctl, FIRST)
    assert pods.ANNOTATION_DECISION not in (first["metadata"].get("annotations") or {})
    ctl.fail(FIRST, cs.terminated("OOMKilled", 137))
    await _fenced(ctl)
    await ctl.stub.RestoreDecision(
        pb.RestoreDecisionRequest(swarm="example", seat=SEAT, choice=types_pb2.CHOICE_FRESH),
        metadata=cs.OPERATOR,
    )
    pod = await cs.wait_for_pod(ctl, SECOND)
    witness = witness_of(pod)
    fence = await reading.fence(ctl.redis, "example", FIRST)
    decision = await reading.decision(ctl.redis, "example", FIRST)
    assert fence is not None and decision is not None
    assert witness["seat"] == SEAT and witness["generation"] == 2
    assert witness["replaces"] == {"execution_id": FIRST, "generation": 1}
    assert (witness["choice"], witness["source"], witness["continuity"]) == (
        "fresh",
        "operator",
        "fresh",
    )
    assert witness["fence"]["reason"] == "oom_killed" == fence.reason
    assert witness["fence"]["epoch"] == fence.controller_epoch
    assert witness["decision_epoch"] == decision.controller_epoch
    assert witness["decided_at"] == decision.decided_at
    shown = json.dumps(pod["metadata"])
    for secret in (cs.worker_credential(ctl, SECOND), cs.OPERATOR_TOKEN, cs.GRANT_KEY, TEXT):
        assert secret not in shown
    # What the Pod carries is what Redis recorded of the replacement.
    held = await reading.execution(ctl.redis, "example", SECOND)
    assert (
        held is not None
        and witnesses.encode(held) == pod["metadata"]["annotations"][pods.ANNOTATION_DECISION]
    )


async def test_an_automatic_native_resume_is_witnessed_with_its_directive(
    controller: cs.Controller,
) -> None:
    """Issue 23: an automatic native resume: who chose is automation; the checkpoint, session
    id and watermark of the directive and the fence's session and watermark ride along."""
    ctl = controller
    await ctl.apply(cs.document(seats=(SEAT,)))
    await cs.wait_for_pod(ctl, FIRST)
    await ctl.stub.ReportCapture(
        pb.ReportCaptureRequest(
            native_session_id=SESSION, archive_watermark=400, checkpoint_id="ckpt-7"
        ),
        metadata=cs.md(cs.worker_credential(ctl, FIRST)),
    )
    await cs.put_checkpoint(ctl.checkpoint_root, SEAT)
    ctl.fail(FIRST, cs.terminated("OOMKilled", 137))
    witness = witness_of(await cs.wait_for_pod(ctl, SECOND))
    assert (witness["choice"], witness["source"], witness["continuity"]) == (
        "resume",
        "automatic",
        "native",
    )
    assert (witness["checkpoint_id"], witness["session_id"], witness["watermark"]) == (
        "ckpt-7",
        SESSION,
        412,
    )
    assert witness["fence"]["native_session_id"] == SESSION
    assert witness["fence"]["archive_watermark"] == 400
    assert "agent" not in witness


async def test_the_local_runtime_records_the_same_witness(tmp_path: pathlib.Path) -> None:
    """Both runtimes alike: a local attempt's ``attempt.json`` records the annotations its Pod
    would carry."""
    rt = local.LocalRuntime(tmp_path, stop_grace=2.0)
    fence = records.Fence(
        execution_id=records.ExecutionId(FIRST),
        swarm="example",
        generation=1,
        seat=records.SeatName(SEAT),
        reason="oom_killed",
        controller_epoch=2,
        native_session_id=None,
        archive_watermark=None,
        fenced_at="2026-12-06T08:00:00Z",
        task_id="t-eng-2",
        task_generation=1,
        releases=(),
    )
    execution = replacing.new_execution(
        swarm="example",
        seat=SEAT,
        generation=2,
        task_id="t-eng-2",
        task_generation=1,
        image=cs.IMAGE,
        directive=directives.Directive(None, directives.Continuity.FRESH, None, None),
        restores_from=fence,
        legacy_spawn=False,
        now=1_765_000_000.0,
        admission=records.Admitted(
            choice=records.Choice.FRESH,
            source=records.DecisionSource.OPERATOR,
            agent=None,
            decided_at="2026-12-06T08:01:00Z",
            decision_epoch=2,
            fence_reason="oom_killed",
            fence_epoch=2,
            fenced_at=fence.fenced_at,
        ),
    )
    spec = pods.LaunchSpec(
        swarm="example",
        seat=SEAT,
        execution_id=SECOND,
        generation=2,
        image=cs.IMAGE,
        command=(sys.executable, "-c", "pass"),
        worker_credential="wk-local-secret",
        annotations=witnesses.pod_annotations(execution),
    )
    try:
        await rt.launch(spec)
        state = json.loads((tmp_path / "example" / SECOND / "attempt.json").read_text())
    finally:
        await rt.remove("example", SECOND)
        await rt.aclose()
    assert state["annotations"] == {pods.ANNOTATION_DECISION: witnesses.encode(execution)}
    assert "wk-local-secret" not in json.dumps(state)


async def _fenced(ctl: cs.Controller) -> None:
    async def pending() -> None:
        decision = await reading.decision(ctl.redis, "example", FIRST)
        assert decision is not None and decision.state.value == "recovery_pending", decision

    await ports.eventually(pending, timeout=20)


Snapshot = dict[bytes, tuple[bytes, int]]


async def snapshot(ctl: cs.Controller) -> Snapshot:
    """Every key of the swarm but its lease and epoch, DUMPed with its TTL."""
    kept: Snapshot = {}
    async for key in ctl.redis.scan_iter(match="agentihooks:{example}:*", count=1000):
        if key.decode() in _LEASE_KEYS:
            continue
        dumped, ttl = await ctl.redis.dump(key), await ctl.redis.pttl(key)
        if dumped is not None:
            kept[key] = (dumped, max(ttl, 0))
    return kept


async def roll_back(ctl: cs.Controller, to: Snapshot) -> None:
    """Put the swarm's state back as `to` held it, in one transaction: what a failover that
    lost the newest writes leaves (the lease and its epoch are kept, so this controller still
    holds the swarm: issue 23's point 3 covers an epoch going back)."""
    now = [k async for k in ctl.redis.scan_iter(match="agentihooks:{example}:*", count=1000)]
    pipe = ctl.redis.pipeline(transaction=True)
    for key in now:
        if key.decode() not in _LEASE_KEYS:
            pipe.delete(key)
    for key, (dumped, ttl) in to.items():
        pipe.restore(key, ttl, dumped, replace=True)
    await pipe.execute()


_LEASE_KEYS = {keys.lease("example"), keys.epoch("example")}


def live_pods(ctl: cs.Controller, seat: str = SEAT) -> list[str]:
    """The execution ids of the seat's Pods not being deleted."""
    return sorted(
        p["metadata"]["labels"]["agentihooks.io/execution"]
        for p in ctl.pods()
        if p["metadata"]["labels"].get("agentihooks.io/seat") == seat
        and not p["metadata"].get("deletionTimestamp")
    )


async def test_a_decision_redis_lost_is_restored_from_the_replacement_pod(
    controller: cs.Controller, caplog: Any
) -> None:
    """Issue 23, point 2: Redis goes back to before the failure and the decision (a failover
    that lost its newest writes) while the replacement Pod runs. The controller writes the
    decision back from the Pod instead of fencing the lost attempt as evicted and asking
    again: the seat ends at the newest generation with exactly one live Pod, the decision is
    the one the caller was told was accepted, a different choice is refused with the spec's
    message ("no recovery decision is pending for this attempt"), and the fence keeps the
    true reason."""
    ctl = controller
    await ctl.apply(cs.document(seats=(SEAT,), automation=False))
    await cs.wait_for_pod(ctl, FIRST)
    # A context-only checkpoint: resume (reconstructed) and fresh are both on offer.
    await cs.put_checkpoint(ctl.checkpoint_root, SEAT, session=None)
    before = await snapshot(ctl)
    ctl.fail(FIRST, cs.terminated("OOMKilled", 137))
    await _fenced(ctl)
    answer = await ctl.stub.RestoreDecision(
        pb.RestoreDecisionRequest(swarm="example", seat=SEAT, choice=types_pb2.CHOICE_RESUME),
        metadata=cs.OPERATOR,
    )
    assert answer.decision.replacement_execution_id == SECOND and not answer.repeated
    told = answer.decision
    await cs.wait_for_pod(ctl, SECOND)

    async def first_removed() -> None:
        assert live_pods(ctl) == [SECOND]

    await ports.eventually(first_removed, timeout=30)
    caplog.set_level("WARNING", logger="services.controller.recovery")
    await roll_back(ctl, before)
    seat = await reading.seat(ctl.redis, "example", SEAT)
    assert seat is not None and (seat.current_execution_id, seat.generation) == (FIRST, 1)

    async def restored() -> None:
        seat = await reading.seat(ctl.redis, "example", SEAT)
        assert seat is not None and (seat.current_execution_id, seat.generation) == (SECOND, 2)
        fence = await reading.fence(ctl.redis, "example", FIRST)
        assert fence is not None and fence.released(records.ReleaseKind.POD)

    await ports.eventually(restored, timeout=30)
    # A few more passes: nothing is fenced, launched or asked again.
    for _ in range(3):
        await ctl.reconcile()
    assert live_pods(ctl) == [SECOND]
    assert ctl.pod_of(f"example.{SEAT}.3") is None
    fence = await reading.fence(ctl.redis, "example", FIRST)
    assert fence is not None and fence.reason == "oom_killed"
    decision = await reading.decision(ctl.redis, "example", FIRST)
    assert decision is not None and decision.state is records.DecisionState.ACCEPTED
    assert (decision.choice, decision.source) == (
        records.Choice.RESUME,
        records.DecisionSource.OPERATOR,
    )
    assert decision.replacement_execution_id == told.replacement_execution_id
    assert decision.directive is not None
    assert decision.directive.checkpoint_id == told.directive.checkpoint_id == "ckpt-7"
    assert decision.directive.recovery.value == "reconstructed"
    held = await reading.execution(ctl.redis, "example", SECOND)
    assert held is not None and held.launched and held.task_text == f"{TEXT} ({SEAT})"
    # The first attempt's credential is revoked again; the replacement's still works.
    record = await ctl.stub.GetLaunchRecord(
        pb.GetLaunchRecordRequest(), metadata=cs.md(cs.worker_credential(ctl, SECOND))
    )
    assert record.directive.checkpoint_id == "ckpt-7"

    different = await cs.refusal(
        ctl.stub.RestoreDecision(
            pb.RestoreDecisionRequest(swarm="example", seat=SEAT, choice=types_pb2.CHOICE_FRESH),
            metadata=cs.OPERATOR,
        )
    )
    assert different.details() == "no recovery decision is pending for this attempt"
    again = await ctl.stub.RestoreDecision(
        pb.RestoreDecisionRequest(swarm="example", seat=SEAT, choice=types_pb2.CHOICE_RESUME),
        metadata=cs.OPERATOR,
    )
    assert again.repeated and again.decision.replacement_execution_id == SECOND
    card = await cs.card(ctl, SEAT)
    assert card is not None and card.decision == "accepted"
    assert card.reason.startswith("oom_killed"), card.reason
    assert "evicted" not in card.reason
    restored_lines = [r for r in caplog.records if "decision_restored" in r.getMessage()]
    assert len(restored_lines) == 1
    assert TEXT not in restored_lines[0].getMessage()
