"""An `ArtifactStore` over the CheckpointStore gRPC service, used when `checkpoint_remote` is true.

Every call carries the attempt's grant (`authorization: Bearer <grant>`); the grant alone names
the scope on the server, so `scope` here only mirrors it for the Validator's checks. Objects are
hashed on this side too while they stream in or out, so a store that lies is caught here.

Errors map onto the port's own: a missing object is `ObjectMissing`, a refused upload
`ObjectCorrupt` or `ObjectTooLarge`, a name the store refuses `InvalidName`. Anything else (the
store is down after the retries, the grant was revoked) is `RemoteStoreError`, which says
nothing about the checkpoint and names no grant.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
from collections.abc import AsyncGenerator, AsyncIterable, AsyncIterator
from typing import Any

import grpc
from agentihooks.swarm.v2 import checkpoint_store_pb2 as pb
from agentihooks.swarm.v2 import checkpoint_store_pb2_grpc as pb_grpc

from services.common.checkpoints import packing, records, storing
from services.restorer import retrying

PUT_CHUNK = 1 << 20
CALL_TIMEOUT_S = 60.0


class RemoteStoreError(Exception):
    """The checkpoint-store service did not answer usably (down, or the grant is refused)."""

    def __init__(self, reason: str) -> None:
        super().__init__(f"checkpoint store: {reason}")
        self.reason = reason


def _error(error: grpc.aio.AioRpcError) -> Exception:
    reason = retrying.reason_of(error)
    code = error.code()
    if code == grpc.StatusCode.NOT_FOUND:
        return storing.ObjectMissing("the object is not in the store")
    if code == grpc.StatusCode.RESOURCE_EXHAUSTED:
        return storing.ObjectTooLarge("the object is over the size limit")
    if code == grpc.StatusCode.INVALID_ARGUMENT and reason == "corrupt_object":
        return storing.ObjectCorrupt("the object's content does not match its hash")
    if code == grpc.StatusCode.INVALID_ARGUMENT and reason == "invalid_name":
        return storing.InvalidName("the store refused the name")
    return RemoteStoreError(reason)


class RemoteStore:
    """The store granted to this attempt, reached through the checkpoint-store service.

    Args:
        channel: a channel to the checkpoint-store service (the caller closes it).
        grant: the store grant (read for restoring, write for capturing).
        scope: the grant's scope (swarm, task, task generation).
        compatibility_key: the worker image tag; `ListCheckpoints` lists by it.
        retry: the retry policy for transport trouble on idempotent calls.
    """

    def __init__(
        self,
        channel: grpc.aio.Channel,
        grant: str,
        scope: storing.StoreScope,
        *,
        compatibility_key: str = "",
        retry: retrying.Retry = retrying.DEFAULT,
    ) -> None:
        self._stub = pb_grpc.CheckpointStoreStub(channel)
        self._metadata = retrying.bearer(grant)
        self._scope = scope
        self._key = compatibility_key
        self._retry = retry

    def __repr__(self) -> str:
        return f"RemoteStore({self._scope.prefix})"

    @property
    def scope(self) -> storing.StoreScope:
        """The grant's scope."""
        return self._scope

    async def _unary(
        self, method: Any, request: Any, compression: grpc.Compression | None = None
    ) -> Any:
        async def call() -> Any:
            return await method(
                request, metadata=self._metadata, timeout=CALL_TIMEOUT_S, compression=compression
            )

        try:
            return await self._retry.call(call)
        except grpc.aio.AioRpcError as error:
            raise _error(error) from None

    async def put_object(
        self, chunks: AsyncIterable[bytes], *, sha256: str, size: int, max_size: int
    ) -> storing.ObjectRef:
        """Upload one object; its hash is checked here as it goes and again by the store."""
        check = storing.UploadCheck(sha256, size, max_size)
        failed: list[storing.StoreError] = []

        async def messages() -> AsyncIterator[pb.PutObjectChunk]:
            yield pb.PutObjectChunk(header=pb.PutObjectHeader(sha256=sha256, size=size))
            try:
                async for chunk in chunks:
                    for offset in range(0, len(chunk), PUT_CHUNK):
                        part = chunk[offset : offset + PUT_CHUNK]
                        check.feed(part)
                        yield pb.PutObjectChunk(data=bytes(part))
                check.finish()
            except storing.StoreError as error:
                # Ending the stream short makes the store refuse it too; nothing is kept.
                failed.append(error)

        try:
            ref = await self._stub.PutObject(
                messages(), metadata=self._metadata, timeout=CALL_TIMEOUT_S
            )
        except grpc.aio.AioRpcError as error:
            if failed:
                raise failed[0] from None
            raise _error(error) from None
        if failed:
            raise failed[0]
        return storing.ObjectRef(ref.sha256, ref.size, existed=ref.existed)

    async def object_exists(self, sha256: str) -> bool:
        """True when the store serves the object (only its first chunk is read)."""
        storing.check_object_name(sha256)
        try:
            async with contextlib.aclosing(self._read(sha256)) as chunks:
                async for _ in chunks:
                    break
        except storing.ObjectMissing:
            return False
        return True

    def read_object(
        self, sha256: str, chunk_size: int = storing.CHUNK_SIZE
    ) -> AsyncIterator[bytes]:
        """The object's bytes as the store streams them (`chunk_size` is the store's choice)."""
        storing.check_object_name(sha256)
        return self._read(sha256)

    async def _read(self, sha256: str) -> AsyncGenerator[bytes, None]:
        call = self._stub.FetchObject(
            pb.FetchObjectRequest(sha256=sha256), metadata=self._metadata, timeout=None
        )
        try:
            async for message in call:
                yield message.data
        except grpc.aio.AioRpcError as error:
            raise _error(error) from None
        finally:
            call.cancel()

    async def digest_object(self, sha256: str) -> tuple[str, int] | None:
        """SHA-256 and size of the bytes the store serves under this name; None when absent."""
        digest, size = hashlib.sha256(), 0
        try:
            async for chunk in self.read_object(sha256):
                digest.update(chunk)
                size += len(chunk)
        except storing.ObjectMissing:
            return None
        return digest.hexdigest(), size

    async def put_manifest(self, checkpoint_id: str, data: bytes) -> None:
        """Commit the manifest's record: the store writes it after checking every object."""
        storing.check_checkpoint_id(checkpoint_id)
        record, _ = records.decode_manifest(data)
        if record.get("checkpoint_id") != checkpoint_id:
            raise storing.InvalidName("the record names another checkpoint id")
        request = pb.CommitCheckpointRequest(
            record_json=json.dumps(record, sort_keys=True, ensure_ascii=False)
        )
        # The record travels as JSON (about 2.6 KB a capture, most of it structure the store
        # packs away); gzip on the wire sends what it is worth, once a second per seat.
        await self._unary(self._stub.CommitCheckpoint, request, grpc.Compression.Gzip)

    async def get_manifest(self, checkpoint_id: str) -> bytes | None:
        """The manifest rebuilt from `GetRecord`: the record and the hash the store holds, packed.

        A manifest the store cannot parse comes back as empty bytes, which the Validator
        reads as `corrupt_manifest`, exactly as it would read the stored file itself.
        """
        storing.check_checkpoint_id(checkpoint_id)
        try:
            response = await self._unary(
                self._stub.GetRecord, pb.GetRecordRequest(checkpoint_id=checkpoint_id)
            )
        except storing.ObjectMissing:
            return None
        except RemoteStoreError as error:
            if error.reason == "corrupt_manifest":
                return b""
            raise
        try:
            record = json.loads(response.record_json)
        except ValueError:
            return b""
        # Packed, as the store keeps it: the same bytes a local folder would give.
        return packing.pack(
            records.canonical_bytes({"manifest_sha256": response.manifest_sha256, "record": record})
        )

    async def list_checkpoint_ids(self) -> list[str]:
        """Ids of the grant's complete checkpoints of this store's compatibility key, sorted."""
        if not self._key:
            return []
        response = await self._unary(
            self._stub.ListCheckpoints,
            pb.ListCheckpointsRequest(compatibility_key=self._key, verified_only=False),
        )
        return sorted(summary.checkpoint_id for summary in response.checkpoints)
