"""The one Redis script runner: every mutation of recovery state is one Lua script run here.

Scripts live in `scripts/*.lua`, one per transition. Every mutating script is prefixed with
`_prelude.lua`, which checks that the lease still names this holder and epoch before anything
else and otherwise writes nothing and returns `lease_lost`; the runner turns that into
`LeaseLost`. Scripts are loaded once (SCRIPT LOAD) and called by hash (EVALSHA) through
redis-py's `register_script`, which reloads a script a restarted Redis forgot.
"""

from __future__ import annotations

import importlib.resources
import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

import redis.asyncio as aioredis
from redis.commands.core import AsyncScript

LEASE_LOST: Final = "lease_lost"

_UNGUARDED: Final = frozenset({"lease_acquire"})
"""Scripts without the lease check: acquiring is what makes a holder."""

SCRIPT_NAMES: Final = (
    "lease_acquire",
    "lease_renew",
    "lease_release",
    "apply_swarm",
    "fence",
    "release",
    "pend",
    "accept",
    "launched",
    "capture",
    "outcome",
    "refusal",
    "request",
    "drop_request",
    "pause",
    "settle",
)


class LeaseLost(Exception):
    """This controller no longer holds the swarm's lease (or its epoch moved on): it wrote
    nothing and must stop its pass."""


def _source(name: str) -> str:
    folder = importlib.resources.files(__package__).joinpath("scripts")
    body = folder.joinpath(f"{name}.lua").read_text(encoding="utf-8")
    if name in _UNGUARDED:
        return body
    return folder.joinpath("_prelude.lua").read_text(encoding="utf-8") + "\n" + body


_SOURCES: Final = {name: _source(name) for name in SCRIPT_NAMES}

AfterWrite = Callable[[str, Mapping[str, Any]], None]
"""A test hook called with each script's name and reply after it ran on Redis (it may raise to
simulate a crash right there)."""


class Scripts:
    """The registered scripts of one Redis client.

    Args:
        client: The Redis client (text or bytes responses both work).
        after_write: Called with the script's name and reply after each guarded script
            ran on Redis.
    """

    def __init__(self, client: aioredis.Redis, *, after_write: AfterWrite | None = None) -> None:
        self._scripts: dict[str, AsyncScript] = {
            name: client.register_script(source) for name, source in _SOURCES.items()
        }
        self.after_write = after_write

    async def acquire(self, lease_key: str, epoch_key: str, holder: str, ttl_ms: int) -> int | None:
        """Run the lease acquisition; the new epoch, or None when someone else holds it."""
        result = await self._scripts["lease_acquire"](
            keys=[lease_key, epoch_key], args=[holder, ttl_ms]
        )
        return None if result is None else int(result)

    async def run(
        self,
        name: str,
        *,
        holder: str,
        epoch: int | None,
        keys: Sequence[str],
        args: Sequence[str | int],
    ) -> dict[str, Any]:
        """Run a guarded script under the lease and return its decoded reply.

        Args:
            name: The script (a file name under `scripts/`, without `.lua`).
            holder: This controller's lease holder id.
            epoch: The epoch of its acquisition; None when it never acquired.
            keys: The lease key, the epoch key, then the script's own keys.
            args: The script's own arguments (after holder and epoch).

        Returns:
            The script's JSON reply; lists that Lua left empty come back as `[]`.

        Raises:
            LeaseLost: the lease no longer names this holder and epoch; nothing was written.
        """
        if epoch is None:
            raise LeaseLost(name)
        raw = await self._scripts[name](keys=list(keys), args=[holder, epoch, *args])
        text = raw.decode() if isinstance(raw, bytes) else str(raw)
        if text == LEASE_LOST:
            raise LeaseLost(name)
        reply: dict[str, Any] = json.loads(text)
        # cjson writes an empty Lua table as {}: every list-valued field reads as a list.
        for field in ("events", "admitted", "updated"):
            if reply.get(field) == {}:
                reply[field] = []
        if self.after_write is not None:
            self.after_write(name, reply)
        return reply
