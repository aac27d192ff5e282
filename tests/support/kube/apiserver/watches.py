"""What the API server keeps to serve watches: stored entries, the events of each write, the open
watches with their selectors, and the lines a watch streams."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Mapping
from typing import Any

from tests.support.kube.apiserver import selectors


@dataclasses.dataclass
class Entry:
    obj: dict[str, Any]
    raw: bytes


@dataclasses.dataclass
class Event:
    rv: int
    resource: str
    type: str
    old: dict[str, Any] | None
    new: dict[str, Any]
    raw: bytes


@dataclasses.dataclass(eq=False)
class Watcher:
    resource: str
    namespace: str | None
    labels: list[tuple[str, str, frozenset[str]]]
    fields: list[tuple[str, str, str]]
    queue: asyncio.Queue[bytes | None]
    transport: asyncio.BaseTransport | None


def visible(watcher: Watcher, obj: Mapping[str, Any]) -> bool:
    namespace = obj.get("metadata", {}).get("namespace")
    if watcher.namespace is not None and namespace != watcher.namespace:
        return False
    return selectors.matches(obj, watcher.labels, watcher.fields)


def event_line(watcher: Watcher, event: Event) -> bytes | None:
    now_in = visible(watcher, event.new)
    was_in = event.old is not None and visible(watcher, event.old)
    if event.type == "DELETED":
        return line("DELETED", event.raw) if was_in else None
    if event.type == "ADDED" or not was_in:
        return line("ADDED", event.raw) if now_in else None
    return line("MODIFIED" if now_in else "DELETED", event.raw)


def line(kind: str, raw: bytes) -> bytes:
    return b'{"type":"' + kind.encode() + b'","object":' + raw + b"}\n"
