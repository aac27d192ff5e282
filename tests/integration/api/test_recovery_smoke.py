"""The Recovery service end to end over real gRPC, real Redis and the Kubernetes emulator."""

from __future__ import annotations

import grpc
import pytest
from agentihooks.swarm.v2 import recovery_pb2 as pb
from agentihooks.swarm.v2 import types_pb2

from tests.support import controller_server as cs
from tests.support import ports


async def test_apply_launches_first_attempts_as_pods(controller: cs.Controller) -> None:
    """Applying admits the first attempt of each new seat (generation 1) and launches its Pod."""
    applied = await controller.apply()
    assert sorted(applied.admitted_executions) == ["example.eng-1.1", "example.eng-2.1"]

    async def launched() -> None:
        assert controller.pod_of("example.eng-1.1") is not None
        assert controller.pod_of("example.eng-2.1") is not None

    await ports.eventually(launched)
    status = await controller.status()
    assert status.runtime == "kubernetes"
    assert {t.task_id for t in status.tasks} == {"t-eng-1", "t-eng-2"}


async def test_failure_without_checkpoint_waits_then_fresh_decision_replaces(
    controller: cs.Controller,
) -> None:
    """No usable checkpoint: the failure waits (recovery_pending); fresh admits one replacement."""
    await controller.apply()
    await ports.eventually(lambda: _has_pod(controller, "example.eng-2.1"))
    controller.fail("example.eng-2.1", cs.terminated("OOMKilled", 137))

    async def pending() -> None:
        status = await controller.status()
        cards = [h for h in status.handoffs if h.seat == "eng-2"]
        assert cards and cards[0].decision == "recovery_pending", cards
        task = next(t for t in status.tasks if t.seat == "eng-2")
        assert task.awaiting == "recovery_pending"
        assert cards[0].failure == "oom_killed"
        assert not cards[0].resume_available

    await ports.eventually(pending, timeout=10)
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await controller.stub.RestoreDecision(
            pb.RestoreDecisionRequest(
                swarm="example", seat="eng-2", choice=types_pb2.CHOICE_RESUME
            ),
            metadata=cs.OPERATOR,
        )
    assert info.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert info.value.details() == "no complete compatible checkpoint to resume from"
    answer = await controller.stub.RestoreDecision(
        pb.RestoreDecisionRequest(swarm="example", seat="eng-2", choice=types_pb2.CHOICE_FRESH),
        metadata=cs.OPERATOR,
    )
    assert answer.decision.replacement_execution_id == "example.eng-2.2"
    assert answer.decision.directive.recovery == types_pb2.CONTINUITY_FRESH
    await ports.eventually(lambda: _has_pod(controller, "example.eng-2.2"), timeout=10)
    again = await controller.stub.RestoreDecision(
        pb.RestoreDecisionRequest(swarm="example", seat="eng-2", choice=types_pb2.CHOICE_FRESH),
        metadata=cs.OPERATOR,
    )
    assert again.repeated and again.decision.replacement_execution_id == "example.eng-2.2"


async def _has_pod(controller: cs.Controller, execution_id: str) -> None:
    assert controller.pod_of(execution_id) is not None
