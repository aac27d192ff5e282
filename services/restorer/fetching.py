"""The store granted to this attempt, and objects fetched from it by hash, hashed again.

"The checkpoint is verified through the store granted to this attempt": with
`checkpoint_remote` that is the checkpoint-store service reached with the attempt's grant,
otherwise the configured bucket or local folder (the bucket wins), bound to the attempt's task
scope. Every object a restore writes is fetched by its SHA-256 and hashed as it arrives; one
read serves both the verification and the restore (`VerifyingStore`), so the bytes written
are the bytes verified, and an object read again later is hashed again, so bytes that changed
after the verification are refused, never written. A chain (schema version 3) whose segments
were all read early is hashed end to end from those same bytes.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import re
from collections.abc import AsyncGenerator, AsyncIterable, AsyncIterator, Iterable, Sequence
from typing import Any

from services.common import settings, tls
from services.common.checkpoints import backends, object_checks, reasons, storing
from services.restorer import launching, remote_store

CONCURRENCY = 8
BATCH_OBJECT_BYTES = 256 * 1024
"""Objects up to this size are read early in batches from a store with `BatchedReads`."""
BATCH_BYTES = 4 * 1024 * 1024
BATCH_OBJECTS = 1024
"""A batch ends at this many bytes or objects (one worker-thread call each)."""
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
        async with tls.channel(launch.store_addr) as channel:
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
    digest, received = hashlib.sha256(), 0
    parts: list[bytes] = []
    try:
        async with contextlib.aclosing(_chunks(store, sha256)) as chunks:
            async for chunk in chunks:
                received += len(chunk)
                if received > size:
                    raise Unusable(reasons.Reason.CORRUPT_OBJECT)
                digest.update(chunk)
                parts.append(bytes(chunk))
    except storing.ObjectMissing:
        raise Unusable(reasons.Reason.MISSING_OBJECT) from None
    except (storing.UnsafePath, storing.InvalidName, storing.ObjectCorrupt):
        raise Unusable(reasons.Reason.CORRUPT_OBJECT) from None
    if received != size or digest.hexdigest() != sha256:
        raise Unusable(reasons.Reason.CORRUPT_OBJECT)
    # One chunk (a small object) is returned as it is, without a copy.
    return b"".join(parts)


def _checked(
    batch: Sequence[tuple[str, int]], found: Sequence[bytes | storing.StoreError | None]
) -> list[bytes | Unusable]:
    """Each object of a batch read as `fetch_object` judges it: its bytes when they are
    exactly the ones named, else why not."""
    out: list[bytes | Unusable] = []
    for (sha256, size), data in zip(batch, found, strict=True):
        if data is None:
            out.append(Unusable(reasons.Reason.MISSING_OBJECT))
        elif isinstance(data, bytes) and (len(data), _sha256(data)) == (size, sha256):
            out.append(data)
        else:  # other bytes, or a StoreError (a link where the object belongs)
            out.append(Unusable(reasons.Reason.CORRUPT_OBJECT))
    return out


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _chain_digest(parts: Sequence[bytes | None]) -> storing.ChainDigest:
    digest = hashlib.sha256()
    for part in parts:
        assert part is not None
        digest.update(part)
    return storing.ChainDigest(digest.hexdigest(), tuple(len(p or b"") for p in parts))


async def _chunks(store: storing.ArtifactStore, sha256: str) -> AsyncGenerator[bytes, None]:
    async for chunk in store.read_object(sha256):
        yield chunk


class Objects:
    """Fetches objects, some of them read early, and lets the Validator verify from those reads.

    Reading early writes nothing: each object is hashed as it arrives and handed out
    only by its hash, after the verdict, so an unverified record can steer nothing. An object
    read early is read once: `verifying_store()` answers the Validator's presence and digest
    checks from that read (the bytes it hashed are the ones the restore then writes), and
    anything else, including every object whose early read failed, straight from the store.
    """

    def __init__(self, store: storing.ArtifactStore, concurrency: int = CONCURRENCY) -> None:
        self._store = store
        self._gate = asyncio.Semaphore(concurrency)
        self._early: dict[tuple[str, int], asyncio.Future[bytes]] = {}
        self._by_name: dict[str, list[asyncio.Future[bytes]]] = {}
        self._batches: list[asyncio.Future[None]] = []

    def read_early(self, wanted: Iterable[tuple[object, object]]) -> None:
        """Start reading each (sha256, size) in the background; odd names are skipped.

        From a store with `storing.BatchedReads` (a local folder), small objects are read and
        hashed many to a worker-thread call: a chain of thousands of segments would otherwise
        cost a few thread hops each.
        """
        batch: list[tuple[str, int]] = []
        for sha256, size in wanted:
            if not isinstance(sha256, str) or not _SHA256.fullmatch(sha256):
                continue
            if isinstance(size, bool) or not isinstance(size, int) or size < 0:
                continue
            if (sha256, size) in self._early:
                continue
            batched = storing.batched(self._store) and size <= BATCH_OBJECT_BYTES
            future: asyncio.Future[bytes] = (
                asyncio.get_running_loop().create_future()
                if batched
                else asyncio.ensure_future(self._read(sha256, size))
            )
            self._early[(sha256, size)] = future
            self._by_name.setdefault(sha256, []).append(future)
            if batched:
                batch.append((sha256, size))
                if sum(n for _, n in batch) >= BATCH_BYTES or len(batch) >= BATCH_OBJECTS:
                    self._batches.append(asyncio.ensure_future(self._read_batch(batch)))
                    batch = []
        if batch:
            self._batches.append(asyncio.ensure_future(self._read_batch(batch)))

    async def _read(self, sha256: str, size: int) -> bytes:
        async with self._gate:
            return await fetch_object(self._store, sha256, size)

    async def _read_batch(self, batch: list[tuple[str, int]]) -> None:
        """Read and hash a batch of small objects; each one's future gets its bytes, or
        `Unusable` as `fetch_object` would raise it, or the store's own failure."""
        futures = [self._early[key] for key in batch]
        try:
            async with self._gate:
                assert storing.batched(self._store)
                found = await self._store.read_objects(batch)
                checked = await asyncio.to_thread(_checked, batch, found)
        except Exception as error:  # the store itself failed: each object's future says so
            for future in futures:
                if not future.done():
                    future.set_exception(error)
            return
        except BaseException:
            for future in futures:
                future.cancel()
            raise
        for future, result in zip(futures, checked, strict=True):
            if not future.done():
                if isinstance(result, Unusable):
                    future.set_exception(result)
                else:
                    future.set_result(result)

    async def get(self, sha256: str, size: int) -> bytes:
        """The object's bytes (see `fetch_object`), from an early read when one was started."""
        early = self._early.pop((sha256, size), None)
        if early is not None:
            return await early
        return await fetch_object(self._store, sha256, size)

    async def read_size(self, sha256: str) -> int | None:
        """The size of an early read of `sha256` that matched its hash, else None."""
        data = await self.read_bytes(sha256)
        return None if data is None else len(data)

    async def read_bytes(self, sha256: str) -> bytes | None:
        """The bytes of an early read of `sha256` that matched its hash, else None."""
        for future in self._by_name.get(sha256, ()):
            # Shielded: a Validator that stops early must not cancel a read the restore
            # still needs. A read that failed says nothing here: the store answers instead.
            with contextlib.suppress(Exception):
                return await asyncio.shield(future)
        return None

    def verifying_store(self) -> VerifyingStore:
        """The store as the Validator should read it: early reads answer for their objects."""
        return VerifyingStore(self._store, self)

    async def aclose(self) -> None:
        """Stop early reads nobody asked for."""
        pending: list[asyncio.Future[Any]] = [*self._batches, *self._early.values()]
        for future in pending:
            future.cancel()
        for future in pending:
            with contextlib.suppress(BaseException):
                await future
        self._batches.clear()
        self._early.clear()
        self._by_name.clear()


class VerifyingStore:
    """An `ArtifactStore` whose presence and digest checks reuse `Objects`' early reads.

    An early read hashed the object's bytes and counted them to the end, so "present, with
    this SHA-256 and size" is what the store itself would answer; when an early read failed or
    there is none, the store is asked, so every refusal is exactly the store's own answer. The
    manifests read through it are kept, so the record a restore uses is the one verified.
    """

    def __init__(self, store: storing.ArtifactStore, objects: Objects) -> None:
        self._store = store
        self._objects = objects
        self._manifests: dict[str, bytes | None] = {}

    def manifest_read(self, checkpoint_id: str) -> bytes | None:
        """The manifest bytes last read through this store for `checkpoint_id`, if any."""
        return self._manifests.get(checkpoint_id)

    @property
    def scope(self) -> storing.StoreScope:
        return self._store.scope

    async def put_object(
        self, chunks: AsyncIterable[bytes], *, sha256: str, size: int, max_size: int
    ) -> storing.ObjectRef:
        return await self._store.put_object(chunks, sha256=sha256, size=size, max_size=max_size)

    async def object_exists(self, sha256: str) -> bool:
        if await self._objects.read_size(sha256) is not None:
            return True
        return await self._store.object_exists(sha256)

    def read_object(
        self, sha256: str, chunk_size: int = storing.CHUNK_SIZE
    ) -> AsyncIterator[bytes]:
        return self._store.read_object(sha256, chunk_size)

    async def known_bytes(self, sha256: str) -> bytes | None:
        """The bytes of an early read of `sha256` that matched its hash, else None (see
        `index_reading.KnownBytes`: index objects read once serve the Validator and the
        restore)."""
        return await self._objects.read_bytes(sha256)

    async def digest_object(self, sha256: str) -> tuple[str, int] | None:
        size = await self._objects.read_size(sha256)
        if size is not None:
            return sha256, size
        return await self._store.digest_object(sha256)

    async def digest_chains(
        self, chains: Sequence[Sequence[str]]
    ) -> list[storing.ChainDigest | storing.StoreError | None]:
        """A chain whose segments were all read early is hashed from those bytes (the bytes
        the restore writes); any other is read from the store."""
        found: list[storing.ChainDigest | storing.StoreError | None] = []
        for names in chains:
            parts = [await self._objects.read_bytes(name) for name in names]
            if all(part is not None for part in parts):
                found.append(await asyncio.to_thread(_chain_digest, parts))
                continue
            try:
                found.append(await object_checks.digest_chain(self._store, names))
            except storing.StoreError as error:
                found.append(error)
        return found

    async def put_manifest(self, checkpoint_id: str, data: bytes) -> None:
        await self._store.put_manifest(checkpoint_id, data)

    async def get_manifest(self, checkpoint_id: str) -> bytes | None:
        data = await self._store.get_manifest(checkpoint_id)
        self._manifests[checkpoint_id] = data
        return data

    async def list_checkpoint_ids(self) -> list[str]:
        return await self._store.list_checkpoint_ids()
