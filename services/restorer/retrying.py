"""The one retry policy of the restorer's calls to the controller and the checkpoint store.

Only transport trouble is retried (the peer is not there yet, a connection dropped, a deadline
passed); a refusal is an answer and is never retried. The policy is an object, not a loop
sprinkled around calls, so tests can make it instant.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Awaitable, Callable
from typing import TypeVar

import grpc

T = TypeVar("T")

TRANSIENT = frozenset(
    {grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.ABORTED}
)


@dataclasses.dataclass(frozen=True)
class Retry:
    """Exponential backoff: `attempts` tries, the first wait `base_s`, each wait doubled."""

    attempts: int = 5
    base_s: float = 0.2
    cap_s: float = 5.0

    def delays(self) -> list[float]:
        """The waits between tries."""
        return [min(self.cap_s, self.base_s * 2**n) for n in range(self.attempts - 1)]

    async def call(self, operation: Callable[[], Awaitable[T]]) -> T:
        """Run `operation`, retrying transient gRPC errors; the last error propagates."""
        for delay in self.delays():
            try:
                return await operation()
            except grpc.aio.AioRpcError as error:
                if error.code() not in TRANSIENT:
                    raise
            await asyncio.sleep(delay)
        return await operation()


DEFAULT = Retry()
NONE = Retry(attempts=1)


def reason_of(error: grpc.aio.AioRpcError) -> str:
    """The spec reason a peer sent in the `agentihooks-reason` trailer, or the status name."""
    for key, value in error.trailing_metadata() or ():
        if key == "agentihooks-reason" and isinstance(value, str):
            return value
    return str(error.code().name).lower()


def bearer(token: str) -> tuple[tuple[str, str], ...]:
    """Call metadata carrying `token` as `authorization: Bearer …`."""
    return (("authorization", f"Bearer {token}"),)
