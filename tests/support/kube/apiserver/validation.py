"""What the API server checks and fills in on a write: names, labels, required fields, immutable
Pod spec fields, Secret data; defaults for a new object."""

from __future__ import annotations

import base64
import binascii
import copy
import re
from typing import Any

from tests.support.kube.apiserver import errors

DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")


LABEL_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]{0,61})?[A-Za-z0-9]$")


LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]{0,61})?[A-Za-z0-9])?$")


def validate(kind: str, resource: str, body: dict[str, Any]) -> None:
    meta = body.get("metadata") or {}
    name = str(meta.get("name") or "")
    problems = []
    if not name or len(name) > 253 or not DNS_SUBDOMAIN.match(name):
        problems.append(f"metadata.name: Invalid value: {name!r}")
    for key, value in (meta.get("labels") or {}).items():
        prefix, _, label = key.rpartition("/")
        if not LABEL_NAME.match(label) or (prefix and not DNS_SUBDOMAIN.match(prefix)):
            problems.append(f"metadata.labels: Invalid value: {key!r}")
        if not isinstance(value, str) or not LABEL_VALUE.match(value):
            problems.append(f"metadata.labels: Invalid value: {value!r}")
    if resource == "pods":
        spec = body.get("spec") or {}
        containers = spec.get("containers") or []
        if not containers:
            problems.append("spec.containers: Required value")
        names = [c.get("name") for c in [*spec.get("initContainers", []), *containers]]
        for container in [*spec.get("initContainers", []), *containers]:
            if not DNS_LABEL.match(str(container.get("name") or "")):
                problems.append(f"spec.containers.name: Invalid value: {container.get('name')!r}")
            if not container.get("image"):
                problems.append("spec.containers.image: Required value")
        if len(set(names)) != len(names):
            problems.append("spec.containers.name: Duplicate value")
        for container in spec.get("initContainers", []):
            if container.get("restartPolicy") not in (None, "Always"):
                problems.append("spec.initContainers.restartPolicy: Unsupported value")
    if resource == "secrets":
        for key, value in (body.get("data") or {}).items():
            try:
                secret_bytes(value)
            except (binascii.Error, TypeError, ValueError):
                problems.append(f"data[{key}]: Invalid value: illegal base64 data")
    if problems:
        raise errors.ApiError(422, f'{kind} "{name}" is invalid: {"; ".join(problems)}')


def secret_bytes(value: Any) -> bytes:
    """A Secret's data value decoded as the API server's JSON decoder does: standard base64,
    line breaks ignored (kustomize wraps long values at 76 characters)."""
    if not isinstance(value, str):
        raise TypeError("a Secret's data value is a string")
    return base64.b64decode(value.replace("\r", "").replace("\n", ""), validate=True)


def default(resource: str, body: dict[str, Any]) -> None:
    """The defaults the API server writes into a workload's spec (those kubectl reads)."""
    spec = body.setdefault("spec", {})
    spec.setdefault("replicas", 1)
    if resource == "deployments":
        spec.setdefault(
            "strategy",
            {
                "type": "RollingUpdate",
                "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": "25%"},
            },
        )
        spec.setdefault("revisionHistoryLimit", 10)
        spec.setdefault("progressDeadlineSeconds", 600)
    elif resource == "statefulsets":
        spec.setdefault(
            "updateStrategy", {"type": "RollingUpdate", "rollingUpdate": {"partition": 0}}
        )
        spec.setdefault("podManagementPolicy", "OrderedReady")
        spec.setdefault("revisionHistoryLimit", 10)


def canonical_data(data: Any) -> dict[str, str]:
    """A Secret's data as the server keeps it, bytes, served again in canonical base64 (the
    line breaks kustomize writes into long values are gone)."""
    return {k: base64.b64encode(secret_bytes(v)).decode() for k, v in (data or {}).items()}


def without_images(spec: Any) -> Any:
    spec = copy.deepcopy(spec or {})
    for field in ("containers", "initContainers"):
        for container in spec.get(field) or ():
            container.pop("image", None)
    return spec
