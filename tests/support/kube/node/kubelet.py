"""A kubelet (and a trivial scheduler) for the Kubernetes API emulator: Pods run as real processes.

`Kubelet` plays one node against an API server's REST API only (aiohttp, the way a real kubelet
talks to the API server): it registers its Node (``Ready`` True), watches the Pods bound to it
(``fieldSelector=spec.nodeName=<node>``), reads Secrets, ConfigMaps and PersistentVolumeClaims,
writes each Pod's status through ``pods/{name}/status`` and finishes graceful deletions with a
delete at grace 0. `Scheduler` binds unbound Pods to a ready node through the Pod ``/binding``
subresource.

What a Pod gets, as the kubelet and a container runtime would give it:

- The "image" is this machine with this project installed: ``command`` + ``args`` run as given
  (there is no image entrypoint); ``PATH`` is the venv's ``bin`` (so ``python3`` and the
  project's console scripts such as ``agentihooks-restorer`` resolve) then
  ``/usr/local/bin:/usr/bin:/bin``; ``HOSTNAME`` is the Pod name and ``HOME`` the user's home from
  /etc/passwd (``/`` when it has none), unless ``env`` sets them. ``env`` takes ``value`` (with
  ``$(VAR)`` expansion), ``valueFrom.secretKeyRef``, ``valueFrom.configMapKeyRef`` (a key of the
  ConfigMap's ``data``), ``fieldRef`` and ``resourceFieldRef``; ``envFrom`` takes ``secretRef``
  and ``configMapRef`` (every key of ``data``; ``binaryData`` is not used), each with ``prefix``,
  and ``env`` wins over it. A missing Secret, ConfigMap or key leaves the container ``waiting``
  with reason ``CreateContainerConfigError`` (message ``secret "x" not found``, ``configmap "x"
  not found`` or ``couldn't find key k in ConfigMap ns/x``; retried every ``config_retry``
  seconds, so it starts once the object appears) unless the reference is ``optional``, which is
  then skipped; so does ``runAsNonRoot`` with user 0. ``workingDir`` is created if missing.
- Each Pod has a mount namespace and a UTS namespace (``unshare --mount --uts --propagation
  private``, held by a sandbox process as the pause container holds a real Pod's namespaces; the
  hostname is the Pod's name). Inside it every container gets
  its own root: a tmpfs holding bind mounts of the host's top-level entries, with the container's
  volume mounts bound on top, and its processes ``chroot`` there. A mount path missing on the
  host is made inside tmpfs copies of its parent folders (each entry bound from the host), so
  nothing is created, mounted over or changed on the host; every mount lives in the namespace and
  disappears with it. Volumes: ``emptyDir`` (a folder per Pod under the kubelet's root, mode 0777,
  group ``fsGroup``; ``medium: Memory`` is a tmpfs in the namespace), ``secret`` (files from the
  Secret's data) and ``configMap`` (files from the ConfigMap's ``data`` as UTF-8 text and its
  ``binaryData`` decoded), both every key or ``items`` (key -> path, ``mode``), mode
  ``defaultMode``/``items[].mode``, 0644 by default, mounted read-only, ``optional`` honoured;
  ``persistentVolumeClaim`` (``claimName`` read from the Pod's namespace; its data is the folder
  ``<root>/claims/<namespace>/<claim>`` on this machine, `Kubelet.claim_path`, mode 0777, given to
  ``fsGroup`` as a kubelet does: group and group read/write on every file, set-group-ID folders,
  ``fsGroupChangePolicy: OnRootMismatch`` honoured; kept when the Pod is deleted, so the next Pod
  with the claim, such as a StatefulSet's replacement, sees the same files; ``readOnly`` makes
  the mount read-only) and ``hostPath``; ``readOnly`` and ``subPath`` mounts. A missing Secret,
  ConfigMap (not ``optional``), item key or claim keeps every container of the Pod ``waiting``
  with reason ``ContainerCreating`` and the Pod's status ``message`` saying what is missing
  (retried every ``config_retry`` seconds, so the Pod starts once it appears). The containers of
  a Pod share a volume's folder, so they see the same contents. Image paths (the project, its
  venv, the Python installation) stay traversable by any user, and stay visible under a volume
  mounted on one of their parents (such as the worker template's ``/work``): they are bound back
  over the volume, which then shows an empty mount-point folder for them.
- ``securityContext``: ``runAsUser``/``runAsGroup`` (setuid/setgid, from the container or the
  Pod), ``fsGroup`` and ``supplementalGroups`` as supplementary groups, ``runAsNonRoot``,
  ``allowPrivilegeEscalation: false`` (no_new_privs). Capabilities, seccomp and
  ``readOnlyRootFilesystem`` are not applied.
- Each container runs in a cgroup v1 memory cgroup under this process's own, with
  ``memory.limit_in_bytes`` (and ``memory.memsw.limit_in_bytes``: no swap beyond it) from
  ``resources.limits.memory``. A container the kernel OOM-killed (the cgroup's ``oom_kill`` count)
  is reported ``terminated`` with reason ``OOMKilled``. When a container's main process ends,
  whatever is left in its cgroup is killed and the cgroup removed.
- Order: init containers with ``restartPolicy: Always`` (native sidecars) start and keep running
  (restarted with back-off when they exit, counting ``restartCount``); the next init container,
  and the main containers, start once the sidecar has started (its ``startupProbe`` passed; without
  one, once its process runs). Ordinary init containers run to completion in order. Probes
  (startup, readiness, liveness): ``exec`` (in the container), ``tcpSocket``, ``httpGet`` (``scheme:
  HTTPS`` without verifying the certificate, as a kubelet does), ``grpc``
  (the gRPC health service), on 127.0.0.1. Restart policies ``Never``, ``OnFailure`` and ``Always``
  (back-off ``backoff``: ``CrashLoopBackOff`` while waiting). Once every main container has
  terminated for good, the sidecars get SIGTERM in reverse order (SIGKILL after
  ``terminationGracePeriodSeconds``) and the phase becomes ``Succeeded`` or ``Failed``.
- Deletion: a Pod with a ``deletionTimestamp`` has its main containers sent SIGTERM, then its
  sidecars, and what still runs when ``deletionGracePeriodSeconds`` ran out gets SIGKILL; the
  terminal status is written, then the kubelet deletes the Pod at grace 0 (precondition: its uid).
  The emulator keeps gracefully deleted Pods only with ``hold_deletions`` (set by the fixture, as
  a real API server does for every Pod bound to a node); a Pod removed at once is killed within
  two seconds.
- Status as a kubelet writes it: ``phase``, ``conditions`` (PodReadyToStartContainers,
  Initialized, ContainersReady, Ready, PodScheduled; conditions written by others are kept),
  ``containerStatuses``/``initContainerStatuses`` (``state``, ``lastState``, ``ready``,
  ``started``, ``restartCount``, ``image``, ``imageID``, ``containerID``, ``name``), ``startTime``,
  ``hostIP``/``podIP`` 127.0.0.1.
- `Kubelet.stop` freezes the node (the node's cgroup v1 freezer, else SIGSTOP to each process
  group), stops the kubelet's own work and sets the Node's conditions ``Unknown`` as the node
  controller would; `Kubelet.start` thaws it and posts ``Ready`` True again.
- Each container run's stdout and stderr go to one log file (`Kubelet.logs`, like
  ``kubectl logs [--previous]``); logs and claims' folders are kept until the kubelet closes,
  other volumes until the Pod is deleted.

- With ``network=True`` (`tests.support.kube.network.pod_network`): each Pod's sandbox also has its
  own network namespace (``unshare --net``), joined to the node's bridge by a veth pair; the Pod's
  address (``status.podIP``, ``fieldRef: status.podIP``) is on the node's /24 of 10.244.0.0/16 and
  probes go to it. Every container's ``/etc/hosts`` names each Service's cluster IP (kept current as
  Services change) and its ``/etc/resolv.conf`` has the cluster's search path. When the API server
  serves in-cluster (the Service ``default/kubernetes`` exists), containers get
  ``KUBERNETES_SERVICE_HOST``/``PORT`` and, unless ``automountServiceAccountToken`` is false,
  ``/var/run/secrets/kubernetes.io/serviceaccount`` (``token`` from a TokenRequest for the Pod's
  service account, ``ca.crt`` from ``kube-root-ca.crt``, ``namespace``); a missing service account
  keeps the Pod ``ContainerCreating``. `pod_network.ServiceProxy` forwards the cluster IPs.

Not emulated: networking without ``network=True`` (every Pod shares the host's network: podIP
127.0.0.1, ports can collide), PID and IPC namespaces (a container's main process is not PID 1),
images and pulls, CPU limits, lifecycle hooks, projected (but the service account token),
downwardAPI and other volume types, ephemeral containers, in-place updates, evictions. Secret
and ConfigMap volumes are files under the kubelet's folder (not a tmpfs), written when the Pod
starts and not updated when the object changes. A claim is only a folder on this machine, one
per kubelet (like a local volume: a Pod on another node sees another folder): no
PersistentVolume or binding (the claim's ``status`` is neither read nor written), no capacity,
StorageClass or access-mode enforcement (any number of Pods may mount it read-write), and its
data stays when the claim is deleted (a claim made again with the same name sees it). A
``hostPath`` of type ``DirectoryOrCreate`` is created on the host, as it is by a kubelet.

API: `Kubelet` (``start``, ``stop``, ``close``, ``logs``, ``log_path``, ``volume_path``,
``claim_path``, ``pid``, ``pod_uids``, ``wait_for_pod``, ``memory_cgroup``, ``stopped``),
`Scheduler` (``bound``), `cluster` (a scheduler and a kubelet per node for an emulator, for
demos and benchmarks), `container_status`, `condition`, `parse_quantity`, `unsupported_reason`;
and for the other stand-ins that talk to the API server as this kubelet does (the workload
controllers, the Service proxy): `ApiServer` (JSON over HTTP with retries), `inform` (list and
watch as an informer) and `cancel_tasks`.
`Kubelet` and `Scheduler` are async context managers; closing a kubelet kills every process it
started (by process group and by cgroup), removes its cgroups and its folders (claims' included),
even when a test fails.
Fixtures: ``kube_scheduler`` and ``kubelet`` (node ``node-1``, with the scheduler; import them
into a conftest). Needs root, cgroup v1 memory and ``unshare``: see `unsupported_reason`.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import decimal
import json
import logging
import os
import platform
import pwd
import re
import secrets
import shutil
import signal
import stat
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

from tests.support.kube import api_client
from tests.support.kube.network import pod_network
from tests.support.kube.node import cgroups, launching, mounting, pods, processes, resources

log = logging.getLogger("tests.kubelet")

_SERVICE_ACCOUNT = "/var/run/secrets/kubernetes.io/serviceaccount"
DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin"
# The project this runs from (tests/support/kube/node/ is four folders below it): part of the
# "image" every container sees.
PROJECT = Path(__file__).resolve().parents[4]

# The container launcher and the Pod sandbox run as files of their own (by path, with ``python -I
# -S``: isolated and quick to start, the standard library only).
_LAUNCHER = str(Path(launching.__file__))
_SANDBOX = str(Path(mounting.__file__))


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


# -- the API --------------------------------------------------------------------------------------


# -- cgroups --------------------------------------------------------------------------------------


# -- Pods and containers --------------------------------------------------------------------------


_REFERENCE = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)")


def _expand(text: str, env: Mapping[str, str]) -> str:
    """Kubernetes ``$(VAR)`` expansion: defined variables are replaced, ``$$`` is ``$``."""

    def one(found: re.Match[str]) -> str:
        if found.group(0) == "$$":
            return "$"
        return env.get(found.group(1), found.group(0))

    return _REFERENCE.sub(one, text)


# envFrom sources and valueFrom key references -> (resource, name in errors, kind).
_ENV_FROM = {
    "secretRef": ("secrets", "secret", "Secret"),
    "configMapRef": ("configmaps", "configmap", "ConfigMap"),
}
_KEY_REFS = {
    "secretKeyRef": ("secrets", "secret", "Secret"),
    "configMapKeyRef": ("configmaps", "configmap", "ConfigMap"),
}


# secret and configMap volumes -> (resource, the source's name field, name in errors, kind).
_VOLUME_OBJECTS = {
    "secret": ("secrets", "secretName", "secret", "Secret"),
    "configMap": ("configmaps", "name", "configmap", "ConfigMap"),
}


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
        self.node_name = node_name
        self.labels = dict(labels or {})
        self.backoff = backoff
        self.config_retry = config_retry
        self.heartbeat = heartbeat
        self._given_root = Path(root) if root is not None else None
        self.root: Path = self._given_root or Path(tempfile.gettempdir()) / "kubelet-unstarted"
        self._created_root = False
        venv_bin = str(Path(sys.executable).parent)
        self.path = path or f"{venv_bin}:{DEFAULT_PATH}"
        if image_paths is None:
            project = str(PROJECT)
            real = str(Path(sys.executable).resolve().parent.parent)
            image_paths = [project, sys.prefix, sys.base_prefix, real]
        self.image_paths = _outermost(str(Path(p)) for p in image_paths)
        self._api = api_client.ApiServer(api_url)
        self._pods: dict[str, pods.Pod] = {}
        self._finished: set[str] = set()
        self._tasks: set[asyncio.Task[Any]] = set()
        self._procs: set[asyncio.subprocess.Process] = set()
        self._running = asyncio.Event()
        self._started = False
        self._closed = False
        self._log_server: web.AppRunner | None = None
        self.log_port = 0
        """Where this kubelet serves containers' logs to the API server (on `HOST_IP`)."""
        self._memory: Path | None = None
        self._freezer: Path | None = None
        self._stopped_groups: list[int] = []
        self._informer: asyncio.Task[None] | None = None
        self._node_transitions: dict[str, tuple[str, str]] = {}
        self.network: pod_network.PodNetwork | None = pod_network.PodNetwork() if network else None
        self._services: dict[str, dict[str, Any]] = {}
        self._services_seen = asyncio.Event()

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
                self.root = Path(tempfile.mkdtemp(prefix=f"kubelet-{self.node_name}-"))
                self._created_root = True
            else:
                self.root = self._given_root
                self._created_root = not self.root.exists()
                self.root.mkdir(parents=True, exist_ok=True)
            (self.root / "pods").mkdir(exist_ok=True)
            (self.root / "logs").mkdir(exist_ok=True)
            own_memory = cgroups.own("memory")
            assert own_memory is not None
            self._memory = own_memory / f"kubelet-{self.node_name}-{token}"
            self._memory.mkdir()
            own_freezer = cgroups.own("freezer")
            if own_freezer is not None and (own_freezer / "cgroup.procs").exists():
                self._freezer = own_freezer / f"kubelet-{self.node_name}-{token}"
                self._freezer.mkdir()
            await self._api.open()
            await self._serve_logs()
            if self.network is not None:
                self.network.open()
                self._spawn(
                    api_client.inform(self._api, "/api/v1/services", {}, self._on_service),
                    f"kubelet {self.node_name} services",
                )
            await self._register()
            self._running.set()
            self._informer = self._spawn(
                api_client.inform(
                    self._api,
                    "/api/v1/pods",
                    {"fieldSelector": f"spec.nodeName={self.node_name}"},
                    self._on_event,
                ),
                f"kubelet {self.node_name} informer",
            )
            if self.heartbeat:
                self._spawn(self._beat(self.heartbeat), f"kubelet {self.node_name} heartbeat")
            return
        if not self._running.is_set():
            await self._thaw()
            self._running.set()
            await self._post_ready(True)

    async def stop(self, *, mark_unknown: bool = True) -> None:
        """Lose the node: freeze every process it runs and stop the kubelet's own work.

        Args:
            mark_unknown: Set the Node's conditions Unknown, as the node controller does once
                the kubelet stops posting its status.
        """
        if not self._started or self._closed or not self._running.is_set():
            return
        self._running.clear()
        await self._freeze()
        if mark_unknown:
            await self._post_ready(None)

    @property
    def memory_cgroup(self) -> Path | None:
        """The memory cgroup holding this node's Pods (``pod<uid>/<container>-<run>`` inside)."""
        return self._memory

    @property
    def stopped(self) -> bool:
        """Whether the node is stopped (frozen)."""
        return self._started and not self._running.is_set()

    async def close(self) -> None:
        """Kill every process, remove the cgroups and folders; safe to call twice."""
        if self._closed:
            return
        self._closed = True
        if not self._started:
            return
        with contextlib.suppress(Exception):
            await self._thaw()
        await api_client.cancel_tasks(self._tasks)
        for proc in list(self._procs):
            processes.kill_group(proc)
            if proc.stdin is not None:
                proc.stdin.close()
        for pod in self._pods.values():
            for c in pod.containers:
                cgroups.kill(c.cgroup)
        for proc in list(self._procs):
            await processes.reap(proc)
        # Every cgroup under the kubelet's own, deepest first, whoever made it.
        for folder in (self._memory, self._freezer):
            if folder is not None:
                for inner in cgroups.tree(folder):
                    await cgroups.remove(inner)
        await self._api.close()
        if self._log_server is not None:
            await self._log_server.cleanup()
            self._log_server = None
        if self.network is not None:
            self.network.close()
        if self._created_root:
            shutil.rmtree(self.root, ignore_errors=True)
        else:
            shutil.rmtree(self.root / "pods", ignore_errors=True)
            shutil.rmtree(self.root / "logs", ignore_errors=True)
            shutil.rmtree(self.root / "claims", ignore_errors=True)

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
        return self.root / "claims" / namespace / claim

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
            pod = await self._api.get(f"/api/v1/namespaces/{namespace}/pods/{name}")
            if predicate(pod):
                return pod
            if time.monotonic() > deadline:
                raise TimeoutError(f"pod {namespace}/{name}: {json.dumps(pod)[:4000]}")
            await asyncio.sleep(0.05)

    # -- the node ---------------------------------------------------------------------------

    def _node_conditions(self, ready: bool | None) -> list[dict[str, Any]]:
        conditions = self._node_condition_values(ready)
        for entry in conditions:
            previous = self._node_transitions.get(entry["type"])
            if previous is not None and previous[0] == entry["status"]:
                entry["lastTransitionTime"] = previous[1]
            self._node_transitions[entry["type"]] = (entry["status"], entry["lastTransitionTime"])
        return conditions

    def _node_condition_values(self, ready: bool | None) -> list[dict[str, Any]]:
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

    def _node_status(self) -> dict[str, Any]:
        memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        resources = {"cpu": str(os.cpu_count() or 1), "memory": str(memory), "pods": "110"}
        arch = {"x86_64": "amd64", "aarch64": "arm64"}.get(platform.machine(), platform.machine())
        return {
            "conditions": self._node_conditions(True),
            "addresses": [
                {"type": "InternalIP", "address": pods.HOST_IP},
                {"type": "Hostname", "address": self.node_name},
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

    async def _serve_logs(self) -> None:
        """Serve containers' logs as a kubelet does for the API server's ``pods/log``:
        ``GET /containerLogs/NAMESPACE/POD/CONTAINER`` (``previous``, ``tailLines``), plain
        text, on a free port of the node's address (advertised as its kubelet endpoint)."""

        async def container_logs(request: web.Request) -> web.Response:
            info = request.match_info
            previous = request.query.get("previous", "").lower() in ("true", "1")
            try:
                path = self.log_path(
                    info["namespace"], info["pod"], info["container"], previous=previous
                )
            except KeyError:
                which = "previous terminated container" if previous else "container"
                return web.Response(
                    status=404,
                    text=f'{which} "{info["container"]}" in pod "{info["pod"]}" has no logs',
                )
            text = path.read_text(errors="replace")
            tail = request.query.get("tailLines")
            if tail and tail.isdigit():
                lines = text.splitlines(keepends=True)
                text = "".join(lines[-int(tail) :]) if int(tail) else ""
            return web.Response(text=text)

        app = web.Application()
        app.router.add_get("/containerLogs/{namespace}/{pod}/{container}", container_logs)
        self._log_server = web.AppRunner(app, access_log=None, handle_signals=False)
        await self._log_server.setup()
        site = web.TCPSite(self._log_server, pods.HOST_IP, 0)
        await site.start()
        server = site._server
        assert server is not None and server.sockets  # type: ignore[attr-defined]
        self.log_port = int(server.sockets[0].getsockname()[1])  # type: ignore[attr-defined]

    async def _register(self) -> None:
        body = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": self.node_name,
                "labels": {
                    "kubernetes.io/hostname": self.node_name,
                    "kubernetes.io/os": "linux",
                    **self.labels,
                },
            },
            "spec": {},
            "status": self._node_status(),
        }
        try:
            await self._api.call("POST", "/api/v1/nodes", body=body)
        except api_client.ApiStatusError as exc:
            if exc.code != 409:
                raise
            await self._api.call(
                "PATCH",
                f"/api/v1/nodes/{self.node_name}/status",
                body={"status": self._node_status()},
                content_type="application/merge-patch+json",
            )

    async def _post_ready(self, ready: bool | None) -> None:
        await self._api.call(
            "PATCH",
            f"/api/v1/nodes/{self.node_name}/status",
            body={"status": {"conditions": self._node_conditions(ready)}},
            content_type="application/merge-patch+json",
        )

    async def _beat(self, every: float) -> None:
        while True:
            await asyncio.sleep(every)
            await self._gate()
            try:
                await self._post_ready(True)
            except api_client.ApiStatusError as exc:
                log.warning("node %s status not posted: %s", self.node_name, exc)

    async def _freeze(self) -> None:
        if self._freezer is not None:
            (self._freezer / "freezer.state").write_text("FROZEN")
            deadline = time.monotonic() + 60
            while (self._freezer / "freezer.state").read_text().strip() != "FROZEN":
                if time.monotonic() > deadline:
                    raise TimeoutError(f"cgroup {self._freezer} does not freeze")
                await asyncio.sleep(0.02)
            return
        for proc in list(self._procs):
            if proc.returncode is None:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(proc.pid, signal.SIGSTOP)
                    self._stopped_groups.append(proc.pid)

    async def _thaw(self) -> None:
        if self._freezer is not None:
            with contextlib.suppress(OSError):
                (self._freezer / "freezer.state").write_text("THAWED")
            return
        for group in self._stopped_groups:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(group, signal.SIGCONT)
        self._stopped_groups.clear()

    # -- events -----------------------------------------------------------------------------

    def _spawn(self, coro: Awaitable[Any], name: str) -> asyncio.Task[Any]:
        task: asyncio.Task[Any] = asyncio.ensure_future(coro)
        task.set_name(name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        task.add_done_callback(processes.log_failure)
        return task

    async def _on_event(self, kind: str, obj: dict[str, Any]) -> None:
        await self._running.wait()
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
                self._spawn(self._finish_deletion(obj), f"delete {obj['metadata']['name']}")
            return
        pod = self._admit(obj)
        self._pods[uid] = pod
        pod.task = self._spawn(self._pod_worker(pod), f"pod {pod.namespace}/{pod.name}")

    def _admit(self, obj: dict[str, Any]) -> pods.Pod:
        meta, spec = obj["metadata"], obj.get("spec") or {}
        folder = self.root / "pods" / meta["uid"]
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
            matches = sorted((self.root / "logs").glob(f"{namespace}_{name}_*"), key=pods.mtime)
            if not matches:
                raise KeyError(f"no logs of {namespace}/{name}")
            return matches[-1]
        return self.root / "logs" / f"{namespace}_{name}_{uid}"

    def _pod(self, namespace: str, name: str) -> pods.Pod:
        for pod in self._pods.values():
            if (pod.namespace, pod.name) == (namespace, name):
                return pod
        raise KeyError(f"no pod {namespace}/{name} on {self.node_name}")

    # -- one Pod ----------------------------------------------------------------------------

    async def _pod_worker(self, pod: pods.Pod) -> None:
        await self._sync_status(pod)
        life = self._spawn(self._lifecycle(pod), f"lifecycle {pod.name}")
        deleted = self._spawn(pod.deleting.wait(), f"deleted {pod.name}")
        await asyncio.wait({life, deleted}, return_when=asyncio.FIRST_COMPLETED)
        if pod.deleting.is_set():
            grace = pods.MINIMUM_GRACE
            if not pod.gone:
                grace = float(pod.obj["metadata"].get("deletionGracePeriodSeconds") or 0)
        else:
            grace = float(pod.spec.get("terminationGracePeriodSeconds", 30))
        pod.terminating = True
        await api_client.cancel_tasks([life])
        await self._terminate(pod, grace)
        pod.final_phase = pod.final_phase or self._terminal_phase(pod)
        await self._sync_status(pod)
        await self._stop_sandbox(pod)
        await pod.deleting.wait()
        deleted.cancel()
        await self._gate()
        if not pod.gone:
            await self._finish_deletion(pod.obj)
        self._finished.add(pod.uid)
        await self._remove_cgroups(pod)
        del self._pods[pod.uid]
        shutil.rmtree(pod.folder, ignore_errors=True)

    async def _lifecycle(self, pod: pods.Pod) -> None:
        await self._prepare(pod)
        for c in pod.init:
            c.state = {"waiting": {"reason": "ContainerCreating"}}
            await self._sync_status(pod)
            if c.kind == "sidecar":
                c.supervisor = self._spawn(self._supervise(pod, c), f"{pod.name}/{c.name}")
                await c.started_event.wait()
                continue
            while True:
                if not await self._start_container(pod, c):
                    return
                code = await self._wait_container(pod, c)
                if code == 0:
                    c.ready = False
                    c.done = True
                    break
                if pod.spec.get("restartPolicy", "Always") == "Never":
                    pod.final_phase = "Failed"
                    return
                await self._back_off(pod, c)
        pod.initialized = True
        for c in pod.main:
            c.state = {"waiting": {"reason": "ContainerCreating"}}
        await self._sync_status(pod)
        for c in pod.main:
            c.supervisor = self._spawn(self._supervise(pod, c), f"{pod.name}/{c.name}")
        await asyncio.gather(*(c.supervisor for c in pod.main if c.supervisor))

    async def _supervise(self, pod: pods.Pod, c: pods.Container) -> None:
        policy = pod.spec.get("restartPolicy", "Always")
        while not pod.terminating:
            if not await self._start_container(pod, c):
                return
            code = await self._wait_container(pod, c)
            if pod.terminating:
                return
            if c.kind == "main" and (policy == "Never" or (policy == "OnFailure" and code == 0)):
                c.done = True
                return
            await self._back_off(pod, c)

    async def _back_off(self, pod: pods.Pod, c: pods.Container) -> None:
        first, longest = self.backoff
        delay = 0.0 if c.restart_count == 0 else min(first * 2 ** (c.restart_count - 1), longest)
        c.last_state = c.state
        if delay > 0:
            c.state = {
                "waiting": {
                    "reason": "CrashLoopBackOff",
                    "message": f"back-off {delay:g}s restarting failed container={c.name} "
                    f"pod={pod.name}_{pod.namespace}({pod.uid})",
                }
            }
            await self._sync_status(pod)
            await asyncio.sleep(delay)
        await self._gate()
        c.restart_count += 1

    async def _gate(self) -> None:
        await self._running.wait()

    # -- volumes and the sandbox ------------------------------------------------------------

    async def _prepare(self, pod: pods.Pod) -> None:
        """Volumes, then the sandbox; retried (containers ContainerCreating) until they work."""
        while True:
            await self._gate()
            try:
                await self._prepare_once(pod)
                pod.message = None
                return
            except pods.MountError as exc:
                pod.message = str(exc)
                for c in pod.containers:
                    if "waiting" in c.state:
                        c.state = {"waiting": {**c.state["waiting"], "message": str(exc)}}
                await self._sync_status(pod)
                log.info("pod %s/%s: %s", pod.namespace, pod.name, exc)
                await asyncio.sleep(self.config_retry)

    async def _prepare_once(self, pod: pods.Pod) -> None:
        spec = pod.spec
        volumes_folder = pod.folder / "volumes"
        volumes_folder.mkdir(exist_ok=True)
        security = spec.get("securityContext") or {}
        fs_group = security.get("fsGroup")
        sources: dict[str, tuple[str, bool]] = {}  # name -> (host path, read-only)
        memory: list[str] = []
        for volume in spec.get("volumes") or ():
            name = volume["name"]
            folder = volumes_folder / name
            if "emptyDir" in volume:
                folder.mkdir(exist_ok=True)
                os.chmod(folder, 0o777)
                if fs_group is not None:
                    os.chown(folder, -1, int(fs_group))
                    os.chmod(folder, 0o2777)
                if (volume["emptyDir"] or {}).get("medium") == "Memory":
                    memory.append(str(folder))
                sources[name] = (str(folder), False)
            elif "secret" in volume or "configMap" in volume:
                kind = "secret" if "secret" in volume else "configMap"
                await self._write_object_volume(pod, kind, volume[kind] or {}, folder, fs_group)
                sources[name] = (str(folder), True)
            elif "persistentVolumeClaim" in volume:
                claim = volume["persistentVolumeClaim"] or {}
                readonly = bool(claim.get("readOnly"))
                policy = security.get("fsGroupChangePolicy")
                claim_folder = await self._claim_volume(pod, claim, fs_group, policy, readonly)
                sources[name] = (str(claim_folder), readonly)
            elif "hostPath" in volume:
                host = volume["hostPath"] or {}
                sources[name] = (_host_path(host), False)
            else:
                kinds = sorted(k for k in volume if k != "name")
                raise pods.MountError(f"volume {name!r}: unsupported volume type {kinds}")
        extra: list[dict[str, Any]] = []
        if self.network is not None:
            pod.ip = self.network.allocate(pod.uid)
            self._write_hosts(pod)
            (pod.folder / "resolv.conf").write_text(pod_network.resolv_conf(pod.namespace))
            extra.append({"source": str(pod.folder / "hosts"), "path": "/etc/hosts"})
            extra.append({"source": str(pod.folder / "resolv.conf"), "path": "/etc/resolv.conf"})
            account = await self._service_account_volume(pod)
            if account is not None:
                extra.append({"source": str(account), "path": _SERVICE_ACCOUNT, "readonly": True})
        roots = []
        for c in pod.containers:
            mounts = [{"readonly": False, "recursive": False, **m} for m in extra]
            for m in c.spec.get("volumeMounts") or ():
                if m["name"] not in sources:
                    raise pods.MountError(f"container {c.name}: no volume named {m['name']!r}")
                source, readonly = sources[m["name"]]
                if m.get("subPath"):
                    sub = Path(source) / m["subPath"]
                    if ".." in Path(m["subPath"]).parts:
                        raise pods.MountError(f"container {c.name}: subPath escapes the volume")
                    if not sub.exists():
                        sub.mkdir(parents=True, mode=0o777)
                    source = str(sub)
                mounts.append(
                    {
                        "source": source,
                        "path": m["mountPath"],
                        "readonly": readonly or bool(m.get("readOnly")),
                        "recursive": source not in (str(volumes_folder / m["name"]),),
                    }
                )
            root = pod.folder / "roots" / c.name
            root.mkdir(parents=True, exist_ok=True)
            dirs = [c.spec["workingDir"]] if c.spec.get("workingDir") else []
            roots.append({"root": str(root), "mounts": mounts, "dirs": dirs})
        stash = pod.folder / "host"
        stash.mkdir(exist_ok=True)
        config = {
            "stash": str(stash),
            "hostname": pod.spec.get("hostname") or pod.name[:63],
            "roots": roots,
            "memory": memory,
            "images": self.image_paths,
        }
        await self._start_sandbox(pod, config)

    # -- the Pod network (with `network`) ----------------------------------------------------

    async def _on_service(self, kind: str, service: dict[str, Any]) -> None:
        """Keep the Services, and every Pod's ``/etc/hosts`` naming them, current."""
        key = f"{service['metadata']['namespace']}/{service['metadata']['name']}"
        if kind == "DELETED":
            self._services.pop(key, None)
        else:
            self._services[key] = service
        for pod in list(self._pods.values()):
            if (pod.folder / "hosts").exists():
                self._write_hosts(pod)

    def _write_hosts(self, pod: pods.Pod) -> None:
        text = pod_network.hosts_file(pod.namespace, pod.name, pod.ip, self._services.values())
        # In place: the file is bound over /etc/hosts, so it must stay the same inode.
        with open(pod.folder / "hosts", "a+") as f:
            f.seek(0)
            if f.read() != text:
                f.seek(0)
                f.truncate()
                f.write(text)
        os.chmod(pod.folder / "hosts", 0o644)

    async def _service_account_volume(self, pod: pods.Pod) -> Path | None:
        """The service account token volume the API server's admission gives a Pod unless
        ``automountServiceAccountToken`` is false (on the Pod, else on its service account):
        ``token`` (a TokenRequest for the Pod's service account), ``ca.crt`` (the namespace's
        ``kube-root-ca.crt``) and ``namespace``. None when not mounted, or when the cluster has
        no in-cluster API (no Service ``default/kubernetes``)."""
        if "default/kubernetes" not in self._services:
            return None
        name = pod.spec.get("serviceAccountName") or "default"
        automount = pod.spec.get("automountServiceAccountToken")
        account = await self._api.get(f"/api/v1/namespaces/{pod.namespace}/serviceaccounts/{name}")
        if account is None:
            raise pods.MountError(f'serviceaccount "{name}" not found')
        if automount is None:
            automount = account.get("automountServiceAccountToken", True)
        if not automount:
            return None
        ca = await self._api.get(f"/api/v1/namespaces/{pod.namespace}/configmaps/kube-root-ca.crt")
        if ca is None:
            raise pods.MountError('configmap "kube-root-ca.crt" not found')
        answer = await self._api.call(
            "POST",
            f"/api/v1/namespaces/{pod.namespace}/serviceaccounts/{name}/token",
            body={"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {}},
        )
        folder = pod.folder / "serviceaccount"
        folder.mkdir(exist_ok=True)
        files = [
            ("token", answer["status"]["token"].encode(), 0o644),
            ("ca.crt", ca["data"]["ca.crt"].encode(), 0o644),
            ("namespace", pod.namespace.encode(), 0o644),
        ]
        security = pod.spec.get("securityContext") or {}
        _write_files(folder, files, security.get("fsGroup"))
        return folder

    async def _write_object_volume(
        self, pod: pods.Pod, kind: str, source: Mapping[str, Any], folder: Path, fs_group: Any
    ) -> None:
        """Write a ``secret`` or ``configMap`` volume's files (see `_volume_files`): a Secret's
        ``data`` decoded from base64; a ConfigMap's ``data`` as UTF-8 text and its
        ``binaryData`` decoded from base64.

        Raises:
            _MountError: The object (or an item's key) is missing and not optional.
        """
        resource, name_field, singular, title = _VOLUME_OBJECTS[kind]
        name = source.get(name_field, "")
        found = await self._api.get(f"/api/v1/namespaces/{pod.namespace}/{resource}/{name}")
        if found is None:
            if source.get("optional"):
                _write_files(folder, [], fs_group)
                return
            raise pods.MountError(f'MountVolume.SetUp failed: {singular} "{name}" not found')
        encoded = found.get("data" if kind == "secret" else "binaryData") or {}
        data = {k: base64.b64decode(v) for k, v in encoded.items()}
        if kind == "configMap":
            data.update({k: str(v).encode() for k, v in (found.get("data") or {}).items()})
        files = _volume_files(source, data, kind, f"{title} {pod.namespace}/{name}")
        _write_files(folder, files, fs_group)

    async def _claim_volume(
        self,
        pod: pods.Pod,
        source: Mapping[str, Any],
        fs_group: Any,
        policy: str | None,
        readonly: bool,
    ) -> Path:
        """The folder of a ``persistentVolumeClaim`` volume (`claim_path`), made on first use
        (mode 0777) and kept when the Pod goes; with ``fsGroup``, its files are given to that
        group (see `_set_volume_ownership`).

        Raises:
            _MountError: The claim does not exist in the Pod's namespace or is being deleted.
        """
        name = str(source.get("claimName", ""))
        if not name or "/" in name or name in (".", ".."):
            raise pods.MountError(f"persistentVolumeClaim: invalid claimName {name!r}")
        claim = await self._api.get(
            f"/api/v1/namespaces/{pod.namespace}/persistentvolumeclaims/{name}"
        )
        failed = f"error processing PVC {pod.namespace}/{name}"
        if claim is None:
            raise pods.MountError(
                f"{failed}: failed to fetch PVC from API server: "
                f'persistentvolumeclaims "{name}" not found'
            )
        if (claim.get("metadata") or {}).get("deletionTimestamp"):
            raise pods.MountError(f"{failed}: can't start pod because PVC is being deleted")
        folder = self.claim_path(pod.namespace, name)
        if not folder.is_dir():
            folder.mkdir(parents=True, exist_ok=True)
            os.chmod(folder, 0o777)
        if fs_group is not None:
            _set_volume_ownership(folder, int(fs_group), readonly, policy)
        return folder

    async def _start_sandbox(self, pod: pods.Pod, config: Mapping[str, Any]) -> None:
        log_file = processes.open_append(pod.folder / "sandbox.log")
        try:
            proc = await asyncio.create_subprocess_exec(
                shutil.which("unshare") or "unshare",
                "--mount",
                "--uts",
                *(["--net"] if self.network is not None else []),
                "--propagation",
                "private",
                "--",
                sys.executable,
                "-I",
                "-S",
                _SANDBOX,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=log_file,
                start_new_session=True,
                env={mounting.ENVIRONMENT: json.dumps(config), "PATH": DEFAULT_PATH},
            )
        finally:
            log_file.close()
        self._procs.add(proc)
        if self._freezer is not None:
            with contextlib.suppress(OSError):
                (self._freezer / "cgroup.procs").write_text(str(proc.pid))
        assert proc.stdout is not None
        line = (await proc.stdout.readline()).decode(errors="replace").strip()
        if line != "ready":
            if proc.stdin is not None:
                proc.stdin.close()
            await processes.reap(proc, kill=True)
            self._procs.discard(proc)
            raise pods.MountError(f"the Pod sandbox failed: {line or 'no answer'}")
        pod.sandbox = proc
        if self.network is not None:
            try:
                pod.ip = await asyncio.to_thread(self.network.attach, pod.uid, proc.pid)
            except OSError as exc:
                await self._stop_sandbox(pod)
                raise pods.MountError(f"the Pod network failed: {exc}") from exc
        pod.sandbox_ready = True
        pod.cgroup = self._memory / f"pod{pod.uid}" if self._memory else None
        if pod.cgroup is not None:
            pod.cgroup.mkdir(exist_ok=True)

    async def _stop_sandbox(self, pod: pods.Pod) -> None:
        proc = pod.sandbox
        pod.sandbox_ready = False
        if proc is None:
            return
        pod.sandbox = None
        if proc.stdin is not None:
            proc.stdin.close()
        await processes.reap(proc, kill=True)
        self._procs.discard(proc)
        if self.network is not None:
            await asyncio.to_thread(self.network.detach, pod.uid)

    async def _remove_cgroups(self, pod: pods.Pod) -> None:
        for c in pod.containers:
            await cgroups.remove(c.cgroup)
            c.cgroup = None
        await cgroups.remove(pod.cgroup)
        pod.cgroup = None

    # -- one container ----------------------------------------------------------------------

    def _identity(self, pod: pods.Pod, c: pods.Container) -> tuple[int, int, list[int], bool]:
        pod_security = pod.spec.get("securityContext") or {}
        security = {**pod_security, **(c.spec.get("securityContext") or {})}
        uid = int(security.get("runAsUser", 0))
        if security.get("runAsNonRoot") and uid == 0:
            raise pods.ConfigError(
                "container has runAsNonRoot and image will run as root "
                f'(pod: "{pod.name}_{pod.namespace}({pod.uid})", container: {c.name})'
            )
        try:
            default_gid = pwd.getpwuid(uid).pw_gid
        except KeyError:
            default_gid = 0
        gid = int(security.get("runAsGroup", default_gid))
        groups = [int(g) for g in pod_security.get("supplementalGroups") or ()]
        if pod_security.get("fsGroup") is not None:
            groups.insert(0, int(pod_security["fsGroup"]))
        no_new_privs = security.get("allowPrivilegeEscalation") is False
        return uid, gid, sorted(set(groups)), no_new_privs

    async def _environment(self, pod: pods.Pod, c: pods.Container, uid: int) -> dict[str, str]:
        """The container's environment: ``envFrom`` (Secrets and ConfigMaps, with ``prefix``),
        then ``env``, then the image's defaults for what neither set.

        Raises:
            _ConfigError: A Secret or ConfigMap (or one of its keys) that is not optional is
                missing, or a reference is not supported.
        """
        cache: dict[tuple[str, str], dict[str, str] | None] = {}

        async def text_data(resource: str, name: str) -> dict[str, str] | None:
            """The text data of a Secret or ConfigMap (None when it does not exist)."""
            if (resource, name) not in cache:
                found = await self._api.get(f"/api/v1/namespaces/{pod.namespace}/{resource}/{name}")
                values = None if found is None else dict(found.get("data") or {})
                if values is not None and resource == "secrets":
                    values = {
                        k: base64.b64decode(v).decode(errors="replace") for k, v in values.items()
                    }
                cache[resource, name] = values
            return cache[resource, name]

        env: dict[str, str] = {}
        for source in c.spec.get("envFrom") or ():
            kind = next((k for k in _ENV_FROM if k in source), None)
            if kind is None:
                raise pods.ConfigError(f"envFrom: unsupported source {sorted(source)}")
            resource, singular, _ = _ENV_FROM[kind]
            ref = source[kind] or {}
            found = await text_data(resource, ref.get("name", ""))
            if found is None:
                if ref.get("optional"):
                    continue
                raise pods.ConfigError(f'{singular} "{ref.get("name", "")}" not found')
            for key, value in found.items():
                env[source.get("prefix", "") + key] = value
        for entry in c.spec.get("env") or ():
            name = entry["name"]
            if "valueFrom" not in entry:
                env[name] = _expand(str(entry.get("value", "")), env)
                continue
            origin = entry["valueFrom"]
            kind = next((k for k in _KEY_REFS if k in origin), None)
            if kind is not None:
                resource, singular, title = _KEY_REFS[kind]
                ref = origin[kind] or {}
                found = await text_data(resource, ref.get("name", ""))
                if found is None or ref.get("key") not in found:
                    if ref.get("optional"):
                        continue
                    if found is None:
                        raise pods.ConfigError(f'{singular} "{ref.get("name", "")}" not found')
                    raise pods.ConfigError(
                        f"couldn't find key {ref.get('key')} in {title} "
                        f"{pod.namespace}/{ref.get('name', '')}"
                    )
                env[name] = found[ref["key"]]
            elif "fieldRef" in origin:
                env[name] = self._field(pod, origin["fieldRef"]["fieldPath"])
            elif "resourceFieldRef" in origin:
                env[name] = resources.resource_field(c.spec, origin["resourceFieldRef"])
            else:
                raise pods.ConfigError(f"env {name}: unsupported valueFrom {sorted(origin)}")
        try:
            home = pwd.getpwuid(uid).pw_dir or "/"
        except KeyError:
            home = "/"
        master = self._services.get("default/kubernetes")
        if self.network is not None and master is not None:
            ports = master["spec"].get("ports") or [{}]
            port = ports[0].get("port", 443)
            env = {
                "KUBERNETES_SERVICE_HOST": master["spec"]["clusterIP"],
                "KUBERNETES_SERVICE_PORT": str(port),
                **env,
            }
        return {"PATH": self.path, "HOSTNAME": pod.name, "HOME": home, **env}

    def _field(self, pod: pods.Pod, path: str) -> str:
        meta = pod.obj["metadata"]
        found = re.fullmatch(r"metadata\.(labels|annotations)\['(.+)'\]", path)
        if found:
            return str((meta.get(found.group(1)) or {}).get(found.group(2), ""))
        values = {
            "metadata.name": meta.get("name"),
            "metadata.namespace": meta.get("namespace"),
            "metadata.uid": meta.get("uid"),
            "spec.nodeName": self.node_name,
            "spec.serviceAccountName": pod.spec.get("serviceAccountName", "default"),
            "status.hostIP": pods.HOST_IP,
            "status.podIP": pod.ip,
        }
        if path not in values:
            raise pods.ConfigError(f"unsupported fieldRef {path}")
        return str(values[path] or "")

    async def _start_container(self, pod: pods.Pod, c: pods.Container) -> bool:
        """Start one run of a container, retrying config errors; False once the Pod stops."""
        while True:
            await self._gate()
            if pod.terminating:
                return False
            try:
                uid, gid, groups, no_new_privs = self._identity(pod, c)
                env = await self._environment(pod, c, uid)
            except pods.ConfigError as exc:
                c.state = {"waiting": {"reason": "CreateContainerConfigError", "message": str(exc)}}
                await self._sync_status(pod)
                await asyncio.sleep(self.config_retry)
                continue
            if not pod.terminating:
                break
        argv = [_expand(str(a), env) for a in c.spec.get("command") or ()]
        argv += [_expand(str(a), env) for a in c.spec.get("args") or ()]
        c.runs += 1
        c.container_id = f"tests-kubelet://{secrets.token_hex(32)}"
        c.cgroup = self._container_cgroup(pod, c)
        c.exit_code = None
        c.started = False
        c.ready = False
        c.started_event.clear()
        log_folder = pod.logs / c.name
        log_folder.mkdir(exist_ok=True)
        log_path = log_folder / f"{c.runs - 1}.log"
        if not argv:
            c.proc = None
            c.exit_code = 128
            c.state = pods.terminated(128, "StartError", "no command: the image has no entrypoint")
            log_path.write_text("")
            return True
        launch = {
            "argv": argv,
            "env": env,
            "uid": uid,
            "gid": gid,
            "groups": groups,
            "no_new_privs": no_new_privs,
            "cwd": c.spec.get("workingDir") or "/",
        }
        proc, failure = await self._launch(pod, c, launch, log_path)
        if failure is not None:
            c.proc = None
            c.exit_code = 128
            c.state = pods.terminated(128, "StartError", failure)
            if proc is not None:
                await processes.reap(proc)
                self._procs.discard(proc)
            await cgroups.remove(c.cgroup)
            c.cgroup = None
            return True
        c.proc = proc
        c.exited.clear()
        c.started_at = pods.now()
        c.state = {"running": {"startedAt": c.started_at}}
        probes = c.spec
        if "startupProbe" not in probes:
            self._mark_started(c)
        if "readinessProbe" not in probes and "startupProbe" not in probes:
            c.ready = True
        await self._sync_status(pod)
        for kind in ("startupProbe", "readinessProbe", "livenessProbe"):
            if kind in probes:
                c.probes.append(self._spawn(self._probe_loop(pod, c, kind), f"{c.name} {kind}"))
        return True

    def _container_cgroup(self, pod: pods.Pod, c: pods.Container) -> Path | None:
        if pod.cgroup is None:
            return None
        folder = pod.cgroup / f"{c.name}-{c.runs}"
        folder.mkdir(exist_ok=True)
        limit = ((c.spec.get("resources") or {}).get("limits") or {}).get("memory")
        if limit is not None:
            size = str(
                int(resources.parse_quantity(limit).to_integral_value(decimal.ROUND_CEILING))
            )
            (folder / "memory.limit_in_bytes").write_text(size)
            with contextlib.suppress(OSError):
                (folder / "memory.memsw.limit_in_bytes").write_text(size)
            with contextlib.suppress(OSError):
                (folder / "memory.swappiness").write_text("0")
        return folder

    async def _launch(
        self,
        pod: pods.Pod,
        c: pods.Container,
        launch: Mapping[str, Any],
        log_path: Path | None,
    ) -> tuple[asyncio.subprocess.Process | None, str | None]:
        """Run the launcher in the container's context; returns it and why it failed, if so."""
        assert pod.sandbox is not None
        cgroups = []
        if c.cgroup is not None:
            cgroups.append(str(c.cgroup / "cgroup.procs"))
        if self._freezer is not None:
            cgroups.append(str(self._freezer / "cgroup.procs"))
        read_end, write_end = os.pipe()
        config = {
            **launch,
            "cgroups": cgroups,
            "ns": f"/proc/{pod.sandbox.pid}/ns/mnt",
            "uts": f"/proc/{pod.sandbox.pid}/ns/uts",
            "net": f"/proc/{pod.sandbox.pid}/ns/net" if self.network is not None else None,
            "root": str(pod.folder / "roots" / c.name),
            "report": write_end,
        }
        output = processes.open_append(log_path) if log_path else None
        try:
            proc = await asyncio.create_subprocess_exec(
                sys.executable,
                "-I",
                "-S",
                _LAUNCHER,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=output if output else asyncio.subprocess.DEVNULL,
                stderr=output if output else asyncio.subprocess.DEVNULL,
                start_new_session=True,
                pass_fds=(write_end,),
                env={launching.ENVIRONMENT: json.dumps(config)},
            )
        except OSError as exc:
            os.close(read_end)
            return None, str(exc)
        finally:
            os.close(write_end)
            if output is not None:
                output.close()
        self._procs.add(proc)
        report = await processes.read_all(read_end)
        if report:
            return proc, report.decode(errors="replace")
        return proc, None

    def _mark_started(self, c: pods.Container) -> None:
        c.started = True
        c.started_event.set()

    async def _wait_container(self, pod: pods.Pod, c: pods.Container) -> int:
        """Wait for the current run to end and record how it ended; returns its exit code."""
        proc = c.proc
        if proc is None:
            await self._sync_status(pod)
            return c.exit_code if c.exit_code is not None else 128
        code = await proc.wait()
        await self._record_exit(pod, c, proc, code)
        return c.exit_code if c.exit_code is not None else 128

    async def _record_exit(
        self, pod: pods.Pod, c: pods.Container, proc: asyncio.subprocess.Process, code: int
    ) -> None:
        """Record a run's end once (whoever saw it first), kill its leftovers, drop its cgroup."""
        if c.proc is not proc:
            return
        c.proc = None
        self._procs.discard(proc)
        current = asyncio.current_task()
        for task in c.probes:
            if task is not current:
                task.cancel()
        c.probes.clear()
        cgroup, c.cgroup = c.cgroup, None
        exit_code = code if code >= 0 else 128 - code
        reason = "Completed" if exit_code == 0 else "Error"
        if cgroups.oom_kills(cgroup) > 0:
            reason = "OOMKilled"
        cgroups.kill(cgroup)
        c.exit_code = exit_code
        c.state = {
            "terminated": {
                "exitCode": exit_code,
                "reason": reason,
                "startedAt": c.started_at,
                "finishedAt": pods.now(),
                "containerID": c.container_id,
            }
        }
        c.ready = False
        c.started = False
        c.exited.set()
        await cgroups.remove(cgroup)
        await self._sync_status(pod)

    async def _kill_container(self, pod: pods.Pod, c: pods.Container, grace: float) -> None:
        """SIGTERM the container's main process, SIGKILL everything of it after `grace`."""
        proc = c.proc
        if proc is None or proc.returncode is not None:
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(proc.pid, signal.SIGTERM)
        try:
            async with asyncio.timeout(max(grace, 0)):
                code = await proc.wait()
        except TimeoutError:
            processes.kill_group(proc)
            cgroups.kill(c.cgroup)
            code = await proc.wait()
        await self._record_exit(pod, c, proc, code)

    async def _terminate(self, pod: pods.Pod, grace: float) -> None:
        """Main containers first, then sidecars in reverse order, within one grace period."""
        deadline = asyncio.get_running_loop().time() + grace

        async def stop(group: Iterable[pods.Container], ordered: bool) -> None:
            running = [c for c in group if c.running]
            if ordered:
                for c in running:
                    await self._kill_container(pod, c, deadline - asyncio.get_running_loop().time())
            else:
                await asyncio.gather(
                    *(
                        self._kill_container(pod, c, deadline - asyncio.get_running_loop().time())
                        for c in running
                    )
                )

        await stop(pod.main, ordered=False)
        await stop([c for c in reversed(pod.init) if c.kind == "sidecar"], ordered=True)
        await stop(pod.init, ordered=False)
        await api_client.cancel_tasks(
            [c.supervisor for c in pod.containers if c.supervisor is not None]
        )
        for c in pod.containers:
            proc = c.proc
            cgroups.kill(c.cgroup)
            if proc is not None:
                processes.kill_group(proc)
                await self._record_exit(pod, c, proc, await proc.wait())
            await api_client.cancel_tasks(c.probes)
            c.probes.clear()
            c.ready = False
            c.started = False

    def _terminal_phase(self, pod: pods.Pod) -> str:
        for c in pod.main:
            terminated = c.state.get("terminated")
            if terminated is None or terminated.get("exitCode") != 0:
                return "Failed"
        return "Succeeded"

    # -- probes -----------------------------------------------------------------------------

    async def _probe_loop(self, pod: pods.Pod, c: pods.Container, kind: str) -> None:
        probe = c.spec[kind]
        period = float(probe.get("periodSeconds", 10))
        timeout = float(probe.get("timeoutSeconds", 1))
        need_success = int(probe.get("successThreshold", 1))
        need_failure = int(probe.get("failureThreshold", 3))
        if kind != "startupProbe" and "startupProbe" in c.spec:
            await c.started_event.wait()
        await asyncio.sleep(float(probe.get("initialDelaySeconds", 0)))
        successes = failures = 0
        while c.running:
            await self._gate()
            ok = await self._probe_once(pod, c, probe, timeout)
            if not self._running.is_set():
                continue  # the node froze meanwhile: the result means nothing
            successes, failures = (successes + 1, 0) if ok else (0, failures + 1)
            if kind == "startupProbe":
                if ok:
                    self._mark_started(c)
                    if "readinessProbe" not in c.spec:
                        c.ready = True
                    await self._sync_status(pod)
                    return
                if failures >= need_failure:
                    await self._kill_container(pod, c, pods.grace_period(pod))
                    return
            elif kind == "readinessProbe":
                if ok and successes >= need_success and not c.ready:
                    c.ready = True
                    await self._sync_status(pod)
                elif not ok and failures >= need_failure and c.ready:
                    c.ready = False
                    await self._sync_status(pod)
            elif not ok and failures >= need_failure:
                await self._kill_container(pod, c, pods.grace_period(pod))
                return
            await asyncio.sleep(period)

    async def _probe_once(
        self, pod: pods.Pod, c: pods.Container, probe: Mapping[str, Any], timeout: float
    ) -> bool:
        try:
            if "exec" in probe:
                return await self._exec_probe(pod, c, probe["exec"].get("command") or [], timeout)
            if "tcpSocket" in probe:
                port = _port(c.spec, probe["tcpSocket"]["port"])
                host = probe["tcpSocket"].get("host") or pod.ip
                async with asyncio.timeout(timeout):
                    _, writer = await asyncio.open_connection(host, port)
                writer.close()
                with contextlib.suppress(OSError):
                    await writer.wait_closed()
                return True
            if "httpGet" in probe:
                get = probe["httpGet"]
                port = _port(c.spec, get["port"])
                url = (
                    f"{get.get('scheme', 'HTTP').lower()}://{get.get('host') or pod.ip}:{port}"
                    f"{get.get('path', '/')}"
                )
                assert self._api.session is not None
                # As a kubelet does: an HTTPS probe does not verify the certificate.
                async with self._api.session.get(
                    url, timeout=aiohttp.ClientTimeout(total=timeout), ssl=False
                ) as response:
                    return 200 <= response.status < 400
            if "grpc" in probe:
                return await _grpc_probe(
                    pod.ip, int(probe["grpc"]["port"]), probe["grpc"].get("service") or "", timeout
                )
        except (OSError, TimeoutError, aiohttp.ClientError, ValueError):
            return False
        return False

    async def _exec_probe(
        self, pod: pods.Pod, c: pods.Container, command: Sequence[str], timeout: float
    ) -> bool:
        if pod.sandbox is None or not command:
            return False
        try:
            uid, gid, groups, no_new_privs = self._identity(pod, c)
            env = await self._environment(pod, c, uid)
        except pods.ConfigError:
            return False
        launch = {
            "argv": list(command),
            "env": env,
            "uid": uid,
            "gid": gid,
            "groups": groups,
            "no_new_privs": no_new_privs,
            "cwd": c.spec.get("workingDir") or "/",
        }
        proc, failure = await self._launch(pod, c, launch, None)
        if proc is None:
            return False
        try:
            async with asyncio.timeout(timeout):
                code = await proc.wait()
        except TimeoutError:
            processes.kill_group(proc)
            await processes.reap(proc)
            return False
        finally:
            self._procs.discard(proc)
        return failure is None and code == 0

    # -- status -----------------------------------------------------------------------------

    def _container_status(self, c: pods.Container) -> dict[str, Any]:
        image = str(c.spec.get("image", ""))
        status: dict[str, Any] = {
            "name": c.name,
            "image": image,
            "imageID": pods.image_id(image) if c.container_id else "",
            "state": c.state,
            "lastState": c.last_state,
            "ready": c.ready,
            "restartCount": c.restart_count,
            "started": c.started,
        }
        if c.container_id:
            status["containerID"] = c.container_id
        return status

    def _phase(self, pod: pods.Pod) -> str:
        if pod.final_phase is not None:
            return pod.final_phase
        if pod.initialized and any(c.runs for c in pod.main):
            return "Running"
        return "Pending"

    def _pod_status(self, pod: pods.Pod) -> dict[str, Any]:
        phase = self._phase(pod)
        terminal = phase in ("Succeeded", "Failed")
        unready = [c.name for c in pod.main if not c.ready]
        unready += [c.name for c in pod.init if c.kind == "sidecar" and not c.ready]
        incomplete = [
            c.name
            for c in pod.init
            if not (c.done if c.kind == "init" else c.started or pod.initialized)
        ]
        initialized = pod.initialized or (terminal and not incomplete)
        ready_reason = "PodCompleted" if terminal else "ContainersNotReady"
        own = {
            "PodReadyToStartContainers": ("True" if pod.sandbox_ready else "False", None, None),
            "Initialized": (
                "True" if initialized else "False",
                None if initialized else "ContainersNotInitialized",
                None
                if initialized
                else f"containers with incomplete status: [{' '.join(incomplete)}]",
            ),
            "ContainersReady": (
                "False" if unready or terminal else "True",
                ready_reason if unready or terminal else None,
                (f"containers with unready status: [{' '.join(unready)}]")
                if unready and not terminal
                else None,
            ),
            "Ready": (
                "False" if unready or terminal else "True",
                ready_reason if unready or terminal else None,
                (f"containers with unready status: [{' '.join(unready)}]")
                if unready and not terminal
                else None,
            ),
            "PodScheduled": ("True", None, None),
        }
        conditions = []
        now = pods.now()
        for kind, (value, reason, message) in own.items():
            previous = pod.transitions.get(kind)
            if previous is None or previous[0] != value:
                pod.transitions[kind] = (value, now)
            entry: dict[str, Any] = {
                "type": kind,
                "status": value,
                "lastProbeTime": None,
                "lastTransitionTime": pod.transitions[kind][1],
            }
            if reason:
                entry["reason"] = reason
            if message:
                entry["message"] = message
            conditions.append(entry)
        current = pod.obj.get("status") or {}
        conditions += [dict(c) for c in current.get("conditions") or () if c.get("type") not in own]
        status: dict[str, Any] = {
            "phase": phase,
            "conditions": conditions,
            "hostIP": pods.HOST_IP,
            "hostIPs": [{"ip": pods.HOST_IP}],
            "startTime": pod.start_time,
            "containerStatuses": [
                self._container_status(c) for c in sorted(pod.main, key=lambda c: c.name)
            ],
        }
        if pod.init:
            status["initContainerStatuses"] = [self._container_status(c) for c in pod.init]
        if pod.sandbox_ready or terminal:
            status["podIP"] = pod.ip
            status["podIPs"] = [{"ip": pod.ip}]
        if current.get("qosClass"):
            status["qosClass"] = current["qosClass"]
        if pod.message and not terminal:
            status["message"] = pod.message
        return status

    async def _sync_status(self, pod: pods.Pod) -> None:
        """Write the Pod's status if it changed (through ``pods/{name}/status``)."""
        async with pod.lock:
            await self._gate()
            if pod.gone:
                return
            status = self._pod_status(pod)
            if status == pod.written:
                return
            try:
                updated = await self._api.call(
                    "PATCH",
                    f"/api/v1/namespaces/{pod.namespace}/pods/{pod.name}/status",
                    body={"status": status},
                    content_type="application/merge-patch+json",
                )
            except api_client.ApiStatusError as exc:
                if exc.code == 404:
                    pod.gone = True
                    pod.deleting.set()
                    return
                log.warning("status of %s/%s not written: %s", pod.namespace, pod.name, exc)
                return
            pod.written = status
            if isinstance(updated, dict) and updated.get("metadata", {}).get("uid") == pod.uid:
                pod.obj = updated
                if updated["metadata"].get("deletionTimestamp"):
                    pod.deleting.set()

    async def _finish_deletion(self, obj: Mapping[str, Any]) -> None:
        meta = obj["metadata"]
        try:
            await self._api.call(
                "DELETE",
                f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}",
                body={
                    "apiVersion": "v1",
                    "kind": "DeleteOptions",
                    "gracePeriodSeconds": 0,
                    "preconditions": {"uid": meta["uid"]},
                },
            )
        except api_client.ApiStatusError as exc:
            if exc.code not in (404, 409):
                raise


# -- helpers --------------------------------------------------------------------------------------


def _host_path(source: Mapping[str, Any]) -> str:
    target = Path(source["path"])
    kind = source.get("type") or ""
    if not target.exists():
        if kind not in ("", "DirectoryOrCreate"):
            raise pods.MountError(f"hostPath type check failed: {target} is not a {kind}")
        target.mkdir(parents=True, mode=0o755)
    return str(target)


def _volume_files(
    source: Mapping[str, Any], data: Mapping[str, bytes], kind: str, owner: str
) -> list[tuple[str, bytes, int]]:
    """The files of a ``secret`` or ``configMap`` volume: one per key, or ``items`` (key ->
    relative path, ``mode``); modes default to ``defaultMode``, else 0644.

    Args:
        source: The volume source.
        data: Key -> content.
        kind: The volume type, for errors.
        owner: The object, for errors ("Secret ns/name").

    Raises:
        _MountError: An item's key is missing (and the source is not optional), or a path is
            absolute or leaves the volume.
    """
    default_mode = int(source.get("defaultMode", 0o644))
    items = source.get("items")
    files: list[tuple[str, bytes, int]] = []
    if items:
        for item in items:
            if item["key"] not in data:
                if source.get("optional"):
                    continue
                raise pods.MountError(
                    f"MountVolume.SetUp failed: couldn't find key {item['key']} in {owner}"
                )
            files.append((item["path"], data[item["key"]], int(item.get("mode", default_mode))))
    else:
        files = [(key, value, default_mode) for key, value in data.items()]
    for relative, _, _ in files:
        if Path(relative).is_absolute() or ".." in Path(relative).parts:
            raise pods.MountError(f"{kind} volume item path {relative!r} escapes the volume")
    return files


def _set_volume_ownership(folder: Path, gid: int, readonly: bool, policy: str | None) -> None:
    """Give a volume to a Pod's ``fsGroup`` as a kubelet does: every entry gets group `gid`
    and group read/write (read on a read-only volume), folders also group search and set-group-ID;
    with ``fsGroupChangePolicy: OnRootMismatch`` nothing changes when the root already has them.
    Symbolic links get the group only."""
    mask = 0o440 if readonly else 0o660
    folder_mask = mask | 0o110 | stat.S_ISGID
    root = os.stat(folder)
    if (
        policy == "OnRootMismatch"
        and root.st_gid == gid
        and root.st_mode & folder_mask == folder_mask
    ):
        return

    def change(path: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            st = os.lstat(path)
            os.lchown(path, -1, gid)
            if not stat.S_ISLNK(st.st_mode):
                extra = folder_mask if stat.S_ISDIR(st.st_mode) else mask
                os.chmod(path, stat.S_IMODE(st.st_mode) | extra)

    change(str(folder))
    for parent, dirs, names in os.walk(folder):
        for entry in [*dirs, *names]:
            change(os.path.join(parent, entry))


def _write_files(folder: Path, files: Iterable[tuple[str, bytes, int]], fs_group: Any) -> None:
    folder.mkdir(exist_ok=True)
    os.chmod(folder, 0o755)
    for relative, content, mode in files:
        target = folder / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(content)
        if fs_group is not None:
            os.chown(target, -1, int(fs_group))
            mode |= 0o040
        os.chmod(target, mode)


def _outermost(paths: Iterable[str]) -> list[str]:
    """The paths that no other path of the list contains."""
    unique = sorted(set(paths), key=len)
    kept: list[str] = []
    for p in unique:
        if p != "/" and not any(p == k or p.startswith(k.rstrip("/") + "/") for k in kept):
            kept.append(p)
    return kept


def _port(spec: Mapping[str, Any], port: int | str) -> int:
    if isinstance(port, int) or str(port).isdigit():
        return int(port)
    for entry in spec.get("ports") or ():
        if entry.get("name") == port:
            return int(entry["containerPort"])
    raise ValueError(f"no port named {port!r}")


async def _grpc_probe(host: str, port: int, service: str, timeout: float) -> bool:
    import grpc  # only probes need it
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    async with grpc.aio.insecure_channel(f"{host}:{port}") as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        try:
            answer = await stub.Check(
                health_pb2.HealthCheckRequest(service=service), timeout=timeout
            )
        except grpc.aio.AioRpcError:
            return False
        return bool(answer.status == health_pb2.HealthCheckResponse.SERVING)


# -- the scheduler --------------------------------------------------------------------------------


# -- fixtures -------------------------------------------------------------------------------------
