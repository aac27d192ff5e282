"""The kubelet of one node: registers it, admits the Pods bound to it and runs each through its
life (see the package docstring for what a Pod gets, and which module holds which part)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import secrets
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from aiohttp import web

from tests.support.kube import api_client
from tests.support.kube.network import pod_network
from tests.support.kube.node import (
    cgroups,
    context,
    environments,
    log_serving,
    pod_lifecycles,
    pods,
    probes,
    processes,
    registering,
    runtime,
    statuses,
    volume_files,
    volumes,
)

log = logging.getLogger("tests.kubelet")

# The project this runs from (tests/support/kube/node/ is four folders below it): part of the
# "image" every container sees.
PROJECT = Path(__file__).resolve().parents[4]


def unsupported_reason() -> str | None:
    """Why this machine cannot run the kubelet (None when it can).

    Returns:
        A sentence naming what is missing: root, Linux, cgroup v1 memory, ``unshare``.
    """
    if sys.platform != "linux":
        return "the kubelet needs Linux"
    if os.geteuid() != 0:
        return "the kubelet needs root (cgroups, mount namespaces, setuid)"
    if shutil.which("unshare") is None:
        return "the kubelet needs unshare (util-linux)"
    memory = cgroups.own("memory")
    if memory is None or not (memory / "memory.limit_in_bytes").exists():
        return "the kubelet needs the cgroup v1 memory controller"
    return None


class Kubelet:
    """One node's kubelet. Use as ``async with Kubelet(url, "node-1") as kubelet:``."""

    def __init__(
        self,
        api_url: str,
        node_name: str = "node-1",
        *,
        root: str | os.PathLike[str] | None = None,
        labels: Mapping[str, str] | None = None,
        backoff: tuple[float, float] = (10.0, 300.0),
        config_retry: float = 1.0,
        image_paths: Sequence[str] | None = None,
        path: str | None = None,
        heartbeat: float | None = None,
        network: bool = False,
    ) -> None:
        """Prepare a kubelet; `start` registers the node and runs its Pods.

        Args:
            api_url: The API server, e.g. the emulator's ``url``.
            node_name: The Node this kubelet registers and runs the Pods of.
            root: A folder for Pod folders and logs (a temporary one when None); what the
                kubelet creates there is removed by `close`.
            labels: Extra Node labels.
            backoff: First and longest restart back-off in seconds (the kubelet's are 10 and
                300); the first restart of a container is immediate, as on a kubelet.
            config_retry: Seconds between tries to configure a container whose Secret or
                ConfigMap is missing, and to set up the volumes of a Pod whose Secret,
                ConfigMap or claim is missing.
            image_paths: Host folders that make up the "image", kept visible and traversable in
                every container; default: the project, the venv and the Python installation.
            path: The containers' default ``PATH``; default: the venv's bin, then
                ``/usr/local/bin:/usr/bin:/bin``.
            heartbeat: Seconds between posts of the Node's conditions (Ready True) while the
                node runs, as a kubelet's node status updates; None posts them only at start.
            network: Give each Pod its own network namespace and address on the node's bridge
                (`tests.support.kube.network.pod_network`), Service names in its ``/etc/hosts``, the
                ``KUBERNETES_SERVICE_HOST``/``PORT`` variables and a service account token
                volume; probes go to the Pod's address. Without it Pods share the host's
                network (podIP 127.0.0.1).
        """
        self.api_url = api_url
        self.heartbeat = heartbeat
        self._given_root = Path(root) if root is not None else None
        self._created_root = False
        venv_bin = str(Path(sys.executable).parent)
        if image_paths is None:
            project = str(PROJECT)
            real = str(Path(sys.executable).resolve().parent.parent)
            image_paths = [project, sys.prefix, sys.base_prefix, real]
        self._context = context.NodeContext(
            api=api_client.ApiServer(api_url),
            node_name=node_name,
            root=self._given_root or Path(tempfile.gettempdir()) / "kubelet-unstarted",
            network=pod_network.PodNetwork() if network else None,
        )
        self._statuses = statuses.StatusWriter(self._context)
        self._registration = registering.Registration(self._context, labels or {})
        self._environments = environments.Environments(
            self._context, path or f"{venv_bin}:{environments.DEFAULT_PATH}"
        )
        self._volumes = volumes.Volumes(
            self._context, volume_files.outermost(str(Path(p)) for p in image_paths)
        )
        self._runtime = runtime.ContainerRuntime(self._context, self._statuses)
        self._prober = probes.Prober(
            self._context, self._runtime, self._environments, self._statuses
        )
        self._pods: dict[str, pods.Pod] = {}
        self._finished: set[str] = set()
        self._pod_lifecycle = pod_lifecycles.PodLifecycle(
            self._context,
            self._pods,
            self._finished,
            writer=self._statuses,
            volume_setup=self._volumes,
            identities=self._environments,
            containers=self._runtime,
            prober=self._prober,
            backoff=backoff,
            config_retry=config_retry,
        )
        self._started = False
        self._closed = False
        self._log_server: web.AppRunner | None = None
        self._informer: asyncio.Task[None] | None = None

    @property
    def backoff(self) -> tuple[float, float]:
        """First and longest restart back-off in seconds."""
        return self._pod_lifecycle.backoff

    @property
    def config_retry(self) -> float:
        """Seconds between tries to configure a container or set up a Pod's volumes."""
        return self._pod_lifecycle.config_retry

    @property
    def node_name(self) -> str:
        """The Node this kubelet registers and runs the Pods of."""
        return self._context.node_name

    @property
    def root(self) -> Path:
        """The kubelet's folder (Pods, logs, claims)."""
        return self._context.root

    @property
    def network(self) -> pod_network.PodNetwork | None:
        """The node's Pod network (with ``network=True``)."""
        return self._context.network

    @property
    def labels(self) -> dict[str, str]:
        """The Node's extra labels."""
        return self._registration.labels

    @property
    def path(self) -> str:
        """The containers' default ``PATH``."""
        return self._environments.path

    @property
    def image_paths(self) -> list[str]:
        """The host folders that make up the "image"."""
        return self._volumes.image_paths

    @property
    def log_port(self) -> int:
        """Where this kubelet serves containers' logs to the API server (on `HOST_IP`)."""
        return self._registration.log_port

    # -- lifecycle --------------------------------------------------------------------------

    async def __aenter__(self) -> Kubelet:
        await self.start()
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.close()

    async def start(self) -> None:
        """Register the node (Ready True) and run its Pods; after `stop`, thaw the node.

        Raises:
            RuntimeError: The machine cannot run the kubelet (see `unsupported_reason`).
        """
        if self._closed:
            raise RuntimeError("the kubelet is closed")
        if not self._started:
            reason = unsupported_reason()
            if reason is not None:
                raise RuntimeError(reason)
            self._started = True
            token = secrets.token_hex(4)
            if self._given_root is None:
                self._context.root = Path(
                    tempfile.mkdtemp(prefix=f"kubelet-{self._context.node_name}-")
                )
                self._created_root = True
            else:
                self._context.root = self._given_root
                self._created_root = not self._context.root.exists()
                self._context.root.mkdir(parents=True, exist_ok=True)
            (self._context.root / "pods").mkdir(exist_ok=True)
            (self._context.root / "logs").mkdir(exist_ok=True)
            own_memory = cgroups.own("memory")
            assert own_memory is not None
            self._context.memory = own_memory / f"kubelet-{self._context.node_name}-{token}"
            self._context.memory.mkdir()
            own_freezer = cgroups.own("freezer")
            if own_freezer is not None and (own_freezer / "cgroup.procs").exists():
                self._context.freezer = own_freezer / f"kubelet-{self._context.node_name}-{token}"
                self._context.freezer.mkdir()
            await self._context.api.open()
            self._log_server, self._registration.log_port = await log_serving.serve(self.log_path)
            if self._context.network is not None:
                self._context.network.open()
                self._context.spawn(
                    api_client.inform(self._context.api, "/api/v1/services", {}, self._on_service),
                    f"kubelet {self._context.node_name} services",
                )
            await self._registration.register()
            self._context.running.set()
            self._informer = self._context.spawn(
                api_client.inform(
                    self._context.api,
                    "/api/v1/pods",
                    {"fieldSelector": f"spec.nodeName={self._context.node_name}"},
                    self._on_event,
                ),
                f"kubelet {self._context.node_name} informer",
            )
            if self.heartbeat:
                self._context.spawn(
                    self._registration.beat(self.heartbeat),
                    f"kubelet {self._context.node_name} heartbeat",
                )
            return
        if not self._context.running.is_set():
            await self._runtime.thaw()
            self._context.running.set()
            await self._registration.post_ready(True)

    async def stop(self, *, mark_unknown: bool = True) -> None:
        """Lose the node: freeze every process it runs and stop the kubelet's own work.

        Args:
            mark_unknown: Set the Node's conditions Unknown, as the node controller does once
                the kubelet stops posting its status.
        """
        if not self._started or self._closed or not self._context.running.is_set():
            return
        self._context.running.clear()
        await self._runtime.freeze()
        if mark_unknown:
            await self._registration.post_ready(None)

    @property
    def memory_cgroup(self) -> Path | None:
        """The memory cgroup holding this node's Pods (``pod<uid>/<container>-<run>`` inside)."""
        return self._context.memory

    @property
    def stopped(self) -> bool:
        """Whether the node is stopped (frozen)."""
        return self._started and not self._context.running.is_set()

    async def close(self) -> None:
        """Kill every process, remove the cgroups and folders; safe to call twice."""
        if self._closed:
            return
        self._closed = True
        if not self._started:
            return
        with contextlib.suppress(Exception):
            await self._runtime.thaw()
        await api_client.cancel_tasks(self._context.tasks)
        for proc in list(self._context.procs):
            processes.kill_group(proc)
            if proc.stdin is not None:
                proc.stdin.close()
        for pod in self._pods.values():
            for c in pod.containers:
                cgroups.kill(c.cgroup)
        for proc in list(self._context.procs):
            await processes.reap(proc)
        # Every cgroup under the kubelet's own, deepest first, whoever made it.
        for folder in (self._context.memory, self._context.freezer):
            if folder is not None:
                for inner in cgroups.tree(folder):
                    await cgroups.remove(inner)
        await self._context.api.close()
        if self._log_server is not None:
            await self._log_server.cleanup()
            self._log_server = None
        if self._context.network is not None:
            self._context.network.close()
        if self._created_root:
            shutil.rmtree(self._context.root, ignore_errors=True)
        else:
            shutil.rmtree(self._context.root / "pods", ignore_errors=True)
            shutil.rmtree(self._context.root / "logs", ignore_errors=True)
            shutil.rmtree(self._context.root / "claims", ignore_errors=True)

    # -- what tests read --------------------------------------------------------------------

    def log_path(self, namespace: str, pod: str, container: str, *, previous: bool = False) -> Path:
        """The log file of a container's current (or previous) run.

        Raises:
            KeyError: The kubelet never ran that container (or, for ``previous``, ran it once).
        """
        folder = self._log_folder(namespace, pod) / container
        runs = sorted((int(p.stem) for p in folder.glob("*.log") if p.stem.isdigit()), reverse=True)
        index = 1 if previous else 0
        if len(runs) <= index:
            raise KeyError(
                f"no {'previous ' if previous else ''}log of {namespace}/{pod}/{container}"
            )
        return folder / f"{runs[index]}.log"

    def logs(self, namespace: str, pod: str, container: str, *, previous: bool = False) -> str:
        """A container's output (stdout and stderr), like ``kubectl logs [--previous]``."""
        return self.log_path(namespace, pod, container, previous=previous).read_text(
            errors="replace"
        )

    def volume_path(self, namespace: str, pod: str, volume: str) -> Path:
        """The host folder of a Pod's ``emptyDir``, ``secret`` or ``configMap`` volume (until the
        Pod is gone), or of its ``persistentVolumeClaim`` volume's claim (`claim_path`).

        Raises:
            KeyError: No such Pod on this node.
        """
        found = self._pod(namespace, pod)
        for entry in found.spec.get("volumes") or ():
            if entry.get("name") == volume and "persistentVolumeClaim" in entry:
                claim = entry["persistentVolumeClaim"] or {}
                return self.claim_path(namespace, str(claim.get("claimName", "")))
        return found.folder / "volumes" / volume

    def claim_path(self, namespace: str, claim: str) -> Path:
        """The host folder holding a PersistentVolumeClaim's data on this node: made when a Pod
        first mounts the claim, kept when Pods go, removed by `close`."""
        return self._volumes.claim_path(namespace, claim)

    def pid(self, namespace: str, pod: str, container: str) -> int | None:
        """The host pid of a running container's main process, or None."""
        found = self._pod(namespace, pod).container(container)
        return found.proc.pid if found is not None and found.running and found.proc else None

    def pod_uids(self) -> list[str]:
        """The uids of the Pods this kubelet holds now."""
        return list(self._pods)

    async def wait_for_pod(
        self,
        namespace: str,
        name: str,
        predicate: Callable[[dict[str, Any] | None], bool],
        *,
        timeout: float = 60.0,
    ) -> dict[str, Any] | None:
        """Read the Pod from the API until `predicate` (given None once it is gone) holds.

        Raises:
            TimeoutError: It did not hold within `timeout` seconds (the message has the Pod).
        """
        deadline = time.monotonic() + timeout
        pod = None
        while True:
            pod = await self._context.api.get(f"/api/v1/namespaces/{namespace}/pods/{name}")
            if predicate(pod):
                return pod
            if time.monotonic() > deadline:
                raise TimeoutError(f"pod {namespace}/{name}: {json.dumps(pod)[:4000]}")
            await asyncio.sleep(0.05)

    # -- events -----------------------------------------------------------------------------

    async def _on_event(self, kind: str, obj: dict[str, Any]) -> None:
        await self._context.running.wait()
        uid = obj["metadata"]["uid"]
        pod = self._pods.get(uid)
        if kind == "DELETED":
            if pod is not None:
                pod.obj = obj
                pod.gone = True
                pod.deleting.set()
            return
        if pod is not None:
            pod.obj = obj
            if obj["metadata"].get("deletionTimestamp"):
                pod.deleting.set()
            return
        if uid in self._finished:
            return
        phase = (obj.get("status") or {}).get("phase")
        if phase in ("Succeeded", "Failed") or obj["metadata"].get("deletionTimestamp"):
            # Nothing of it runs here: a deleted Pod that never ran is finished at once.
            self._finished.add(uid)
            if obj["metadata"].get("deletionTimestamp"):
                self._context.spawn(
                    self._statuses.finish_deletion(obj), f"delete {obj['metadata']['name']}"
                )
            return
        pod = self._admit(obj)
        self._pods[uid] = pod
        pod.task = self._context.spawn(
            self._pod_lifecycle.run(pod), f"pod {pod.namespace}/{pod.name}"
        )

    def _admit(self, obj: dict[str, Any]) -> pods.Pod:
        meta, spec = obj["metadata"], obj.get("spec") or {}
        folder = self._context.root / "pods" / meta["uid"]
        folder.mkdir(parents=True, exist_ok=True)
        logs = self._log_folder(meta["namespace"], meta["name"], meta["uid"])
        logs.mkdir(parents=True, exist_ok=True)
        init = [
            pods.Container(dict(c), "sidecar" if c.get("restartPolicy") == "Always" else "init")
            for c in spec.get("initContainers") or ()
        ]
        main = [pods.Container(dict(c), "main") for c in spec.get("containers") or ()]
        for c in [*init, *main]:
            c.state = {"waiting": {"reason": "PodInitializing"}}
            c.exited.set()
        if init:
            init[0].state = {"waiting": {"reason": "ContainerCreating"}}
        else:
            for c in main:
                c.state = {"waiting": {"reason": "ContainerCreating"}}
        return pods.Pod(obj, folder, logs, init, main)

    def _log_folder(self, namespace: str, name: str, uid: str | None = None) -> Path:
        if uid is None:
            matches = sorted(
                (self._context.root / "logs").glob(f"{namespace}_{name}_*"), key=pods.mtime
            )
            if not matches:
                raise KeyError(f"no logs of {namespace}/{name}")
            return matches[-1]
        return self._context.root / "logs" / f"{namespace}_{name}_{uid}"

    def _pod(self, namespace: str, name: str) -> pods.Pod:
        for pod in self._pods.values():
            if (pod.namespace, pod.name) == (namespace, name):
                return pod
        raise KeyError(f"no pod {namespace}/{name} on {self._context.node_name}")

    async def _gate(self) -> None:
        await self._context.running.wait()

    # -- the Pod network (with `network`) ----------------------------------------------------

    async def _on_service(self, kind: str, service: dict[str, Any]) -> None:
        """Keep the Services, and every Pod's ``/etc/hosts`` naming them, current."""
        key = f"{service['metadata']['namespace']}/{service['metadata']['name']}"
        if kind == "DELETED":
            self._context.services.pop(key, None)
        else:
            self._context.services[key] = service
        for pod in list(self._pods.values()):
            if (pod.folder / "hosts").exists():
                self._volumes.write_hosts(pod)
