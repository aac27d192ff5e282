"""Writing one capturer's checkpoints into the attempt's store: objects first, the record last.

A checkpoint takes the next sequence whose id is free (a stored checkpoint is authoritative and
is never written over: another capturer may share the scope). Once written, `Validator.verify`
runs on it; between full verifications, at most `full_verify_s` apart, a writer that extends
its own verified checkpoint reads back only the objects it just wrote
(`Validator.verify_written`).
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import AsyncIterator
from typing import Any

from services.common import logs
from services.common.checkpoints import records, storing, validation
from services.restorer import captures, launching

log = logging.getLogger("services.restorer")


class CheckpointWriter:
    """Chooses checkpoint ids for one attempt's scope and writes its checkpoints.

    Args:
        scope: the attempt's scope (its execution id names the checkpoints).
        max_object_bytes: the store's object size limit.
        full_verify_s: how long the writer reads back only what it wrote before it verifies
            every object of its checkpoint again.
    """

    def __init__(self, scope: launching.Scope, max_object_bytes: int, full_verify_s: float) -> None:
        self._scope = scope
        self._max_object_bytes = max_object_bytes
        self._full_verify_s = full_verify_s
        self._sequence: int | None = None
        # The objects this writer's own verification read and found intact (None: none yet,
        # so its next checkpoint is verified in full).
        self._verified: set[str] | None = None
        self._verified_at = 0.0

    async def free_id(self, store: storing.ArtifactStore) -> tuple[int, str]:
        """The next sequence whose checkpoint id is not taken: a stored checkpoint is
        authoritative and is never written over (another capturer may share the scope)."""
        for _ in range(1000):
            sequence = await self._next_sequence(store)
            checkpoint_id = f"ckpt-{self._scope.execution_id}-{sequence}"
            try:
                taken = await store.get_manifest(checkpoint_id) is not None
            except storing.StoreError:
                taken = True
            except Exception as error:  # the store is down or refused the grant
                logs.event(log, "store_failed", logging.WARNING, exception=type(error).__name__)
                raise captures.CaptureError("checkpoint store unavailable") from None
            if not taken:
                return sequence, checkpoint_id
        raise captures.CaptureError("no free checkpoint id")

    async def _next_sequence(self, store: storing.ArtifactStore) -> int:
        if self._sequence is None:
            mine = re.compile(rf"ckpt-{re.escape(self._scope.execution_id)}-(\d+)")
            try:
                ids = await store.list_checkpoint_ids()
            except Exception as error:  # a store that cannot list still takes new checkpoints
                logs.event(log, "store_failed", logging.WARNING, exception=type(error).__name__)
                ids = []
            found = [int(m.group(1)) for i in ids if (m := mine.fullmatch(i))]
            self._sequence = max(found, default=0)
        self._sequence += 1
        return self._sequence

    async def write(
        self,
        store: storing.ArtifactStore,
        objects: dict[str, bytes],
        checkpoint_id: str,
        record: dict[str, Any],
    ) -> None:
        """Objects first, the record last, then the verification of what was written."""
        try:
            for sha256, data in objects.items():
                await store.put_object(
                    _one(data),
                    sha256=sha256,
                    size=len(data),
                    max_size=self._max_object_bytes,
                )
            await store.put_manifest(checkpoint_id, records.encode_manifest(record))
            named = {sha256 for _role, sha256, _size in records.stored_objects(record)}
            validator = validation.Validator(store)
            expectation = validation.Expectation(checkpoint_id, self._scope.execution_generation)
            loop = asyncio.get_running_loop()
            recent = loop.time() - self._verified_at < self._full_verify_s
            if recent and self._verified is not None and named <= self._verified | objects.keys():
                # Everything else it names, this capturer verified before: read only what it
                # wrote now, so continuous capture does not read the session again each time.
                written = {sha256: len(data) for sha256, data in objects.items()}
                verdict = await validator.verify_written(expectation, written)
            else:
                verdict = await validator.verify(expectation)
                self._verified, self._verified_at = set(), loop.time()
        except storing.StoreError as error:
            raise captures.CaptureError(type(error).__name__) from None
        except Exception as error:  # the store is down or refused the grant
            logs.event(log, "store_failed", logging.WARNING, exception=type(error).__name__)
            raise captures.CaptureError("checkpoint store unavailable") from None
        if verdict.reason is not None:
            self._verified = None  # the next capture verifies everything again
            raise captures.CaptureError(verdict.reason.value)
        self._verified = (self._verified or set()) | named | objects.keys()


async def _one(data: bytes) -> AsyncIterator[bytes]:
    yield data
