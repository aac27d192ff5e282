"""What the shared watches keep of a Pod or a Node: only what `classifying` reads.

A list of thousands of Pods holds far more than classification needs (specs, managed fields);
`informing.Informer` keeps each object cut down to these parts.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, cast

from services.controller.pods import classifying, runtime

# What `classifying` reads of a Pod (and `attempt_of` of its labels); the rest is not kept.
_POD_METADATA = (
    "name",
    "namespace",
    "uid",
    "resourceVersion",
    "labels",
    "creationTimestamp",
    "deletionTimestamp",
)
_POD_STATUS = (
    "phase",
    "reason",
    "startTime",
    "conditions",
    "containerStatuses",
    "initContainerStatuses",
)


_POD_ANNOTATIONS = (runtime.ANNOTATION_DECISION, runtime.ANNOTATION_ATTEMPT)


def trim_pod(pod: Mapping[str, Any]) -> classifying.Pod:
    """The part of a Pod that classification reads: identity, labels, node, status."""
    meta = pod.get("metadata") or {}
    status = pod.get("status") or {}
    node = (pod.get("spec") or {}).get("nodeName")
    trimmed: dict[str, Any] = {
        "metadata": {k: meta[k] for k in _POD_METADATA if k in meta},
        "status": {k: status[k] for k in _POD_STATUS if k in status},
    }
    if node:
        trimmed["spec"] = {"nodeName": node}
    # Only the annotations the controller reads back when Redis lost what they say: the
    # decision a replacement carries and the identity every worker carries.
    annotations = meta.get("annotations") or {}
    kept = {k: annotations[k] for k in _POD_ANNOTATIONS if annotations.get(k)}
    if kept:
        trimmed["metadata"]["annotations"] = kept
    return cast(classifying.Pod, trimmed)


def trim_node(node: Mapping[str, Any]) -> classifying.Node:
    """The part of a Node that classification reads: its name and Ready condition."""
    conditions = (node.get("status") or {}).get("conditions") or ()
    trimmed = {
        "metadata": {"name": (node.get("metadata") or {}).get("name")},
        "status": {"conditions": [c for c in conditions if c.get("type") == "Ready"]},
    }
    return cast(classifying.Node, trimmed)
