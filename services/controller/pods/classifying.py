"""Why a worker Pod failed, read from raw Pod JSON the way Kubernetes really reports it.

Pure: no client library, no I/O. The runtime adapter hands in the Pod exactly as the API server
sent it (``json.loads`` of the response), so a pass over 10,000 Pods never builds model objects.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime, timedelta
from typing import NamedTuple, TypedDict

WORKER_CONTAINER = "worker"
"""The container that runs the agent; only its terminations say how the attempt ended."""

RESTORER_CONTAINER = "restorer"
"""The restorer sidecar: an init container with ``restartPolicy: Always``."""

IMAGE_PULL_GRACE = timedelta(minutes=2)
"""A registry hiccup often heals on the kubelet's next retry, so image pulls get this long."""

FINAL_CAPTURE_WAIT = timedelta(seconds=15)
"""How long after the worker container stopped a fence waits while the restorer sidecar still
runs: it is taking its final capture (the worker Pod template's grace period allows for it)."""


class FailureReason(enum.StrEnum):
    """The spec's failure reasons, spelled as they appear in fences and on the JSON surfaces."""

    OOM_KILLED = "oom_killed"
    EVICTED = "evicted"
    NODE_LOST = "node_lost"
    IMAGE_PULL = "image_pull"
    APPLICATION_EXIT = "application_exit"


class ContainerStateTerminated(TypedDict, total=False):
    exitCode: int
    reason: str
    signal: int
    finishedAt: str


class ContainerStateWaiting(TypedDict, total=False):
    reason: str


class ContainerState(TypedDict, total=False):
    waiting: ContainerStateWaiting
    running: dict[str, object]
    terminated: ContainerStateTerminated


class ContainerStatus(TypedDict, total=False):
    name: str
    state: ContainerState
    lastState: ContainerState


class PodCondition(TypedDict, total=False):
    type: str
    status: str
    reason: str


class PodStatus(TypedDict, total=False):
    phase: str
    reason: str
    startTime: str
    conditions: list[PodCondition]
    containerStatuses: list[ContainerStatus]
    initContainerStatuses: list[ContainerStatus]


class PodSpec(TypedDict, total=False):
    nodeName: str


class ObjectMeta(TypedDict, total=False):
    name: str
    namespace: str
    uid: str
    resourceVersion: str
    labels: dict[str, str]
    annotations: dict[str, str]
    creationTimestamp: str
    deletionTimestamp: str


class Pod(TypedDict, total=False):
    metadata: ObjectMeta
    spec: PodSpec
    status: PodStatus


class NodeCondition(TypedDict, total=False):
    type: str
    status: str


class NodeStatus(TypedDict, total=False):
    conditions: list[NodeCondition]


class Node(TypedDict, total=False):
    metadata: ObjectMeta
    status: NodeStatus


IMAGE_PULL_WAITING = frozenset(
    {
        "ErrImagePull",
        "ImagePullBackOff",
        "InvalidImageName",
        "ErrImageNeverPull",
        "ImageInspectError",
        "RegistryUnavailable",
    }
)
# DisruptionTarget reasons that mean the Pod was pushed off a healthy node. They count only once
# the Pod is terminal: a refused eviction (a PodDisruptionBudget said no) leaves the condition on a
# Pod that keeps running.
_EVICTION_DISRUPTIONS = frozenset(
    {
        "TerminationByKubelet",
        "EvictionByEvictionAPI",
        "PreemptionByScheduler",
        "PreemptionByKubeScheduler",  # the spelling of Kubernetes 1.26
    }
)
# DisruptionTarget reasons that mean the node went away under the Pod; the node cannot report, so
# the Pod's own status stays stale and is never terminal in time.
_NODE_DISRUPTIONS = frozenset({"DeletionByTaintManager", "DeletionByPodGC"})


class Evidence(NamedTuple):
    """What one version of a Pod says by itself, read once (`evidence`); `verdict` adds what
    may change while the Pod does not: its node's readiness and the time."""

    succeeded: bool
    terminal: bool
    """No container of the Pod can run again (`is_terminal`)."""
    own: FailureReason | None = None
    """The failure the Pod's own status proves: its worker's exit, an eviction, its node lost."""
    final_capture: datetime | None = None
    """Until when a fence waits for the restorer's final capture (`final_capture_deadline`)."""
    node: str | None = None
    """The node the Pod is bound to."""
    image_pull: datetime | None = None
    """When the Pod, stuck pulling an image, becomes an `image_pull` failure."""

    def next_deadline(self) -> datetime | None:
        """When the Pod's classification may change with nothing about it changing: the image
        pull grace or the final capture's wait running out (None: no such moment)."""
        found = [d for d in (self.image_pull, self.final_capture) if d is not None]
        return min(found, default=None)


def evidence(pod: Pod) -> Evidence:
    """What the Pod as the API server returned it says by itself (see `classify`)."""
    status = pod.get("status") or {}
    phase = status.get("phase")
    if phase == "Succeeded":
        return Evidence(succeeded=True, terminal=True)
    worker = _worker_status(status)
    terminal = is_terminal(pod)
    own: FailureReason | None = None
    disruption = _disruption_reason(status)
    if _oom_killed(worker):
        own = FailureReason.OOM_KILLED
    elif (phase == "Failed" and status.get("reason") == "Evicted") or (
        disruption in _EVICTION_DISRUPTIONS and terminal
    ):
        own = FailureReason.EVICTED
    elif (
        status.get("reason") == "NodeLost" or phase == "Unknown" or disruption in _NODE_DISRUPTIONS
    ):
        own = FailureReason.NODE_LOST
    elif phase == "Failed" or _exited_non_zero(worker):
        own = FailureReason.APPLICATION_EXIT
    return Evidence(
        succeeded=False,
        terminal=terminal,
        own=own,
        final_capture=final_capture_deadline(pod, FINAL_CAPTURE_WAIT),
        node=(pod.get("spec") or {}).get("nodeName") or None,
        image_pull=image_pull_deadline(pod),
    )


def verdict(
    found: Evidence, nodes: Mapping[str, Node] | None, now: datetime
) -> FailureReason | None:
    """The failure a Pod's evidence names at `now` with these nodes (see `classify`)."""
    if found.succeeded:
        return None
    if found.final_capture is not None and now < found.final_capture:
        # Not failed yet as far as a fence is concerned: the sidecar is archiving what the
        # worker completed, and fencing now would record a lost tail that is not lost.
        return None
    if found.own is not None:
        return found.own
    if nodes is not None and found.node and not node_ready(nodes.get(found.node)):
        return FailureReason.NODE_LOST
    if found.image_pull is not None and now >= found.image_pull:
        return FailureReason.IMAGE_PULL
    return None


def classify(pod: Pod, nodes: Mapping[str, Node] | None, now: datetime) -> FailureReason | None:
    """Name the failure of one worker attempt, or None while it is healthy (or succeeded).

    Container evidence comes first (an OOM kill is the cause even if the node vanished later),
    then what the cluster did to the Pod, then what the node says, then image pulls. While the
    worker has stopped and the restorer sidecar still runs (its final capture), for at most
    `FINAL_CAPTURE_WAIT` after the worker stopped, there is no failure yet.

    What the Pod says by itself (`evidence`) is read once per version of it by whoever keeps
    Pods (`informing`); only `verdict` runs again as nodes and time move on.

    Args:
        pod: The Pod as the API server returned it.
        nodes: Nodes by name, to notice a Pod bound to a node that is gone or not Ready;
            None skips that check.
        now: The current time (timezone-aware), for the image pull grace.

    Returns:
        The failure reason, or None.
    """
    return verdict(evidence(pod), nodes, now)


def image_pull_deadline(pod: Pod) -> datetime | None:
    """When a Pod stuck pulling an image becomes an ``image_pull`` failure, if it is stuck.

    Args:
        pod: The Pod as the API server returned it.

    Returns:
        ``status.startTime`` (else ``metadata.creationTimestamp``) plus the grace, the minimum
        datetime when neither is known, or None when no container waits on an image pull.
    """
    status = pod.get("status") or {}
    if not any(
        ((s.get("state") or {}).get("waiting") or {}).get("reason") in IMAGE_PULL_WAITING
        for s in _statuses(status)
    ):
        return None
    started = status.get("startTime") or (pod.get("metadata") or {}).get("creationTimestamp")
    if not started:
        # The API server always stamps creationTimestamp; without it the Pod's age cannot be
        # proven short, and waiting forever on a Pod that never pulls is the worse mistake.
        return datetime.min.replace(tzinfo=UTC)
    return _timestamp(started) + IMAGE_PULL_GRACE


def is_terminal(pod: Pod) -> bool:
    """Whether no container of the Pod can run again.

    Args:
        pod: The Pod as the API server returned it.

    Returns:
        True for phase Succeeded or Failed, or for a Pod being deleted whose containers
        (sidecars included) have all terminated.
    """
    status = pod.get("status") or {}
    if status.get("phase") in ("Succeeded", "Failed"):
        return True
    if not (pod.get("metadata") or {}).get("deletionTimestamp"):
        return False
    containers = status.get("containerStatuses") or []
    return bool(containers) and all(
        "terminated" in (s.get("state") or {}) for s in _statuses(status)
    )


def final_capture_deadline(pod: Pod, wait: timedelta) -> datetime | None:
    """Until when a fence waits for the restorer's final capture, or None when it need not.

    The worker container terminated (exited, crashed or OOM-killed) while the restorer sidecar
    still runs: the sidecar is taking its final capture of everything the worker completed, and
    a fence before its report would name a lost tail that is in fact archived. The wait is
    bounded by `wait` after the worker's termination, so a sidecar that never reports delays
    the fence by that much at most.

    Args:
        pod: The Pod as the API server returned it.
        wait: How long after the worker's termination the fence waits at most.

    Returns:
        The worker's termination time plus `wait`, or None when the worker still runs, has no
        termination time, or no restorer sidecar runs beside it.
    """
    status = pod.get("status") or {}
    terminated = (_worker_status(status).get("state") or {}).get("terminated")
    if terminated is None or not terminated.get("finishedAt"):
        return None
    restorer = next(
        (
            s
            for s in status.get("initContainerStatuses") or ()
            if s.get("name") == RESTORER_CONTAINER
        ),
        None,
    )
    if restorer is None or "running" not in (restorer.get("state") or {}):
        return None
    return _timestamp(str(terminated["finishedAt"])) + wait


def _statuses(status: PodStatus) -> Iterable[ContainerStatus]:
    yield from status.get("initContainerStatuses") or ()
    yield from status.get("containerStatuses") or ()


def _worker_status(status: PodStatus) -> ContainerStatus:
    for container in status.get("containerStatuses") or ():
        if container.get("name") == WORKER_CONTAINER:
            return container
    return {}


def _oom_killed(worker: ContainerStatus) -> bool:
    for state in (worker.get("state") or {}, worker.get("lastState") or {}):
        if (state.get("terminated") or {}).get("reason") == "OOMKilled":
            return True
    return False


def _exited_non_zero(worker: ContainerStatus) -> bool:
    state = worker.get("state") or {}
    terminated = state.get("terminated")
    if terminated is None and "running" not in state:
        # Under a restart policy, a crash-looping worker waits with its crash in lastState.
        terminated = (worker.get("lastState") or {}).get("terminated")
    return terminated is not None and terminated.get("exitCode", 0) != 0


def _disruption_reason(status: PodStatus) -> str | None:
    for condition in status.get("conditions") or ():
        if condition.get("type") == "DisruptionTarget" and condition.get("status") == "True":
            return condition.get("reason")
    return None


def _timestamp(text: str) -> datetime:
    moment = datetime.fromisoformat(text)
    # The API server writes RFC 3339 in UTC; a bare timestamp from a hand-made Pod means UTC too.
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def node_ready(node: Node | None) -> bool:
    """Whether a node exists and its Ready condition is True (Unknown and False are not)."""
    if node is None:
        return False
    for condition in (node.get("status") or {}).get("conditions") or ():
        if condition.get("type") == "Ready":
            return condition.get("status") == "True"
    return False
