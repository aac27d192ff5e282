"""The shared watches, client-go reflector style: list, then watch from the list's
resourceVersion.

`kubernetes.KubernetesRuntime` follows one Pod watch (label-selected to the Pods it manages)
and one Node watch, each feeding an `informing.Informer` through its `feeds.Feed`. A watch lists
again on 410 Gone and every resync period, and watches again after a drop, with a backoff.
While the API does not answer, both wait out the steps of one backoff (`availability.Health`).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import gc
import json
import logging
import math
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import aiohttp
import orjson

from services.common import logs
from services.controller.pods import api_errors, availability, feeds, runtime

logger = logging.getLogger(__name__)

Request = Callable[..., Awaitable[tuple[int, bytes]]]
"""One API call made as the runtime makes it (`KubernetesRuntime._request`)."""


@dataclasses.dataclass(frozen=True)
class Reflector:
    """How the runtime's watches list and watch: through its calls, its health and its periods.

    Args:
        request: The runtime's one API call (its lists go through it).
        health: Whether the API answers; the watches share its backoff while it does not.
        resync_period: Seconds between two lists (a backstop: a watch that works misses
            nothing).
        watch_timeout: Seconds the API server keeps one watch open before we renew it.
    """

    request: Request
    health: availability.Health
    resync_period: float
    watch_timeout: int

    async def follow(
        self,
        what: str,
        feed: feeds.Feed,
        list_method: Callable[..., Awaitable[Any]],
        watch_method: Callable[..., Awaitable[Any]],
        *args: Any,
        **kwargs: Any,
    ) -> None:
        """List, then watch from the list's resourceVersion; list again when it is Gone (410)
        and every resync period; watch again after a drop, after a backoff (shared by both
        watches while the API does not answer)."""
        sync = feed.sync
        loop = asyncio.get_running_loop()
        cursor = _Cursor()
        backoff = availability.backoff()
        resync_at = loop.time()
        while True:
            try:
                if cursor.version is None or loop.time() >= resync_at:
                    began = time.monotonic()
                    _, body = await self.request(f"list {what}", list_method, *args, **kwargs)
                    with collector_paused():
                        data = orjson.loads(body)
                        del body
                        version = data["metadata"]["resourceVersion"]
                        # Fresh unless the watch ran unbroken up to this list (a resync).
                        feed.listed(data["items"], cursor.version is None, began)
                        del data
                    cursor.version = version
                    sync.listed()
                    resync_at = loop.time() + self.resync_period
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
                await self.health.step(what, exc)
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
        feed: feeds.Feed,
        seconds: float,
    ) -> None:
        """Read one watch until the server ends it (at most `seconds` on), moving the cursor
        past each event."""
        timeout = max(1, min(self.watch_timeout, math.ceil(seconds)))
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
            self.health.lost()
            raise api_errors.unreachable(f"watch {what}", exc) from exc
        self.health.heard(response.status)
        # A backstop for a server that keeps a busy watch open past its timeoutSeconds: the
        # resync is due then.
        backstop = asyncio.timeout(timeout + 30)
        try:
            if response.status == 410:
                raise _Gone
            if response.status >= 300:
                raise api_errors.error(
                    f"watch {what}", response.status, await response.read(), response
                )
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
                        raise api_errors.error(
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


class _Gone(Exception):
    """The watch's resourceVersion is too old (410): list again."""


class _Dropped(Exception):
    """An open watch was cut mid-stream (the connection, not an answer): watch again."""


class _Cursor:
    """Where a watch has read up to (None: list first)."""

    def __init__(self) -> None:
        self.version: str | None = None


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
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
