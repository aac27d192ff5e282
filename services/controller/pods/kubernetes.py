"""`PodRuntime` on Kubernetes through kubernetes-asyncio, working on the raw JSON the API sends.

Every call passes ``_preload_content=False`` and parses the body itself (orjson):
turning 10,000 Pods into client model objects costs 7-10 times the parse. With
``_preload_content=False`` the client raises nothing for an error status, so `_request` checks
the status itself and maps every failure onto `runtime.PodsError` (the only place that knows
Kubernetes error shapes).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import copy
import dataclasses
import gc
import heapq
import json
import logging
import random
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping
from datetime import UTC, datetime
from typing import Any, TypeVar

import aiohttp
import orjson
from kubernetes_asyncio import client
from kubernetes_asyncio.client import exceptions

from services.controller.pods import classifying, runtime, templates

logger = logging.getLogger(__name__)

_TEMPORARY = frozenset({0, 429, 500, 502, 503, 504})
_CLASSIFY_SLICE = 100  # Pods classified between two yields to the event loop
_MEMORY = 10_000  # departed and removed attempts remembered (bounded: a pass outlives them)
_Key = tuple[str, str]
_T = TypeVar("_T")
_U = TypeVar("_U")


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
    ) -> None:
        """Build the runtime; it borrows the client and never closes it.

        Args:
            api_client: A configured kubernetes-asyncio ApiClient.
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
        """
        self._core = client.CoreV1Api(api_client)
        self._namespace = namespace
        self._template = copy.deepcopy(dict(pod_template))
        self._restorer_image = restorer_image
        self._worker_env = dict(worker_env or {})
        self._check_nodes = check_nodes
        self._timeout = aiohttp.ClientTimeout(total=request_timeout)
        self._watch_timeout = watch_timeout
        # Final states of Pods the cluster deleted under us (an eviction, the Pod GC), seen on the
        # watch: once deleted they no longer list, and the reason would be lost.
        self._departed: collections.OrderedDict[_Key, classifying.Pod] = collections.OrderedDict()
        self._removed: collections.OrderedDict[_Key, None] = collections.OrderedDict()
        self._tasks: set[asyncio.Task[None]] = set()
        self._wakes: set[_Wake] = set()

    async def list_attempts(self, swarm: str) -> list[runtime.Attempt]:
        """Every worker Pod of the swarm, classified (see `runtime.PodRuntime`).

        Pods this runtime removed are left out even while a finalizer keeps them (a controller
        restarted since sees them again, Terminating); Pods the cluster deleted under a running
        watch are kept, with the reason their final state shows.
        """
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
        now = datetime.now(UTC)
        attempts = []
        with _collector_paused():
            nodes: dict[str, classifying.Node] | None = None
            if nodes_body is not None:
                nodes = {n["metadata"]["name"]: n for n in orjson.loads(nodes_body)["items"]}
            items = orjson.loads(pods_body)["items"]
            del pods_body
            for start in range(0, len(items), _CLASSIFY_SLICE):
                # Other tasks (a recovery from the watch, an API call) get the loop between
                # slices: a large list is not one long stall.
                await asyncio.sleep(0)
                for pod in items[start : start + _CLASSIFY_SLICE]:
                    attempt = _attempt(pod, nodes, now)
                    # A removed attempt whose Pod a finalizer keeps Terminating is removed all
                    # the same.
                    if attempt is not None and (swarm, attempt.execution_id) not in self._removed:
                        attempts.append(attempt)
            del items, nodes  # the parsed objects go while the collector is paused (see there)
        listed = {a.execution_id for a in attempts}
        for (owner, execution), pod in list(self._departed.items()):
            attempt = (
                _attempt(pod, None, now) if owner == swarm and execution not in listed else None
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

    async def watch(self, swarm: str) -> AsyncIterator[runtime.Change]:
        """Wake on any change of a worker's failure or liveness, or of its node's readiness.

        A worker whose own status now shows a failure comes in `Change.failed`, classified from
        that status; everything else (a worker deleted from under us or finished, a node going
        NotReady, an image pull's grace ending, a failure only a Node can prove) asks for a full
        pass. A new healthy Pod (the replacement the controller just created) wakes nothing.
        """
        wake = _Wake({"pods", "nodes"} if self._check_nodes else {"pods"})
        pod_nodes: dict[str, str] = {}
        followers = [asyncio.create_task(self._follow_pods(swarm, wake, pod_nodes))]
        if self._check_nodes:
            followers.append(asyncio.create_task(self._follow_nodes(wake, pod_nodes)))
        self._tasks.update(followers)
        self._wakes.add(wake)
        try:
            while (change := await wake.wait()) is not None:
                yield change
        finally:
            self._wakes.discard(wake)
            for follower in followers:
                follower.cancel()
            await asyncio.gather(*followers, return_exceptions=True)
            self._tasks.difference_update(followers)

    async def launch(self, spec: runtime.LaunchSpec) -> None:
        """Create the attempt's Pod (sidecar injected), then its credential Secret owned by it.

        The Pod goes first so the Secret can name it as owner (the cluster then deletes the
        Secret with the Pod, whoever deletes that); the kubelet waits for a missing Secret.
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
            pod,
            tolerate=frozenset({409}),
        )
        if status == 409:
            _, body = await self._request(
                "read pod", self._core.read_namespaced_pod, name, self._namespace
            )
        existing = orjson.loads(body)
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
            secret,
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
        _remember(self._removed, key, None)
        self._departed.pop(key, None)
        options = {"gracePeriodSeconds": 0, "propagationPolicy": "Background"}
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

    async def aclose(self) -> None:
        """End every watch of this runtime and stop their followers."""
        for wake in list(self._wakes):
            wake.close()
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._tasks.clear()

    async def _follow_pods(self, swarm: str, wake: _Wake, pod_nodes: dict[str, str]) -> None:
        seen: dict[str, tuple[classifying.FailureReason | None, bool]] = {}
        deadlines: dict[str, datetime] = {}

        def note(kind: str, pod: classifying.Pod, announce: bool) -> None:
            name = pod["metadata"]["name"]
            if kind == "DELETED":
                seen.pop(name, None)
                pod_nodes.pop(name, None)
                deadlines.pop(name, None)
                key = _key(pod)
                if key is None or key not in self._removed:
                    if key is not None:
                        _remember(self._departed, key, pod)
                    # A Pod this runtime removed leaves nothing for a pass to do.
                    wake.relist()
                return
            now = datetime.now(UTC)
            failure = classifying.classify(pod, None, now)
            terminal = classifying.is_terminal(pod)
            node = (pod.get("spec") or {}).get("nodeName")
            if node and not terminal:
                pod_nodes[name] = node
            else:
                pod_nodes.pop(name, None)
            before = seen.get(name, _HEALTHY)
            seen[name] = (failure, terminal)
            if announce and before != (failure, terminal):
                if failure is None or failure is classifying.FailureReason.IMAGE_PULL:
                    # Finished, recovered or stuck pulling (its node may yet say node_lost).
                    wake.relist()
                elif failure != before[0] and (attempt := _attempt(pod, None, now)) is not None:
                    # The worker's own status proves it: no Node can change this reason.
                    wake.failed(attempt)
            deadline = classifying.image_pull_deadline(pod) if failure is None else None
            if deadline is not None and deadlines.get(name) != deadline:
                # Nothing about the Pod may change when its grace runs out: wake then anyway.
                deadlines[name] = deadline
                wake.at(deadline)

        def listed(items: list[classifying.Pod]) -> None:
            seen.clear()
            pod_nodes.clear()
            for pod in items:
                note("ADDED", pod, announce=False)
            wake.started("pods")
            wake.relist()  # whatever happened while nobody watched, the pass now reads it

        await self._follow(
            "pods",
            wake,
            self._core.list_namespaced_pod,
            (self._namespace,),
            {"label_selector": _selector(swarm)},
            listed,
            lambda k, p: note(k, p, True),
        )

    async def _follow_nodes(self, wake: _Wake, pod_nodes: dict[str, str]) -> None:
        ready: dict[str, bool] = {}

        def listed(items: list[classifying.Node]) -> None:
            before = dict(ready)
            ready.clear()
            ready.update({n["metadata"]["name"]: classifying.node_ready(n) for n in items})
            wake.started("nodes")
            if before and any(ready.get(n) != r for n, r in before.items()):
                wake.relist()

        def note(kind: str, node: classifying.Node) -> None:
            name = node["metadata"]["name"]
            now_ready = kind != "DELETED" and classifying.node_ready(node)
            if kind == "DELETED":
                ready.pop(name, None)
            elif ready.get(name) == now_ready:
                return
            else:
                ready[name] = now_ready
            if name in pod_nodes.values():
                wake.relist()

        await self._follow("nodes", wake, self._core.list_node, (), {}, listed, note)

    async def _follow(
        self,
        what: str,
        wake: _Wake,
        method: Callable[..., Awaitable[Any]],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        listed: Callable[[list[Any]], None],
        note: Callable[[str, Any], None],
    ) -> None:
        """List, then watch from the list's resourceVersion; re-list when it is Gone (410)."""
        cursor = _Cursor()
        backoff = _Backoff()
        while True:
            try:
                if cursor.version is None:
                    _, body = await self._request(f"list {what}", method, *args, **kwargs)
                    with _collector_paused():
                        data = orjson.loads(body)
                        listed(data["items"])
                        cursor.version = data["metadata"]["resourceVersion"]
                        del data
                await self._stream(what, method, args, kwargs, cursor, note)
                backoff.reset()
            except _Gone:
                logger.info("watch of %s expired; listing again", what)
                cursor.version = None
            except runtime.PodsUnavailable as exc:
                logger.warning("watch of %s interrupted: %s", what, exc)
                await backoff.sleep(exc.retry_after)
            except runtime.PodsRefused as exc:
                wake.fail(exc)
                return
            except (ValueError, KeyError, TypeError) as exc:
                # A body that is not the JSON Kubernetes sends: say so rather than hang.
                wake.fail(runtime.PodsRefused(f"watch {what}: malformed response ({exc!r:.80})"))
                return

    async def _stream(
        self,
        what: str,
        method: Callable[..., Awaitable[Any]],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        cursor: _Cursor,
        note: Callable[[str, Any], None],
    ) -> None:
        """Read one watch until the server ends it, moving the cursor past each event."""
        try:
            response = await method(
                *args,
                **kwargs,
                watch=True,
                resource_version=cursor.version,
                allow_watch_bookmarks=True,
                timeout_seconds=self._watch_timeout,
                _preload_content=False,
                _request_timeout=aiohttp.ClientTimeout(
                    sock_connect=30, sock_read=self._watch_timeout + 30
                ),
            )
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            raise _unreachable(f"watch {what}", exc) from exc
        try:
            if response.status == 410:
                raise _Gone
            if response.status >= 300:
                raise _error(f"watch {what}", response.status, await response.read(), response)
            while line := await response.content.readline():
                if not line.strip():
                    continue  # a keep-alive newline, not an event
                event = orjson.loads(line)
                kind, obj = event.get("type"), event.get("object") or {}
                if kind == "ERROR":
                    if obj.get("code") == 410:
                        raise _Gone
                    raise _error(f"watch {what}", int(obj.get("code") or 0), json.dumps(obj), None)
                if kind != "BOOKMARK":
                    note(kind, obj)
                cursor.version = (obj.get("metadata") or {}).get(
                    "resourceVersion"
                ) or cursor.version
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            raise _unreachable(f"watch {what}", exc) from exc
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
            raise _error(what, exc.status or 0, b"" if quiet else exc.body, None) from None
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            raise _unreachable(what, exc) from exc
        status = int(response.status)
        if status >= 300 and status not in tolerate:
            raise _error(what, status, b"" if quiet else body, response)
        return status, body


class _Gone(Exception):
    """The watch's resourceVersion is too old (410): list again."""


class _Cursor:
    """Where a watch has read up to (None: list first)."""

    def __init__(self) -> None:
        self.version: str | None = None


_HEALTHY: tuple[classifying.FailureReason | None, bool] = (None, False)
"""What the Pod watch assumes of a Pod it has not seen: no failure, not terminal."""


class _Wake:
    """Coalesced wakes for one watch consumer, with timed wakes and a follower's fatal error.

    No wake is given before every follower has listed once: a change in between would be in
    neither the pass the first wake starts nor any event.
    """

    def __init__(self, followers: set[str]) -> None:
        self._unlisted = set(followers)
        self._event = asyncio.Event()
        self._poke = asyncio.Event()
        self._deadlines: list[datetime] = []
        self._error: runtime.PodsError | None = None
        self._closed = False
        self._failed: dict[str, runtime.Attempt] = {}
        self._relist = False

    def relist(self) -> None:
        self._relist = True
        self._set()

    def failed(self, attempt: runtime.Attempt) -> None:
        self._failed[attempt.execution_id] = attempt
        self._set()

    def _set(self) -> None:
        self._event.set()
        self._poke.set()

    def _take(self) -> runtime.Change:
        change = runtime.Change(tuple(self._failed.values()), self._relist)
        self._failed, self._relist = {}, False
        return change

    def started(self, follower: str) -> None:
        self._unlisted.discard(follower)
        self._poke.set()

    def at(self, when: datetime) -> None:
        heapq.heappush(self._deadlines, when)
        self._poke.set()

    def fail(self, error: runtime.PodsError) -> None:
        self._error = error
        self._set()

    def close(self) -> None:
        self._closed = True
        self._set()

    async def wait(self) -> runtime.Change | None:
        """Wait for the next wake; None once the watch is closed."""
        while True:
            if self._error is not None:
                raise self._error
            if self._closed:
                return None
            if self._unlisted:
                self._poke.clear()
                await self._poke.wait()
                continue
            if self._event.is_set():
                self._event.clear()
                return self._take()
            now = datetime.now(UTC)
            if self._deadlines and self._deadlines[0] <= now:
                while self._deadlines and self._deadlines[0] <= now:
                    heapq.heappop(self._deadlines)
                self._relist = True
                return self._take()
            timeout = (self._deadlines[0] - now).total_seconds() if self._deadlines else None
            self._poke.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._poke.wait(), timeout)


class _Backoff:
    def __init__(self) -> None:
        self._delay = 0.2

    def reset(self) -> None:
        self._delay = 0.2

    async def sleep(self, hint: float | None = None) -> None:
        delay = hint if hint is not None else self._delay * random.uniform(0.5, 1.5)
        self._delay = min(self._delay * 2, 10.0)
        await asyncio.sleep(delay)


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


def _key(pod: classifying.Pod) -> _Key | None:
    labels = pod.get("metadata", {}).get("labels") or {}
    swarm, execution = labels.get(runtime.LABEL_SWARM), labels.get(runtime.LABEL_EXECUTION)
    return (swarm, execution) if swarm and execution else None


def _attempt(
    pod: classifying.Pod, nodes: Mapping[str, classifying.Node] | None, now: datetime
) -> runtime.Attempt | None:
    labels = pod.get("metadata", {}).get("labels") or {}
    try:
        return runtime.Attempt(
            swarm=labels[runtime.LABEL_SWARM],
            seat=labels[runtime.LABEL_SEAT],
            execution_id=labels[runtime.LABEL_EXECUTION],
            generation=int(labels[runtime.LABEL_GENERATION]),
            failure=classifying.classify(pod, nodes, now),
            alive=not classifying.is_terminal(pod),
        )
    except (KeyError, ValueError):
        # Not one of ours after all (someone copied the managed-by label): not an attempt.
        logger.warning("ignoring Pod %s: its attempt labels are incomplete", _name(pod))
        return None


def _name(pod: classifying.Pod) -> str:
    return pod.get("metadata", {}).get("name", "?")


def _remember(memory: collections.OrderedDict[_Key, Any], key: _Key, value: Any) -> None:
    memory[key] = value
    memory.move_to_end(key)
    while len(memory) > _MEMORY:
        memory.popitem(last=False)


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
