"""A Pod's status as a kubelet writes it: phase, conditions, container statuses, addresses; and
writing it through ``pods/NAME/status``, and finishing a deletion at grace 0."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from tests.support.kube import api_client
from tests.support.kube.node import (
    context,
    pods,
)

log = logging.getLogger("tests.kubelet")


def container_status(c: pods.Container) -> dict[str, Any]:
    image = str(c.spec.get("image", ""))
    status: dict[str, Any] = {
        "name": c.name,
        "image": image,
        "imageID": pods.image_id(image) if c.container_id else "",
        "state": c.state,
        "lastState": c.last_state,
        "ready": c.ready,
        "restartCount": c.restart_count,
        "started": c.started,
    }
    if c.container_id:
        status["containerID"] = c.container_id
    return status


def phase(pod: pods.Pod) -> str:
    if pod.final_phase is not None:
        return pod.final_phase
    if pod.initialized and any(c.runs for c in pod.main):
        return "Running"
    return "Pending"


def pod_status(pod: pods.Pod) -> dict[str, Any]:
    pod_phase = phase(pod)
    terminal = pod_phase in ("Succeeded", "Failed")
    unready = [c.name for c in pod.main if not c.ready]
    unready += [c.name for c in pod.init if c.kind == "sidecar" and not c.ready]
    incomplete = [
        c.name
        for c in pod.init
        if not (c.done if c.kind == "init" else c.started or pod.initialized)
    ]
    initialized = pod.initialized or (terminal and not incomplete)
    ready_reason = "PodCompleted" if terminal else "ContainersNotReady"
    own = {
        "PodReadyToStartContainers": ("True" if pod.sandbox_ready else "False", None, None),
        "Initialized": (
            "True" if initialized else "False",
            None if initialized else "ContainersNotInitialized",
            None if initialized else f"containers with incomplete status: [{' '.join(incomplete)}]",
        ),
        "ContainersReady": (
            "False" if unready or terminal else "True",
            ready_reason if unready or terminal else None,
            (f"containers with unready status: [{' '.join(unready)}]")
            if unready and not terminal
            else None,
        ),
        "Ready": (
            "False" if unready or terminal else "True",
            ready_reason if unready or terminal else None,
            (f"containers with unready status: [{' '.join(unready)}]")
            if unready and not terminal
            else None,
        ),
        "PodScheduled": ("True", None, None),
    }
    conditions = []
    now = pods.now()
    for kind, (value, reason, message) in own.items():
        previous = pod.transitions.get(kind)
        if previous is None or previous[0] != value:
            pod.transitions[kind] = (value, now)
        entry: dict[str, Any] = {
            "type": kind,
            "status": value,
            "lastProbeTime": None,
            "lastTransitionTime": pod.transitions[kind][1],
        }
        if reason:
            entry["reason"] = reason
        if message:
            entry["message"] = message
        conditions.append(entry)
    current = pod.obj.get("status") or {}
    conditions += [dict(c) for c in current.get("conditions") or () if c.get("type") not in own]
    status: dict[str, Any] = {
        "phase": pod_phase,
        "conditions": conditions,
        "hostIP": pods.HOST_IP,
        "hostIPs": [{"ip": pods.HOST_IP}],
        "startTime": pod.start_time,
        "containerStatuses": [container_status(c) for c in sorted(pod.main, key=lambda c: c.name)],
    }
    if pod.init:
        status["initContainerStatuses"] = [container_status(c) for c in pod.init]
    if pod.sandbox_ready or terminal:
        status["podIP"] = pod.ip
        status["podIPs"] = [{"ip": pod.ip}]
    if current.get("qosClass"):
        status["qosClass"] = current["qosClass"]
    if pod.message and not terminal:
        status["message"] = pod.message
    return status


def terminal_phase(pod: pods.Pod) -> str:
    for c in pod.main:
        terminated = c.state.get("terminated")
        if terminated is None or terminated.get("exitCode") != 0:
            return "Failed"
    return "Succeeded"


class StatusWriter:
    """Writes the Pods' statuses of one node to the API server."""

    def __init__(self, node: context.NodeContext) -> None:
        self.context = node

    async def sync(self, pod: pods.Pod) -> None:
        """Write the Pod's status if it changed (through ``pods/{name}/status``)."""
        async with pod.lock:
            await self.context.gate()
            if pod.gone:
                return
            status = pod_status(pod)
            if status == pod.written:
                return
            try:
                updated = await self.context.api.call(
                    "PATCH",
                    f"/api/v1/namespaces/{pod.namespace}/pods/{pod.name}/status",
                    body={"status": status},
                    content_type="application/merge-patch+json",
                )
            except api_client.ApiStatusError as exc:
                if exc.code == 404:
                    pod.gone = True
                    pod.deleting.set()
                    return
                log.warning("status of %s/%s not written: %s", pod.namespace, pod.name, exc)
                return
            pod.written = status
            if isinstance(updated, dict) and updated.get("metadata", {}).get("uid") == pod.uid:
                pod.obj = updated
                if updated["metadata"].get("deletionTimestamp"):
                    pod.deleting.set()

    async def finish_deletion(self, obj: Mapping[str, Any]) -> None:
        meta = obj["metadata"]
        try:
            await self.context.api.call(
                "DELETE",
                f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}",
                body={
                    "apiVersion": "v1",
                    "kind": "DeleteOptions",
                    "gracePeriodSeconds": 0,
                    "preconditions": {"uid": meta["uid"]},
                },
            )
        except api_client.ApiStatusError as exc:
            if exc.code not in (404, 409):
                raise
