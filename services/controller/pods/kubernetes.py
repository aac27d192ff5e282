"""`PodRuntime` on Kubernetes through kubernetes-asyncio, working on the raw JSON the API sends.

Every call passes ``_preload_content=False`` and parses the body itself (orjson):
turning 10,000 Pods into client model objects costs 7-10 times the parse. With
``_preload_content=False`` the client raises nothing for an error status, so `_request` checks
the status itself and maps every failure onto `runtime.PodsError` (`api_errors`). The only
module that imports the Kubernetes client, with `recording` for Events; `pod_launching` makes
the calls that create and delete an attempt's Pod and Secret, through this runtime's `_request`.

One Pod watch and one Node watch per runtime. The first `watch` starts them (`watching`: list,
then watch, client-go reflector style). They feed `informing.Informer`, which fans each change
out to the watches of the swarms it concerns and serves `list_attempts` from its cache once
synced, so a pass costs no API call. The two watches have a connection pool of their own (see
`_inform`): calls never wait for a connection a watch holds. Whether the API answers is a
state every call and watch sets (`availability`).
"""

from __future__ import annotations

import asyncio
import collections
import copy
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any

import aiohttp
import aiohttp.helpers
import orjson
from kubernetes_asyncio import client
from kubernetes_asyncio.client import exceptions

from services.common import waiting
from services.controller.pods import (
    api_errors,
    api_sessions,
    attempts,
    availability,
    classifying,
    direct_requests,
    event_bodies,
    feeds,
    informing,
    notices,
    pod_launching,
    recording,
    runtime,
    templates,
    watching,
)

_MANAGED = f"{runtime.LABEL_MANAGED_BY}={runtime.MANAGED_BY}"


class ApiClient(client.ApiClient):  # type: ignore[misc]
    """kubernetes-asyncio's client, sending a `Body` as it is, and reading the environment's
    proxy once (`api_sessions`).

    The library walks every request body through `sanitize_for_serialization` (for its model
    objects) before encoding it; a Pod's body is a few hundred values and the walk costs about
    three times the encoding. The runtime's bodies (`pod_launching.Body`) are plain JSON, so that
    walk is skipped for them; anything else goes through it as before.
    """

    def __init__(self, configuration: Any = None, *args: Any, **kwargs: Any) -> None:
        super().__init__(configuration, *args, **kwargs)
        api_sessions.read_proxy_once(self.rest_client, self.configuration.host)

    def sanitize_for_serialization(self, obj: Any) -> Any:
        if type(obj) is pod_launching.Body:
            return obj
        return super().sanitize_for_serialization(obj)


class KubernetesRuntime:
    """Worker attempts as labelled Pods in one namespace, each with a credential Secret."""

    def __init__(
        self,
        api_client: client.ApiClient,
        namespace: str,
        pod_template: Mapping[str, Any],
        *,
        restorer_image: str | None = None,
        worker_env: Mapping[str, str] | None = None,
        check_nodes: bool = True,
        request_timeout: float = 60.0,
        watch_timeout: int = 300,
        resync_period: float = 300.0,
        events_timeout: float = recording.TIMEOUT_S,
    ) -> None:
        """Build the runtime; it borrows the client and never closes it.

        Args:
            api_client: A configured kubernetes-asyncio ApiClient (this module's `ApiClient`
                sends the runtime's request bodies without walking them first).
            namespace: Where worker Pods and their Secrets live.
            pod_template: The worker Pod template (see `templates.default_pod_template`).
            restorer_image: The sidecar image; the worker image when None.
            worker_env: Settings every worker Pod gets from the controller's own (the
                controller's address as workers reach it, the store's, the checkpoint bucket);
                the Pod template overrides any of them (`templates.render_pod`).
            check_nodes: Read Nodes so a Pod on a gone or NotReady node counts as node_lost
                (needs list/watch on nodes, a cluster-scoped permission).
            request_timeout: Seconds for one ordinary API call.
            watch_timeout: Seconds the API server keeps one watch open before we renew it.
            resync_period: Seconds between two lists of the shared watches (a backstop: a
                watch that works misses nothing).
            events_timeout: Seconds for one call posting an Event (`recording`).
        """
        self._api_client = api_client
        self._core = client.CoreV1Api(api_client)
        self._namespace = namespace
        self._template = copy.deepcopy(dict(pod_template))
        self._worker_env = dict(worker_env or {})
        self._check_nodes = check_nodes
        self._timeout = aiohttp.ClientTimeout(total=request_timeout)
        # The four calls of a replacement skip the library's request builder on this module's
        # client (`direct_requests`); a client built otherwise sends them as every other call.
        self._direct = (
            direct_requests.DirectRequests(api_client)
            if isinstance(api_client, ApiClient)
            else None
        )
        # Final states of Pods the cluster deleted under us (an eviction, the Pod GC), seen on the
        # watch: once deleted they no longer list, and the reason would be lost.
        self._departed: collections.OrderedDict[attempts.Key, classifying.Pod] = (
            collections.OrderedDict()
        )
        # Attempts removed here, with their Pod's uid when known (their Events still name it).
        self._removed: collections.OrderedDict[attempts.Key, str | None] = collections.OrderedDict()
        self._informer: informing.Informer | None = None
        self._watch_client: client.ApiClient | None = None
        self._reflectors: list[asyncio.Task[None]] = []
        self._health = availability.Health(availability.address(api_client.configuration.host))
        self._recorder = recording.EventRecorder(
            api_client, namespace, self._pod_ref, timeout_s=events_timeout
        )
        self._reflector = watching.Reflector(
            self._request, self._health, resync_period, watch_timeout
        )
        self._launcher = pod_launching.PodLauncher(
            self._core,
            self._request,
            namespace,
            self._template,
            restorer_image=restorer_image,
            worker_env=self._worker_env,
            informer=lambda: self._informer,
            record=self._recorder.record,
        )
        self._closed = False

    @property
    def api_available(self) -> bool | None:
        """True while the Kubernetes API answers, False while it does not (unreachable, or a
        temporary error status), None before the first call or watch."""
        return self._health.state

    def subscribe(self, subscriber: runtime.AvailabilitySubscriber) -> None:
        """Call `subscriber` with `api_available` on each change, in order (a coroutine
        function is awaited). Not called with the state now."""
        self._health.subscribers.append(subscriber)

    async def list_attempts(self, swarm: str) -> list[runtime.Attempt]:
        """Every worker Pod of the swarm, classified (see `runtime.PodRuntime`).

        Read from the shared watches' cache while they run and are synced (waiting for a list
        under way), with no API call; otherwise (no watch yet, or a watch broken) listed from
        the API server, whose errors the caller sees. Pods this runtime removed are left out
        even while a finalizer keeps them (a controller restarted since sees them again,
        Terminating); Pods the cluster deleted under a running watch are kept, with the reason
        their final state shows.
        """
        informer = self._informer
        if informer is not None and await informer.ready():
            found = await attempts.classified(
                swarm, informer.pods_of(swarm), informer.node_map(), self._removed, informer.read
            )
        else:
            found = await self._list(swarm)
        found.extend(attempts.departed(swarm, self._departed, found))
        return found

    async def swarms(self) -> set[str]:
        """The swarms of every worker Pod in the namespace (`runtime.Surveying`): from the
        shared Pod watch's cache (its first list, started here if it was not yet), or one list
        of its own when the watch cannot list."""
        informer = self._inform()
        if await informer.ready():
            return informer.swarms()
        _, body = await self._request(
            "list pods", self._core.list_namespaced_pod, self._namespace, label_selector=_MANAGED
        )
        with watching.collector_paused():
            items = orjson.loads(body)["items"]
            labels = ((pod.get("metadata") or {}).get("labels") or {} for pod in items)
            return {name for found in labels if (name := found.get(runtime.LABEL_SWARM))}

    async def _list(self, swarm: str) -> list[runtime.Attempt]:
        """The swarm's attempts as the API server lists them now."""
        pods_call = self._request(
            "list pods",
            self._core.list_namespaced_pod,
            self._namespace,
            label_selector=_selector(swarm),
        )
        nodes_body: bytes | None = None
        if self._check_nodes:
            (_, pods_body), (_, nodes_body) = await waiting.both(
                pods_call, self._request("list nodes", self._core.list_node)
            )
        else:
            _, pods_body = await pods_call
        with watching.collector_paused():
            nodes: dict[str, classifying.Node] | None = None
            if nodes_body is not None:
                nodes = {n["metadata"]["name"]: n for n in orjson.loads(nodes_body)["items"]}
            items = orjson.loads(pods_body)["items"]
            del pods_body
            found = await attempts.classified(swarm, items, nodes, self._removed)
            del items, nodes  # the parsed objects go while the collector is paused (see there)
        return found

    async def watch(self, swarm: str) -> AsyncIterator[runtime.Change]:
        """Wake on any change of a worker's failure or liveness, or of its node's readiness.

        A worker whose own status now shows a failure comes in `Change.failed`, classified from
        that status; everything else (a worker deleted from under us or finished, a node going
        NotReady, an image pull's grace ending, a failure only a Node can prove) asks for a full
        pass. A new healthy Pod (the replacement the controller just created) wakes nothing.
        Every swarm's watch is fed by the runtime's one Pod watch and one Node watch; after
        `aclose` a watch ends at once.
        """
        if self._closed:
            return
        informer = self._inform()
        wake = informer.subscribe(swarm)
        try:
            while (change := await wake.wait()) is not None:
                yield change
        finally:
            informer.unsubscribe(swarm, wake)

    async def launch(self, spec: runtime.LaunchSpec) -> None:
        """Create the attempt's Pod, then its credential Secret owned by it
        (`pod_launching.PodLauncher.launch`). A removed attempt is never created again."""
        if (spec.swarm, spec.execution_id) in self._removed:
            return  # removed is final
        await self._launcher.launch(spec)

    async def remove(self, swarm: str, execution_id: str) -> None:
        """Delete the attempt's Pod (no grace: the fence already took its authority) and Secret,
        and remember it removed (`pod_launching.PodLauncher.remove`)."""
        key = (swarm, execution_id)
        attempts.remember(self._removed, key, self._pod_ref(swarm, execution_id).uid)
        self._departed.pop(key, None)
        await self._launcher.remove(swarm, execution_id)

    def start_recording(self, instance: str) -> None:
        """Post Kubernetes Events for notices from now on, as `instance` (see `recording`)."""
        self._recorder.start(instance)

    def record(self, notice: notices.Notice, regarding: event_bodies.PodRef | None = None) -> None:
        """Post an Event on the notice's Pod, best effort: never blocks, never raises."""
        self._recorder.record(notice, regarding=regarding)

    async def stop_recording(self) -> None:
        """Stop posting Events (what is still queued is dropped)."""
        await self._recorder.aclose()

    def _pod_ref(self, swarm: str, execution_id: str) -> event_bodies.PodRef:
        """An attempt's Pod, with the uid the watch showed (or this runtime created, or the
        cluster deleted, or this runtime removed), for its Events."""
        name = templates.pod_name(swarm, execution_id)
        key = (swarm, execution_id)
        pod = self._informer.pod(name) if self._informer is not None else None
        if pod is None:
            pod = self._departed.get(key)
        uid = (pod or {}).get("metadata", {}).get("uid") or self._removed.get(key)
        return event_bodies.PodRef(name, uid)

    async def aclose(self) -> None:
        """End every watch of this runtime, stop the shared watches and close their pool."""
        self._closed = True
        await self._recorder.aclose()
        informer, self._informer = self._informer, None
        if informer is not None:
            informer.close()
        tasks, self._reflectors = self._reflectors, []
        await waiting.cancel(tasks)
        watch_client, self._watch_client = self._watch_client, None
        if watch_client is not None:
            await watch_client.close()
        await self._health.aclose()

    def _inform(self) -> informing.Informer:
        """The shared watches, started on first use."""
        if self._informer is not None:
            return self._informer
        informer = informing.Informer(
            check_nodes=self._check_nodes, removed=self._removed, departed=self._departed
        )
        # A pool of its own, one connection per watch: a watch holds its connection for
        # minutes, and in the calls' pool it would leave that many fewer for the calls.
        configuration = copy.deepcopy(self._api_client.configuration)
        configuration.connection_pool_maxsize = 2 if self._check_nodes else 1
        self._watch_client = type(self._api_client)(configuration)
        followers = [
            self._follow(
                informing.PODS,
                informer.pod_feed,
                self._core.list_namespaced_pod,
                self._namespace,
                label_selector=_MANAGED,
            )
        ]
        if informer.node_feed is not None:
            followers.append(
                self._follow(informing.NODES, informer.node_feed, self._core.list_node)
            )
        self._reflectors = [
            asyncio.create_task(follower, name=f"kubernetes-watch-{what}")
            for what, follower in zip((informing.PODS, informing.NODES), followers, strict=False)
        ]
        self._informer = informer
        return informer

    async def _follow(
        self,
        what: str,
        feed: feeds.Feed,
        list_method: Callable[..., Awaitable[Any]],
        *args: Any,
        **kwargs: Any,
    ) -> None:
        """Follow one shared watch (`watching.Reflector.follow`). The watch is the same API
        method on the watches' own client."""
        assert self._watch_client is not None
        watching_api = type(self._core)(self._watch_client)  # the same API, on the watches' pool
        watch_method = getattr(watching_api, list_method.__name__)
        await self._reflector.follow(what, feed, list_method, watch_method, *args, **kwargs)

    async def _request(
        self,
        what: str,
        method: Callable[..., Awaitable[Any]],
        *args: Any,
        tolerate: frozenset[int] = frozenset(),
        quiet: bool = False,
        **kwargs: Any,
    ) -> tuple[int, bytes]:
        """One API call; returns status and raw body, raising `PodsError` unless tolerated.

        ``quiet`` keeps the server's message out of the error (Secret calls: nothing about a
        credential's object may reach a log).
        """
        try:
            direct, routed = self._direct, direct_requests.route(method)
            if direct is not None and routed is not None:
                response, body = await direct.send(routed, args, kwargs, self._timeout)
            else:
                response = await method(
                    *args, **kwargs, _preload_content=False, _request_timeout=self._timeout
                )
                try:
                    body = await response.read()
                finally:
                    response.release()
        except exceptions.ApiException as exc:
            self._health.heard(exc.status or 0)
            raise api_errors.error(
                what, exc.status or 0, b"" if quiet else exc.body, None
            ) from None
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            self._health.lost()
            raise api_errors.unreachable(what, exc) from exc
        status = int(response.status)
        self._health.heard(status)
        if status >= 300 and status not in tolerate:
            raise api_errors.error(what, status, b"" if quiet else body, response)
        return status, body


def _selector(swarm: str) -> str:
    return f"{runtime.LABEL_MANAGED_BY}={runtime.MANAGED_BY},{runtime.LABEL_SWARM}={swarm}"
