"""Reading Kubernetes objects as JSON: a container's status, a condition's value."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def container_status(pod: Mapping[str, Any] | None, name: str) -> dict[str, Any]:
    """The status of one container (init or main) of a Pod, or {} when it has none yet."""
    status = (pod or {}).get("status") or {}
    for entry in (
        *(status.get("initContainerStatuses") or ()),
        *(status.get("containerStatuses") or ()),
    ):
        if entry.get("name") == name:
            return dict(entry)
    return {}


def condition(obj: Mapping[str, Any] | None, kind: str) -> str | None:
    """The status (``"True"``...) of a Pod's or Node's condition, or None."""
    for entry in ((obj or {}).get("status") or {}).get("conditions") or ():
        if entry.get("type") == kind:
            return str(entry.get("status"))
    return None
