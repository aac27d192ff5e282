"""`PodRuntime` on Kubernetes through kubernetes-asyncio, working on the raw JSON the API sends.

Every call passes ``_preload_content=False`` and parses the body itself (orjson):
turning 10,000 Pods into client model objects costs 7-10 times the parse. With
``_preload_content=False`` the client raises nothing for an error status, so `_request` checks
the status itself and maps every failure onto `runtime.PodsError` (the only place that knows
Kubernetes error shapes).

One Pod watch and one Node watch per runtime. The first `watch` starts them, client-go reflector
style: list (the Pod list label-selected to the Pods this controller manages), then watch from
the list's resourceVersion; list again on 410 Gone and every resync period; watch again after a
drop, with a backoff. They feed `informing.Informer`, which fans each change out to the watches
of the swarms it concerns and serves `list_attempts` from its cache once synced, so a pass costs
no API call. The two watches have a connection pool of their own (see `_inform`): calls never
wait for a connection a watch holds.

Whether the API answers is a state (`KubernetesRuntime.api_available`, followed with
`subscribe`): every answer and every failure to get one sets it. While it does not answer, the
watches wait with a backoff they share and log one JSON line per step
(``kubernetes_unavailable``, with the API's host:port and the exception's type, never a
credential), and one line when it answers again (``kubernetes_available``).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import copy
import dataclasses
import gc
import json
import logging
import math
import time
import urllib.parse
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping
from datetime import UTC, datetime
from typing import Any, TypeVar

import aiohttp
import aiohttp.helpers
import orjson
import yarl
from kubernetes_asyncio import client
from kubernetes_asyncio.client import exceptions

from services.common import logs, waiting
from services.controller.pods import (
    classifying,
    event_bodies,
    informing,
    notices,
    recording,
    runtime,
    templates,
)

logger = logging.getLogger(__name__)

_TEMPORARY = frozenset({0, 429, 500, 502, 503, 504})
_CLASSIFY_SLICE = 100  # Pods classified between two yields to the event loop
_MANAGED = f"{runtime.LABEL_MANAGED_BY}={runtime.MANAGED_BY}"
_T = TypeVar("_T")
_U = TypeVar("_U")


_READ_BUFSIZE = 2**21
"""The session's read buffer, as kubernetes-asyncio sets it (a watch event can be large)."""


class Body(dict):  # type: ignore[type-arg]
    """A request body this runtime built: JSON already (dicts, lists, text, numbers)."""


class ApiClient(client.ApiClient):  # type: ignore[misc]
    """kubernetes-asyncio's client, sending a `Body` as it is, and reading the environment's
    proxy once.

    The library walks every request body through `sanitize_for_serialization` (for its model
    objects) before encoding it; a Pod's body is a few hundred values and the walk costs about
    three times the encoding. The runtime's bodies are plain JSON, so that walk is skipped for
    them; anything else goes through it as before.

    The library's HTTP session trusts the environment, so aiohttp looks for a proxy
    (`HTTPS_PROXY`, `NO_PROXY`) and a `.netrc` login on a worker thread for every request: two
    thread hops per call. Here the proxy the environment names for the API server (when the
    kubeconfig names none) is read once, when the client is built, and the session does not
    look again. (A `.netrc` login is not how Kubernetes authenticates; the kubeconfig's
    credentials are used as before.)
    """

    def __init__(self, configuration: Any = None, *args: Any, **kwargs: Any) -> None:
        super().__init__(configuration, *args, **kwargs)
        rest = self.rest_client
        if rest.proxy is None:
            with contextlib.suppress(LookupError):
                proxy, auth = aiohttp.helpers.get_env_proxy_for_url(
                    yarl.URL(self.configuration.host)
                )
                rest.proxy = str(proxy)
                if auth is not None:
                    rest.proxy_headers = {"Proxy-Authorization": auth.encode()}
        trusting = rest.pool_manager
        rest.pool_manager = aiohttp.ClientSession(
            connector=trusting.connector,
            trust_env=False,
            read_bufsize=_READ_BUFSIZE,
        )
        trusting.detach()  # the connector is the new session's now

    def sanitize_for_serialization(self, obj: Any) -> Any:
        if type(obj) is Body:
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
        self._restorer_image = restorer_image
        self._worker_env = dict(worker_env or {})
        self._check_nodes = check_nodes
        self._timeout = aiohttp.ClientTimeout(total=request_timeout)
        self._watch_timeout = watch_timeout
        self._resync_period = resync_period
        # Final states of Pods the cluster deleted under us (an eviction, the Pod GC), seen on the
        # watch: once deleted they no longer list, and the reason would be lost.
        self._departed: collections.OrderedDict[informing.Key, classifying.Pod] = (
            collections.OrderedDict()
        )
        # Attempts removed here, with their Pod's uid when known (their Events still name it).
        self._removed: collections.OrderedDict[informing.Key, str | None] = (
            collections.OrderedDict()
        )
        self._informer: informing.Informer | None = None
        self._watch_client: client.ApiClient | None = None
        self._reflectors: list[asyncio.Task[None]] = []
        self._health = _Health(_address(api_client.configuration.host))
        self._recorder = recording.EventRecorder(
            api_client, namespace, self._pod_ref, timeout_s=events_timeout
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
            attempts = await self._classify(swarm, informer.pods_of(swarm), informer.node_map())
        else:
            attempts = await self._list(swarm)
        listed = {a.execution_id for a in attempts}
        now = datetime.now(UTC)
        for (owner, execution), pod in list(self._departed.items()):
            attempt = (
                informing.attempt_of(pod, None, now)
                if owner == swarm and execution not in listed
                else None
            )
            if attempt is not None:
                # Deleted with neither a Succeeded phase nor a recorded cause: it did not finish,
                # and "any other" failure is application_exit.
                succeeded = (pod.get("status") or {}).get("phase") == "Succeeded"
                failure = attempt.failure or (
                    None if succeeded else classifying.FailureReason.APPLICATION_EXIT
                )
                # Departed: the Pod is gone and only its last state is remembered, so the pass
                # treats the attempt as missing (a held replacement is then relaunched).
                attempts.append(
                    dataclasses.replace(attempt, failure=failure, alive=False, departed=True)
                )
        return attempts

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
            (_, pods_body), (_, nodes_body) = await _both(
                pods_call, self._request("list nodes", self._core.list_node)
            )
        else:
            _, pods_body = await pods_call
        with _collector_paused():
            nodes: dict[str, classifying.Node] | None = None
            if nodes_body is not None:
                nodes = {n["metadata"]["name"]: n for n in orjson.loads(nodes_body)["items"]}
            items = orjson.loads(pods_body)["items"]
            del pods_body
            attempts = await self._classify(swarm, items, nodes)
            del items, nodes  # the parsed objects go while the collector is paused (see there)
        return attempts

    async def _classify(
        self,
        swarm: str,
        pods: list[classifying.Pod],
        nodes: Mapping[str, classifying.Node] | None,
    ) -> list[runtime.Attempt]:
        now = datetime.now(UTC)
        attempts = []
        for start in range(0, len(pods), _CLASSIFY_SLICE):
            # Other tasks (a recovery from the watch, an API call) get the loop between
            # slices: a large list is not one long stall.
            await asyncio.sleep(0)
            for pod in pods[start : start + _CLASSIFY_SLICE]:
                attempt = informing.attempt_of(pod, nodes, now)
                # A removed attempt whose Pod a finalizer keeps Terminating is removed all the
                # same.
                if attempt is not None and (swarm, attempt.execution_id) not in self._removed:
                    attempts.append(attempt)
        return attempts

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
        """Create the attempt's Pod (sidecar injected), then its credential Secret owned by it.

        The Pod goes first so the Secret can name it as owner (the cluster then deletes the
        Secret with the Pod, whoever deletes that); the kubelet waits for a missing Secret. The
        created Pod is listed from then on, even before the shared watch shows it.
        """
        if (spec.swarm, spec.execution_id) in self._removed:
            return  # removed is final: a removed attempt is never created again
        name = templates.pod_name(spec.swarm, spec.execution_id)
        try:
            pod = templates.render_pod(
                self._template,
                spec,
                namespace=self._namespace,
                restorer_image=self._restorer_image,
                defaults=self._worker_env,
            )
        except ValueError as exc:
            raise runtime.PodsRefused(f"launch {name}: {exc}") from None
        status, body = await self._request(
            "create pod",
            self._core.create_namespaced_pod,
            self._namespace,
            Body(pod),
            tolerate=frozenset({409}),
        )
        if status == 409:
            _, body = await self._request(
                "read pod", self._core.read_namespaced_pod, name, self._namespace
            )
        existing = orjson.loads(body)
        if status < 300 and self._informer is not None:
            self._informer.launched(existing, time.monotonic())
        if status < 300:
            notice = notices.launched(spec.swarm, spec.seat, spec.execution_id, spec.generation)
            if notice is not None:
                pod_ref = event_bodies.PodRef(name, existing["metadata"].get("uid"))
                self._recorder.record(notice, regarding=pod_ref)
        labels = existing["metadata"].get("labels") or {}
        if (labels.get(runtime.LABEL_SWARM), labels.get(runtime.LABEL_EXECUTION)) != (
            spec.swarm,
            spec.execution_id,
        ):
            raise runtime.PodsRefused(f"launch {name}: the Pod name is held by another attempt")
        secret = templates.render_secret(
            spec, namespace=self._namespace, owner_uid=existing["metadata"]["uid"]
        )
        status, _ = await self._request(
            "create secret",
            self._core.create_namespaced_secret,
            self._namespace,
            Body(secret),
            tolerate=frozenset({409}),
            quiet=True,
        )
        if status == 409:
            # Left by an interrupted launch, perhaps with a credential since re-minted.
            await self._request(
                "update secret",
                self._core.patch_namespaced_secret,
                secret["metadata"]["name"],
                self._namespace,
                {
                    "metadata": {"ownerReferences": secret["metadata"]["ownerReferences"]},
                    "data": secret["data"],
                },
                quiet=True,
            )

    async def remove(self, swarm: str, execution_id: str) -> None:
        """Delete the attempt's Pod (no grace: the fence already took its authority) and Secret."""
        key = (swarm, execution_id)
        informing.remember(self._removed, key, self._pod_ref(swarm, execution_id).uid)
        self._departed.pop(key, None)
        options = Body(gracePeriodSeconds=0, propagationPolicy="Background")
        await _both(
            self._request(
                "delete pod",
                self._core.delete_namespaced_pod,
                templates.pod_name(swarm, execution_id),
                self._namespace,
                body=options,
                tolerate=frozenset({404}),
            ),
            self._request(
                "delete secret",
                self._core.delete_namespaced_secret,
                templates.secret_name(swarm, execution_id),
                self._namespace,
                body=options,
                tolerate=frozenset({404}),
                quiet=True,
            ),
        )

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
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
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
        feed: informing.Feed,
        list_method: Callable[..., Awaitable[Any]],
        *args: Any,
        **kwargs: Any,
    ) -> None:
        """List, then watch from the list's resourceVersion; list again when it is Gone (410)
        and every resync period; watch again after a drop, after a backoff (shared by both
        watches while the API does not answer). The watch is the same API method on the
        watches' own client."""
        assert self._watch_client is not None
        watching = type(self._core)(self._watch_client)  # the same API, on the watches' pool
        watch_method = getattr(watching, list_method.__name__)
        sync = feed.sync
        loop = asyncio.get_running_loop()
        cursor = _Cursor()
        backoff = _backoff()
        resync_at = loop.time()
        while True:
            try:
                if cursor.version is None or loop.time() >= resync_at:
                    began = time.monotonic()
                    _, body = await self._request(f"list {what}", list_method, *args, **kwargs)
                    with _collector_paused():
                        data = orjson.loads(body)
                        del body
                        version = data["metadata"]["resourceVersion"]
                        # Fresh unless the watch ran unbroken up to this list (a resync).
                        feed.listed(data["items"], cursor.version is None, began)
                        del data
                    cursor.version = version
                    sync.listed()
                    resync_at = loop.time() + self._resync_period
                await self._stream(
                    what, watch_method, args, kwargs, cursor, feed, resync_at - loop.time()
                )
                backoff.reset()
            except _Gone:
                logger.info("watch of %s expired; listing again", what)
                cursor.version = None
                sync.relisting()
            except _Dropped as exc:
                # Cut mid-stream: nothing says the API is down (the next connect will tell).
                logger.info("watch of %s dropped (%s); watching again", what, exc)
                sync.broken()
                await backoff.sleep()
            except runtime.PodsUnavailable as exc:
                sync.broken()
                await self._health.step(what, exc)
            except (runtime.PodsRefused, ValueError, KeyError, TypeError) as exc:
                # Refused, or a body that is not the JSON Kubernetes sends: every subscriber's
                # watch says so rather than hang, and this one lists again after a backoff.
                error = (
                    exc
                    if isinstance(exc, runtime.PodsRefused)
                    else runtime.PodsRefused(f"watch {what}: malformed response ({exc!r:.80})")
                )
                logger.warning("watch of %s refused: %s", what, error)
                cursor.version = None
                sync.broken()
                feed.fail(error)
                await backoff.sleep()
            except Exception as exc:
                # A surprise (a bug): the cache is not trusted until a list succeeds again.
                logs.event(
                    logger,
                    "kubernetes_watch_failed",
                    logging.ERROR,
                    watch=what,
                    exception=type(exc).__name__,
                )
                cursor.version = None
                sync.broken()
                await backoff.sleep()

    async def _stream(
        self,
        what: str,
        method: Callable[..., Awaitable[Any]],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        cursor: _Cursor,
        feed: informing.Feed,
        seconds: float,
    ) -> None:
        """Read one watch until the server ends it (at most `seconds` on), moving the cursor
        past each event."""
        timeout = max(1, min(self._watch_timeout, math.ceil(seconds)))
        try:
            response = await method(
                *args,
                **kwargs,
                watch=True,
                resource_version=cursor.version,
                allow_watch_bookmarks=True,
                timeout_seconds=timeout,
                _preload_content=False,
                _request_timeout=aiohttp.ClientTimeout(sock_connect=30, sock_read=timeout + 30),
            )
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            self._health.lost()
            raise _unreachable(f"watch {what}", exc) from exc
        self._heard(response.status)
        # A backstop for a server that keeps a busy watch open past its timeoutSeconds: the
        # resync is due then.
        backstop = asyncio.timeout(timeout + 30)
        try:
            if response.status == 410:
                raise _Gone
            if response.status >= 300:
                raise _error(f"watch {what}", response.status, await response.read(), response)
            feed.sync.opened()
            async with backstop:
                while line := await response.content.readline():
                    if not line.strip():
                        continue  # a keep-alive newline, not an event
                    event = orjson.loads(line)
                    kind, obj = event.get("type"), event.get("object") or {}
                    if kind == "ERROR":
                        if obj.get("code") == 410:
                            raise _Gone
                        raise _error(
                            f"watch {what}", int(obj.get("code") or 0), json.dumps(obj), None
                        )
                    if kind != "BOOKMARK":
                        feed.note(kind, obj)
                    cursor.version = (obj.get("metadata") or {}).get(
                        "resourceVersion"
                    ) or cursor.version
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            if backstop.expired():
                return
            raise _Dropped(type(exc).__name__) from exc
        finally:
            response.close()

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
            response = await method(
                *args, **kwargs, _preload_content=False, _request_timeout=self._timeout
            )
            try:
                body = await response.read()
            finally:
                response.release()
        except exceptions.ApiException as exc:
            self._heard(exc.status or 0)
            raise _error(what, exc.status or 0, b"" if quiet else exc.body, None) from None
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            self._health.lost()
            raise _unreachable(what, exc) from exc
        status = int(response.status)
        self._heard(status)
        if status >= 300 and status not in tolerate:
            raise _error(what, status, b"" if quiet else body, response)
        return status, body

    def _heard(self, status: int) -> None:
        """What one answer says of the API: a temporary error status is as good as none."""
        if status in _TEMPORARY:
            self._health.lost()
        else:
            self._health.answered()


class _Gone(Exception):
    """The watch's resourceVersion is too old (410): list again."""


class _Dropped(Exception):
    """An open watch was cut mid-stream (the connection, not an answer): watch again."""


class _Cursor:
    """Where a watch has read up to (None: list first)."""

    def __init__(self) -> None:
        self.version: str | None = None


def _backoff() -> waiting.Backoff:
    """Jittered waits from 0.2 s, doubling up to 10 s (many controllers do not retry in step)."""
    return waiting.Backoff(0.2, 10.0, jitter=0.5)


class _Health:
    """Whether the Kubernetes API answers, as the runtime's calls and watches find it.

    Subscribers are told each change by one task at a time, in order, and always end with
    the state now. While the API does not answer, the watches take backoff steps together: a
    watch that fails during another's step waits for its end, unlogged, so each step is one
    log line.
    """

    def __init__(self, address: str) -> None:
        self.address = address
        self.state: bool | None = None
        self.subscribers: list[runtime.AvailabilitySubscriber] = []
        self._told: bool | None = None
        self._telling: set[asyncio.Task[None]] = set()
        self._lock = asyncio.Lock()
        self._backoff = _backoff()
        self._attempt = 0
        self._since = 0.0
        self._step_ends = 0.0

    def answered(self) -> None:
        if self.state is True:
            return
        after: dict[str, Any] = {}
        if self._attempt:
            after = {
                "attempts": self._attempt,
                "unavailable_s": round(time.monotonic() - self._since, 1),
            }
        self._attempt, self._step_ends = 0, 0.0
        self._backoff.reset()
        logs.event(logger, "kubernetes_available", address=self.address, **after)
        self._set(True)

    def lost(self) -> None:
        if self.state is not False:
            self._since = time.monotonic()
            self._set(False)

    async def step(self, watch: str, error: runtime.PodsUnavailable) -> None:
        """One backoff step after the `watch` (its list or its watch) found the API
        unavailable (`error`)."""
        loop = asyncio.get_running_loop()
        if loop.time() < self._step_ends:
            await asyncio.sleep(self._step_ends - loop.time())
            return
        self.lost()
        self._attempt += 1
        delay = error.retry_after if error.retry_after is not None else self._backoff.next()
        self._step_ends = loop.time() + delay
        logs.event(
            logger,
            "kubernetes_unavailable",
            logging.WARNING,
            address=self.address,
            watch=watch,
            attempt=self._attempt,
            retry_in_s=delay,
            exception=type(error.__cause__ or error).__name__,
            **({"code": error.code} if error.code else {}),
        )
        await asyncio.sleep(delay)

    def _set(self, state: bool) -> None:
        self.state = state
        task = asyncio.get_running_loop().create_task(self._tell(), name="kubernetes-health")
        self._telling.add(task)
        task.add_done_callback(self._telling.discard)

    async def _tell(self) -> None:
        async with self._lock:
            while self.state is not None and self._told is not self.state:
                state = self._told = self.state
                await waiting.tell(self.subscribers, state, logger, "kubernetes_subscriber_failed")

    async def aclose(self) -> None:
        """Let the subscribers hear the last change."""
        await asyncio.gather(*self._telling, return_exceptions=True)


async def _both(first: Awaitable[_T], second: Awaitable[_U]) -> tuple[_T, _U]:
    """Await two calls at once; when one fails, cancel the other before raising (no stray task)."""
    one, two = asyncio.ensure_future(first), asyncio.ensure_future(second)
    try:
        return await one, await two
    finally:
        for task in (one, two):
            task.cancel()
        await asyncio.gather(one, two, return_exceptions=True)


@contextlib.contextmanager
def _collector_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector while a large list is parsed and read.

    A list of thousands of Pods is hundreds of thousands of dicts, lists and strings. Each
    allocation counts towards a collection, and the collections find nothing (parsed JSON holds
    no cycles; reference counting frees it) but walk all of it, doubling the time the event
    loop spends on a list. Freed inside the pause, the objects leave no count behind. Other
    tasks may run while it is paused (a list is classified in slices); for those moments their
    garbage waits for the next collection, which costs nothing but a little memory.
    """
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def _selector(swarm: str) -> str:
    return f"{runtime.LABEL_MANAGED_BY}={runtime.MANAGED_BY},{runtime.LABEL_SWARM}={swarm}"


def _address(host: str) -> str:
    """The API's host:port from the client's URL (nothing else of it: no credential)."""
    parts = urllib.parse.urlsplit(host)
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        port = 0
    name = parts.hostname or "?"
    return f"[{name}]:{port}" if ":" in name else f"{name}:{port}"


def _unreachable(what: str, exc: BaseException) -> runtime.PodsUnavailable:
    return runtime.PodsUnavailable(
        f"{what}: the Kubernetes API is unreachable ({type(exc).__name__})"
    )


def _error(what: str, status: int, body: bytes | str | None, response: Any) -> runtime.PodsError:
    """Map an API status (and its Status body) onto the runtime's errors."""
    reason, message = "", ""
    try:
        parsed = json.loads(body or b"{}")
        if isinstance(parsed, dict):
            reason, message = str(parsed.get("reason") or ""), str(parsed.get("message") or "")
    except ValueError:
        pass
    text = f"{what}: {status} {reason}".rstrip() + (f": {message}" if message else "")
    if status in _TEMPORARY:
        retry_after = None
        header = response.headers.get("Retry-After") if response is not None else None
        if header and header.isdigit():
            retry_after = float(header)
        return runtime.PodsUnavailable(text, code=status, retry_after=retry_after)
    return runtime.PodsRefused(text, code=status)
