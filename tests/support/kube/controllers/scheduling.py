"""A trivial kube-scheduler: binds each unbound Pod to a ready node it fits, through the Pod's
``/binding`` subresource."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from typing import Any

from tests.support.kube import api_client, objects

log = logging.getLogger("tests.kubelet")


class Scheduler:
    """Binds each unbound Pod to a ready node through ``pods/{name}/binding``.

    Nodes are chosen round-robin among those whose ``Ready`` condition is True, that are not
    ``unschedulable``, whose labels match the Pod's ``nodeSelector`` and whose ``NoSchedule`` /
    ``NoExecute`` taints the Pod tolerates. A Pod with no such node waits until one appears.
    """

    def __init__(self, api_url: str) -> None:
        self.api_url = api_url
        self._api = api_client.ApiServer(api_url)
        self._pending: dict[str, dict[str, Any]] = {}
        self._nodes: dict[str, dict[str, Any]] = {}
        self._wake = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._turn = 0
        self.bound: dict[str, str] = {}
        """``namespace/name`` -> node, for every binding this scheduler made."""

    async def __aenter__(self) -> Scheduler:
        await self.start()
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.close()

    async def start(self) -> None:
        """Watch unbound Pods and Nodes, and bind."""
        await self._api.open()
        self._tasks = [
            asyncio.create_task(
                api_client.inform(
                    self._api, "/api/v1/pods", {"fieldSelector": "spec.nodeName="}, self._pod
                ),
                name="scheduler pods",
            ),
            asyncio.create_task(
                api_client.inform(self._api, "/api/v1/nodes", {}, self._node),
                name="scheduler nodes",
            ),
            asyncio.create_task(self._loop(), name="scheduler"),
        ]

    async def close(self) -> None:
        """Stop scheduling."""
        await api_client.cancel_tasks(self._tasks)
        self._tasks = []
        await self._api.close()

    async def _pod(self, kind: str, obj: dict[str, Any]) -> None:
        uid = obj["metadata"]["uid"]
        if kind == "DELETED" or obj["metadata"].get("deletionTimestamp"):
            self._pending.pop(uid, None)
        else:
            self._pending[uid] = obj
        self._wake.set()

    async def _node(self, kind: str, obj: dict[str, Any]) -> None:
        name = obj["metadata"]["name"]
        if kind == "DELETED":
            self._nodes.pop(name, None)
        else:
            self._nodes[name] = obj
        self._wake.set()

    def _fits(self, pod: Mapping[str, Any], node: Mapping[str, Any]) -> bool:
        if objects.condition(node, "Ready") != "True" or (node.get("spec") or {}).get(
            "unschedulable"
        ):
            return False
        spec = pod.get("spec") or {}
        labels = node["metadata"].get("labels") or {}
        if any(labels.get(k) != v for k, v in (spec.get("nodeSelector") or {}).items()):
            return False
        tolerations = spec.get("tolerations") or ()
        for taint in (node.get("spec") or {}).get("taints") or ():
            if taint.get("effect") not in ("NoSchedule", "NoExecute"):
                continue
            if not any(tolerates(t, taint) for t in tolerations):
                return False
        return True

    async def _loop(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            for uid, pod in list(self._pending.items()):
                nodes = sorted(n for n, node in self._nodes.items() if self._fits(pod, node))
                if not nodes:
                    continue
                node = nodes[self._turn % len(nodes)]
                self._turn += 1
                meta = pod["metadata"]
                try:
                    await self._api.call(
                        "POST",
                        f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}/binding",
                        body={
                            "apiVersion": "v1",
                            "kind": "Binding",
                            "metadata": {"name": meta["name"], "namespace": meta["namespace"]},
                            "target": {"apiVersion": "v1", "kind": "Node", "name": node},
                        },
                    )
                    self.bound[f"{meta['namespace']}/{meta['name']}"] = node
                except api_client.ApiStatusError as exc:
                    if exc.code not in (404, 409):
                        log.warning("cannot bind %s to %s: %s", meta["name"], node, exc)
                        self._wake.set()
                        await asyncio.sleep(0.5)
                        continue
                self._pending.pop(uid, None)


def tolerates(toleration: Mapping[str, Any], taint: Mapping[str, Any]) -> bool:
    if toleration.get("effect") and toleration["effect"] != taint.get("effect"):
        return False
    if toleration.get("operator") == "Exists":
        return not toleration.get("key") or toleration["key"] == taint.get("key")
    return toleration.get("key") == taint.get("key") and toleration.get("value", "") == taint.get(
        "value", ""
    )
