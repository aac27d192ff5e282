"""What the parts of one kubelet share: its API client, whether the node runs, the tasks and
processes it started, its cgroups, its folder, its Pod network and the Services it knows.

The `Kubelet` makes one `NodeContext` and hands it to each of its parts (environments, volumes,
the container runtime, probes, status writing, node registration), so they work on the same
node without reaching into the kubelet.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Awaitable
from pathlib import Path
from typing import Any

from tests.support.kube import api_client
from tests.support.kube.network import pod_network
from tests.support.kube.node import processes


@dataclasses.dataclass(eq=False)
class NodeContext:
    """One node's shared state (see the module docstring)."""

    api: api_client.ApiServer
    node_name: str
    root: Path
    network: pod_network.PodNetwork | None
    running: asyncio.Event = dataclasses.field(default_factory=asyncio.Event)
    """Set while the node runs; cleared while it is stopped (frozen)."""
    tasks: set[asyncio.Task[Any]] = dataclasses.field(default_factory=set)
    procs: set[asyncio.subprocess.Process] = dataclasses.field(default_factory=set)
    memory: Path | None = None
    """The node's memory cgroup (``pod<uid>/<container>-<run>`` inside)."""
    freezer: Path | None = None
    """The node's freezer cgroup, when the machine has one."""
    services: dict[str, dict[str, Any]] = dataclasses.field(default_factory=dict)
    """The cluster's Services by ``namespace/name`` (kept with a Pod network)."""

    async def gate(self) -> None:
        """Wait while the node is stopped."""
        await self.running.wait()

    def spawn(self, coro: Awaitable[Any], name: str) -> asyncio.Task[Any]:
        """Run `coro` as one of the node's tasks (cancelled when the kubelet closes)."""
        task: asyncio.Task[Any] = asyncio.ensure_future(coro)
        task.set_name(name)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)
        task.add_done_callback(processes.log_failure)
        return task
