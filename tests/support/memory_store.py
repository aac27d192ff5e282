"""An in-memory `ArtifactStore` for pure-logic unit tests (never for contract or integration).

Tests reach into `objects` and `manifests` to plant hostile bytes directly.
"""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterable, AsyncIterator

from services.common.checkpoints import storing


class MemoryStore:
    """Objects and manifests in dicts, bound to one scope, checked like a real backend."""

    def __init__(self, scope: storing.StoreScope) -> None:
        self._scope = scope
        self.objects: dict[str, bytes] = {}
        self.manifests: dict[str, bytes] = {}

    @property
    def scope(self) -> storing.StoreScope:
        return self._scope

    async def put_object(
        self, chunks: AsyncIterable[bytes], *, sha256: str, size: int, max_size: int
    ) -> storing.ObjectRef:
        check = storing.UploadCheck(sha256, size, max_size)
        data = bytearray()
        async for chunk in chunks:
            check.feed(chunk)
            data += chunk
        check.finish()
        existed = sha256 in self.objects
        self.objects.setdefault(sha256, bytes(data))
        return storing.ObjectRef(sha256, size, existed)

    def add(self, data: bytes) -> str:
        """Store `data` under its own hash; returns the hash."""
        sha256 = hashlib.sha256(data).hexdigest()
        self.objects[sha256] = data
        return sha256

    async def object_exists(self, sha256: str) -> bool:
        return storing.check_object_name(sha256) in self.objects

    def read_object(
        self, sha256: str, chunk_size: int = storing.CHUNK_SIZE
    ) -> AsyncIterator[bytes]:
        storing.check_object_name(sha256)
        return self._read(sha256, chunk_size)

    async def _read(self, sha256: str, chunk_size: int) -> AsyncIterator[bytes]:
        if sha256 not in self.objects:
            raise storing.ObjectMissing("the object is not in the store")
        data = self.objects[sha256]
        for start in range(0, len(data), chunk_size):
            yield data[start : start + chunk_size]

    async def digest_object(self, sha256: str) -> tuple[str, int] | None:
        data = self.objects.get(storing.check_object_name(sha256))
        return None if data is None else (hashlib.sha256(data).hexdigest(), len(data))

    async def put_manifest(self, checkpoint_id: str, data: bytes) -> None:
        self.manifests[storing.check_checkpoint_id(checkpoint_id)] = data

    async def get_manifest(self, checkpoint_id: str) -> bytes | None:
        return self.manifests.get(storing.check_checkpoint_id(checkpoint_id))

    async def list_checkpoint_ids(self) -> list[str]:
        return sorted(self.manifests)
