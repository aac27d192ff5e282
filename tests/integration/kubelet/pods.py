"""Pod bodies and API helpers for the kubelet tests: everything goes through the real client."""

from __future__ import annotations

import asyncio
import base64
import json
import os
from collections.abc import Iterable, Mapping
from typing import Any

import aiohttp
from kubernetes_asyncio import client

from tests.support.kube.apiserver import emulator as k8s_emulator
from tests.support.kube.objects import container_status

NS = "default"
IMAGE = "registry.local/agent-worker:test"


def python(name: str, script: str, **extra: Any) -> dict[str, Any]:
    """A container running ``python3 -c script`` (the venv's python, first on the PATH)."""
    return {"name": name, "image": IMAGE, "command": ["python3", "-c", script], **extra}


def shell(name: str, script: str, **extra: Any) -> dict[str, Any]:
    """A container running ``sh -c script``."""
    return {"name": name, "image": IMAGE, "command": ["sh", "-c", script], **extra}


def pod(
    name: str,
    containers: Iterable[Mapping[str, Any]],
    *,
    init: Iterable[Mapping[str, Any]] = (),
    volumes: Iterable[Mapping[str, Any]] = (),
    restart: str = "Never",
    grace: int | None = None,
    security: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """A Pod body (unbound: the scheduler binds it)."""
    spec: dict[str, Any] = {"restartPolicy": restart, "containers": [dict(c) for c in containers]}
    if init:
        spec["initContainers"] = [dict(c) for c in init]
    if volumes:
        spec["volumes"] = [dict(v) for v in volumes]
    if grace is not None:
        spec["terminationGracePeriodSeconds"] = grace
    if security is not None:
        spec["securityContext"] = dict(security)
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}


async def create(k8s: k8s_emulator.K8sEmulator, body: Mapping[str, Any]) -> None:
    """Create a Pod through the API, as a controller does."""
    await client.CoreV1Api(k8s.api_client).create_namespaced_pod(NS, dict(body))


async def create_secret(k8s: k8s_emulator.K8sEmulator, name: str, data: Mapping[str, str]) -> None:
    """Create a Secret through the API."""
    body = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name},
        "data": {k: base64.b64encode(v.encode()).decode() for k, v in data.items()},
    }
    await client.CoreV1Api(k8s.api_client).create_namespaced_secret(NS, body)


async def delete(k8s: k8s_emulator.K8sEmulator, name: str, grace: int | None = None) -> None:
    """Delete a Pod through the API (the Pod's own grace period unless `grace` is given)."""
    await client.CoreV1Api(k8s.api_client).delete_namespaced_pod(
        name, NS, grace_period_seconds=grace
    )


def exists(path: str | os.PathLike[str]) -> bool:
    """Whether a path exists on this machine (outside every Pod's namespace)."""
    return os.path.lexists(path)


def terminal(pod: Mapping[str, Any] | None) -> bool:
    return ((pod or {}).get("status") or {}).get("phase") in ("Succeeded", "Failed")


def phase(pod: Mapping[str, Any] | None) -> str | None:
    return ((pod or {}).get("status") or {}).get("phase")


def state(pod: Mapping[str, Any] | None, container: str) -> dict[str, Any]:
    """A container's ``state`` ({} before the kubelet reported it)."""
    return dict(container_status(pod, container).get("state") or {})


class PodWatch:
    """Every version of one Pod from the API's watch, opened before the test acts, so the last
    status before a deletion is never missed (it is in the DELETED event's object)."""

    def __init__(self, k8s: k8s_emulator.K8sEmulator, name: str):
        self.url = k8s.url
        self.name = name
        self.versions: list[tuple[str, dict[str, Any]]] = []
        self._session: aiohttp.ClientSession | None = None
        self._response: aiohttp.ClientResponse | None = None

    async def __aenter__(self) -> PodWatch:
        self._session = aiohttp.ClientSession()
        self._response = await self._session.get(
            f"{self.url}/api/v1/namespaces/{NS}/pods",
            params={"watch": "true", "fieldSelector": f"metadata.name={self.name}"},
        )
        return self

    async def __aexit__(self, *_: object) -> None:
        if self._response is not None:
            self._response.close()
        if self._session is not None:
            await self._session.close()

    async def until_deleted(self, timeout: float = 120.0) -> dict[str, Any]:
        """Read events until DELETED; returns the deleted object (with its last status)."""
        async with asyncio.timeout(timeout):
            return await self._until_deleted()

    async def _until_deleted(self) -> dict[str, Any]:
        assert self._response is not None
        while True:
            line = await self._response.content.readline()
            assert line, "the watch ended before the Pod was deleted"
            event = json.loads(line)
            self.versions.append((event["type"], event["object"]))
            if event["type"] == "DELETED":
                return dict(event["object"])
