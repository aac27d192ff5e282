"""The node itself as a kubelet registers it: its Node object, its conditions (Ready, the
pressures, Unknown once it stops posting), its heartbeat."""

from __future__ import annotations

import asyncio
import logging
import os
import platform
from collections.abc import Mapping
from typing import Any

from tests.support.kube import api_client
from tests.support.kube.node import (
    context,
    pods,
)

log = logging.getLogger("tests.kubelet")


class Registration:
    """Registers one node and posts its conditions."""

    def __init__(self, node: context.NodeContext, labels: Mapping[str, str]) -> None:
        self.context = node
        self.labels = dict(labels)
        self.log_port = 0
        """The kubelet endpoint's port the Node advertises (its log server)."""
        self._transitions: dict[str, tuple[str, str]] = {}

    def conditions(self, ready: bool | None) -> list[dict[str, Any]]:
        conditions = self.condition_values(ready)
        for entry in conditions:
            previous = self._transitions.get(entry["type"])
            if previous is not None and previous[0] == entry["status"]:
                entry["lastTransitionTime"] = previous[1]
            self._transitions[entry["type"]] = (entry["status"], entry["lastTransitionTime"])
        return conditions

    def condition_values(self, ready: bool | None) -> list[dict[str, Any]]:
        now = pods.now()
        if ready is None:
            return [
                {
                    "type": kind,
                    "status": "Unknown",
                    "reason": "NodeStatusUnknown",
                    "message": "Kubelet stopped posting node status.",
                    "lastHeartbeatTime": now,
                    "lastTransitionTime": now,
                }
                for kind in ("MemoryPressure", "DiskPressure", "PIDPressure", "Ready")
            ]
        pressure = [
            {
                "type": kind,
                "status": "False",
                "reason": f"KubeletHasSufficient{word}",
                "message": f"kubelet has sufficient {word.lower()} available",
                "lastHeartbeatTime": now,
                "lastTransitionTime": now,
            }
            for kind, word in (
                ("MemoryPressure", "Memory"),
                ("DiskPressure", "Disk"),
                ("PIDPressure", "PID"),
            )
        ]
        return [
            *pressure,
            {
                "type": "Ready",
                "status": "True" if ready else "False",
                "reason": "KubeletReady" if ready else "KubeletNotReady",
                "message": "kubelet is posting ready status",
                "lastHeartbeatTime": now,
                "lastTransitionTime": now,
            },
        ]

    def status(self) -> dict[str, Any]:
        memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        resources = {"cpu": str(os.cpu_count() or 1), "memory": str(memory), "pods": "110"}
        arch = {"x86_64": "amd64", "aarch64": "arm64"}.get(platform.machine(), platform.machine())
        return {
            "conditions": self.conditions(True),
            "addresses": [
                {"type": "InternalIP", "address": pods.HOST_IP},
                {"type": "Hostname", "address": self.context.node_name},
            ],
            "capacity": resources,
            "allocatable": resources,
            "daemonEndpoints": {"kubeletEndpoint": {"Port": self.log_port}},
            "nodeInfo": {
                "architecture": arch,
                "bootID": "",
                "containerRuntimeVersion": "tests-kubelet://1",
                "kernelVersion": platform.release(),
                "kubeProxyVersion": "",
                "kubeletVersion": "v1.31.0-tests",
                "machineID": "",
                "operatingSystem": "linux",
                "osImage": "this machine",
                "systemUUID": "",
            },
        }

    async def register(self) -> None:
        body = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": self.context.node_name,
                "labels": {
                    "kubernetes.io/hostname": self.context.node_name,
                    "kubernetes.io/os": "linux",
                    **self.labels,
                },
            },
            "spec": {},
            "status": self.status(),
        }
        try:
            await self.context.api.call("POST", "/api/v1/nodes", body=body)
        except api_client.ApiStatusError as exc:
            if exc.code != 409:
                raise
            await self.context.api.call(
                "PATCH",
                f"/api/v1/nodes/{self.context.node_name}/status",
                body={"status": self.status()},
                content_type="application/merge-patch+json",
            )

    async def post_ready(self, ready: bool | None) -> None:
        await self.context.api.call(
            "PATCH",
            f"/api/v1/nodes/{self.context.node_name}/status",
            body={"status": {"conditions": self.conditions(ready)}},
            content_type="application/merge-patch+json",
        )

    async def beat(self, every: float) -> None:
        while True:
            await asyncio.sleep(every)
            await self.context.gate()
            try:
                await self.post_ready(True)
            except api_client.ApiStatusError as exc:
                log.warning("node %s status not posted: %s", self.context.node_name, exc)
