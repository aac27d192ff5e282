"""Failure reasons classified from kubelet Pod statuses, end to end: the emulator holds the Pod
status as Kubernetes reports it, the real controller fences the attempt, and the reason reaches
the handoff card, the fence record and the fence event (spec: "What happens when a Pod fails")."""

from __future__ import annotations

import datetime
import json
from typing import Any

import pytest

from services.controller.pods import classifying
from services.controller.state import reading
from tests.support import controller_server as cs
from tests.support import ports

E2 = "example.eng-2.1"


def _worker(state: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {
        "name": classifying.WORKER_CONTAINER,
        "image": cs.IMAGE,
        "imageID": "",
        "ready": False,
        "restartCount": 0,
        "state": state,
        **extra,
    }


RUNNING = {"running": {"startedAt": "2026-12-02T10:00:05Z"}}
KILLED = {"terminated": {"reason": "Error", "exitCode": 137, "signal": 9}}


def _evicted() -> dict[str, Any]:
    """What the kubelet writes when it evicts a Pod under node memory pressure."""
    return {
        "phase": "Failed",
        "reason": "Evicted",
        "message": "The node was low on resource: memory. Threshold quantity: 100Mi.",
        "startTime": "2026-12-02T10:00:00Z",
        "conditions": [
            {"type": "Ready", "status": "False", "reason": "PodFailed"},
            {"type": "DisruptionTarget", "status": "True", "reason": "TerminationByKubelet"},
        ],
        "containerStatuses": [_worker(KILLED)],
    }


def _disruption_terminal(reason: str) -> dict[str, Any]:
    """A Pod the cluster pushed off its node (no Evicted reason), once it is terminal."""
    return {
        "phase": "Failed",
        "startTime": "2026-12-02T10:00:00Z",
        "conditions": [
            {"type": "Ready", "status": "False", "reason": "PodFailed"},
            {"type": "DisruptionTarget", "status": "True", "reason": reason},
        ],
        "containerStatuses": [_worker(KILLED)],
    }


def _node_lost_unknown() -> dict[str, Any]:
    """What the node lifecycle controller leaves on a Pod of an unreachable node."""
    return {
        "phase": "Unknown",
        "reason": "NodeLost",
        "message": "Node node-a which was running pod worker is unresponsive",
        "startTime": "2026-12-02T10:00:00Z",
        "conditions": [{"type": "Ready", "status": "Unknown", "reason": "NodeStatusUnknown"}],
        "containerStatuses": [_worker(RUNNING)],
    }


def _node_lost_phase_only() -> dict[str, Any]:
    return {
        "phase": "Unknown",
        "startTime": "2026-12-02T10:00:00Z",
        "containerStatuses": [_worker(RUNNING)],
    }


async def _fenced_as(controller: cs.Controller, reason: str) -> None:
    """The attempt is fenced with `reason`: card, fence record and fence event agree."""

    async def fenced() -> None:
        card = await cs.card(controller, "eng-2")
        assert card is not None and card.failure == reason, card
        assert card.execution_id == E2 and card.decision == "recovery_pending"

    await ports.eventually(fenced, timeout=10)
    fence = await reading.fence(controller.redis, "example", E2)
    assert fence is not None and fence.reason == reason and fence.generation == 1
    events = await cs.watch(controller, lambda seen: any(e.kind == "fence" for e in seen))
    fences = [e for e in events if e.kind == "fence"]
    assert [(e.execution_id, e.seat) for e in fences] == [(E2, "eng-2")]
    assert json.loads(fences[0].detail_json)["reason"] == reason
    status = await controller.status()
    assert next(t for t in status.tasks if t.seat == "eng-2").awaiting == "recovery_pending"
    # The other seat's attempt is untouched.
    assert next(s for s in status.seats if s.seat == "eng-1").state == "running"


@pytest.fixture
async def running(controller: cs.Controller) -> cs.Controller:
    """Swarm `example` applied; both first attempts' Pods exist."""
    await controller.apply()
    await cs.wait_for_pod(controller, "example.eng-1.1")
    await cs.wait_for_pod(controller, E2)
    return controller


async def test_oom_killed_from_the_terminated_reason(running: cs.Controller) -> None:
    """Spec: a failure reason is one of oom_killed, …: `oom_killed` from a terminated state's
    reason OOMKilled (issue 3)."""
    running.fail(E2, cs.terminated("OOMKilled", 137))
    await _fenced_as(running, "oom_killed")


async def test_exit_137_without_oomkilled_is_application_exit(running: cs.Controller) -> None:
    """Issue 3: exit code 137 alone is only SIGKILL, not OOM, so it is application_exit."""
    running.fail(E2, cs.terminated("Error", 137))
    await _fenced_as(running, "application_exit")


async def test_application_exit_from_a_non_zero_exit(running: cs.Controller) -> None:
    """Spec: a failure reason is … application_exit (any other non-zero exit)."""
    running.fail(E2, cs.terminated("Error", 1))
    await _fenced_as(running, "application_exit")


async def test_evicted_from_phase_failed_reason_evicted(running: cs.Controller) -> None:
    """Spec: a failure reason is … evicted: phase Failed with reason Evicted, as the kubelet
    writes it under node pressure (the container's exit 137 is the eviction's kill)."""
    running.fail(E2, _evicted())
    await _fenced_as(running, "evicted")


@pytest.mark.parametrize(
    "disruption", ["TerminationByKubelet", "EvictionByEvictionAPI", "PreemptionByScheduler"]
)
async def test_evicted_from_a_disruption_target_once_terminal(
    running: cs.Controller, disruption: str
) -> None:
    """Spec: … evicted; issue 3: from a DisruptionTarget condition once the Pod is terminal."""
    running.fail(E2, _disruption_terminal(disruption))
    await _fenced_as(running, "evicted")


async def test_a_running_pods_stale_disruption_target_is_no_failure(
    running: cs.Controller,
) -> None:
    """Issue 3: a running Pod's stale DisruptionTarget (an eviction a PodDisruptionBudget
    refused) is not a failure: nothing is fenced."""
    running.fail(
        E2,
        {
            "phase": "Running",
            "startTime": "2026-12-02T10:00:00Z",
            "conditions": [
                {"type": "Ready", "status": "True"},
                {"type": "DisruptionTarget", "status": "True", "reason": "EvictionByEvictionAPI"},
            ],
            "containerStatuses": [_worker(RUNNING, ready=True)],
        },
    )
    await running.reconcile()
    await running.reconcile()
    assert await cs.card(running, "eng-2") is None
    assert await reading.fence(running.redis, "example", E2) is None
    assert running.pod_of(E2) is not None


@pytest.mark.parametrize(
    "status", [_node_lost_unknown, _node_lost_phase_only], ids=["reason-NodeLost", "phase-Unknown"]
)
async def test_node_lost_from_phase_unknown_or_reason_node_lost(
    running: cs.Controller, status: Any
) -> None:
    """Spec: a failure reason is … node_lost; issue 3: from reason NodeLost or phase Unknown
    (the containers still read running: the node cannot report)."""
    running.fail(E2, status())
    await _fenced_as(running, "node_lost")


async def test_node_lost_from_a_taint_manager_deletion(running: cs.Controller) -> None:
    """Issue 3: node_lost from a DisruptionTarget of DeletionByTaintManager (the node went
    away; the Pod's own status stays stale and running)."""
    running.fail(
        E2,
        {
            "phase": "Running",
            "startTime": "2026-12-02T10:00:00Z",
            "conditions": [
                {"type": "Ready", "status": "False", "reason": "NodeStatusUnknown"},
                {"type": "DisruptionTarget", "status": "True", "reason": "DeletionByTaintManager"},
            ],
            "containerStatuses": [_worker(RUNNING)],
        },
    )
    await _fenced_as(running, "node_lost")


async def test_image_pull_within_the_two_minute_grace_is_not_fenced(
    running: cs.Controller,
) -> None:
    """Spec: a failure reason is … image_pull (after a two minute grace): a Pod that has
    waited on its image for less than two minutes is not fenced."""
    running.fail(E2, cs.image_pull(datetime.datetime.now(datetime.UTC)))
    await running.reconcile()
    await running.reconcile()
    assert await reading.fence(running.redis, "example", E2) is None
    assert await cs.card(running, "eng-2") is None
    seat = next(s for s in (await running.status()).seats if s.seat == "eng-2")
    assert (seat.current_execution_id, seat.state) == (E2, "running")


async def test_image_pull_after_the_two_minute_grace_is_fenced(running: cs.Controller) -> None:
    """Spec: a failure reason is … image_pull (after a two minute grace): the same Pod whose
    wait began more than two minutes ago is fenced with image_pull."""
    started = datetime.datetime.now(datetime.UTC) - datetime.timedelta(minutes=2, seconds=5)
    running.fail(E2, cs.image_pull(started))
    await _fenced_as(running, "image_pull")
