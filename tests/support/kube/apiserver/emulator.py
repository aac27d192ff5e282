"""A small Kubernetes API server for tests, driven through the real kubernetes-asyncio client.

It serves the REST paths the controller uses, for Pods, Secrets and Nodes, and those `kubectl
apply -k deploy/k8s/` uses, for the kinds deploy/k8s/ holds (Namespaces, ServiceAccounts,
ConfigMaps, Services, PersistentVolumeClaims, Deployments, StatefulSets, ReplicaSets, RBAC,
NetworkPolicies, and cert-manager's Issuers and Certificates of deploy/k8s/certificates/; stored
as given, with no controller acting on them yet), with kubectl's
discovery (``/api``, ``/apis``, each group/version's resource list) and an OpenAPI v3 index
whose PATCH operations take ``fieldValidation`` (so kubectl validates on the server, which here
checks what `validation.validate` checks, not every field):

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
import collections
import contextlib
import copy
import json
import socket
from collections.abc import AsyncIterator, Iterable, Mapping
from typing import Any

import aiohttp
import pytest_asyncio
from aiohttp import web
from kubernetes_asyncio import client

from tests.support.kube.apiserver import (
    authorizing,
    cluster_tls,
    discovery,
    errors,
    kinds,
    listing,
    patching,
    pod_subresources,
    selectors,
    store,
    watches,
)
from tests.support.kube.apiserver import events as k8s_events


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
        self._tls: Any = None
        self._https_runner: web.AppRunner | None = None
        self.calls: collections.Counter[str] = collections.Counter()
        self.url = ""
        self.api_client: Any = None
        self.store = store.Store(history=history)
        self.store.on_new_namespace = self._publish_ca
        self.authorizer = authorizing.Authorizer(self.store)
        self.tokens = self.authorizer.tokens
        """Tokens issued through TokenRequest -> (namespace, service account)."""
        self.authorized = self.authorizer.authorized
        """Requests RBAC allowed, by ``USER VERB RESOURCE`` (``system:serviceaccount:…``)."""
        self._faults: dict[str, collections.deque[tuple[int, float | None]]] = (
            collections.defaultdict(collections.deque)
        )
        self._stalls: dict[str, tuple[float, asyncio.Event]] = {}
        self._clients: list[Any] = []
        self._runner: web.AppRunner | None = None
        self._flowing = asyncio.Event()
        self._flowing.set()
        self.lister = listing.Lister(self.store, self._flowing, gone_as_status=gone_as_status)

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
        request bearing one is authorized by RBAC (see `authorizing.Authorizer.authorize`)."""
        if self.https_port:
            return
        service_ip = self.store.allocate_ip()
        self._tls = cluster_tls.serving_context(service_ip)
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
        app.router.add_get("/version", discovery.version)
        app.router.add_get("/api", discovery.discovery)
        app.router.add_get("/apis", discovery.discovery)
        app.router.add_get("/api/v1", discovery.discovery)
        app.router.add_get("/apis/{group}/{version}", discovery.discovery)
        app.router.add_get("/openapi/v3", discovery.openapi)
        app.router.add_get("/openapi/v3/{path:.+}", discovery.openapi)
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

    def client(self, kind: Any = client.ApiClient) -> Any:
        """A new kubernetes-asyncio client (of class `kind`: the controller's own
        `kubernetes.ApiClient`, say) for this emulator, closed by `stop`."""
        api_client = kind(client.Configuration(host=self.url))
        self._clients.append(api_client)
        return api_client

    # -- the Python side ------------------------------------------------------------------------

    @property
    def resource_version(self) -> int:
        """The newest resourceVersion (one counter for every kind, as etcd has)."""
        return self.store.rv

    @property
    def open_watches(self) -> int:
        """How many watch streams are open now."""
        return len(self.store.watchers)

    def create(self, resource: str, obj: Mapping[str, Any], namespace: str | None = None) -> Any:
        """Store an object as given (status included), as if a controller had made it."""
        body = copy.deepcopy(dict(obj))
        meta = body.setdefault("metadata", {})
        if namespace is not None:
            meta["namespace"] = namespace
        if (meta.get("namespace"), meta["name"]) in self.store.by_resource[resource]:
            raise errors.ApiError(
                409, f'{resource} "{meta["name"]}" already exists', "AlreadyExists"
            )
        return self.store.put(resource, None, self.store.stamp(resource, body))

    def get(self, resource: str, name: str, namespace: str | None = None) -> Any:
        """A copy of one object, or None."""
        return self.store.get(resource, name, namespace)

    def objects(self, resource: str, namespace: str | None = None) -> list[Any]:
        """Copies of every object of a kind (in one namespace when given)."""
        return self.store.objects(resource, namespace)

    def set_pod_status(self, namespace: str, name: str, status: Mapping[str, Any]) -> Any:
        """Replace a Pod's status, as the kubelet does; watchers see MODIFIED."""
        entry = self.store.entry("pods", namespace, name)
        return self.store.put("pods", entry, {**entry.obj, "status": copy.deepcopy(dict(status))})

    def bind_pod(self, namespace: str, name: str, node: str) -> Any:
        """Set a Pod's ``spec.nodeName``, as the scheduler's binding does."""
        return self.store.bind_pod(namespace, name, node)

    @property
    def hold_deletions(self) -> bool:
        """Keep gracefully deleted Pods bound to a node Terminating until `finish_deletion`."""
        return self.store.hold_deletions

    @hold_deletions.setter
    def hold_deletions(self, hold: bool) -> None:
        self.store.hold_deletions = hold

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
        entry = self.store.entry("nodes", None, name)
        body = copy.deepcopy(entry.obj)
        others = [c for c in body["status"].get("conditions", []) if c.get("type") != "Ready"]
        body["status"]["conditions"] = [*others, _ready_condition(ready)]
        return self.store.put("nodes", entry, body)

    def remove_node(self, name: str) -> None:
        """Delete a node at once (Pods bound to it stay, as on a real cluster)."""
        self.store.remove("nodes", self.store.entry("nodes", None, name))

    def delete(self, resource: str, name: str, namespace: str | None = None) -> None:
        """Remove an object at once, finalizers or not."""
        self.store.remove(resource, self.store.entry(resource, namespace, name))

    def finish_deletion(self, namespace: str, name: str) -> None:
        """Complete a held Pod deletion, as the kubelet does once the containers stopped."""
        entry = self.store.entry("pods", namespace, name)
        if not entry.obj["metadata"].get("finalizers"):
            self.store.remove("pods", entry)

    def compact(self) -> None:
        """Forget all history: a watch from any older resourceVersion now gets 410 Gone."""
        self.store.history.clear()
        self.store.compacted = self.store.rv

    def drop_watches(self, *, abrupt: bool = False) -> None:
        """End every open watch: cleanly (as at ``timeoutSeconds``) or by closing the socket."""
        for watcher in list(self.store.watchers):
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
        entry = self.store.entry("pods", namespace, name)
        body = {**copy.deepcopy(entry.obj), "status": copy.deepcopy(dict(status))}
        self.store.rv += 1
        body["metadata"]["resourceVersion"] = str(self.store.rv)
        raw = json.dumps(body, separators=(",", ":")).encode()
        self.store.by_resource["pods"][store.object_key(body)] = watches.Entry(body, raw)
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
            self.store.put("pods", None, self.store.stamp("pods", body))
            count += 1
        return count

    # -- HTTP -----------------------------------------------------------------------------------

    async def _collection(self, request: web.Request) -> web.StreamResponse:
        watch = request.query.get("watch", "").lower() in ("true", "1")
        verb = {"GET": "watch" if watch else "list", "POST": "create"}.get(request.method)
        if _view_of(request) is not None:
            return await self._view_collection(request, verb)
        try:
            resource, namespace = self._route(request, item=False)
            if verb is None:
                raise errors.ApiError(405, f"the server does not allow this method on {resource}")
            self.authorizer.authorize(request, verb, resource, namespace)
            self._count(f"{verb} {resource}")
            await self._stalled(f"{verb} {resource}")
            if verb == "watch":
                return await self.lister.watch(request, resource, namespace)
            if verb == "list":
                return self.lister.list(request, resource, namespace)
            return errors.json_response(
                201, self.store.create(resource, namespace, await _body(request))
            )
        except errors.ApiError as exc:
            return errors.status_response(exc)

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
                self.authorizer.authorize(request, "create", path, namespace, name)
            elif verb is not None:
                self.authorizer.authorize(request, verb, path, namespace, name)
            if sub == "log" and resource == "pods" and verb == "get":
                self._count("get pods/log")
                return await pod_subresources.log(
                    self.store, request, self.store.entry(resource, namespace, name)
                )
            if sub == "token" and resource == "serviceaccounts" and request.method == "POST":
                self._count("create serviceaccounts/token")
                return errors.json_response(
                    201, self.authorizer.issue_token(self.store.entry(resource, namespace, name))
                )
            if sub == "portforward" and resource == "pods" and request.method in ("GET", "POST"):
                self._count("create pods/portforward")
                return await pod_subresources.port_forward(
                    request, self.store.entry(resource, namespace, name)
                )
            if verb is None or sub not in (None, "status", "binding", "scale"):
                raise errors.ApiError(405, f"the server does not allow this method on {path}")
            if (
                (sub == "binding") != (verb == "create")
                or (sub == "binding" and resource != "pods")
                or (sub == "scale" and resource not in kinds.SCALED)
                or (sub and resource in ("secrets", "configmaps"))
            ):
                raise errors.ApiError(404, "the server could not find the requested resource")
            self._count(f"{verb} {path}")
            await self._stalled(f"{verb} {path}")
            entry = self.store.entry(resource, namespace, name)
            if sub == "scale":
                return await self._scale(request, resource, entry, verb)
            if verb == "get":
                return web.Response(body=entry.raw, content_type="application/json")
            if verb == "delete":
                return self.store.delete(request, resource, entry, await request.read())
            body = await _body(request)
            if verb == "create":
                return errors.json_response(201, self.store.bind(entry, body))
            if verb == "patch":
                body = patching.apply(entry.obj, body, request.content_type)
            return errors.json_response(
                200, self.store.update(resource, entry, body, status_only=bool(sub))
            )
        except errors.ApiError as exc:
            return errors.status_response(exc)

    async def _view_collection(self, request: web.Request, verb: str | None) -> web.Response:
        """List or create through a view (`_VIEWS`): Events as events.k8s.io/v1."""
        group, resource = request.match_info["group"], request.match_info["resource"]
        namespace = request.match_info.get("namespace")
        call = f"{verb} {resource}.{group}"
        try:
            if verb not in ("list", "create") or (verb == "create" and namespace is None):
                raise errors.ApiError(405, f"the server does not allow this method on {resource}")
            self.authorizer.authorize(request, verb, resource, namespace, group=group)
            self._count(call)
            await self._stalled(call)
            if verb == "list":
                labels = selectors.parse_labels(request.query.get("labelSelector", ""))
                fields = selectors.parse_fields(request.query.get("fieldSelector", ""))
                items = [
                    shown
                    for (ns, _), entry in sorted(self.store.by_resource["events"].items())
                    if namespace is None or ns == namespace
                    if selectors.matches(shown := k8s_events.to_v1(entry.obj), labels, fields)
                ]
                meta = {"resourceVersion": str(self.store.rv)}
                kind = {"kind": "EventList", "apiVersion": k8s_events.GROUP_VERSION}
                return errors.json_response(200, {**kind, "metadata": meta, "items": items})
            assert namespace is not None
            body = await _body(request)
            if not isinstance(body, dict) or body.get("kind", "Event") != "Event":
                raise errors.ApiError(400, "the body of the request is not an Event")
            try:
                k8s_events.check_create(body, namespace)
            except k8s_events.Invalid as exc:
                raise errors.ApiError(422, str(exc)) from None
            stored = self.store.create("events", namespace, k8s_events.to_core(body))
            return errors.json_response(201, k8s_events.to_v1(stored))
        except errors.ApiError as exc:
            return errors.status_response(exc)

    async def _view_item(self, request: web.Request, verb: str | None) -> web.Response:
        """Get, patch, update or delete one Event through the events.k8s.io/v1 view."""
        group, resource = request.match_info["group"], request.match_info["resource"]
        namespace, name = request.match_info.get("namespace"), request.match_info["name"]
        call = f"{verb} {resource}.{group}"
        try:
            if verb not in ("get", "patch", "update", "delete") or request.match_info.get("sub"):
                raise errors.ApiError(405, f"the server does not allow this method on {resource}")
            self.authorizer.authorize(request, verb, resource, namespace, name, group=group)
            self._count(call)
            await self._stalled(call)
            entry = self.store.entry("events", namespace, name)
            if verb == "delete":
                return self.store.delete(request, "events", entry, await request.read())
            old = k8s_events.to_v1(entry.obj)
            if verb == "get":
                return errors.json_response(200, old)
            body = await _body(request)
            new = patching.apply(old, body, request.content_type) if verb == "patch" else body
            if not isinstance(new, dict):
                raise errors.ApiError(400, "the body of the request is not an Event")
            try:
                k8s_events.check_update(old, new, namespace or "")
            except k8s_events.Invalid as exc:
                raise errors.ApiError(422, str(exc)) from None
            core = k8s_events.to_core(new)
            meta = dict(entry.obj["metadata"])
            for field in ("labels", "annotations"):
                meta[field] = (new.get("metadata") or {}).get(field)
            core["metadata"] = {k: v for k, v in meta.items() if v is not None}
            if core == entry.obj:
                return errors.json_response(200, old)
            return errors.json_response(
                200, k8s_events.to_v1(self.store.put("events", entry, core))
            )
        except errors.ApiError as exc:
            return errors.status_response(exc)

    async def _scale(
        self, request: web.Request, resource: str, entry: watches.Entry, verb: str
    ) -> web.Response:
        """A workload's ``/scale`` (autoscaling/v1 Scale): read it, or set ``spec.replicas``
        through it (PUT or PATCH), as ``kubectl scale`` does."""
        if verb == "delete":
            raise errors.ApiError(405, f"the server does not allow this method on {resource}/scale")
        if verb != "get":
            body = await _body(request)
            if verb == "patch":
                body = patching.apply(_scale_of(entry.obj), body, request.content_type)
            replicas = (body.get("spec") or {}).get("replicas") if isinstance(body, dict) else None
            if type(replicas) is not int or replicas < 0:
                raise errors.ApiError(
                    422,
                    f'Scale.autoscaling "{entry.obj["metadata"]["name"]}" is invalid: '
                    f"spec.replicas: Invalid value: {replicas!r}",
                )
            scaled = copy.deepcopy(entry.obj)
            scaled["spec"]["replicas"] = replicas
            self.store.update(resource, entry, scaled, status_only=False)
            entry = self.store.entry(
                resource, entry.obj["metadata"].get("namespace"), entry.obj["metadata"]["name"]
            )
        return errors.json_response(200, _scale_of(entry.obj))

    def _route(self, request: web.Request, *, item: bool) -> tuple[str, str | None]:
        resource = request.match_info["resource"]
        namespace = request.match_info.get("namespace")
        group = request.match_info.get("group")
        version = f"{group}/{request.match_info['version']}" if group else "v1"
        kind = kinds.KINDS.get(resource)
        listing_all = not item and request.method == "GET" and bool(kind and kind[1])
        if (
            kind is None
            or kind[2] != version
            or (kind[1] != (namespace is not None) and not listing_all)
        ):
            raise errors.ApiError(404, "the server could not find the requested resource")
        return resource, namespace

    def _count(self, call: str) -> None:
        self.calls[call] += 1
        if self._faults.get(call):
            code, retry_after = self._faults[call].popleft()
            raise errors.ApiError(code, f"injected failure of {call}", retry_after=retry_after)

    # -- the store ------------------------------------------------------------------------------


# -- selectors, patches, validation -------------------------------------------------------------


def _view_of(request: web.Request) -> str | None:
    """The stored resource a request's group/version and resource are a view of, or None."""
    group = request.match_info.get("group")
    if not group:
        return None
    return kinds.VIEWS.get(
        (f"{group}/{request.match_info['version']}", request.match_info["resource"])
    )


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


def _ready_condition(ready: bool | None) -> dict[str, str]:
    status, reason = {
        True: ("True", "KubeletReady"),
        False: ("False", "KubeletNotReady"),
        None: ("Unknown", "NodeStatusUnknown"),
    }[ready]
    now = store.now()
    return {
        "type": "Ready",
        "status": status,
        "reason": reason,
        "lastHeartbeatTime": now,
        "lastTransitionTime": now,
    }


async def _body(request: web.Request) -> Any:
    try:
        return await request.json()
    except ValueError as exc:
        raise errors.ApiError(400, "the request body is not JSON") from exc


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
