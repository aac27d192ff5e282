"""Label and field selectors, parsed and matched as the API server does for list and watch."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from tests.support.kube.apiserver import errors, validation

SET_REQUIREMENT = re.compile(r"^\s*([^\s!=(),]+)\s+(in|notin)\s+\(([^)]*)\)\s*$")


def owner_uids(obj: Mapping[str, Any]) -> list[str]:
    owners = obj.get("metadata", {}).get("ownerReferences") or ()
    return [uid for o in owners if isinstance(o, Mapping) and (uid := o.get("uid"))]


def parse_labels(text: str) -> list[tuple[str, str, frozenset[str]]]:
    """Requirements as (key, operator, values); operators: in, notin, exists, !exists."""
    parts, depth, current = [], 0, ""
    for char in text:
        depth += {"(": 1, ")": -1}.get(char, 0)
        if char == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += char
    parts.append(current)
    requirements = []
    for part in (p.strip() for p in parts):
        if not part:
            continue
        if found := SET_REQUIREMENT.match(part):
            values = frozenset(v.strip() for v in found.group(3).split(",") if v.strip())
            requirements.append((found.group(1), found.group(2), values))
        elif "!=" in part:
            key, value = (s.strip() for s in part.split("!=", 1))
            requirements.append((key, "notin", frozenset({value})))
        elif "=" in part:
            key, value = (s.strip() for s in re.split("==?", part, maxsplit=1))
            requirements.append((key, "in", frozenset({value})))
        elif part.startswith("!"):
            requirements.append((part[1:].strip(), "!exists", frozenset()))
        else:
            requirements.append((part, "exists", frozenset()))
    for key, _, values in requirements:
        name = key.rpartition("/")[2]
        if not validation.LABEL_NAME.match(name) or any(
            not validation.LABEL_VALUE.match(v) for v in values
        ):
            raise errors.ApiError(
                400, f"unable to parse requirement: invalid label selector {text!r}"
            )
    return requirements


def parse_fields(text: str) -> list[tuple[str, str, str]]:
    requirements = []
    for part in (p.strip() for p in text.split(",") if p.strip()):
        found = re.match(r"^([A-Za-z.]+)\s*(!=|==|=)\s*(.*)$", part)
        if not found:
            raise errors.ApiError(400, f"invalid field selector {text!r}")
        requirements.append((found.group(1), found.group(2), found.group(3)))
    return requirements


def matches(
    obj: Mapping[str, Any],
    labels: list[tuple[str, str, frozenset[str]]],
    fields: list[tuple[str, str, str]],
) -> bool:
    have = obj.get("metadata", {}).get("labels") or {}
    for key, operator, values in labels:
        if operator == "exists" and key not in have:
            return False
        if operator == "!exists" and key in have:
            return False
        if operator == "in" and have.get(key) not in values:
            return False
        if operator == "notin" and key in have and have[key] in values:
            return False
    for path, operator, value in fields:
        current: Any = obj
        for step in path.split("."):
            current = current.get(step) if isinstance(current, dict) else None
        if (str(current if current is not None else "") == value) != (operator != "!="):
            return False
    return True
