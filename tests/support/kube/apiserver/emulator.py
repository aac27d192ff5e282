"""A small Kubernetes API server for tests, driven through the real kubernetes-asyncio client.

It serves the REST paths the controller uses, for Pods, Secrets and Nodes, and those `kubectl
apply -k deploy/k8s/` uses, for the kinds deploy/k8s/ holds (Namespaces, ServiceAccounts,
ConfigMaps, Services, PersistentVolumeClaims, Deployments, StatefulSets, ReplicaSets, RBAC,
NetworkPolicies, and cert-manager's Issuers and Certificates of deploy/k8s/certificates/; stored
as given, with no controller acting on them yet), with kubectl's
discovery (``/api``, ``/apis``, each group/version's resource list) and an OpenAPI v3 index
whose PATCH operations take ``fieldValidation`` (so kubectl validates on the server, which here
checks what `_validate` checks, not every field):

- ``GET`` collection: list (``labelSelector`` with ``=``, ``==``, ``!=``, ``in``, ``notin``,
  exists and ``!key``; ``fieldSelector`` on ``metadata.name``, ``metadata.namespace``,
  ``spec.nodeName``, ``status.phase`` and other dotted paths; ``limit``/``continue``; the list's
  ``metadata.resourceVersion``), or ``?watch=true`` (JSON lines of ADDED / MODIFIED / DELETED,
  BOOKMARK with ``allowWatchBookmarks``, replay from ``resourceVersion``, an ERROR event with a
  410 ``Expired`` Status for a compacted version, ``timeoutSeconds``; a label change moves an
  object in or out of a filtered watch as ADDED / DELETED, like the watch cache).
- ``POST`` collection (201; 409 ``AlreadyExists``; 422 ``Invalid`` for bad names, labels,
  containers or a non-``Always`` init container restartPolicy; ``generateName``), ``GET``,
  ``PUT`` (409 ``Conflict`` on a stale ``resourceVersion``), ``PATCH`` (merge, strategic merge with
  the usual merge keys, JSON patch) and ``DELETE`` (``gracePeriodSeconds``, preconditions,
  finalizers keep an object Terminating, owner references are garbage-collected) of one object;
  ``/status`` (GET/PUT/PATCH, the only way to change a Pod's status, as on a real server) and Pod
  ``/binding``, a workload's ``/scale``. Status changes through the main resource are ignored,
  Pod spec changes other than images are refused, Secret ``stringData`` is folded into base64
  ``data`` and ``data`` is kept as canonical base64 (line breaks dropped, as the real decoder
  ignores them).
- Events are one store served under two APIs, as the API server serves them
  (`tests.support.kube.apiserver.events`): ``events.k8s.io/v1`` (create with its checks, get,
  list, patch and update of the series and labels only, delete; no watch) and core v1
  (everything above), each converted from the other, so an Event a controller posts with
  ``events.k8s.io/v1`` is what ``kubectl get events`` (a Table: LAST SEEN, TYPE, REASON, OBJECT,
  MESSAGE) and ``kubectl describe pod`` (core v1, by ``involvedObject`` uid, name and namespace)
  show.
- Errors are ``Status`` objects with the real reasons and messages (404 ``NotFound``...).
- Services get a cluster IP (``spec.clusterIP``, kept across updates) from 10.96.0.0/12;
  Endpoints are stored as given. ``pods/NAME/log`` is fetched from the node's kubelet,
  ``pods/NAME/portforward`` streams to the Pod's address
  (`tests.support.kube.network.portforward`, the WebSocket tunnel kubectl 1.31+ uses) and
  ``serviceaccounts/NAME/token`` issues a token.
- With ``in_cluster=True`` (or `serve_in_cluster`) the same API is also served over HTTPS for
  Pods, behind the Service ``default/kubernetes``, with ``kube-root-ca.crt`` and the service
  account ``default`` in every namespace (see `serve_in_cluster`). A request bearing a token
  issued here is authorized by the Roles, ClusterRoles and bindings stored (403 ``Forbidden``
  otherwise); any other request is the test's own (a cluster admin's) and always allowed.

The Python side lets a test play kubelet, scheduler and node: `K8sEmulator.set_pod_status`,
`bind_pod`, `add_node`, `set_node_ready`, `remove_node`, `finish_deletion` (with
``hold_deletions``), `compact`, `drop_watches`, `fail_next` (`clear_faults`), `stall`,
`bulk_create_pods`, and it counts calls in `K8sEmulator.calls` (keys such as ``"list pods"``,
``"watch pods"``, ``"patch pods/status"``, ``"create events.events.k8s.io"`` for a resource
served by a group of its own beside core v1). To test a watch's consumer, `pause_watches` /
`resume_watches` hold events back (a slow watch) and `miss_pod_status` changes a Pod that no
watch is told of (a missed event). `pause_serving` / `resume_serving` take the API server away
(connections refused) and bring it back on the same port with everything it stored.
Fixture: ``k8s_emulator`` (add ``"tests.support.kube.apiserver.emulator"`` to ``pytest_plugins``).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import collections
import contextlib
import copy
import dataclasses
import datetime
import ipaddress
import json
import os
import re
import secrets
import shutil
import socket
import ssl
import tempfile
import uuid
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from typing import Any

import aiohttp
import pytest_asyncio
from aiohttp import web
from kubernetes_asyncio import client

from tests.support.kube.apiserver import events as k8s_events
from tests.support.kube.network import portforward

# resource -> (kind, namespaced, group/version): what the controller uses (Pods, Secrets, Nodes)
# and what `kubectl apply -k deploy/k8s/` creates.
_KINDS = {
    "pods": ("Pod", True, "v1"),
    "secrets": ("Secret", True, "v1"),
    "nodes": ("Node", False, "v1"),
    "namespaces": ("Namespace", False, "v1"),
    "serviceaccounts": ("ServiceAccount", True, "v1"),
    "configmaps": ("ConfigMap", True, "v1"),
    "services": ("Service", True, "v1"),
    "endpoints": ("Endpoints", True, "v1"),
    "persistentvolumeclaims": ("PersistentVolumeClaim", True, "v1"),
    "events": ("Event", True, "v1"),
    "deployments": ("Deployment", True, "apps/v1"),
    "statefulsets": ("StatefulSet", True, "apps/v1"),
    "replicasets": ("ReplicaSet", True, "apps/v1"),
    "roles": ("Role", True, "rbac.authorization.k8s.io/v1"),
    "rolebindings": ("RoleBinding", True, "rbac.authorization.k8s.io/v1"),
    "clusterroles": ("ClusterRole", False, "rbac.authorization.k8s.io/v1"),
    "clusterrolebindings": ("ClusterRoleBinding", False, "rbac.authorization.k8s.io/v1"),
    "networkpolicies": ("NetworkPolicy", True, "networking.k8s.io/v1"),
    # cert-manager's kinds, as its CRDs serve them (deploy/k8s/certificates/;
    # `tests.support.kube.controllers.cert_manager` plays its controller).
    "certificates": ("Certificate", True, "cert-manager.io/v1"),
    "issuers": ("Issuer", True, "cert-manager.io/v1"),
}
# (group/version, resource) served as a view of a stored resource: Events, stored once as core
# v1 and also served as events.k8s.io/v1 (converted each way,
# `tests.support.kube.apiserver.events`).
_VIEWS = {(k8s_events.GROUP_VERSION, "events"): "events"}
# Subresources served beyond /status: Pod /binding and the workloads' /scale.
_SCALED = frozenset({"deployments", "statefulsets", "replicasets"})
_SHORT_NAMES = {
    "pods": ["po"],
    "nodes": ["no"],
    "namespaces": ["ns"],
    "serviceaccounts": ["sa"],
    "configmaps": ["cm"],
    "services": ["svc"],
    "endpoints": ["ep"],
    "persistentvolumeclaims": ["pvc"],
    "events": ["ev"],
    "deployments": ["deploy"],
    "statefulsets": ["sts"],
    "replicasets": ["rs"],
    "networkpolicies": ["netpol"],
}
_REASONS = {
    400: "BadRequest",
    401: "Unauthorized",
    403: "Forbidden",
    404: "NotFound",
    405: "MethodNotAllowed",
    409: "Conflict",
    410: "Expired",
    415: "UnsupportedMediaType",
    422: "Invalid",
    429: "TooManyRequests",
    500: "InternalError",
    503: "ServiceUnavailable",
    504: "Timeout",
}
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
_LABEL_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]{0,61})?[A-Za-z0-9]$")
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]{0,61})?[A-Za-z0-9])?$")
_SET_REQUIREMENT = re.compile(r"^\s*([^\s!=(),]+)\s+(in|notin)\s+\(([^)]*)\)\s*$")
_MERGE_KEYS = {
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


class ApiError(Exception):
    """A request the emulator answers with a Status object."""

    def __init__(self, code: int, message: str, reason: str | None = None, **details: Any):
        super().__init__(message)
        self.code, self.message, self.reason, self.details = code, message, reason, details


@dataclasses.dataclass
class _Entry:
    obj: dict[str, Any]
    raw: bytes


@dataclasses.dataclass
class _Event:
    rv: int
    resource: str
    type: str
    old: dict[str, Any] | None
    new: dict[str, Any]
    raw: bytes


@dataclasses.dataclass(eq=False)
class _Watcher:
    resource: str
    namespace: str | None
    labels: list[tuple[str, str, frozenset[str]]]
    fields: list[tuple[str, str, str]]
    queue: asyncio.Queue[bytes | None]
    transport: asyncio.BaseTransport | None


class K8sEmulator:
    """The emulated API server. Start it with `start` (or `serving`), stop it with `stop`."""

    def __init__(
        self, *, gone_as_status: bool = False, history: int = 200_000, in_cluster: bool = False
    ) -> None:
        """Prepare an empty cluster.

        Args:
            gone_as_status: Answer a watch from a compacted resourceVersion with HTTP 410 (the
                etcd path) instead of a 200 stream holding one ERROR event (the watch cache).
            history: Events kept for watches that resume from a resourceVersion.
            in_cluster: Also serve HTTPS for Pods (see `serve_in_cluster`) from `start`.
        """
        self.gone_as_status = gone_as_status
        self.in_cluster = in_cluster
        self.https_port = 0
        """The in-cluster HTTPS listener's port on 127.0.0.1 (0 until `serve_in_cluster`)."""
        self.ca_pem = b""
        """The PEM of the CA that signed the HTTPS listener's certificate."""
        self.tokens: dict[str, tuple[str, str]] = {}
        """Tokens issued through TokenRequest -> (namespace, service account)."""
        self.authorized: collections.Counter[str] = collections.Counter()
        """Requests RBAC allowed, by ``USER VERB RESOURCE`` (``system:serviceaccount:…``)."""
        self._tls: Any = None
        self._https_runner: web.AppRunner | None = None
        self.hold_deletions = False
        """Keep gracefully deleted Pods bound to a node Terminating until `finish_deletion`."""
        self.calls: collections.Counter[str] = collections.Counter()
        self.url = ""
        self.api_client: Any = None
        self._store: dict[str, dict[tuple[str, str], _Entry]] = {r: {} for r in _KINDS}
        # Owner uid -> the objects naming it in ownerReferences, so a delete's garbage
        # collection costs O(dependents), not a scan of the whole store.
        self._dependents: dict[str, dict[tuple[str, tuple[str, str]], None]] = {}
        self._rv = 0
        self._history: collections.deque[_Event] = collections.deque(maxlen=history)
        self._compacted = 0
        self._watchers: set[_Watcher] = set()
        self._faults: dict[str, collections.deque[tuple[int, float | None]]] = (
            collections.defaultdict(collections.deque)
        )
        self._stalls: dict[str, tuple[float, asyncio.Event]] = {}
        self._clients: list[Any] = []
        self._runner: web.AppRunner | None = None
        self._flowing = asyncio.Event()
        self._flowing.set()

    # -- lifecycle ------------------------------------------------------------------------------

    async def start(self) -> None:
        """Serve on a free port of 127.0.0.1 and make `api_client` (host = `url`, no auth)."""
        port = await self._serve(0)
        self.url = f"http://127.0.0.1:{port}"
        self.api_client = self.client()
        if self.in_cluster:
            await self.serve_in_cluster()

    async def serve_in_cluster(self) -> None:
        """Serve the same API over HTTPS for Pods, as a cluster's API server is reached from
        inside: a CA and a certificate for the Service ``default/kubernetes`` (its cluster IP,
        ``kubernetes.default.svc`` and 127.0.0.1), that Service with an Endpoints object naming
        the HTTPS port on 127.0.0.1 (a Service proxy forwards the cluster IP there), and the
        ConfigMap ``kube-root-ca.crt`` (``ca.crt``) and the service account ``default`` in every
        namespace, made for each new namespace too, as the cluster's controllers do. A
        TokenRequest (``serviceaccounts/NAME/token``) issues a token, remembered in `tokens`; a
        request bearing one is authorized by RBAC (see `_authorize`)."""
        if self.https_port:
            return
        service_ip = self._allocate_ip()
        self._tls = _tls_context(service_ip)
        self.ca_pem = self._tls[1]
        self._https_runner = web.AppRunner(self._app(), access_log=None, handle_signals=False)
        await self._https_runner.setup()
        site = web.TCPSite(self._https_runner, "127.0.0.1", 0, ssl_context=self._tls[0])
        await site.start()
        self.https_port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        if self.get("namespaces", "default") is None:
            self.create("namespaces", {"metadata": {"name": "default"}})
        self.create(
            "services",
            {
                "metadata": {"name": "kubernetes", "labels": {"component": "apiserver"}},
                "spec": {
                    "clusterIP": service_ip,
                    "ports": [{"name": "https", "port": 443, "targetPort": self.https_port}],
                },
            },
            "default",
        )
        self.create(
            "endpoints",
            {
                "metadata": {"name": "kubernetes"},
                "subsets": [
                    {
                        "addresses": [{"ip": "127.0.0.1"}],
                        "ports": [{"name": "https", "port": self.https_port}],
                    }
                ],
            },
            "default",
        )
        for namespace in self.objects("namespaces"):
            self._publish_ca(namespace["metadata"]["name"])

    def _publish_ca(self, namespace: str) -> None:
        """What a cluster's controllers put in every namespace: the ``default`` service account
        and the CA bundle ``kube-root-ca.crt`` (only when serving in-cluster)."""
        if not self.ca_pem:
            return
        if self.get("serviceaccounts", "default", namespace) is None:
            self.create("serviceaccounts", {"metadata": {"name": "default"}}, namespace)
        if self.get("configmaps", "kube-root-ca.crt", namespace) is None:
            self.create(
                "configmaps",
                {
                    "metadata": {"name": "kube-root-ca.crt"},
                    "data": {"ca.crt": self.ca_pem.decode()},
                },
                namespace,
            )

    def _allocate_ip(self) -> str:
        """A free cluster IP in 10.96.0.0/12 (random, so that two emulators on one machine,
        each with a Service proxy, rarely pick the same)."""
        taken = {
            (e.obj.get("spec") or {}).get("clusterIP") for e in self._store["services"].values()
        }
        while True:
            number = secrets.randbelow(2**20 - 2) + 1
            address = f"10.{96 + (number >> 16)}.{(number >> 8) & 255}.{number & 255}"
            if address not in taken and not address.endswith(".255"):
                return address

    async def pause_serving(self) -> None:
        """Stop serving, as an API server that went away: every open connection (watches
        included) is cut and new ones are refused, until `resume_serving`. The store stays."""
        self.drop_watches(abrupt=True)
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def resume_serving(self) -> None:
        """Serve again on the same port, with everything stored before `pause_serving`."""
        if self._runner is None:
            await self._serve(int(self.url.rsplit(":", 1)[1]))

    async def _serve(self, port: int) -> int:
        self._runner = web.AppRunner(self._app(), access_log=None, handle_signals=False)
        await self._runner.setup()
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        # The port again after `pause_serving`, though its connections linger in TIME_WAIT.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", port))
        await web.SockSite(self._runner, sock).start()
        bound: int = sock.getsockname()[1]
        return bound

    def _app(self) -> web.Application:
        app = web.Application(client_max_size=64 * 2**20)
        app.router.add_get("/version", self._version)
        app.router.add_get("/api", self._discovery)
        app.router.add_get("/apis", self._discovery)
        app.router.add_get("/api/v1", self._discovery)
        app.router.add_get("/apis/{group}/{version}", self._discovery)
        app.router.add_get("/openapi/v3", self._openapi)
        app.router.add_get("/openapi/v3/{path:.+}", self._openapi)
        for prefix in (
            "/api/v1/namespaces/{namespace}",
            "/api/v1",
            "/apis/{group}/{version}/namespaces/{namespace}",
            "/apis/{group}/{version}",
        ):
            app.router.add_route("*", prefix + "/{resource}", self._collection)
            app.router.add_route("*", prefix + "/{resource}/{name}", self._item)
            app.router.add_route("*", prefix + "/{resource}/{name}/{sub}", self._item)
        return app

    async def stop(self) -> None:
        """End every watch, close the clients made here and stop serving."""
        self._flowing.set()
        for call in list(self._stalls):
            self.stall(call, None)
        self.drop_watches()
        for api_client in self._clients:
            await api_client.close()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        if self._https_runner is not None:
            await self._https_runner.cleanup()
            self._https_runner = None

    def client(self) -> Any:
        """A new kubernetes-asyncio ApiClient for this emulator, closed by `stop`."""
        api_client = client.ApiClient(client.Configuration(host=self.url))
        self._clients.append(api_client)
        return api_client

    # -- the Python side ------------------------------------------------------------------------

    @property
    def resource_version(self) -> int:
        """The newest resourceVersion (one counter for every kind, as etcd has)."""
        return self._rv

    @property
    def open_watches(self) -> int:
        """How many watch streams are open now."""
        return len(self._watchers)

    def create(self, resource: str, obj: Mapping[str, Any], namespace: str | None = None) -> Any:
        """Store an object as given (status included), as if a controller had made it."""
        body = copy.deepcopy(dict(obj))
        meta = body.setdefault("metadata", {})
        if namespace is not None:
            meta["namespace"] = namespace
        if (meta.get("namespace"), meta["name"]) in self._store[resource]:
            raise ApiError(409, f'{resource} "{meta["name"]}" already exists', "AlreadyExists")
        return self._put(resource, None, self._stamp(resource, body))

    def get(self, resource: str, name: str, namespace: str | None = None) -> Any:
        """A copy of one object, or None."""
        entry = self._store[resource].get((namespace or "", name))
        return json.loads(entry.raw) if entry else None

    def objects(self, resource: str, namespace: str | None = None) -> list[Any]:
        """Copies of every object of a kind (in one namespace when given)."""
        return [
            json.loads(e.raw)
            for (ns, _), e in sorted(self._store[resource].items())
            if namespace is None or ns == namespace
        ]

    def set_pod_status(self, namespace: str, name: str, status: Mapping[str, Any]) -> Any:
        """Replace a Pod's status, as the kubelet does; watchers see MODIFIED."""
        entry = self._entry("pods", namespace, name)
        return self._put("pods", entry, {**entry.obj, "status": copy.deepcopy(dict(status))})

    def bind_pod(self, namespace: str, name: str, node: str) -> Any:
        """Set a Pod's ``spec.nodeName``, as the scheduler's binding does."""
        entry = self._entry("pods", namespace, name)
        body = copy.deepcopy(entry.obj)
        body["spec"]["nodeName"] = node
        return self._put("pods", entry, body)

    def add_node(
        self, name: str, *, ready: bool | None = True, labels: Mapping[str, str] | None = None
    ) -> Any:
        """Register a node whose Ready condition is True, False or (None) Unknown."""
        node = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": name,
                "labels": {"kubernetes.io/hostname": name, **(labels or {})},
            },
            "spec": {},
            "status": {"conditions": [_ready_condition(ready)]},
        }
        return self.create("nodes", node)

    def set_node_ready(self, name: str, ready: bool | None) -> Any:
        """Set a node's Ready condition (None: Unknown, as when the kubelet stops posting)."""
        entry = self._entry("nodes", None, name)
        body = copy.deepcopy(entry.obj)
        others = [c for c in body["status"].get("conditions", []) if c.get("type") != "Ready"]
        body["status"]["conditions"] = [*others, _ready_condition(ready)]
        return self._put("nodes", entry, body)

    def remove_node(self, name: str) -> None:
        """Delete a node at once (Pods bound to it stay, as on a real cluster)."""
        self._remove("nodes", self._entry("nodes", None, name))

    def delete(self, resource: str, name: str, namespace: str | None = None) -> None:
        """Remove an object at once, finalizers or not."""
        self._remove(resource, self._entry(resource, namespace, name))

    def finish_deletion(self, namespace: str, name: str) -> None:
        """Complete a held Pod deletion, as the kubelet does once the containers stopped."""
        entry = self._entry("pods", namespace, name)
        if not entry.obj["metadata"].get("finalizers"):
            self._remove("pods", entry)

    def compact(self) -> None:
        """Forget all history: a watch from any older resourceVersion now gets 410 Gone."""
        self._history.clear()
        self._compacted = self._rv

    def drop_watches(self, *, abrupt: bool = False) -> None:
        """End every open watch: cleanly (as at ``timeoutSeconds``) or by closing the socket."""
        for watcher in list(self._watchers):
            if abrupt and watcher.transport is not None:
                watcher.transport.close()
            watcher.queue.put_nowait(None)

    def pause_watches(self) -> None:
        """Hold every watch event back (open watches and new ones) until `resume_watches`."""
        self._flowing.clear()

    def resume_watches(self) -> None:
        """Send the events `pause_watches` held back, in order, and the next ones at once."""
        self._flowing.set()

    def miss_pod_status(self, namespace: str, name: str, status: Mapping[str, Any]) -> Any:
        """Replace a Pod's status as `set_pod_status` does, but tell no watch, now or on a
        resume (an event a watch missed): only a list shows it."""
        entry = self._entry("pods", namespace, name)
        body = {**copy.deepcopy(entry.obj), "status": copy.deepcopy(dict(status))}
        self._rv += 1
        body["metadata"]["resourceVersion"] = str(self._rv)
        raw = json.dumps(body, separators=(",", ":")).encode()
        self._store["pods"][_key(body)] = _Entry(body, raw)
        return json.loads(raw)

    def fail_next(
        self, call: str, code: int, *, times: int = 1, retry_after: float | None = None
    ) -> None:
        """Answer the next ``times`` calls named ``call`` (a `calls` key) with a Status ``code``."""
        self._faults[call].extend([(code, retry_after)] * times)

    def clear_faults(self, call: str) -> None:
        """Forget the failures `fail_next` armed for ``call`` and has not answered with yet."""
        self._faults.pop(call, None)

    def stall(self, call: str, seconds: float | None) -> None:
        """Answer every call named ``call`` only after ``seconds`` (an overloaded API server);
        None answers at once again, the calls held now included."""
        lifted = self._stalls.pop(call, None)
        if lifted is not None:
            lifted[1].set()
        if seconds is not None:
            self._stalls[call] = (seconds, asyncio.Event())

    async def _stalled(self, call: str) -> None:
        """Hold a call `stall` names (until its time passes, the stall is lifted or the
        emulator stops)."""
        stalled = self._stalls.get(call)
        if stalled is not None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stalled[1].wait(), stalled[0])

    def bulk_create_pods(self, namespace: str, pods: Iterable[Mapping[str, Any]]) -> int:
        """Store many Pods quickly (no HTTP, status kept as given); returns how many."""
        count = 0
        for pod in pods:
            body = copy.deepcopy(dict(pod))
            body.setdefault("metadata", {})["namespace"] = namespace
            self._put("pods", None, self._stamp("pods", body))
            count += 1
        return count

    # -- HTTP -----------------------------------------------------------------------------------

    async def _version(self, request: web.Request) -> web.Response:
        return web.json_response({"major": "1", "minor": "31", "gitVersion": "v1.31.0-emulated"})

    async def _openapi(self, request: web.Request) -> web.Response:
        """OpenAPI v3 as far as kubectl reads it: the root names a document per group/version,
        and each document's PATCH operations declare ``fieldValidation``, so kubectl leaves
        validation to the server (``--validate=strict``, its default) instead of downloading
        schemas. The emulator takes the parameter and checks what `_validate` checks; it does
        not know every field of every kind, so an unknown field is not refused here."""
        versions = sorted({v for _, _, v in _KINDS.values()})
        paths = {("api/" if v == "v1" else "apis/") + v: v for v in versions}
        wanted = request.match_info.get("path")
        if wanted is None:
            return web.json_response(
                {"paths": {p: {"serverRelativeURL": f"/openapi/v3/{p}?hash=0"} for p in paths}}
            )
        version = paths.get(wanted)
        if version is None:
            return _status(ApiError(404, "the server could not find the requested resource"))
        group, _, short = version.rpartition("/")
        operations: dict[str, Any] = {}
        for name, (kind, namespaced, gv) in _KINDS.items():
            if gv != version:
                continue
            where = f"/{wanted}/namespaces/{{namespace}}" if namespaced else f"/{wanted}"
            operations[f"{where}/{name}/{{name}}"] = {
                "patch": {
                    "x-kubernetes-group-version-kind": {
                        "group": group,
                        "version": short,
                        "kind": kind,
                    },
                    "parameters": [
                        {"name": "fieldValidation", "in": "query", "schema": {"type": "string"}}
                    ],
                    "responses": {"200": {"description": "OK"}},
                }
            }
        return web.json_response(
            {
                "openapi": "3.0.0",
                "info": {"title": "Kubernetes", "version": "v1.31.0-emulated"},
                "paths": operations,
            }
        )

    async def _discovery(self, request: web.Request) -> web.Response:
        """Legacy (unaggregated) discovery, as kubectl reads it to map kinds to resources:
        ``/api``, ``/apis``, ``/api/v1`` and ``/apis/GROUP/VERSION``."""
        host = request.host
        if request.path == "/api":
            return web.json_response(
                {
                    "kind": "APIVersions",
                    "versions": ["v1"],
                    "serverAddressByClientCIDRs": [
                        {"clientCIDR": "0.0.0.0/0", "serverAddress": host}
                    ],
                }
            )
        versions = sorted({v for _, _, v in _KINDS.values() if "/" in v} | {v for v, _ in _VIEWS})
        if request.path == "/apis":
            groups = []
            for version in versions:
                group = version.split("/")[0]
                entry = {"groupVersion": version, "version": version.split("/")[1]}
                groups.append({"name": group, "versions": [entry], "preferredVersion": entry})
            return web.json_response({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
        group = request.match_info.get("group")
        version = f"{group}/{request.match_info['version']}" if group else "v1"
        if version not in {v for _, _, v in _KINDS.values()} | {v for v, _ in _VIEWS}:
            return _status(ApiError(404, "the server could not find the requested resource"))
        resources = []
        served = [(name, *kind, False) for name, kind in sorted(_KINDS.items())]
        served += [(name, *_KINDS[stored][:2], v, True) for (v, name), stored in _VIEWS.items()]
        for name, kind, namespaced, gv, view in served:
            if gv != version:
                continue
            verbs = ["create", "delete", "get", "list", "patch", "update"]
            verbs += [] if view else ["watch"]  # a view's watch is not served
            resources.append(
                {
                    "name": name,
                    "singularName": kind.lower(),
                    "namespaced": namespaced,
                    "kind": kind,
                    "verbs": verbs,
                    "shortNames": _SHORT_NAMES.get(name, []),
                }
            )
            subresources = ["status"] if name not in ("secrets", "configmaps") else []
            subresources = [] if view else subresources
            subresources += ["binding"] if name == "pods" else []
            subresources += ["scale"] if name in _SCALED else []
            for sub in subresources:
                resources.append(
                    {
                        "name": f"{name}/{sub}",
                        "singularName": "",
                        "namespaced": namespaced,
                        "kind": "Scale" if sub == "scale" else kind,
                        "verbs": ["create"] if sub == "binding" else ["get", "patch", "update"],
                    }
                )
        return web.json_response(
            {
                "kind": "APIResourceList",
                "apiVersion": "v1",
                "groupVersion": version,
                "resources": resources,
            }
        )

    async def _collection(self, request: web.Request) -> web.StreamResponse:
        watch = request.query.get("watch", "").lower() in ("true", "1")
        verb = {"GET": "watch" if watch else "list", "POST": "create"}.get(request.method)
        if _view_of(request) is not None:
            return await self._view_collection(request, verb)
        try:
            resource, namespace = self._route(request, item=False)
            if verb is None:
                raise ApiError(405, f"the server does not allow this method on {resource}")
            self._authorize(request, verb, resource, namespace)
            self._count(f"{verb} {resource}")
            await self._stalled(f"{verb} {resource}")
            if verb == "watch":
                return await self._watch(request, resource, namespace)
            if verb == "list":
                return self._list(request, resource, namespace)
            return self._json(201, self._create(resource, namespace, await _body(request)))
        except ApiError as exc:
            return _status(exc)

    async def _item(self, request: web.Request) -> web.StreamResponse:
        name, sub = request.match_info["name"], request.match_info.get("sub")
        verb = {"GET": "get", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}.get(
            request.method, "create" if request.method == "POST" and sub == "binding" else None
        )
        if _view_of(request) is not None:
            return await self._view_item(request, verb)
        try:
            resource, namespace = self._route(request, item=True)
            path = f"{resource}/{sub}" if sub else resource
            if sub in ("token", "portforward"):
                self._authorize(request, "create", path, namespace, name)
            elif verb is not None:
                self._authorize(request, verb, path, namespace, name)
            if sub == "log" and resource == "pods" and verb == "get":
                self._count("get pods/log")
                return await self._log(request, self._entry(resource, namespace, name))
            if sub == "token" and resource == "serviceaccounts" and request.method == "POST":
                self._count("create serviceaccounts/token")
                return self._json(201, self._token(self._entry(resource, namespace, name)))
            if sub == "portforward" and resource == "pods" and request.method in ("GET", "POST"):
                self._count("create pods/portforward")
                return await self._port_forward(request, self._entry(resource, namespace, name))
            if verb is None or sub not in (None, "status", "binding", "scale"):
                raise ApiError(405, f"the server does not allow this method on {path}")
            if (
                (sub == "binding") != (verb == "create")
                or (sub == "binding" and resource != "pods")
                or (sub == "scale" and resource not in _SCALED)
                or (sub and resource in ("secrets", "configmaps"))
            ):
                raise ApiError(404, "the server could not find the requested resource")
            self._count(f"{verb} {path}")
            await self._stalled(f"{verb} {path}")
            entry = self._entry(resource, namespace, name)
            if sub == "scale":
                return await self._scale(request, resource, entry, verb)
            if verb == "get":
                return web.Response(body=entry.raw, content_type="application/json")
            if verb == "delete":
                return self._delete(request, resource, entry, await request.read())
            body = await _body(request)
            if verb == "create":
                return self._json(201, self._bind(entry, body))
            if verb == "patch":
                body = _patch(entry.obj, body, request.content_type)
            return self._json(200, self._update(resource, entry, body, status_only=bool(sub)))
        except ApiError as exc:
            return _status(exc)

    async def _view_collection(self, request: web.Request, verb: str | None) -> web.Response:
        """List or create through a view (`_VIEWS`): Events as events.k8s.io/v1."""
        group, resource = request.match_info["group"], request.match_info["resource"]
        namespace = request.match_info.get("namespace")
        call = f"{verb} {resource}.{group}"
        try:
            if verb not in ("list", "create") or (verb == "create" and namespace is None):
                raise ApiError(405, f"the server does not allow this method on {resource}")
            self._authorize(request, verb, resource, namespace, group=group)
            self._count(call)
            await self._stalled(call)
            if verb == "list":
                labels = _parse_labels(request.query.get("labelSelector", ""))
                fields = _parse_fields(request.query.get("fieldSelector", ""))
                items = [
                    shown
                    for (ns, _), entry in sorted(self._store["events"].items())
                    if namespace is None or ns == namespace
                    if _matches(shown := k8s_events.to_v1(entry.obj), labels, fields)
                ]
                meta = {"resourceVersion": str(self._rv)}
                kind = {"kind": "EventList", "apiVersion": k8s_events.GROUP_VERSION}
                return self._json(200, {**kind, "metadata": meta, "items": items})
            assert namespace is not None
            body = await _body(request)
            if not isinstance(body, dict) or body.get("kind", "Event") != "Event":
                raise ApiError(400, "the body of the request is not an Event")
            try:
                k8s_events.check_create(body, namespace)
            except k8s_events.Invalid as exc:
                raise ApiError(422, str(exc)) from None
            stored = self._create("events", namespace, k8s_events.to_core(body))
            return self._json(201, k8s_events.to_v1(stored))
        except ApiError as exc:
            return _status(exc)

    async def _view_item(self, request: web.Request, verb: str | None) -> web.Response:
        """Get, patch, update or delete one Event through the events.k8s.io/v1 view."""
        group, resource = request.match_info["group"], request.match_info["resource"]
        namespace, name = request.match_info.get("namespace"), request.match_info["name"]
        call = f"{verb} {resource}.{group}"
        try:
            if verb not in ("get", "patch", "update", "delete") or request.match_info.get("sub"):
                raise ApiError(405, f"the server does not allow this method on {resource}")
            self._authorize(request, verb, resource, namespace, name, group=group)
            self._count(call)
            await self._stalled(call)
            entry = self._entry("events", namespace, name)
            if verb == "delete":
                return self._delete(request, "events", entry, await request.read())
            old = k8s_events.to_v1(entry.obj)
            if verb == "get":
                return self._json(200, old)
            body = await _body(request)
            new = _patch(old, body, request.content_type) if verb == "patch" else body
            if not isinstance(new, dict):
                raise ApiError(400, "the body of the request is not an Event")
            try:
                k8s_events.check_update(old, new, namespace or "")
            except k8s_events.Invalid as exc:
                raise ApiError(422, str(exc)) from None
            core = k8s_events.to_core(new)
            meta = dict(entry.obj["metadata"])
            for field in ("labels", "annotations"):
                meta[field] = (new.get("metadata") or {}).get(field)
            core["metadata"] = {k: v for k, v in meta.items() if v is not None}
            if core == entry.obj:
                return self._json(200, old)
            return self._json(200, k8s_events.to_v1(self._put("events", entry, core)))
        except ApiError as exc:
            return _status(exc)

    def _token(self, entry: _Entry) -> dict[str, Any]:
        """A TokenRequest's answer: a new token for the service account, for an hour."""
        meta = entry.obj["metadata"]
        token = "emulated." + secrets.token_urlsafe(32)
        self.tokens[token] = (meta["namespace"], meta["name"])
        expires = datetime.datetime.now(datetime.UTC) + datetime.timedelta(hours=1)
        return {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "metadata": {"name": meta["name"], "namespace": meta["namespace"]},
            "spec": {"audiences": ["https://kubernetes.default.svc"], "expirationSeconds": 3600},
            "status": {
                "token": token,
                "expirationTimestamp": expires.strftime("%Y-%m-%dT%H:%M:%SZ"),
            },
        }

    async def _port_forward(self, request: web.Request, entry: _Entry) -> web.StreamResponse:
        """``pods/NAME/portforward``: streams to the Pod's ports at its ``status.podIP``, as the
        API server does through the kubelet (`tests.support.kube.network.portforward`)."""
        status = entry.obj.get("status") or {}
        if status.get("phase") != "Running" or not status.get("podIP"):
            name = entry.obj["metadata"]["name"]
            raise ApiError(
                400,
                f"unable to upgrade connection: pod {name} is not running: "
                f"{status.get('phase') or 'Pending'}",
            )
        address = status["podIP"]

        async def dial(port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
            return await asyncio.open_connection(address, port)

        return await portforward.serve(request, dial)

    async def _log(self, request: web.Request, entry: _Entry) -> web.Response:
        """``pods/NAME/log``: the container's log, fetched from the kubelet of the Pod's node
        (its InternalIP and kubelet endpoint port, as the API server does)."""
        pod = entry.obj
        name = pod["metadata"]["name"]
        spec = pod.get("spec") or {}
        containers = [c["name"] for c in spec.get("containers") or ()]
        inits = [c["name"] for c in spec.get("initContainers") or ()]
        container = request.query.get("container")
        if not container:
            if len(containers) != 1 or inits:
                more = f" or one of the init containers: [{' '.join(inits)}]" if inits else ""
                raise ApiError(
                    400,
                    f"a container name must be specified for pod {name}, choose one of: "
                    f"[{' '.join(containers)}]{more}",
                )
            container = containers[0]
        if container not in containers + inits:
            raise ApiError(400, f"container {container} is not valid for pod {name}")
        node = self.get("nodes", spec["nodeName"]) if spec.get("nodeName") else None
        if node is None:
            raise ApiError(400, f"pod {name} does not have a host assigned")
        status = node.get("status") or {}
        port = ((status.get("daemonEndpoints") or {}).get("kubeletEndpoint") or {}).get("Port")
        address = next(
            (a["address"] for a in status.get("addresses") or () if a.get("type") == "InternalIP"),
            None,
        )
        url = f"http://{address}:{port}/containerLogs/{pod['metadata']['namespace']}/{name}/"
        params = {k: v for k, v in request.query.items() if k in ("previous", "tailLines")}
        try:
            async with (
                aiohttp.ClientSession() as session,
                session.get(url + container, params=params) as answer,
            ):
                text = await answer.text()
                if answer.status != 200:
                    raise ApiError(400, text)
        except aiohttp.ClientError as exc:
            raise ApiError(
                500, f'Get "{url}{container}": the kubelet does not answer ({exc})'
            ) from exc
        return web.Response(text=text, content_type="text/plain")

    async def _scale(
        self, request: web.Request, resource: str, entry: _Entry, verb: str
    ) -> web.Response:
        """A workload's ``/scale`` (autoscaling/v1 Scale): read it, or set ``spec.replicas``
        through it (PUT or PATCH), as ``kubectl scale`` does."""
        if verb == "delete":
            raise ApiError(405, f"the server does not allow this method on {resource}/scale")
        if verb != "get":
            body = await _body(request)
            if verb == "patch":
                body = _patch(_scale_of(entry.obj), body, request.content_type)
            replicas = (body.get("spec") or {}).get("replicas") if isinstance(body, dict) else None
            if type(replicas) is not int or replicas < 0:
                raise ApiError(
                    422,
                    f'Scale.autoscaling "{entry.obj["metadata"]["name"]}" is invalid: '
                    f"spec.replicas: Invalid value: {replicas!r}",
                )
            scaled = copy.deepcopy(entry.obj)
            scaled["spec"]["replicas"] = replicas
            self._update(resource, entry, scaled, status_only=False)
            entry = self._entry(
                resource, entry.obj["metadata"].get("namespace"), entry.obj["metadata"]["name"]
            )
        return self._json(200, _scale_of(entry.obj))

    def _route(self, request: web.Request, *, item: bool) -> tuple[str, str | None]:
        resource = request.match_info["resource"]
        namespace = request.match_info.get("namespace")
        group = request.match_info.get("group")
        version = f"{group}/{request.match_info['version']}" if group else "v1"
        kind = _KINDS.get(resource)
        listing_all = not item and request.method == "GET" and bool(kind and kind[1])
        if (
            kind is None
            or kind[2] != version
            or (kind[1] != (namespace is not None) and not listing_all)
        ):
            raise ApiError(404, "the server could not find the requested resource")
        return resource, namespace

    def _authorize(
        self,
        request: web.Request,
        verb: str,
        path: str,
        namespace: str | None,
        name: str | None = None,
        *,
        group: str | None = None,
    ) -> None:
        """RBAC for a request bearing a token issued here (a Pod's service account): allowed
        when a rule of a Role bound in the namespace, or of a ClusterRole bound there or
        cluster-wide, names the verb, the API group, the resource (``pods/status`` for a
        subresource) and, if it lists ``resourceNames``, the name; else 403 ``Forbidden`` with
        the API server's message. A request with no token, or one not issued here (a test's
        kubeconfig may carry one), is the test's own, a cluster admin's: always allowed."""
        header = request.headers.get("Authorization", "")
        who = self.tokens.get(header.removeprefix("Bearer ").strip()) if header else None
        if who is None:
            return
        resource = path.split("/")[0]
        version = _KINDS[resource][2]
        if group is None:
            group = version.split("/")[0] if "/" in version else ""
        user = f"system:serviceaccount:{who[0]}:{who[1]}"
        for rule in self._rules(who, namespace):
            if (
                _names(rule.get("verbs"), verb)
                and _names(rule.get("apiGroups"), group)
                and _names(rule.get("resources"), path)
                and (not rule.get("resourceNames") or name in rule["resourceNames"])
            ):
                self.authorized[f"{user} {verb} {path}"] += 1
                return
        subject = f'{resource} "{name}"' if name else resource
        where = f'in the namespace "{namespace}"' if namespace else "at the cluster scope"
        raise ApiError(
            403,
            f'{subject} is forbidden: User "{user}" cannot {verb} resource "{path}" in API '
            f'group "{group}" {where}',
        )

    def _rules(self, who: tuple[str, str], namespace: str | None) -> list[dict[str, Any]]:
        """The rules of every role bound to the service account `who` that apply in
        `namespace` (cluster-wide bindings, and the namespace's own)."""

        def binds(binding: Mapping[str, Any]) -> bool:
            return any(
                s.get("kind") == "ServiceAccount" and (s.get("namespace"), s.get("name")) == who
                for s in binding.get("subjects") or ()
            )

        found: list[dict[str, Any]] = []
        bindings = [(b, None) for b in self.objects("clusterrolebindings")]
        if namespace:
            bindings += [(b, namespace) for b in self.objects("rolebindings", namespace)]
        for binding, where in bindings:
            if not binds(binding):
                continue
            ref = binding.get("roleRef") or {}
            if ref.get("kind") == "Role" and where:
                role = self.get("roles", ref.get("name", ""), where)
            else:
                role = self.get("clusterroles", ref.get("name", ""))
            found += (role or {}).get("rules") or []
        return found

    def _count(self, call: str) -> None:
        self.calls[call] += 1
        if self._faults.get(call):
            code, retry_after = self._faults[call].popleft()
            raise ApiError(code, f"injected failure of {call}", retry_after=retry_after)

    def _json(self, code: int, obj: Any) -> web.Response:
        return web.Response(status=code, body=json.dumps(obj), content_type="application/json")

    def _list(self, request: web.Request, resource: str, namespace: str | None) -> web.Response:
        labels = _parse_labels(request.query.get("labelSelector", ""))
        fields = _parse_fields(request.query.get("fieldSelector", ""))
        keys = sorted(k for k in self._store[resource] if namespace is None or k[0] == namespace)
        start = request.query.get("continue")
        if start:
            try:
                after = tuple(json.loads(base64.urlsafe_b64decode(start)))
            except (ValueError, binascii.Error) as exc:
                raise ApiError(400, "continue key is not valid") from exc
            keys = [k for k in keys if k > after]
        limit = int(request.query.get("limit") or 0)
        raws: list[bytes] = []
        more, token, last = "", "", ("", "")
        for key in keys:
            entry = self._store[resource][key]
            if _matches(entry.obj, labels, fields):
                if limit and len(raws) == limit:
                    token = base64.urlsafe_b64encode(json.dumps(list(last)).encode()).decode()
                    more = f',"continue":"{token}"'
                    break
                raws.append(entry.raw)
                last = key
        if resource in ("pods", "events") and "as=Table" in request.headers.get("Accept", ""):
            shown = [json.loads(raw) for raw in raws]
            if resource == "events":
                return self._table(request, shown, token, k8s_events.COLUMNS, k8s_events.cells)
            return self._table(request, shown, token)
        kind, _, version = _KINDS[resource]
        head = f'{{"kind":"{kind}List","apiVersion":"{version}","metadata":{{"resourceVersion":'
        body = b"".join((f'{head}"{self._rv}"{more}}},"items":['.encode(), b",".join(raws), b"]}"))
        return web.Response(body=body, content_type="application/json")

    def _table(
        self,
        request: web.Request,
        pods: list[dict[str, Any]],
        token: str,
        columns: list[tuple[str, str, int]] | None = None,
        cells: Callable[[Mapping[str, Any]], list[Any]] | None = None,
    ) -> web.Response:
        """Pods as a meta.k8s.io/v1 Table, as ``kubectl get pods`` asks for them (server-side
        printing): the columns NAME, READY, STATUS, RESTARTS, AGE (and IP, NODE for ``-o wide``),
        the rows worked out as the API server's printer does; or other objects with their own
        `columns` and `cells` (Events: `k8s_events`)."""
        include = request.query.get("includeObject", "Metadata")
        rows = []
        for pod in pods:
            if include == "Object":
                shown: Any = pod
            else:
                shown = {
                    "kind": "PartialObjectMetadata",
                    "apiVersion": "meta.k8s.io/v1",
                    "metadata": pod["metadata"],
                }
            rows.append({"cells": (cells or _pod_cells)(pod), "object": shown})
        columns = columns or [
            ("Name", "string", 0),
            ("Ready", "string", 0),
            ("Status", "string", 0),
            ("Restarts", "string", 0),
            ("Age", "string", 0),
            ("IP", "string", 1),
            ("Node", "string", 1),
        ]
        meta: dict[str, Any] = {"resourceVersion": str(self._rv)}
        if token:
            meta["continue"] = token
        table = {
            "kind": "Table",
            "apiVersion": "meta.k8s.io/v1",
            "metadata": meta,
            "columnDefinitions": [
                {
                    "name": n,
                    "type": t,
                    "format": "name" if n == "Name" else "",
                    "description": "",
                    "priority": p,
                }
                for n, t, p in columns
            ],
            "rows": rows,
        }
        return self._json(200, table)

    async def _watch(
        self, request: web.Request, resource: str, namespace: str | None
    ) -> web.StreamResponse:
        labels = _parse_labels(request.query.get("labelSelector", ""))
        fields = _parse_fields(request.query.get("fieldSelector", ""))
        since = request.query.get("resourceVersion") or "0"
        bookmarks = request.query.get("allowWatchBookmarks", "").lower() in ("true", "1")
        timeout = float(request.query.get("timeoutSeconds") or 1800)
        if not since.isdigit():
            raise ApiError(400, f"invalid resource version {since!r}")
        gone = since != "0" and int(since) < self._compacted
        if gone and self.gone_as_status:
            raise ApiError(410, f"too old resource version: {since} ({self._compacted})")
        response = web.StreamResponse(headers={"Content-Type": "application/json"})
        response.enable_chunked_encoding()
        await response.prepare(request)
        if gone:
            status = _status_body(
                ApiError(410, f"too old resource version: {since} ({self._compacted})")
            )
            await response.write(json.dumps({"type": "ERROR", "object": status}).encode() + b"\n")
            return response
        watcher = _Watcher(resource, namespace, labels, fields, asyncio.Queue(), request.transport)
        # Built and registered with no await between, so no event falls in a gap.
        if since == "0":
            backlog = [
                _line("ADDED", e.raw)
                for e in self._store[resource].values()
                if _visible(watcher, e.obj)
            ]
        else:
            backlog = [
                line
                for e in self._history
                if e.rv > int(since)
                and e.resource == resource
                and (line := _event_line(watcher, e)) is not None
            ]
        self._watchers.add(watcher)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        try:
            for line in backlog:
                await self._flowing.wait()
                await response.write(line)
            while (remaining := deadline - loop.time()) > 0:
                try:
                    line = await asyncio.wait_for(watcher.queue.get(), min(remaining, 0.5))
                except TimeoutError:
                    if request.transport is None or request.transport.is_closing():
                        return response
                    continue
                if line is None:
                    return response
                await self._flowing.wait()
                await response.write(line)
            if bookmarks:
                mark = {"kind": _KINDS[resource][0], "apiVersion": _KINDS[resource][2]}
                mark["metadata"] = {"resourceVersion": str(self._rv)}  # type: ignore[assignment]
                await response.write(_line("BOOKMARK", json.dumps(mark).encode()))
        except (ConnectionError, RuntimeError):
            pass  # the client went away
        finally:
            self._watchers.discard(watcher)
        return response

    def _create(self, resource: str, namespace: str | None, body: Any) -> Any:
        kind = _KINDS[resource][0]
        if not isinstance(body, dict) or body.get("kind", kind) != kind:
            raise ApiError(400, f"the body of the request is not a {kind}")
        meta = body.setdefault("metadata", {})
        if meta.get("namespace", namespace) != namespace:
            raise ApiError(400, "the namespace of the provided object does not match the request's")
        if not meta.get("name") and meta.get("generateName"):
            meta["name"] = meta["generateName"] + secrets.token_hex(3)[:5]
        if namespace is not None:
            meta["namespace"] = namespace
        name = str(meta.get("name") or "")
        _validate(kind, resource, body)
        if (namespace or "", name) in self._store[resource]:
            raise ApiError(
                409,
                f'{resource} "{name}" already exists',
                "AlreadyExists",
                name=name,
                kind=resource,
            )
        if resource == "pods":
            body["status"] = {"phase": "Pending", "qosClass": "BestEffort"}
        for field in ("uid", "resourceVersion", "creationTimestamp", "deletionTimestamp"):
            meta.pop(field, None)
        return self._put(resource, None, self._stamp(resource, body))

    def _update(self, resource: str, entry: _Entry, body: Any, *, status_only: bool) -> Any:
        old = entry.obj
        if not isinstance(body, dict):
            raise ApiError(400, "the body of the request is not an object")
        meta = body.get("metadata") or {}
        if meta.get("name", old["metadata"]["name"]) != old["metadata"]["name"]:
            raise ApiError(400, "the name of the object does not match the name on the URL")
        version = meta.get("resourceVersion")
        if version and version != old["metadata"]["resourceVersion"]:
            raise ApiError(
                409,
                f'Operation cannot be fulfilled on {resource} "{old["metadata"]["name"]}": the '
                "object has been modified; please apply your changes to the latest version and "
                "try again",
            )
        if status_only:
            new = {**copy.deepcopy(old), "status": copy.deepcopy(body.get("status") or {})}
        else:
            new = copy.deepcopy(body)
            new["metadata"] = {**copy.deepcopy(meta)}
            for field in ("uid", "creationTimestamp", "deletionTimestamp", "namespace", "name"):
                if field in old["metadata"]:
                    new["metadata"][field] = old["metadata"][field]
            if resource != "secrets":
                new["status"] = copy.deepcopy(old.get("status") or {})
            if resource == "pods" and _without_images(new.get("spec")) != _without_images(
                old.get("spec")
            ):
                raise ApiError(
                    422,
                    f'Pod "{old["metadata"]["name"]}" is invalid: spec: Forbidden: pod updates '
                    "may not change fields other than the container images",
                )
            _validate(_KINDS[resource][0], resource, new)
        new["metadata"]["resourceVersion"] = old["metadata"]["resourceVersion"]
        if resource == "secrets":
            new["data"] = _canonical_data(new.get("data"))
        if resource in _SCALED and not status_only:
            _defaulted(resource, new)
        if resource == "services":
            # The cluster IP is the server's and cannot change (a replace that leaves it out
            # keeps it, as kubectl's three-way merge does).
            for field in ("clusterIP", "clusterIPs", "type"):
                if field in (old.get("spec") or {}):
                    new.setdefault("spec", {}).setdefault(field, old["spec"][field])
        if resource in _SCALED:
            # The workload's generation counts its spec's changes, not its status's.
            generation = int(old["metadata"].get("generation") or 1)
            changed = new.get("spec") != old.get("spec")
            new["metadata"]["generation"] = generation + 1 if changed else generation
        if new == old:
            return old
        stored = self._put(resource, entry, new)
        meta = stored["metadata"]
        finished = meta.get("deletionTimestamp") and not meta.get("finalizers")
        if finished and not (resource == "pods" and self.hold_deletions):
            self._remove(resource, self._store[resource][_key(stored)])
        return stored

    def _bind(self, entry: _Entry, body: Any) -> Any:
        target = (body.get("target") or {}) if isinstance(body, dict) else {}
        if not target.get("name"):
            raise ApiError(422, "Binding is invalid: target.name: Required value")
        if entry.obj.get("spec", {}).get("nodeName"):
            raise ApiError(
                409, f"pod {entry.obj['metadata']['name']} is already assigned to a node"
            )
        self.bind_pod(
            entry.obj["metadata"].get("namespace"), entry.obj["metadata"]["name"], target["name"]
        )
        return {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Success",
            "code": 201,
        }

    def _delete(
        self, request: web.Request, resource: str, entry: _Entry, raw: bytes
    ) -> web.Response:
        options = json.loads(raw) if raw.strip() else {}
        grace_text = request.query.get("gracePeriodSeconds")
        grace = int(grace_text) if grace_text else options.get("gracePeriodSeconds")
        meta = entry.obj["metadata"]
        wanted = options.get("preconditions") or {}
        for field in ("uid", "resourceVersion"):
            if wanted.get(field) and wanted[field] != meta.get(field):
                raise ApiError(
                    409,
                    f"Precondition failed: {field} in precondition: {wanted[field]}, "
                    f"{field} in object meta: {meta.get(field)}",
                )
        if grace is None:
            grace = entry.obj.get("spec", {}).get("terminationGracePeriodSeconds", 30)
        held = (
            resource == "pods"
            and self.hold_deletions
            and grace != 0
            and bool(entry.obj.get("spec", {}).get("nodeName"))
        )
        if meta.get("finalizers") or held:
            if not meta.get("deletionTimestamp"):
                body = copy.deepcopy(entry.obj)
                body["metadata"]["deletionTimestamp"] = _now()
                body["metadata"]["deletionGracePeriodSeconds"] = grace if resource == "pods" else 0
                self._put(resource, entry, body)
            return web.Response(
                body=self._store[resource][_key(entry.obj)].raw, content_type="application/json"
            )
        final = self._remove(resource, entry, orphan=options.get("propagationPolicy") == "Orphan")
        if resource == "pods":
            return self._json(200, final)
        return self._json(
            200,
            {
                "kind": "Status",
                "apiVersion": "v1",
                "metadata": {},
                "status": "Success",
                "details": {"name": meta["name"], "kind": resource, "uid": meta.get("uid")},
            },
        )

    # -- the store ------------------------------------------------------------------------------

    def _entry(self, resource: str, namespace: str | None, name: str) -> _Entry:
        entry = self._store[resource].get((namespace or "", name))
        if entry is None:
            raise ApiError(
                404, f'{resource} "{name}" not found', "NotFound", name=name, kind=resource
            )
        return entry

    def _stamp(self, resource: str, body: dict[str, Any]) -> dict[str, Any]:
        meta = body["metadata"]
        meta.setdefault("uid", str(uuid.uuid4()))
        meta.setdefault("creationTimestamp", _now())
        body.setdefault("kind", _KINDS[resource][0])
        body.setdefault("apiVersion", _KINDS[resource][2])
        if resource in _SCALED:
            meta["generation"] = 1
            _defaulted(resource, body)
        if resource == "services":
            spec = body.setdefault("spec", {})
            spec.setdefault("type", "ClusterIP")
            if not spec.get("clusterIP"):
                spec["clusterIP"] = self._allocate_ip()
            spec.setdefault("clusterIPs", [spec["clusterIP"]])
        if resource == "secrets":
            data = body.setdefault("data", {})
            for key, value in (body.pop("stringData", None) or {}).items():
                data[key] = base64.b64encode(str(value).encode()).decode()
            body.setdefault("type", "Opaque")
        return body

    def _put(self, resource: str, old: _Entry | None, body: dict[str, Any]) -> Any:
        """Store a new version of an object and tell the watchers."""
        if resource == "secrets" and "stringData" in body:
            body = self._stamp(resource, body)
        if resource == "secrets":
            body["data"] = _canonical_data(body.get("data"))
        self._rv += 1
        body["metadata"]["resourceVersion"] = str(self._rv)
        raw = json.dumps(body, separators=(",", ":")).encode()
        key = _key(body)
        if old is not None:
            self._unindex(resource, old.obj)
        self._store[resource][key] = _Entry(body, raw)
        for uid in _owner_uids(body):
            self._dependents.setdefault(uid, {})[(resource, key)] = None
        self._record(
            _Event(
                self._rv,
                resource,
                "MODIFIED" if old else "ADDED",
                old.obj if old else None,
                body,
                raw,
            )
        )
        if resource == "namespaces" and old is None:
            self._publish_ca(body["metadata"]["name"])
        return json.loads(raw)

    def _remove(self, resource: str, entry: _Entry, *, orphan: bool = False) -> Any:
        del self._store[resource][_key(entry.obj)]
        self._unindex(resource, entry.obj)
        final = copy.deepcopy(entry.obj)
        final["metadata"].setdefault("deletionTimestamp", _now())
        self._rv += 1
        final["metadata"]["resourceVersion"] = str(self._rv)
        raw = json.dumps(final, separators=(",", ":")).encode()
        self._record(_Event(self._rv, resource, "DELETED", entry.obj, final, raw))
        if not orphan:  # the garbage collector, in the foreground of this call for simplicity
            uid = entry.obj["metadata"].get("uid")
            for kind, key in list(self._dependents.get(uid, {}) if uid else ()):
                dependent = self._store[kind].get(key)
                if dependent is not None:
                    self._remove(kind, dependent)
        return final

    def _unindex(self, resource: str, obj: Mapping[str, Any]) -> None:
        key = _key(obj)
        for uid in _owner_uids(obj):
            dependents = self._dependents.get(uid)
            if dependents is not None:
                dependents.pop((resource, key), None)
                if not dependents:
                    del self._dependents[uid]

    def _record(self, event: _Event) -> None:
        if self._history.maxlen is not None and len(self._history) == self._history.maxlen:
            self._compacted = self._history[0].rv
        self._history.append(event)
        for watcher in self._watchers:
            if watcher.resource == event.resource:
                line = _event_line(watcher, event)
                if line is not None:
                    watcher.queue.put_nowait(line)


# -- selectors, patches, validation -------------------------------------------------------------


def _view_of(request: web.Request) -> str | None:
    """The stored resource a request's group/version and resource are a view of, or None."""
    group = request.match_info.get("group")
    if not group:
        return None
    return _VIEWS.get((f"{group}/{request.match_info['version']}", request.match_info["resource"]))


def _owner_uids(obj: Mapping[str, Any]) -> list[str]:
    owners = obj.get("metadata", {}).get("ownerReferences") or ()
    return [uid for o in owners if isinstance(o, Mapping) and (uid := o.get("uid"))]


def _parse_labels(text: str) -> list[tuple[str, str, frozenset[str]]]:
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
        if found := _SET_REQUIREMENT.match(part):
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
        if not _LABEL_NAME.match(name) or any(not _LABEL_VALUE.match(v) for v in values):
            raise ApiError(400, f"unable to parse requirement: invalid label selector {text!r}")
    return requirements


def _parse_fields(text: str) -> list[tuple[str, str, str]]:
    requirements = []
    for part in (p.strip() for p in text.split(",") if p.strip()):
        found = re.match(r"^([A-Za-z.]+)\s*(!=|==|=)\s*(.*)$", part)
        if not found:
            raise ApiError(400, f"invalid field selector {text!r}")
        requirements.append((found.group(1), found.group(2), found.group(3)))
    return requirements


def _matches(
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


def _visible(watcher: _Watcher, obj: Mapping[str, Any]) -> bool:
    namespace = obj.get("metadata", {}).get("namespace")
    if watcher.namespace is not None and namespace != watcher.namespace:
        return False
    return _matches(obj, watcher.labels, watcher.fields)


def _event_line(watcher: _Watcher, event: _Event) -> bytes | None:
    now_in = _visible(watcher, event.new)
    was_in = event.old is not None and _visible(watcher, event.old)
    if event.type == "DELETED":
        return _line("DELETED", event.raw) if was_in else None
    if event.type == "ADDED" or not was_in:
        return _line("ADDED", event.raw) if now_in else None
    return _line("MODIFIED" if now_in else "DELETED", event.raw)


def _line(kind: str, raw: bytes) -> bytes:
    return b'{"type":"' + kind.encode() + b'","object":' + raw + b"}\n"


def _patch(target: dict[str, Any], patch: Any, content_type: str) -> Any:
    if content_type == "application/merge-patch+json":
        return _merge(target, patch)
    if content_type == "application/strategic-merge-patch+json":
        return _strategic(target, patch)
    if content_type == "application/json-patch+json":
        return _json_patch(target, patch)
    raise ApiError(415, f"the patch content type {content_type!r} is not supported")


def _merge(target: Any, patch: Any) -> Any:
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = _merge(out.get(key), value)
    return out


def _strategic(target: Any, patch: Any) -> Any:
    if not isinstance(patch, dict) or not isinstance(target, dict):
        return _merge(None, patch)
    out = dict(target)
    for key, value in patch.items():
        if key.startswith("$"):
            continue
        current = out.get(key)
        if value is None:
            out.pop(key, None)
        elif key in _MERGE_KEYS and isinstance(value, list) and isinstance(current, list):
            merge_key, merged = _MERGE_KEYS[key], copy.deepcopy(current)
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
                    merged.append(_strategic({}, item) if isinstance(item, dict) else item)
                else:
                    merged[index] = _strategic(merged[index], item)
            out[key] = merged
        elif key == "finalizers" and isinstance(value, list) and isinstance(current, list):
            out[key] = [*current, *(v for v in value if v not in current)]
        elif isinstance(value, dict) and isinstance(current, dict):
            out[key] = _strategic(current, value)
        else:
            out[key] = _merge(None, value)
    return out


def _json_patch(target: dict[str, Any], operations: Any) -> Any:
    doc: Any = copy.deepcopy(target)
    if not isinstance(operations, list):
        raise ApiError(400, "a JSON patch is a list of operations")
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
                    raise ApiError(422, f"the test of {path} failed")
            elif op in ("add", "replace"):
                if op == "replace" and last not in parent:
                    raise KeyError(last)
                parent[last] = operation["value"]
            elif op == "remove":
                del parent[last]
            elif op == "test" and parent.get(last) != operation["value"]:
                raise ApiError(422, f"the test of {path} failed")
        except (KeyError, IndexError, ValueError, TypeError) as exc:
            raise ApiError(422, f"the JSON patch cannot apply at {path}") from exc
    return doc


def _validate(kind: str, resource: str, body: dict[str, Any]) -> None:
    meta = body.get("metadata") or {}
    name = str(meta.get("name") or "")
    problems = []
    if not name or len(name) > 253 or not _DNS_SUBDOMAIN.match(name):
        problems.append(f"metadata.name: Invalid value: {name!r}")
    for key, value in (meta.get("labels") or {}).items():
        prefix, _, label = key.rpartition("/")
        if not _LABEL_NAME.match(label) or (prefix and not _DNS_SUBDOMAIN.match(prefix)):
            problems.append(f"metadata.labels: Invalid value: {key!r}")
        if not isinstance(value, str) or not _LABEL_VALUE.match(value):
            problems.append(f"metadata.labels: Invalid value: {value!r}")
    if resource == "pods":
        spec = body.get("spec") or {}
        containers = spec.get("containers") or []
        if not containers:
            problems.append("spec.containers: Required value")
        names = [c.get("name") for c in [*spec.get("initContainers", []), *containers]]
        for container in [*spec.get("initContainers", []), *containers]:
            if not _DNS_LABEL.match(str(container.get("name") or "")):
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
                _secret_bytes(value)
            except (binascii.Error, TypeError, ValueError):
                problems.append(f"data[{key}]: Invalid value: illegal base64 data")
    if problems:
        raise ApiError(422, f'{kind} "{name}" is invalid: {"; ".join(problems)}')


def _secret_bytes(value: Any) -> bytes:
    """A Secret's data value decoded as the API server's JSON decoder does: standard base64,
    line breaks ignored (kustomize wraps long values at 76 characters)."""
    if not isinstance(value, str):
        raise TypeError("a Secret's data value is a string")
    return base64.b64decode(value.replace("\r", "").replace("\n", ""), validate=True)


def _names(listed: Any, value: str) -> bool:
    """Whether an RBAC rule's list names `value` (or ``*``)."""
    return bool(listed) and ("*" in listed or value in listed)


def _tls_context(service_ip: str) -> tuple[ssl.SSLContext, bytes]:
    """A new CA and a server certificate it signed for the API server's in-cluster names: the
    server's TLS context and the CA's PEM."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "emulator-ca")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    names = ["kubernetes", "kubernetes.default", "kubernetes.default.svc"]
    names.append("kubernetes.default.svc.cluster.local")
    addresses = [ipaddress.ip_address(a) for a in (service_ip, "127.0.0.1")]
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kube-apiserver")]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName(
                [x509.DNSName(n) for n in names] + [x509.IPAddress(a) for a in addresses]
            ),
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )
    folder = tempfile.mkdtemp(prefix="emulator-tls-")
    try:
        cert_path, key_path = os.path.join(folder, "tls.crt"), os.path.join(folder, "tls.key")
        with open(cert_path, "wb") as f:
            f.write(cert.public_bytes(serialization.Encoding.PEM))
        with open(key_path, "wb") as f:
            f.write(
                key.private_bytes(
                    serialization.Encoding.PEM,
                    serialization.PrivateFormat.PKCS8,
                    serialization.NoEncryption(),
                )
            )
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(cert_path, key_path)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return context, ca.public_bytes(serialization.Encoding.PEM)


def _defaulted(resource: str, body: dict[str, Any]) -> None:
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


def _pod_cells(pod: Mapping[str, Any]) -> list[Any]:
    """A Pod's row as ``kubectl get pods`` shows it: ready containers, the status word (a
    container's waiting or terminated reason over the phase, Terminating while deleted),
    restarts, age, IP and node."""
    status = pod.get("status") or {}
    containers = (pod.get("spec") or {}).get("containers") or ()
    statuses = status.get("containerStatuses") or ()
    ready = sum(1 for c in statuses if c.get("ready"))
    word = status.get("reason") or status.get("phase") or "Pending"
    for entry in statuses:
        state = entry.get("state") or {}
        if (state.get("waiting") or {}).get("reason"):
            word = state["waiting"]["reason"]
        elif (state.get("terminated") or {}).get("reason"):
            word = state["terminated"]["reason"]
    if word == "Pending" and (pod.get("spec") or {}).get("nodeName"):
        word = "ContainerCreating" if not statuses else word
    if pod["metadata"].get("deletionTimestamp"):
        word = "Terminating"
    restarts = sum(int(c.get("restartCount") or 0) for c in statuses)
    return [
        pod["metadata"]["name"],
        f"{ready}/{len(containers)}",
        word,
        str(restarts),
        _age(pod["metadata"].get("creationTimestamp")),
        status.get("podIP") or "<none>",
        (pod.get("spec") or {}).get("nodeName") or "<none>",
    ]


def _age(stamp: str | None) -> str:
    """How long ago, as kubectl writes it: 45s, 12m, 5h, 3d."""
    if not stamp:
        return "<unknown>"
    then = datetime.datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=datetime.UTC)
    seconds = max(0, int((datetime.datetime.now(datetime.UTC) - then).total_seconds()))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size * 2:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def _canonical_data(data: Any) -> dict[str, str]:
    """A Secret's data as the server keeps it, bytes, served again in canonical base64 (the
    line breaks kustomize writes into long values are gone)."""
    return {k: base64.b64encode(_secret_bytes(v)).decode() for k, v in (data or {}).items()}


def _scale_of(obj: Mapping[str, Any]) -> dict[str, Any]:
    """A workload's Scale: its replicas wanted and seen, and its selector as a string."""
    meta = obj["metadata"]
    selector = (obj.get("spec") or {}).get("selector") or {}
    labels = ",".join(f"{k}={v}" for k, v in sorted((selector.get("matchLabels") or {}).items()))
    return {
        "kind": "Scale",
        "apiVersion": "autoscaling/v1",
        "metadata": {
            k: meta[k]
            for k in ("name", "namespace", "uid", "resourceVersion", "creationTimestamp")
            if k in meta
        },
        "spec": {"replicas": (obj.get("spec") or {}).get("replicas", 1)},
        "status": {"replicas": (obj.get("status") or {}).get("replicas", 0), "selector": labels},
    }


def _without_images(spec: Any) -> Any:
    spec = copy.deepcopy(spec or {})
    for field in ("containers", "initContainers"):
        for container in spec.get(field) or ():
            container.pop("image", None)
    return spec


def _ready_condition(ready: bool | None) -> dict[str, str]:
    status, reason = {
        True: ("True", "KubeletReady"),
        False: ("False", "KubeletNotReady"),
        None: ("Unknown", "NodeStatusUnknown"),
    }[ready]
    now = _now()
    return {
        "type": "Ready",
        "status": status,
        "reason": reason,
        "lastHeartbeatTime": now,
        "lastTransitionTime": now,
    }


def _key(obj: Mapping[str, Any]) -> tuple[str, str]:
    return obj["metadata"].get("namespace") or "", obj["metadata"]["name"]


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


async def _body(request: web.Request) -> Any:
    try:
        return await request.json()
    except ValueError as exc:
        raise ApiError(400, "the request body is not JSON") from exc


def _status_body(error: ApiError) -> dict[str, Any]:
    body: dict[str, Any] = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": error.message,
        "reason": error.reason or _REASONS.get(error.code, "Unknown"),
        "code": error.code,
    }
    details = {k: v for k, v in error.details.items() if k != "retry_after"}
    if details:
        body["details"] = details
    return body


def _status(error: ApiError) -> web.Response:
    headers = {}
    if error.details.get("retry_after") is not None:
        headers["Retry-After"] = str(int(error.details["retry_after"]))
    return web.Response(
        status=error.code,
        body=json.dumps(_status_body(error)),
        content_type="application/json",
        headers=headers,
    )


@contextlib.asynccontextmanager
async def serving(**options: Any) -> AsyncIterator[K8sEmulator]:
    """Run an emulator for the duration of the block.

    Args:
        **options: Passed to `K8sEmulator`.

    Yields:
        The started emulator, with ``url`` and ``api_client``.
    """
    emulator = K8sEmulator(**options)
    await emulator.start()
    try:
        yield emulator
    finally:
        await emulator.stop()


@pytest_asyncio.fixture
async def k8s_emulator() -> AsyncIterator[K8sEmulator]:
    """A started emulator (``.url``, ``.api_client``), stopped after the test."""
    async with serving() as emulator:
        yield emulator


async def follow_pods(
    emulator: K8sEmulator, namespace: str
) -> AsyncIterator[tuple[str, Mapping[str, Any]]]:
    """Every Pod event of `namespace` from the start, as (type, the Pod's metadata), through
    the real client: when the server ends or cuts a watch (its timeout, an outage) it is
    watched again from the last event seen, so nothing is missed and nothing seen twice.
    Bookmarks are skipped; an ERROR event (410 Gone after a compaction) raises."""
    api = client.CoreV1Api(emulator.api_client)
    version = "0"
    while True:
        try:
            response = await api.list_namespaced_pod(
                namespace,
                watch=True,
                resource_version=version,
                timeout_seconds=600,
                _preload_content=False,
            )
        except aiohttp.ClientError:
            await asyncio.sleep(0.1)  # the API server is away: try again
            continue
        try:
            while line := await response.content.readline():
                event = json.loads(line)
                if event["type"] == "ERROR":
                    raise RuntimeError(f"the Pod watch ended with {event['object']}")
                meta = event["object"]["metadata"]
                version = meta.get("resourceVersion") or version
                if event["type"] != "BOOKMARK":
                    yield event["type"], meta
        except aiohttp.ClientError:
            pass  # cut: watch again from `version`
        finally:
            response.close()
