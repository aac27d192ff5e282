"""The failure reasons of "What happens when a Pod fails", read from Pod status as Kubernetes
reports it: "A failure reason is one of oom_killed, evicted, node_lost, image_pull (after a two
minute grace) or application_exit."
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from services.controller.pods import classifying

Reason = classifying.FailureReason
NOW = datetime(2026, 12, 2, 15, 0, 0, tzinfo=UTC)
READY = {"status": {"conditions": [{"type": "Ready", "status": "True"}]}}
NOT_READY = {"status": {"conditions": [{"type": "Ready", "status": "False"}]}}
UNKNOWN = {"status": {"conditions": [{"type": "Ready", "status": "Unknown"}]}}


def terminated(code: int, reason: str = "Error") -> dict[str, Any]:
    return {"terminated": {"exitCode": code, "reason": reason}}


RUNNING: dict[str, Any] = {"running": {"startedAt": "2026-12-02T14:00:00Z"}}


def waiting(reason: str) -> dict[str, Any]:
    return {"waiting": {"reason": reason}}


def pod(
    phase: str = "Running",
    *,
    reason: str | None = None,
    worker: dict[str, Any] | None = None,
    last: dict[str, Any] | None = None,
    sidecar: dict[str, Any] | None = None,
    disruption: str | None = None,
    disruption_status: str = "True",
    node: str | None = "node-a",
    started: datetime | None = NOW - timedelta(hours=1),
    created: datetime | None = NOW - timedelta(hours=1),
    deleting: bool = False,
) -> classifying.Pod:
    worker_status: dict[str, Any] = {"name": "worker", "state": worker or RUNNING}
    if last is not None:
        worker_status["lastState"] = last
    status: dict[str, Any] = {
        "phase": phase,
        "conditions": [{"type": "Ready", "status": "True"}],
        "containerStatuses": [worker_status],
        "initContainerStatuses": [{"name": "restorer", "state": sidecar or RUNNING}],
    }
    if reason:
        status["reason"] = reason
    if disruption:
        status["conditions"].append(
            {"type": "DisruptionTarget", "status": disruption_status, "reason": disruption}
        )
    if started:
        status["startTime"] = started.strftime("%Y-%m-%dT%H:%M:%SZ")
    metadata: dict[str, Any] = {"name": "w"}
    if created:
        metadata["creationTimestamp"] = created.strftime("%Y-%m-%dT%H:%M:%SZ")
    if deleting:
        metadata["deletionTimestamp"] = NOW.strftime("%Y-%m-%dT%H:%M:%SZ")
    spec = {"nodeName": node} if node else {}
    return {"metadata": metadata, "spec": spec, "status": status}  # type: ignore[typeddict-item]


def classify(p: classifying.Pod, nodes: dict[str, Any] | None = None) -> Reason | None:
    return classifying.classify(p, {"node-a": READY} if nodes is None else nodes, NOW)


@pytest.mark.parametrize(
    "p",
    [
        pod("Failed", worker=terminated(137, "OOMKilled")),
        pod("Running", worker=waiting("CrashLoopBackOff"), last=terminated(137, "OOMKilled")),
        pod("Running", worker=terminated(137, "OOMKilled")),
    ],
    ids=["state", "last-state", "before-phase-turns"],
)
def test_oom_killed_from_a_terminated_state_with_reason_oomkilled(p: classifying.Pod) -> None:
    """oom_killed: the worker's state or lastState terminated with reason OOMKilled."""
    assert classify(p) is Reason.OOM_KILLED


def test_exit_code_137_without_oomkilled_is_application_exit() -> None:
    """Exit code 137 alone is only SIGKILL, not OOM: application_exit."""
    assert classify(pod("Failed", worker=terminated(137, "Error"))) is Reason.APPLICATION_EXIT


def test_oom_of_the_sidecar_is_not_the_workers_oom() -> None:
    """oom_killed reads the worker container only (the restorer sidecar restarts in place)."""
    p = pod("Running", sidecar=terminated(137, "OOMKilled"))
    assert classify(p) is None


@pytest.mark.parametrize(
    "p",
    [
        pod("Failed", reason="Evicted", worker=terminated(137)),
        pod("Failed", disruption="TerminationByKubelet", worker=terminated(143)),
        pod("Failed", disruption="EvictionByEvictionAPI", worker=terminated(143)),
        pod("Failed", disruption="PreemptionByScheduler", worker=terminated(143)),
        pod(
            "Running",
            disruption="EvictionByEvictionAPI",
            worker=terminated(143),
            sidecar=terminated(0),
            deleting=True,
        ),
    ],
    ids=["phase-reason", "kubelet", "eviction-api", "preemption", "deleting-all-terminated"],
)
def test_evicted_once_the_pod_is_terminal(p: classifying.Pod) -> None:
    """evicted: phase Failed with reason Evicted, or a DisruptionTarget (TerminationByKubelet,
    EvictionByEvictionAPI, PreemptionByScheduler) once the Pod is terminal."""
    assert classify(p) is Reason.EVICTED


@pytest.mark.parametrize(
    "p",
    [
        pod("Running", disruption="EvictionByEvictionAPI"),
        pod("Running", disruption="TerminationByKubelet", deleting=True),
        pod("Running", disruption="PreemptionByScheduler", disruption_status="False"),
    ],
    ids=["running", "deleting-still-running", "condition-false"],
)
def test_a_running_pods_stale_disruption_target_is_not_a_failure(p: classifying.Pod) -> None:
    """A running Pod's stale DisruptionTarget (a refused eviction) is not a failure."""
    assert classify(p) is None


@pytest.mark.parametrize(
    "p",
    [
        pod("Running", reason="NodeLost"),
        pod("Unknown"),
        pod("Running", disruption="DeletionByTaintManager"),
        pod("Running", disruption="DeletionByPodGC"),
    ],
    ids=["reason-nodelost", "phase-unknown", "taint-manager", "pod-gc"],
)
def test_node_lost_from_the_pods_own_status(p: classifying.Pod) -> None:
    """node_lost: reason NodeLost, phase Unknown, or a DisruptionTarget of DeletionByTaintManager
    or DeletionByPodGC."""
    assert classify(p) is Reason.NODE_LOST


@pytest.mark.parametrize(
    "nodes",
    [{}, {"node-a": NOT_READY}, {"node-a": UNKNOWN}, {"node-a": {"status": {}}}],
    ids=["node-missing", "not-ready", "unknown", "no-ready-condition"],
)
def test_node_lost_when_the_pods_node_is_gone_or_not_ready(nodes: dict[str, Any]) -> None:
    """node_lost: a Pod bound to a node that is gone or not Ready."""
    assert classify(pod("Running"), nodes) is Reason.NODE_LOST


def test_node_state_is_not_read_without_nodes_or_before_binding() -> None:
    """node_lost from node state only when nodes are given and the Pod is bound (spec.nodeName)."""
    assert classifying.classify(pod("Running"), None, NOW) is None
    assert classify(pod("Pending", node=None), {}) is None


def test_the_workers_own_exit_wins_over_a_node_lost_later() -> None:
    """A recorded non-zero exit is the cause even when its node vanished afterwards."""
    assert classify(pod("Failed", worker=terminated(1)), {}) is Reason.APPLICATION_EXIT


@pytest.mark.parametrize("reason", sorted(classifying.IMAGE_PULL_WAITING))
def test_image_pull_before_the_grace_is_not_a_failure(reason: str) -> None:
    """image_pull only after a two minute grace: before it, no failure."""
    young = pod("Pending", worker=waiting(reason), started=NOW - timedelta(seconds=119))
    assert classify(young) is None


@pytest.mark.parametrize("reason", sorted(classifying.IMAGE_PULL_WAITING))
def test_image_pull_after_the_grace(reason: str) -> None:
    """image_pull from a waiting reason among ErrImagePull, ImagePullBackOff, InvalidImageName,
    ErrImageNeverPull, ImageInspectError, RegistryUnavailable after the two minute grace."""
    old = pod("Pending", worker=waiting(reason), started=NOW - timedelta(minutes=2))
    assert classify(old) is Reason.IMAGE_PULL


def test_image_pull_of_the_restorer_sidecar_counts() -> None:
    """image_pull: init containers are checked too (the restorer sidecar's image)."""
    p = pod(
        "Pending",
        worker=waiting("PodInitializing"),
        sidecar=waiting("ImagePullBackOff"),
        started=NOW - timedelta(minutes=3),
    )
    assert classify(p) is Reason.IMAGE_PULL


def test_image_pull_grace_runs_from_creation_when_the_pod_never_started() -> None:
    """The grace counts from status.startTime, or metadata.creationTimestamp without one."""
    p = pod("Pending", worker=waiting("ErrImagePull"), started=None, created=NOW)
    assert classify(p) is None
    late = NOW + classifying.IMAGE_PULL_GRACE
    assert classifying.classify(p, {"node-a": READY}, late) is Reason.IMAGE_PULL
    assert classifying.image_pull_deadline(p) == late


def test_other_waiting_reasons_are_not_image_pull() -> None:
    """Only the listed waiting reasons are image pulls (a missing Secret is not)."""
    p = pod("Pending", worker=waiting("CreateContainerConfigError"), started=NOW - timedelta(1))
    assert classify(p) is None


@pytest.mark.parametrize(
    "p",
    [
        pod("Failed", worker=terminated(3)),
        pod("Running", worker=terminated(1), sidecar=RUNNING),
        pod("Failed", reason="DeadlineExceeded", worker=terminated(0)),
        pod("Running", worker=waiting("CrashLoopBackOff"), last=terminated(2)),
    ],
    ids=["failed", "worker-exited-sidecar-up", "failed-phase-only", "crash-loop"],
)
def test_application_exit_from_any_other_non_zero_exit(p: classifying.Pod) -> None:
    """application_exit from any other terminated state with a non-zero exit code (phase Failed
    or the worker container terminated non-zero)."""
    assert classify(p) is Reason.APPLICATION_EXIT


@pytest.mark.parametrize(
    "p",
    [
        pod("Succeeded", worker=terminated(0, "Completed")),
        pod("Succeeded", worker=terminated(0, "Completed"), last=terminated(137, "OOMKilled")),
        pod("Running", worker=terminated(0, "Completed")),
    ],
    ids=["succeeded", "succeeded-after-restart", "exited-zero"],
)
def test_a_succeeded_pod_is_not_a_failure(p: classifying.Pod) -> None:
    """A succeeded Pod (exit 0) is not a failure."""
    assert classify(p) is None


def test_a_healthy_running_pod_is_not_a_failure() -> None:
    """A running worker on a Ready node is no failure (and its Pod is not terminal)."""
    p = pod("Running")
    assert classify(p) is None
    assert not classifying.is_terminal(p)


def test_failure_reasons_are_the_specs_words() -> None:
    """The reasons are spelled as in the spec: oom_killed, evicted, node_lost, image_pull,
    application_exit."""
    assert [str(r) for r in Reason] == [
        "oom_killed",
        "evicted",
        "node_lost",
        "image_pull",
        "application_exit",
    ]
    assert timedelta(minutes=2) == classifying.IMAGE_PULL_GRACE


# --- the final capture ------------------------------------------------------------------------

FINAL_WAIT = timedelta(seconds=10)


def finished(code: int, reason: str, at: datetime) -> dict[str, Any]:
    state = terminated(code, reason)
    state["terminated"]["finishedAt"] = at.strftime("%Y-%m-%dT%H:%M:%SZ")
    return state


@pytest.mark.parametrize(("code", "reason"), [(137, "OOMKilled"), (1, "Error"), (0, "Completed")])
def test_a_worker_stopped_beside_a_running_sidecar_waits_for_its_final_capture(
    code: int, reason: str
) -> None:
    """Issue 21: "The controller, seeing a worker container terminated while its sidecar runs,
    waits a short bounded time for that final report before it fences": until the worker's
    termination plus the wait."""
    stopped = NOW - timedelta(seconds=3)
    found = classifying.final_capture_deadline(
        pod(worker=finished(code, reason, stopped)), FINAL_WAIT
    )
    assert found == stopped + FINAL_WAIT


@pytest.mark.parametrize(
    "given",
    [
        pod(),  # the worker runs
        pod(worker=terminated(137, "OOMKilled")),  # no termination time to count from
        pod(  # the sidecar stopped too: it reported what it could, or died with the worker
            worker=finished(137, "OOMKilled", NOW),
            sidecar=finished(0, "Completed", NOW),
        ),
        pod(phase="Pending", worker=waiting("ContainerCreating"), sidecar=waiting("PodInit")),
    ],
)
def test_nothing_to_wait_for_without_a_stopped_worker_and_a_running_sidecar(
    given: classifying.Pod,
) -> None:
    """No wait when the worker runs, when its termination has no time, or when the sidecar
    no longer runs (the Pod was killed whole, or the sidecar already ended)."""
    assert classifying.final_capture_deadline(given, FINAL_WAIT) is None


def test_a_pod_without_a_restorer_status_waits_for_nothing() -> None:
    given = pod(worker=finished(1, "Error", NOW))
    given["status"]["initContainerStatuses"] = []
    assert classifying.final_capture_deadline(given, FINAL_WAIT) is None


def test_no_failure_is_named_while_the_sidecar_takes_its_final_capture() -> None:
    """Issue 21: the fence waits for the final report, bounded: an OOM-killed worker beside a
    running sidecar is no failure yet within the wait, `oom_killed` after it, and at once when
    the sidecar stopped (it reported, or died)."""
    stopped = NOW - timedelta(seconds=2)
    waiting_pod = pod(worker=finished(137, "OOMKilled", stopped))
    assert classifying.classify(waiting_pod, None, NOW) is None
    deadline = stopped + classifying.FINAL_CAPTURE_WAIT
    assert classifying.evidence(waiting_pod).next_deadline() == deadline
    assert classifying.classify(waiting_pod, None, deadline) is Reason.OOM_KILLED
    ended = pod(worker=finished(137, "OOMKilled", stopped), sidecar=finished(0, "Completed", NOW))
    assert classifying.classify(ended, None, NOW) is Reason.OOM_KILLED
    assert classifying.evidence(ended).next_deadline() is None


def test_a_pods_evidence_read_once_gives_each_later_verdict() -> None:
    """What a Pod says by itself is read once (`evidence`); the verdict follows the nodes and
    the time with no new read: a pull stuck past its grace becomes image_pull, a node gone
    NotReady makes node_lost (ahead of image_pull), and a failure the Pod's own status proves
    stays what it is whatever the node says."""
    pulling = classifying.evidence(
        pod("Pending", worker=waiting("ErrImagePull"), started=NOW - timedelta(seconds=60))
    )
    ready, not_ready = {"node-a": READY}, {"node-a": NOT_READY}
    assert classifying.verdict(pulling, ready, NOW) is None
    late = NOW + timedelta(seconds=60)
    assert classifying.verdict(pulling, ready, late) is Reason.IMAGE_PULL
    assert classifying.verdict(pulling, not_ready, NOW) is Reason.NODE_LOST
    assert classifying.verdict(pulling, None, NOW) is None
    assert pulling.next_deadline() == late
    crashed = classifying.evidence(pod("Failed", worker=terminated(1)))
    assert classifying.verdict(crashed, not_ready, late) is Reason.APPLICATION_EXIT
    assert crashed.terminal and crashed.next_deadline() is None
