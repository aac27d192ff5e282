"""The S3 backend: checkpoints in a bucket (`AGENTIHOOKS_CHECKPOINT_BUCKET`), through aioboto3.

Keys follow the local layout under the bucket: `{swarm}/{task_id}/{task_generation}/objects/
{sha[:2]}/{sha}` and `.../records/{checkpoint_id}.json`.

How an upload stays invisible until its hash is checked: an object of at most one part is
buffered, checked, then sent in one PUT. A larger one goes up as a multipart upload; S3 shows
no object (nothing under `objects/` in a listing) until CompleteMultipartUpload, which is sent
only after the whole stream matched its size and hash. On a mismatch, an oversize stream or any
interruption the upload is aborted, which discards its parts. Both writes carry
`If-None-Match: *`, so an object already stored is never rewritten. A manifest is one PUT,
which S3 makes visible whole or not at all.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
from collections.abc import AsyncIterable, AsyncIterator
from typing import Any

import aioboto3
import botocore.config
import botocore.exceptions

from services.common.checkpoints import storing

PART_SIZE = 8 * 1024 * 1024
"""Multipart part size; also the largest object buffered whole for a single PUT."""

_MISSING = frozenset({"404", "NoSuchKey", "NotFound"})
_EXISTS = frozenset({"412", "PreconditionFailed"})


def _code(error: botocore.exceptions.ClientError) -> str:
    return str(error.response.get("Error", {}).get("Code", ""))


class S3Backend:
    """Checkpoint stores in one S3 bucket; one client per backend, opened on first use.

    Args:
        bucket: the bucket name.
        endpoint_url: an S3-compatible server's URL (`AGENTIHOOKS_S3_ENDPOINT_URL`); None for AWS.
        session: the aioboto3 session holding credentials; a default session when None.
    """

    def __init__(
        self,
        bucket: str,
        endpoint_url: str | None = None,
        session: aioboto3.Session | None = None,
    ) -> None:
        self.bucket = bucket
        self.endpoint_url = endpoint_url
        self._session = session if session is not None else aioboto3.Session()
        self._context: Any = None
        self._client: Any = None
        self._lock = asyncio.Lock()
        self._closed = False

    def scoped(self, scope: storing.StoreScope) -> S3Store:
        """The store of one task scope."""
        return S3Store(self, scope)

    async def client(self) -> Any:
        """The backend's S3 client, opened on first use."""
        if self._client is None:
            async with self._lock:
                if self._closed:
                    raise RuntimeError("the S3 checkpoint backend is closed")
                if self._client is None:
                    config = botocore.config.Config(
                        # Path-style addressing works with every S3-compatible server.
                        s3={"addressing_style": "path"} if self.endpoint_url else None,
                        retries={"mode": "standard", "max_attempts": 3},
                        # Our own SHA-256 check covers integrity; extra trailing checksums
                        # break some S3-compatible servers.
                        request_checksum_calculation="when_required",
                        response_checksum_validation="when_required",
                    )
                    context = self._session.client(
                        "s3", endpoint_url=self.endpoint_url, config=config
                    )
                    self._client = await context.__aenter__()
                    self._context = context
        return self._client

    async def aclose(self) -> None:
        """Close the client; stores handed out before become unusable."""
        async with self._lock:
            self._closed = True
            context, self._context, self._client = self._context, None, None
        if context is not None:
            await context.__aexit__(None, None, None)


class S3Store:
    """An `ArtifactStore` over `s3://{bucket}/{scope.prefix}/`."""

    def __init__(self, backend: S3Backend, scope: storing.StoreScope) -> None:
        self._backend = backend
        self._bucket = backend.bucket
        self._scope = scope

    @property
    def scope(self) -> storing.StoreScope:
        """The scope every key of this store lives under."""
        return self._scope

    def _object_key(self, sha256: str) -> str:
        return f"{self._scope.prefix}/objects/{sha256[:2]}/{sha256}"

    def _records(self) -> str:
        return f"{self._scope.prefix}/records/"

    async def put_object(
        self, chunks: AsyncIterable[bytes], *, sha256: str, size: int, max_size: int
    ) -> storing.ObjectRef:
        """Store one object, checking hash and size before it becomes visible."""
        check = storing.UploadCheck(sha256, size, max_size)
        if await self.object_exists(sha256):
            async for chunk in chunks:
                check.feed(chunk)
            check.finish()
            return storing.ObjectRef(sha256, size, existed=True)
        if size <= PART_SIZE:
            created = await self._put_whole(chunks, check)
        else:
            created = await self._put_parts(chunks, check)
        return storing.ObjectRef(sha256, size, existed=not created)

    async def _put_whole(self, chunks: AsyncIterable[bytes], check: storing.UploadCheck) -> bool:
        body = bytearray()
        async for chunk in chunks:
            check.feed(chunk)
            body += chunk
        check.finish()
        client = await self._backend.client()
        try:
            await client.put_object(
                Bucket=self._bucket,
                Key=self._object_key(check.sha256),
                Body=bytes(body),
                IfNoneMatch="*",
            )
        except botocore.exceptions.ClientError as error:
            if _code(error) in _EXISTS:
                return False
            raise
        return True

    async def _put_parts(self, chunks: AsyncIterable[bytes], check: storing.UploadCheck) -> bool:
        client = await self._backend.client()
        key = self._object_key(check.sha256)
        upload = await client.create_multipart_upload(Bucket=self._bucket, Key=key)
        upload_id = upload["UploadId"]
        parts: list[dict[str, Any]] = []

        async def send(data: bytes) -> None:
            number = len(parts) + 1
            sent = await client.upload_part(
                Bucket=self._bucket, Key=key, UploadId=upload_id, PartNumber=number, Body=data
            )
            parts.append({"PartNumber": number, "ETag": sent["ETag"]})

        try:
            buffer = bytearray()
            async for chunk in chunks:
                check.feed(chunk)
                buffer += chunk
                while len(buffer) >= PART_SIZE:
                    await send(bytes(buffer[:PART_SIZE]))
                    del buffer[:PART_SIZE]
            check.finish()
            if buffer or not parts:
                await send(bytes(buffer))
            try:
                await client.complete_multipart_upload(
                    Bucket=self._bucket,
                    Key=key,
                    UploadId=upload_id,
                    MultipartUpload={"Parts": parts},
                    IfNoneMatch="*",
                )
            except botocore.exceptions.ClientError as error:
                if _code(error) not in _EXISTS:
                    raise
                await self._abort(key, upload_id)
                return False
        except BaseException:
            # Abort discards the parts: a refused or interrupted upload leaves nothing behind.
            # Best effort: the original error matters more than a failed abort, which the
            # bucket's abort-incomplete-uploads lifecycle rule cleans up (storage policy).
            with contextlib.suppress(Exception):
                await asyncio.shield(self._abort(key, upload_id))
            raise
        return True

    async def _abort(self, key: str, upload_id: str) -> None:
        client = await self._backend.client()
        try:
            await client.abort_multipart_upload(Bucket=self._bucket, Key=key, UploadId=upload_id)
        except botocore.exceptions.ClientError as error:
            if _code(error) not in _MISSING | {"NoSuchUpload"}:
                raise

    async def object_exists(self, sha256: str) -> bool:
        """True when the object is stored (a HEAD request; 404 is False)."""
        storing.check_object_name(sha256)
        client = await self._backend.client()
        try:
            await client.head_object(Bucket=self._bucket, Key=self._object_key(sha256))
        except botocore.exceptions.ClientError as error:
            if _code(error) in _MISSING:
                return False
            raise
        return True

    def read_object(
        self, sha256: str, chunk_size: int = storing.CHUNK_SIZE
    ) -> AsyncIterator[bytes]:
        """The object's bytes; iterating raises `ObjectMissing` when it is absent."""
        storing.check_object_name(sha256)
        if chunk_size < 1:
            raise ValueError("chunk_size must be positive")
        return self._read(sha256, chunk_size)

    async def _read(self, sha256: str, chunk_size: int) -> AsyncIterator[bytes]:
        body = await self._open(self._object_key(sha256))
        if body is None:
            raise storing.ObjectMissing("the object is not in the store")
        try:
            buffer = bytearray()
            # The HTTP stream hands out what has arrived; gather it into full chunks.
            while data := await body.read(chunk_size - len(buffer)):
                buffer += data
                if len(buffer) >= chunk_size:
                    yield bytes(buffer)
                    buffer.clear()
            if buffer:
                yield bytes(buffer)
        finally:
            body.close()

    async def _open(self, key: str) -> Any:
        client = await self._backend.client()
        try:
            response = await client.get_object(Bucket=self._bucket, Key=key)
        except botocore.exceptions.ClientError as error:
            if _code(error) in _MISSING:
                return None
            raise
        return response["Body"]

    async def digest_object(self, sha256: str) -> tuple[str, int] | None:
        """SHA-256 and size of the stored bytes, streamed; None when absent."""
        storing.check_object_name(sha256)
        body = await self._open(self._object_key(sha256))
        if body is None:
            return None
        digest, size = hashlib.sha256(), 0
        try:
            while data := await body.read(storing.CHUNK_SIZE):
                digest.update(data)
                size += len(data)
        finally:
            body.close()
        return digest.hexdigest(), size

    async def put_manifest(self, checkpoint_id: str, data: bytes) -> None:
        """Write the manifest in one PUT: visible whole or not at all."""
        storing.check_checkpoint_id(checkpoint_id)
        if len(data) > storing.MAX_MANIFEST_BYTES:
            raise storing.ObjectTooLarge("the manifest is over the size limit")
        client = await self._backend.client()
        await client.put_object(
            Bucket=self._bucket,
            Key=f"{self._records()}{checkpoint_id}.json",
            Body=data,
            ContentType="application/json",
        )

    async def get_manifest(self, checkpoint_id: str) -> bytes | None:
        """The manifest's bytes, or None when absent."""
        storing.check_checkpoint_id(checkpoint_id)
        body = await self._open(f"{self._records()}{checkpoint_id}.json")
        if body is None:
            return None
        try:
            data: bytes = await body.read(storing.MAX_MANIFEST_BYTES + 1)
            # One read returns what has arrived; keep reading up to one byte past the limit.
            while len(data) <= storing.MAX_MANIFEST_BYTES and (
                more := await body.read(storing.MAX_MANIFEST_BYTES + 1 - len(data))
            ):
                data += more
        finally:
            body.close()
        if len(data) > storing.MAX_MANIFEST_BYTES:
            raise storing.ObjectTooLarge("the manifest is over the size limit")
        return data

    async def list_checkpoint_ids(self) -> list[str]:
        """Ids of the manifests in this scope, sorted."""
        client = await self._backend.client()
        prefix = self._records()
        ids: list[str] = []
        async for page in client.get_paginator("list_objects_v2").paginate(
            Bucket=self._bucket, Prefix=prefix
        ):
            for item in page.get("Contents", []):
                name = str(item["Key"])[len(prefix) :]
                if name.endswith(".json") and storing.is_safe_name(name.removesuffix(".json")):
                    ids.append(name.removesuffix(".json"))
        return sorted(ids)
