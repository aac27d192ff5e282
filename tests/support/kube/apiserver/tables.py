"""Table answers (``Accept: application/json;as=Table``) as kubectl get prints them: Pod cells and
ages."""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from typing import Any


def pod_cells(pod: Mapping[str, Any]) -> list[Any]:
    """A Pod's row as ``kubectl get pods`` shows it: ready containers, the status word (a
    container's waiting or terminated reason over the phase, Terminating while deleted),
    restarts, age, IP and node."""
    status = pod.get("status") or {}
    containers = (pod.get("spec") or {}).get("containers") or ()
    statuses = status.get("containerStatuses") or ()
    ready = sum(1 for c in statuses if c.get("ready"))
    word = status.get("reason") or status.get("phase") or "Pending"
    for entry in statuses:
        state = entry.get("state") or {}
        if (state.get("waiting") or {}).get("reason"):
            word = state["waiting"]["reason"]
        elif (state.get("terminated") or {}).get("reason"):
            word = state["terminated"]["reason"]
    if word == "Pending" and (pod.get("spec") or {}).get("nodeName"):
        word = "ContainerCreating" if not statuses else word
    if pod["metadata"].get("deletionTimestamp"):
        word = "Terminating"
    restarts = sum(int(c.get("restartCount") or 0) for c in statuses)
    return [
        pod["metadata"]["name"],
        f"{ready}/{len(containers)}",
        word,
        str(restarts),
        age(pod["metadata"].get("creationTimestamp")),
        status.get("podIP") or "<none>",
        (pod.get("spec") or {}).get("nodeName") or "<none>",
    ]


def age(stamp: str | None) -> str:
    """How long ago, as kubectl writes it: 45s, 12m, 5h, 3d."""
    if not stamp:
        return "<unknown>"
    then = datetime.datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=datetime.UTC)
    seconds = max(0, int((datetime.datetime.now(datetime.UTC) - then).total_seconds()))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size * 2:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"
