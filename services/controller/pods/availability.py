"""Whether the Kubernetes API answers, as the runtime's calls and watches find it.

Whether the API answers is a state (`kubernetes.KubernetesRuntime.api_available`, followed with
`subscribe`): every answer and every failure to get one sets it (`Health.heard`,
`Health.lost`). While it does not answer, the watches wait with a backoff they share and log
one JSON line per step (``kubernetes_unavailable``, with the API's host:port and the
exception's type, never a credential), and one line when it answers again
(``kubernetes_available``).
"""

from __future__ import annotations

import asyncio
import logging
import time
import urllib.parse
from typing import Any

from services.common import logs, waiting
from services.controller.pods import api_errors, runtime

logger = logging.getLogger(__name__)


def backoff() -> waiting.Backoff:
    """Jittered waits from 0.2 s, doubling up to 10 s (many controllers do not retry in step)."""
    return waiting.Backoff(0.2, 10.0, jitter=0.5)


class Health:
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
        self._backoff = backoff()
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

    def heard(self, status: int) -> None:
        """What one answer says of the API: a temporary error status is as good as none."""
        if status in api_errors.TEMPORARY:
            self.lost()
        else:
            self.answered()

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


def address(host: str) -> str:
    """The API's host:port from the client's URL (nothing else of it: no credential)."""
    parts = urllib.parse.urlsplit(host)
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        port = 0
    name = parts.hostname or "?"
    return f"[{name}]:{port}" if ":" in name else f"{name}:{port}"
