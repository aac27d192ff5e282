"""Reading collections as the API server serves them: lists (selectors, ``limit`` and
``continue``), Tables for kubectl, and watches (replay from a resourceVersion, bookmarks, 410
for a compacted one, a filtered watch's ADDED and DELETED as objects enter and leave it)."""

from __future__ import annotations

import asyncio
import base64
import binascii
import json
from collections.abc import Callable, Mapping
from typing import Any

from aiohttp import web

from tests.support.kube.apiserver import (
    errors,
    kinds,
    selectors,
    store,
    tables,
    watches,
)
from tests.support.kube.apiserver import events as k8s_events


class Lister:
    """Serves lists, Tables and watches from one `store.Store`."""

    def __init__(
        self, objects: store.Store, flowing: asyncio.Event, *, gone_as_status: bool
    ) -> None:
        """Args:
        objects: The store to read.
        flowing: Cleared while watches are paused (`K8sEmulator.pause_watches`).
        gone_as_status: Answer a watch from a compacted resourceVersion with HTTP 410.
        """
        self.store = objects
        self.flowing = flowing
        self.gone_as_status = gone_as_status

    def list(self, request: web.Request, resource: str, namespace: str | None) -> web.Response:
        labels = selectors.parse_labels(request.query.get("labelSelector", ""))
        fields = selectors.parse_fields(request.query.get("fieldSelector", ""))
        keys = sorted(
            k for k in self.store.by_resource[resource] if namespace is None or k[0] == namespace
        )
        start = request.query.get("continue")
        if start:
            try:
                after = tuple(json.loads(base64.urlsafe_b64decode(start)))
            except (ValueError, binascii.Error) as exc:
                raise errors.ApiError(400, "continue key is not valid") from exc
            keys = [k for k in keys if k > after]
        limit = int(request.query.get("limit") or 0)
        raws: list[bytes] = []
        more, token, last = "", "", ("", "")
        for key in keys:
            entry = self.store.by_resource[resource][key]
            if selectors.matches(entry.obj, labels, fields):
                if limit and len(raws) == limit:
                    token = base64.urlsafe_b64encode(json.dumps(list(last)).encode()).decode()
                    more = f',"continue":"{token}"'
                    break
                raws.append(entry.raw)
                last = key
        if resource in ("pods", "events") and "as=Table" in request.headers.get("Accept", ""):
            shown = [json.loads(raw) for raw in raws]
            if resource == "events":
                return self.table(request, shown, token, k8s_events.COLUMNS, k8s_events.cells)
            return self.table(request, shown, token)
        kind, _, version = kinds.KINDS[resource]
        head = f'{{"kind":"{kind}List","apiVersion":"{version}","metadata":{{"resourceVersion":'
        body = b"".join(
            (f'{head}"{self.store.rv}"{more}}},"items":['.encode(), b",".join(raws), b"]}")
        )
        return web.Response(body=body, content_type="application/json")

    def table(
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
            rows.append({"cells": (cells or tables.pod_cells)(pod), "object": shown})
        columns = columns or [
            ("Name", "string", 0),
            ("Ready", "string", 0),
            ("Status", "string", 0),
            ("Restarts", "string", 0),
            ("Age", "string", 0),
            ("IP", "string", 1),
            ("Node", "string", 1),
        ]
        meta: dict[str, Any] = {"resourceVersion": str(self.store.rv)}
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
        return errors.json_response(200, table)

    async def watch(
        self, request: web.Request, resource: str, namespace: str | None
    ) -> web.StreamResponse:
        labels = selectors.parse_labels(request.query.get("labelSelector", ""))
        fields = selectors.parse_fields(request.query.get("fieldSelector", ""))
        since = request.query.get("resourceVersion") or "0"
        bookmarks = request.query.get("allowWatchBookmarks", "").lower() in ("true", "1")
        timeout = float(request.query.get("timeoutSeconds") or 1800)
        if not since.isdigit():
            raise errors.ApiError(400, f"invalid resource version {since!r}")
        gone = since != "0" and int(since) < self.store.compacted
        if gone and self.gone_as_status:
            raise errors.ApiError(
                410, f"too old resource version: {since} ({self.store.compacted})"
            )
        response = web.StreamResponse(headers={"Content-Type": "application/json"})
        response.enable_chunked_encoding()
        await response.prepare(request)
        if gone:
            status = errors.status_body(
                errors.ApiError(410, f"too old resource version: {since} ({self.store.compacted})")
            )
            await response.write(json.dumps({"type": "ERROR", "object": status}).encode() + b"\n")
            return response
        watcher = watches.Watcher(
            resource, namespace, labels, fields, asyncio.Queue(), request.transport
        )
        # Built and registered with no await between, so no event falls in a gap.
        if since == "0":
            backlog = [
                watches.line("ADDED", e.raw)
                for e in self.store.by_resource[resource].values()
                if watches.visible(watcher, e.obj)
            ]
        else:
            backlog = [
                line
                for e in self.store.history
                if e.rv > int(since)
                and e.resource == resource
                and (line := watches.event_line(watcher, e)) is not None
            ]
        self.store.watchers.add(watcher)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        try:
            for line in backlog:
                await self.flowing.wait()
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
                await self.flowing.wait()
                await response.write(line)
            if bookmarks:
                mark = {"kind": kinds.KINDS[resource][0], "apiVersion": kinds.KINDS[resource][2]}
                mark["metadata"] = {"resourceVersion": str(self.store.rv)}  # type: ignore[assignment]
                await response.write(watches.line("BOOKMARK", json.dumps(mark).encode()))
        except (ConnectionError, RuntimeError):
            pass  # the client went away
        finally:
            self.store.watchers.discard(watcher)
        return response
