"""The checkpoint storage port: scopes, names, errors and the `ArtifactStore` protocol.

A store is always bound to one scope (swarm, task, task generation), which is also the prefix of
every storage path, so a grant for one task can never read or write another task's checkpoints.
Objects are content-addressed by SHA-256; one manifest per checkpoint holds its record.

Checkpoint objects are authoritative data: this port has no delete operation on purpose.
"""

from __future__ import annotations

import dataclasses
import hashlib
import re
from collections.abc import AsyncIterable, AsyncIterator, Sequence
from typing import Protocol, TypeGuard, runtime_checkable

CHUNK_SIZE = 4 * 1024 * 1024
"""Default read size; large enough that hashlib releases the GIL and syscalls stay rare."""

MAX_MANIFEST_BYTES = 16 * 1024 * 1024
"""A manifest larger than this is not read into memory (it is reported as too large)."""

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
_OBJECT_NAME = re.compile(r"[0-9a-f]{64}")


class StoreError(Exception):
    """Base of every error a checkpoint store raises about names or content."""


class ObjectMissing(StoreError):
    """The named object is not in the store."""


class ObjectCorrupt(StoreError):
    """An upload's bytes do not match the hash or size it declared; nothing was kept."""


class ObjectTooLarge(StoreError):
    """An object or manifest is over the size limit; nothing was kept or read."""


class InvalidName(StoreError):
    """An object name or checkpoint id is not a safe name; no storage was touched."""


class UnsafePath(StoreError):
    """The store holds a link or a non-regular entry where a file or folder belongs."""


def is_safe_name(value: object) -> TypeGuard[str]:
    """True for a name usable as one path segment: `[A-Za-z0-9][A-Za-z0-9._-]{0,127}`."""
    return isinstance(value, str) and _NAME.fullmatch(value) is not None


def check_object_name(sha256: object) -> str:
    """Return `sha256` when it is 64 lowercase hex digits, else raise `InvalidName`."""
    if not isinstance(sha256, str) or _OBJECT_NAME.fullmatch(sha256) is None:
        # The offending value is not echoed: it may be hostile and end up in a log.
        raise InvalidName("an object name must be 64 lowercase hex digits")
    return sha256


def check_checkpoint_id(checkpoint_id: object) -> str:
    """Return `checkpoint_id` when it is a safe name, else raise `InvalidName`."""
    if not is_safe_name(checkpoint_id):
        raise InvalidName("a checkpoint id must match [A-Za-z0-9][A-Za-z0-9._-]{0,127}")
    return checkpoint_id


@dataclasses.dataclass(frozen=True)
class StoreScope:
    """The task a store is bound to; its `prefix` scopes every storage path."""

    swarm: str
    task_id: str
    task_generation: int

    def __post_init__(self) -> None:
        if not is_safe_name(self.swarm):
            raise ValueError("the store scope's swarm is not a safe name")
        if not is_safe_name(self.task_id):
            raise ValueError("the store scope's task_id is not a safe name")
        generation = self.task_generation
        if isinstance(generation, bool) or not isinstance(generation, int) or generation < 0:
            raise ValueError("the store scope's task_generation must be a non-negative integer")

    @property
    def prefix(self) -> str:
        """`{swarm}/{task_id}/{task_generation}`: the folder or key prefix of this scope."""
        return f"{self.swarm}/{self.task_id}/{self.task_generation}"


@dataclasses.dataclass(frozen=True)
class ObjectRef:
    """A stored object; `existed` is True when the store already held it (nothing rewritten)."""

    sha256: str
    size: int
    existed: bool


class UploadCheck:
    """Checks an upload's hash and size while it streams in (shared by every backend).

    Args:
        sha256: the declared lowercase hex SHA-256.
        size: the declared size in bytes.
        max_size: the largest object the caller accepts.

    Raises:
        InvalidName: `sha256` is not an object name.
        ObjectTooLarge: the declared size is over `max_size`.
        ValueError: a negative size or limit.
    """

    def __init__(self, sha256: str, size: int, max_size: int) -> None:
        self.sha256 = check_object_name(sha256)
        if size < 0 or max_size < 0:
            raise ValueError("object sizes are non-negative")
        if size > max_size:
            raise ObjectTooLarge("the object is over the size limit")
        self.size = size
        self.received = 0
        self._hash = hashlib.sha256()

    def feed(self, chunk: bytes | bytearray | memoryview) -> None:
        """Account for one chunk; raise `ObjectCorrupt` as soon as it passes the declared size."""
        self.received += len(chunk)
        if self.received > self.size:
            raise ObjectCorrupt("the object is larger than its declared size")
        self._hash.update(chunk)

    def finish(self) -> None:
        """Raise `ObjectCorrupt` unless the whole stream matched the declared size and hash."""
        if self.received != self.size:
            raise ObjectCorrupt("the object is smaller than its declared size")
        if self._hash.hexdigest() != self.sha256:
            raise ObjectCorrupt("the object's content does not match its hash")


class ArtifactStore(Protocol):
    """Checkpoint storage bound to one `StoreScope`.

    Names are checked before any storage is touched: an object name must match
    `^[0-9a-f]{64}$` and a checkpoint id `^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`, else `InvalidName`.
    """

    @property
    def scope(self) -> StoreScope:
        """The scope every path of this store lives under."""
        ...

    async def put_object(
        self, chunks: AsyncIterable[bytes], *, sha256: str, size: int, max_size: int
    ) -> ObjectRef:
        """Store one object, checking its hash and size while it streams in.

        On a mismatch or an oversize object nothing is kept (not even a temporary file) and
        `ObjectCorrupt` or `ObjectTooLarge` is raised. An object already stored is not rewritten;
        the stream is still checked and the result has `existed=True`.
        """
        ...

    async def object_exists(self, sha256: str) -> bool:
        """True when the object is stored."""
        ...

    def read_object(self, sha256: str, chunk_size: int = CHUNK_SIZE) -> AsyncIterator[bytes]:
        """The object's bytes in chunks; iterating raises `ObjectMissing` when it is absent."""
        ...

    async def digest_object(self, sha256: str) -> tuple[str, int] | None:
        """SHA-256 hex and size of what is stored under this name; None when absent."""
        ...

    async def put_manifest(self, checkpoint_id: str, data: bytes) -> None:
        """Write one checkpoint's manifest atomically: readers see the old one or the new one."""
        ...

    async def get_manifest(self, checkpoint_id: str) -> bytes | None:
        """The manifest's bytes; None when absent; `ObjectTooLarge` over `MAX_MANIFEST_BYTES`."""
        ...

    async def list_checkpoint_ids(self) -> list[str]:
        """Ids of every manifest in this scope, sorted."""
        ...


@runtime_checkable
class BatchedReads(Protocol):
    """A store whose small reads cost less together than one by one (a local folder: each read
    alone is a hop to a worker thread and back). Optional: a store without these is read one
    call at a time, with the same results."""

    async def get_manifests(self) -> list[tuple[str, bytes | StoreError | None]]:
        """`list_checkpoint_ids` and `get_manifest` of each, in one call: (id, the manifest's
        bytes, or None when it went meanwhile, or the `StoreError` reading it raised)."""
        ...

    async def digest_objects(
        self, names: Sequence[str]
    ) -> list[tuple[str, int] | StoreError | None]:
        """`digest_object` of each name, in one call, in order (the `StoreError` a name's read
        raised in its place)."""
        ...

    async def objects_exist(self, names: Sequence[str]) -> list[bool | StoreError]:
        """`object_exists` of each name, in one call, in order (the `StoreError` a name's
        check raised in its place)."""
        ...

    async def read_objects(
        self, wanted: Sequence[tuple[str, int]]
    ) -> list[bytes | StoreError | None]:
        """The bytes of each (name, size), in one call, in order: at most `size` plus one byte
        of each (enough to tell a larger object), None when absent, or the `StoreError` its
        read raised. Unchecked: the caller hashes them."""
        ...


@dataclasses.dataclass(frozen=True)
class ChainDigest:
    """What a chain's objects hold, read in order: the SHA-256 of their concatenation and
    each one's size."""

    sha256: str
    sizes: tuple[int, ...]


@runtime_checkable
class ChainReads(Protocol):
    """A store that hashes a chain of objects (schema version 3) itself: in one worker thread
    for a local folder, from reads already made for a restore. Optional: a store without it is
    read object by object through `read_object`, with the same results."""

    async def digest_chains(
        self, chains: Sequence[Sequence[str]]
    ) -> list[ChainDigest | StoreError | None]:
        """For each chain, in order: its digest, None when one of its objects is absent, or
        the `StoreError` reading it raised."""
        ...


_BATCHED: dict[type, bool] = {}
_CHAINED: dict[type, bool] = {}


def batched(store: object) -> TypeGuard[BatchedReads]:
    """Whether `store` reads in batches (`BatchedReads`), worked out once per store type (a
    runtime Protocol check walks the protocol's members at every call: a few percent of a
    native decision)."""
    kind = type(store)
    found = _BATCHED.get(kind)
    if found is None:
        found = _BATCHED[kind] = isinstance(store, BatchedReads)
    return found


def chained(store: object) -> TypeGuard[ChainReads]:
    """Whether `store` hashes chains itself (`ChainReads`), worked out once per store type."""
    kind = type(store)
    found = _CHAINED.get(kind)
    if found is None:
        found = _CHAINED[kind] = isinstance(store, ChainReads)
    return found


class Backend(Protocol):
    """A storage location that hands out stores bound to one scope each."""

    def scoped(self, scope: StoreScope) -> ArtifactStore:
        """The store for `scope`; no I/O happens until it is used."""
        ...

    async def aclose(self) -> None:
        """Release connections; stores handed out before become unusable."""
        ...
