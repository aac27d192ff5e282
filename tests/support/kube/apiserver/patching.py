"""Patches as the API server applies them: JSON merge patch, strategic merge patch (by the merge
keys of the kinds served) and JSON patch."""

from __future__ import annotations

import copy
from typing import Any

from tests.support.kube.apiserver import errors

MERGE_KEYS = {
    "containers": "name",
    "initContainers": "name",
    "ephemeralContainers": "name",
    "containerStatuses": "name",
    "initContainerStatuses": "name",
    "ephemeralContainerStatuses": "name",
    "conditions": "type",
    "env": "name",
    "volumes": "name",
    "volumeMounts": "mountPath",
    "ports": "containerPort",
    "ownerReferences": "uid",
    "imagePullSecrets": "name",
    "addresses": "type",
    "taints": "key",
}


def apply(target: dict[str, Any], patch: Any, content_type: str) -> Any:
    if content_type == "application/merge-patch+json":
        return merge(target, patch)
    if content_type == "application/strategic-merge-patch+json":
        return strategic(target, patch)
    if content_type == "application/json-patch+json":
        return json_patch(target, patch)
    raise errors.ApiError(415, f"the patch content type {content_type!r} is not supported")


def merge(target: Any, patch: Any) -> Any:
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merge(out.get(key), value)
    return out


def strategic(target: Any, patch: Any) -> Any:
    if not isinstance(patch, dict) or not isinstance(target, dict):
        return merge(None, patch)
    out = dict(target)
    for key, value in patch.items():
        if key.startswith("$"):
            continue
        current = out.get(key)
        if value is None:
            out.pop(key, None)
        elif key in MERGE_KEYS and isinstance(value, list) and isinstance(current, list):
            merge_key, merged = MERGE_KEYS[key], copy.deepcopy(current)
            for item in value:
                index = next(
                    (
                        i
                        for i, e in enumerate(merged)
                        if isinstance(item, dict)
                        and isinstance(e, dict)
                        and e.get(merge_key) == item.get(merge_key)
                    ),
                    None,
                )
                if isinstance(item, dict) and item.get("$patch") == "delete":
                    if index is not None:
                        merged.pop(index)
                elif index is None:
                    merged.append(strategic({}, item) if isinstance(item, dict) else item)
                else:
                    merged[index] = strategic(merged[index], item)
            out[key] = merged
        elif key == "finalizers" and isinstance(value, list) and isinstance(current, list):
            out[key] = [*current, *(v for v in value if v not in current)]
        elif isinstance(value, dict) and isinstance(current, dict):
            out[key] = strategic(current, value)
        else:
            out[key] = merge(None, value)
    return out


def json_patch(target: dict[str, Any], operations: Any) -> Any:
    doc: Any = copy.deepcopy(target)
    if not isinstance(operations, list):
        raise errors.ApiError(400, "a JSON patch is a list of operations")
    for operation in operations:
        op, path = operation.get("op"), operation.get("path", "")
        steps = [s.replace("~1", "/").replace("~0", "~") for s in path.split("/")[1:]]
        parent: Any = doc
        try:
            for step in steps[:-1]:
                parent = parent[int(step)] if isinstance(parent, list) else parent[step]
            last = steps[-1]
            if isinstance(parent, list):
                index = len(parent) if last == "-" else int(last)
                if op == "add":
                    parent.insert(index, operation["value"])
                elif op == "remove":
                    parent.pop(index)
                elif op == "replace":
                    parent[index] = operation["value"]
                elif op == "test" and parent[index] != operation["value"]:
                    raise errors.ApiError(422, f"the test of {path} failed")
            elif op in ("add", "replace"):
                if op == "replace" and last not in parent:
                    raise KeyError(last)
                parent[last] = operation["value"]
            elif op == "remove":
                del parent[last]
            elif op == "test" and parent.get(last) != operation["value"]:
                raise errors.ApiError(422, f"the test of {path} failed")
        except (KeyError, IndexError, ValueError, TypeError) as exc:
            raise errors.ApiError(422, f"the JSON patch cannot apply at {path}") from exc
    return doc
