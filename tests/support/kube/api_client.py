"""Talking to the API server as the cluster's own components do: JSON over HTTP and informers.

The kubelet, the scheduler, the workload controllers, cert-manager and the Service proxy of
these tests reach the API server only through its REST API, as their real counterparts do.
`ApiServer` makes one call (retried when a retry can fix it) or one watch request; `inform` lists
and watches a collection forever, as an informer; `cancel_tasks` stops such loops for good.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping
from typing import Any

import aiohttp

log = logging.getLogger("tests.kubelet")


class ApiStatusError(Exception):
    """An API call answered with an error Status."""

    def __init__(self, code: int, body: Any):
        message = body.get("message") if isinstance(body, dict) else str(body)
        super().__init__(f"{code}: {message}")
        self.code, self.body = code, body


class _Gone(Exception):
    """A watch's resourceVersion is too old: list again."""


class ApiServer:
    """JSON over HTTP to the API server, with retries for what a retry can fix."""

    def __init__(self, url: str):
        self.url = url.rstrip("/")
        self.session: aiohttp.ClientSession | None = None

    async def open(self) -> None:
        if self.session is None:
            self.session = aiohttp.ClientSession(
                timeout=aiohttp.ClientTimeout(total=None, sock_connect=30, sock_read=None)
            )

    async def close(self) -> None:
        if self.session is not None:
            await self.session.close()
            self.session = None

    async def call(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        params: Mapping[str, str] | None = None,
        content_type: str = "application/json",
        attempts: int = 8,
    ) -> Any:
        """One call; 5xx, 429 and connection errors are retried with back-off.

        Raises:
            ApiStatusError: Any other error answer (404, 409, 422...), or the last retried one.
        """
        assert self.session is not None
        delay = 0.05
        for attempt in range(attempts):
            try:
                async with self.session.request(
                    method,
                    self.url + path,
                    params=params,
                    data=None if body is None else json.dumps(body),
                    headers={"Content-Type": content_type, "Accept": "application/json"},
                    timeout=aiohttp.ClientTimeout(total=60),
                ) as response:
                    text = await response.text()
                    payload = json.loads(text) if text else None
                    if response.status < 400:
                        return payload
                    error = ApiStatusError(response.status, payload)
                    if response.status not in (429, 500, 502, 503, 504):
                        raise error
            except (aiohttp.ClientError, TimeoutError, OSError) as exc:
                error = ApiStatusError(0, {"message": str(exc)})
            if attempt + 1 < attempts:
                await asyncio.sleep(delay)
                delay = min(delay * 2, 2.0)
        raise error

    async def get(self, path: str) -> Any:
        """The object, or None when it does not exist."""
        try:
            return await self.call("GET", path)
        except ApiStatusError as exc:
            if exc.code == 404:
                return None
            raise

    async def watch(self, path: str, params: Mapping[str, str]) -> AsyncIterator[tuple[str, Any]]:
        """The events of one watch request until the server ends it."""
        assert self.session is not None
        async with self.session.get(
            self.url + path,
            params={**params, "watch": "true"},
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=30, sock_read=None),
        ) as response:
            if response.status == 410:
                raise _Gone
            if response.status >= 400:
                raise ApiStatusError(response.status, await response.text())
            while True:
                line = await response.content.readline()
                if not line:
                    return
                if not line.strip():
                    continue
                event = json.loads(line)
                if event.get("type") == "ERROR":
                    if (event.get("object") or {}).get("code") == 410:
                        raise _Gone
                    raise ApiStatusError(
                        int((event.get("object") or {}).get("code") or 500), event.get("object")
                    )
                yield event["type"], event["object"]


async def inform(
    api: ApiServer,
    path: str,
    params: Mapping[str, str],
    handle: Callable[[str, dict[str, Any]], Awaitable[None]],
) -> None:
    """List and watch `path` forever, as an informer: `handle` gets ADDED, MODIFIED and DELETED
    (a list after a 410 Gone reports what vanished meanwhile as DELETED)."""
    known: dict[str, dict[str, Any]] = {}
    delay = 0.1
    while True:
        try:
            listing = await api.call("GET", path, params=params, attempts=1)
            version = listing["metadata"]["resourceVersion"]
            items = {item["metadata"]["uid"]: item for item in listing.get("items") or ()}
            for uid in [u for u in known if u not in items]:
                await handle("DELETED", known.pop(uid))
            for uid, item in items.items():
                await handle("MODIFIED" if uid in known else "ADDED", item)
            known = items
            delay = 0.1
            while True:
                watch = {
                    **params,
                    "resourceVersion": version,
                    "allowWatchBookmarks": "true",
                    "timeoutSeconds": "300",
                }
                async for kind, obj in api.watch(path, watch):
                    version = obj.get("metadata", {}).get("resourceVersion") or version
                    if kind == "BOOKMARK":
                        continue
                    uid = obj["metadata"]["uid"]
                    if kind == "DELETED":
                        known.pop(uid, None)
                    else:
                        known[uid] = obj
                    await handle(kind, obj)
        except _Gone:
            continue
        except (ApiStatusError, aiohttp.ClientError, OSError, TimeoutError, ValueError) as exc:
            log.debug("watch of %s failed (%s); listing again", path, exc)
            await asyncio.sleep(delay)
            delay = min(delay * 2, 2.0)


async def cancel_tasks(tasks: Iterable[asyncio.Task[Any]], *, rounds: int = 24) -> None:
    """Cancel tasks and wait until they end, cancelling again any that swallowed it (Python
    3.11's ``asyncio.wait_for`` can, when what it waits for ends at the same moment)."""
    pending = {t for t in tasks if not t.done()}
    for _ in range(rounds):
        if not pending:
            return
        for task in pending:
            task.cancel()
        _, pending = await asyncio.wait(pending, timeout=2)
    if pending:
        names = sorted(t.get_name() for t in pending)
        log.error("tasks that ignore cancellation are left running: %s", names)
