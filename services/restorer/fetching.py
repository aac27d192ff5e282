"""The store granted to this attempt, and objects fetched from it by hash, hashed again.

"The checkpoint is verified through the store granted to this attempt": with
`checkpoint_remote` that is the checkpoint-store service reached with the attempt's grant,
otherwise the configured bucket or local folder (the bucket wins), bound to the attempt's task
scope. Every object a restore writes is fetched by its SHA-256 and hashed again as it arrives,
so bytes that changed after the verification are refused, never written.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import re
from collections.abc import AsyncGenerator, AsyncIterator, Iterable

import grpc

from services.common import settings
from services.common.checkpoints import backends, reasons, storing
from services.restorer import launching, remote_store

CONCURRENCY = 4
_SHA256 = re.compile(r"[0-9a-f]{64}")


class Unusable(Exception):
    """An object that cannot be used: `reason` is `missing_object` or `corrupt_object`."""

    def __init__(self, reason: reasons.Reason) -> None:
        super().__init__(reason.value)
        self.reason = reason


def store_scope(launch: launching.LaunchRecord) -> storing.StoreScope:
    """The task scope the attempt's store is bound to (swarm, task, task generation)."""
    scope = launch.scope
    return storing.StoreScope(scope.swarm, scope.task_id, scope.task_generation)


@contextlib.asynccontextmanager
async def granted_store(
    launch: launching.LaunchRecord,
    storage: settings.StorageSettings,
    grant: str,
) -> AsyncIterator[storing.ArtifactStore | None]:
    """The store granted to this attempt, or None when the worker has no checkpoint store.

    Args:
        launch: the attempt's launch record (`checkpoint_remote`, `store_addr`, scope).
        storage: the worker's storage settings (used unless `checkpoint_remote`).
        grant: the grant for the checkpoint-store service (restore or capture grant).

    Raises:
        ValueError: the storage settings are unusable (the message names the variable).
    """
    if launch.checkpoint_remote:
        if not launch.store_addr or not grant:
            yield None
            return
        async with grpc.aio.insecure_channel(launch.store_addr) as channel:
            yield remote_store.RemoteStore(
                channel, grant, store_scope(launch), compatibility_key=launch.worker_image
            )
        return
    backend = backends.open_backend(
        str(storage.checkpoint_root) if storage.checkpoint_root else None,
        storage.checkpoint_bucket,
        storage.s3_endpoint_url,
    )
    if backend is None:
        yield None
        return
    try:
        yield backend.scoped(store_scope(launch))
    finally:
        await backend.aclose()


async def fetch_object(store: storing.ArtifactStore, sha256: str, size: int) -> bytes:
    """One object's bytes, hashed again as they arrive; never returns other bytes.

    Raises:
        Unusable: the object is missing, or its bytes are not the ones the record names.
        Exception: the store itself failed (down, grant refused): says nothing of the object.
    """
    digest, data = hashlib.sha256(), bytearray()
    try:
        async with contextlib.aclosing(_chunks(store, sha256)) as chunks:
            async for chunk in chunks:
                if len(data) + len(chunk) > size:
                    raise Unusable(reasons.Reason.CORRUPT_OBJECT)
                digest.update(chunk)
                data += chunk
    except storing.ObjectMissing:
        raise Unusable(reasons.Reason.MISSING_OBJECT) from None
    except (storing.UnsafePath, storing.InvalidName, storing.ObjectCorrupt):
        raise Unusable(reasons.Reason.CORRUPT_OBJECT) from None
    if len(data) != size or digest.hexdigest() != sha256:
        raise Unusable(reasons.Reason.CORRUPT_OBJECT)
    return bytes(data)


async def _chunks(store: storing.ArtifactStore, sha256: str) -> AsyncGenerator[bytes, None]:
    async for chunk in store.read_object(sha256):
        yield chunk


class Objects:
    """Fetches objects, some of them read early while the Validator reads the same store.

    Reading early writes nothing: each object is hashed again as it arrives and handed out
    only by its hash, after the verdict, so an unverified record can steer nothing.
    """

    def __init__(self, store: storing.ArtifactStore, concurrency: int = CONCURRENCY) -> None:
        self._store = store
        self._gate = asyncio.Semaphore(concurrency)
        self._early: dict[tuple[str, int], asyncio.Future[bytes]] = {}

    def read_early(self, wanted: Iterable[tuple[object, object]]) -> None:
        """Start reading each (sha256, size) in the background; odd names are skipped."""
        for sha256, size in wanted:
            if not isinstance(sha256, str) or not _SHA256.fullmatch(sha256):
                continue
            if isinstance(size, bool) or not isinstance(size, int) or size < 0:
                continue
            if (sha256, size) not in self._early:
                self._early[(sha256, size)] = asyncio.ensure_future(self._read(sha256, size))

    async def _read(self, sha256: str, size: int) -> bytes:
        async with self._gate:
            return await fetch_object(self._store, sha256, size)

    async def get(self, sha256: str, size: int) -> bytes:
        """The object's bytes (see `fetch_object`), from an early read when one was started."""
        early = self._early.pop((sha256, size), None)
        if early is not None:
            return await early
        return await fetch_object(self._store, sha256, size)

    async def aclose(self) -> None:
        """Stop early reads nobody asked for."""
        for future in self._early.values():
            future.cancel()
        for future in self._early.values():
            with contextlib.suppress(BaseException):
                await future
        self._early.clear()
