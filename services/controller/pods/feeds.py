"""Where one shared watch hands its lists, events and refusals, and whether its cache may be read.

`kubernetes.KubernetesRuntime` follows each watch (`watching`) and feeds what it reads into a
`Feed`; `informing.Informer` builds one per watch and reads its `Sync` before it serves a list
from the cache.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from services.controller.pods import runtime


class Sync:
    """Whether one watch's cache may be read: listed, and its watch unbroken since.

    Until its first list ends, and while it lists again after 410 Gone, readers wait for the
    list (one list serves every swarm). While the watch is broken (dropped and not yet back, or
    refused), `ready` says no and readers list for themselves, as without a watch: they see
    what the API server says, errors included.
    """

    def __init__(self) -> None:
        self.synced = False
        """Listed once: a subscriber's first wake may come (what it missed, a pass reads)."""
        self._live = False
        self._settled = asyncio.Event()

    def listed(self) -> None:
        self.synced = self._live = True
        self._settled.set()

    def opened(self) -> None:
        """The watch is streaming again from where the cache is."""
        self._live = self.synced
        self._settled.set()

    def relisting(self) -> None:
        self._live = False
        self._settled.clear()

    def broken(self) -> None:
        self._live = False
        self._settled.set()

    async def ready(self) -> bool:
        await self._settled.wait()
        return self._live


@dataclasses.dataclass(frozen=True)
class Feed:
    """Where one watch's lists, events and refusals go, and whether its cache may be read."""

    sync: Sync
    listed: Callable[[Iterable[Mapping[str, Any]], bool, float], None]
    """A list of every object: its items, whether fresh (see `Informer.pods_listed`), and the
    monotonic time it began."""
    note: Callable[[str, Mapping[str, Any]], None]
    """One ADDED / MODIFIED / DELETED event."""
    fail: Callable[[runtime.PodsError], None]
    """The watch was refused."""
