"""A cluster's worth of nodes for the API emulator: a scheduler and a kubelet per node.

`cluster` starts them for demos, benchmarks and tests that need several nodes; the fixtures
``kube_scheduler`` and ``kubelet`` (node ``node-1``, with the scheduler) are for tests to
import into a conftest.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import pytest_asyncio

from tests.support.kube.controllers import scheduling
from tests.support.kube.node import kubelet as kubelet_module

log = logging.getLogger("tests.kubelet")


@dataclasses.dataclass
class Cluster:
    """A scheduler and kubelets for an emulator (see `cluster`)."""

    scheduler: scheduling.Scheduler
    kubelets: dict[str, kubelet_module.Kubelet]


@contextlib.asynccontextmanager
async def cluster(
    emulator: Any,
    *,
    nodes: Sequence[str] = ("node-1",),
    root: str | os.PathLike[str] | None = None,
    **options: Any,
) -> AsyncIterator[Cluster]:
    """A scheduler and one kubelet per node for an emulator, for demos and benchmarks.

    Args:
        emulator: A started `tests.support.kube.apiserver.emulator.K8sEmulator`; its
            ``hold_deletions`` is set, so gracefully deleted Pods wait for their kubelet.
        nodes: The node names.
        root: A folder for the kubelets' folders (one per node inside); temporary when None.
        **options: Passed to each `Kubelet`.

    Yields:
        The `Cluster`; everything is stopped and cleaned up on exit.
    """
    emulator.hold_deletions = True
    async with contextlib.AsyncExitStack() as stack:
        scheduler = await stack.enter_async_context(scheduling.Scheduler(emulator.url))
        kubelets = {}
        for name in nodes:
            folder = Path(root) / name if root is not None else None
            kubelets[name] = await stack.enter_async_context(
                kubelet_module.Kubelet(emulator.url, name, root=folder, **options)
            )
        yield Cluster(scheduler, kubelets)


@pytest_asyncio.fixture
async def kube_scheduler(k8s_emulator: Any) -> AsyncIterator[scheduling.Scheduler]:
    """A `Scheduler` for the test's emulator."""
    async with scheduling.Scheduler(k8s_emulator.url) as scheduler:
        yield scheduler


@pytest_asyncio.fixture
async def kubelet(
    k8s_emulator: Any, kube_scheduler: scheduling.Scheduler, tmp_path: Path
) -> AsyncIterator[kubelet_module.Kubelet]:
    """A started `Kubelet` for node ``node-1`` of the test's emulator, with a scheduler.

    The emulator keeps gracefully deleted Pods Terminating until the kubelet finishes them
    (``hold_deletions``), as a real API server does for Pods bound to a node. Restart back-off
    is 1 s doubling to 10 s (the kubelet's: 10 s to 300 s).
    """
    k8s_emulator.hold_deletions = True
    async with kubelet_module.Kubelet(
        k8s_emulator.url, "node-1", root=tmp_path / "kubelet", backoff=(1.0, 10.0)
    ) as node:
        yield node
