"""Kubernetes Events posted for notices, best effort: never blocking, never raising.

`EventRecorder.record` only puts a notice on a bounded queue (a full queue drops it, counted and
logged once). One task takes them and finds the Pod each is about (an Event about a Pod that may
not be created yet, the replacement a decision admitted, waits up to `HOLD_S` for it: `kubectl
describe pod` finds an Event by the Pod's uid), aggregates and rate-limits them (`correlation`)
and posts them with the `events.k8s.io/v1` API: `create`, and `patch` of a repeated Event's
series (AlreadyExists on create: another replica posted it, patched when it repeated here;
NotFound on a patch: created again). The calls go through a client of their own with one
connection and a short timeout: an Events API that fails or hangs costs recovery nothing, not
even a connection of the runtime's pool, and it never changes whether the runtime counts the
API as available. A failure is logged once per kind of failure (call and status or exception
type) and never raised. What is left on the queue when the recorder stops is dropped.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import dataclasses
import logging
import time
from collections.abc import Callable
from typing import Any

import aiohttp
import orjson
from kubernetes_asyncio import client
from kubernetes_asyncio.client import exceptions

from services.common import logs, waiting
from services.controller.pods import correlation, event_bodies, notices

logger = logging.getLogger(__name__)

QUEUE = 1000
"""Notices waiting to be posted at most; more are dropped."""

FLUSH_S = 1.0
"""How often Events held back by their Pod's bucket are looked at again."""

TIMEOUT_S = 5.0
"""The longest one Events call may take."""

HOLD_S = 10.0
"""How long an Event about a Pod that may not be created yet (`notices.Notice.pod_pending`)
waits for it; then it is posted without the Pod's uid (``kubectl get events`` shows it,
``kubectl describe pod`` does not)."""

_TEMPORARY = frozenset({0, 429, 500, 502, 503, 504})

Resolve = Callable[[str, str], event_bodies.PodRef]
"""(swarm, execution id) -> the attempt's Pod, with its uid when the runtime knows it."""


@dataclasses.dataclass(frozen=True)
class _Pending:
    """A notice queued at monotonic time `since`, on its Pod when the caller knew it."""

    notice: notices.Notice
    regarding: event_bodies.PodRef | None
    since: float


class EventRecorder:
    """Posts notices as Events on the workers' Pods (see the module docstring).

    Args:
        api_client: The runtime's client; the recorder makes one of its own from its
            configuration (one connection) and closes it.
        namespace: The workers' namespace.
        resolve: Finds an attempt's Pod.
        queue_size: Notices waiting at most.
        correlator: Aggregation and rate limits (client-go's by default).
        flush_s: How often held-back Events are looked at again.
        timeout_s: The longest one call may take.
    """

    def __init__(
        self,
        api_client: client.ApiClient,
        namespace: str,
        resolve: Resolve,
        *,
        queue_size: int = QUEUE,
        correlator: correlation.Correlator | None = None,
        flush_s: float = FLUSH_S,
        timeout_s: float = TIMEOUT_S,
    ) -> None:
        self._source = api_client
        self._namespace = namespace
        self._resolve = resolve
        self._queue: asyncio.Queue[_Pending] = asyncio.Queue(queue_size)
        self.correlator = correlator or correlation.Correlator()
        self._flush_s = flush_s
        self._timeout = aiohttp.ClientTimeout(total=timeout_s)
        self._instance: str | None = None
        self._client: client.ApiClient | None = None
        self._events: client.EventsV1Api | None = None
        self._task: asyncio.Task[None] | None = None
        self._logged: set[str] = set()
        self._held: list[_Pending] = []
        self.posted = 0
        """Calls the API server accepted (creates and patches)."""
        self.dropped = 0
        """Notices dropped: the queue was full, or the recorder was not running."""
        self.failed = 0
        """Calls that failed."""

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    def start(self, instance: str) -> None:
        """Post from now on as `instance` (the Events' `reportingInstance`: the holder id)."""
        if self._task is not None:
            return
        self._instance = instance
        configuration = copy.deepcopy(self._source.configuration)
        configuration.connection_pool_maxsize = 1
        self._client = type(self._source)(configuration)
        self._events = client.EventsV1Api(self._client)
        self._task = asyncio.get_running_loop().create_task(self._run(), name="kubernetes-events")

    def record(self, notice: notices.Notice, regarding: event_bodies.PodRef | None = None) -> None:
        """Queue an Event for `notice` on its Pod (`regarding`, else the attempt's Pod as the
        runtime knows it when the Event is posted); never blocks, never raises."""
        if self._instance is None or not self.running:
            self.dropped += 1
            return
        try:
            self._queue.put_nowait(_Pending(notice, regarding, time.monotonic()))
        except asyncio.QueueFull:
            self.dropped += 1
            self._once("queue", "kubernetes_events_dropped", queue=self._queue.maxsize)

    async def aclose(self) -> None:
        """Stop posting; what is still queued is dropped."""
        task, self._task = self._task, None
        if task is not None:
            await waiting.cancel([task])
        api, self._client, self._events = self._client, None, None
        if api is not None:
            await api.close()
        self.dropped += self._queue.qsize() + len(self._held)
        self._held = []
        while not self._queue.empty():
            self._queue.get_nowait()

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        flush_at = loop.time() + self._flush_s
        while True:
            try:
                async with asyncio.timeout(max(0.0, flush_at - loop.time())):
                    pending: _Pending | None = await self._queue.get()
            except TimeoutError:
                pending = None
            if pending is not None:
                await self._observe(pending)
            if loop.time() >= flush_at:
                held, self._held = self._held, []
                for waiting in held:
                    await self._observe(waiting)
                for post in self.correlator.due():
                    await self._send(post)
                flush_at = loop.time() + self._flush_s

    async def _observe(self, pending: _Pending) -> None:
        """One occurrence: its Event's body, aggregated and posted (or held back by its Pod's
        bucket). An Event about a Pod that may not be created yet (`Notice.pod_pending`: a
        replacement) waits up to `HOLD_S` for it, so that ``kubectl describe pod`` finds it."""
        try:
            notice = pending.notice
            regarding = pending.regarding or self._resolve(notice.swarm, notice.execution_id)
            waiting = notice.pod_pending and time.monotonic() - pending.since < HOLD_S
            if regarding.uid is None and waiting:
                if len(self._held) < self._queue.maxsize:
                    self._held.append(pending)
                else:
                    self.dropped += 1
                return
            related = None
            if notice.related_execution_id:
                related = self._resolve(notice.swarm, notice.related_execution_id)
            assert self._instance is not None
            body = event_bodies.event(
                notice,
                namespace=self._namespace,
                instance=self._instance,
                regarding=regarding,
                related=related,
            )
        except Exception as exc:  # a bug here must not end the recorder
            self.dropped += 1
            kind = type(exc).__name__
            self._once(f"event:{kind}", "kubernetes_event_failed", call="event", exception=kind)
            return
        post = self.correlator.observe(body)
        if post is not None:
            await self._send(post)

    async def _send(self, post: correlation.Post) -> None:
        """Make one planned call and tell the correlator how it went."""
        assert self._events is not None
        call = "create" if isinstance(post, correlation.Create) else "patch"
        try:
            if isinstance(post, correlation.Create):
                request = self._events.create_namespaced_event(
                    self._namespace,
                    dict(post.body),
                    _preload_content=False,
                    _request_timeout=self._timeout,
                )
            else:
                request = self._events.patch_namespaced_event(
                    post.name,
                    self._namespace,
                    {"series": dict(post.series)},
                    _preload_content=False,
                    _request_timeout=self._timeout,
                )
            status = await _status(request)
        except Exception as exc:
            self.failed += 1
            self._once(
                f"{call}:{type(exc).__name__}",
                "kubernetes_event_failed",
                call=call,
                exception=type(exc).__name__,
            )
            self.correlator.failed(post, temporary=True)
            return
        if status < 300:
            self.posted += 1
            self._logged.clear()  # it works again: a new failure is worth a line
            self.correlator.sent(post)
        elif status == 409 and isinstance(post, correlation.Create):
            self.correlator.exists(post)
        elif status == 404 and isinstance(post, correlation.PatchSeries):
            self.correlator.missing(post)
        else:
            self.failed += 1
            self._once(f"{call}:{status}", "kubernetes_event_failed", call=call, code=status)
            self.correlator.failed(post, temporary=status in _TEMPORARY)

    def _once(self, kind: str, event: str, **fields: Any) -> None:
        """Log one line per kind of failure until a call succeeds again."""
        if kind in self._logged:
            return
        self._logged.add(kind)
        logs.event(logger, event, logging.WARNING, namespace=self._namespace, **fields)


async def _status(request: Any) -> int:
    """The status of one call made with ``_preload_content=False`` (its body read and
    released); a timeout, an unreachable API or a client error raises."""
    try:
        response = await request
    except exceptions.ApiException as exc:
        return int(exc.status or 0)
    try:
        body = await response.read()
    finally:
        response.release()
    status = int(response.status)
    if status == 409:
        # AlreadyExists, not a Conflict on a stale version (the recorder sends none).
        with contextlib.suppress(ValueError, TypeError, AttributeError):
            if orjson.loads(body).get("reason") not in (None, "AlreadyExists"):
                return 422
    return status
