"""The CheckpointStore gRPC service: every call is checked against its grant, then translated.

The grant alone names the scope (swarm, task, task generation, execution generation): a caller
cannot ask for another scope, so a grant for another task simply finds nothing of this one.
Objects are checked against their SHA-256 while they stream in; a record is written only after
every object it lists is stored.

Every call's grant is checked against the revocations in Redis. While Redis does not answer,
the store fails closed: a call whose grant's revocation cannot be read is refused with
UNAVAILABLE (`redis_unavailable`), so a revoked grant is never accepted because Redis was down.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import AsyncIterator
from typing import Any

import grpc
from agentihooks.swarm.v2 import checkpoint_store_pb2 as pb
from agentihooks.swarm.v2 import checkpoint_store_pb2_grpc as pb_grpc
from agentihooks.swarm.v2 import types_pb2

from services.common import errors, logs, redis_link, revocations, rpc, settings, tokens
from services.common.checkpoints import backends, record_schema, records, storing, validation

SERVICE_NAME = "agentihooks.swarm.v2.CheckpointStore"
FETCH_CHUNK = 1 << 20
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
log = logging.getLogger("services.checkpoint_store")


def _summary_pb(summary: records.Summary) -> types_pb2.CheckpointSummary:
    return types_pb2.CheckpointSummary(
        checkpoint_id=summary.checkpoint_id,
        continuity=summary.continuity,
        compatibility_key=summary.compatibility_key,
        native_session_id=summary.native_session_id or "",
        watermark=summary.watermark or 0,
        sequence=summary.sequence,
        created_at=summary.created_at,
        task_generation=summary.task_generation,
        execution_generation=summary.execution_generation,
        project=summary.project,
    )


def _name(sha256: str) -> str:
    if not _SHA256.match(sha256):
        raise errors.Malformed("invalid_name", "object name must be a lowercase hex sha256")
    return sha256


def _stored_sha256(manifest: bytes) -> str | None:
    """The hash of the record a stored manifest holds; None when it does not decode."""
    try:
        record, _ = records.decode_manifest(manifest)
    except records.ManifestError:
        return None
    return records.record_sha256(record)


class CheckpointStoreService(pb_grpc.CheckpointStoreServicer):
    """Translates gRPC calls to a scoped ArtifactStore.

    Args:
        backend: Where checkpoints are stored.
        grant_key: The key grants are signed with.
        revoked: The revocation list (in Redis).
        max_object_bytes: The largest object accepted.
        redis_client: The Redis client behind `revoked` (closed with the service).
        link: Whether Redis answers (followed by `open_service`'s caller for its health
            status; told at once when a call finds Redis unreachable).
    """

    def __init__(
        self,
        backend: storing.Backend,
        grant_key: str,
        revoked: tokens.Revocations,
        max_object_bytes: int,
        redis_client: redis_link.Client | None = None,
        link: redis_link.RedisLink | None = None,
    ) -> None:
        self._backend = backend
        self._key = grant_key
        self._revoked = revoked
        self._max = max_object_bytes
        self._redis = redis_client
        self.link = link

    def register(self, server: grpc.aio.Server) -> None:
        pb_grpc.add_CheckpointStoreServicer_to_server(self, server)

    async def aclose(self) -> None:
        await self._backend.aclose()
        if self._redis is not None:
            await self._redis.aclose()

    async def _granted(
        self, context: grpc.aio.ServicerContext[Any, Any], right: tokens.Right
    ) -> tuple[tokens.Grant, storing.ArtifactStore]:
        try:
            grant = await tokens.check_grant(
                self._key, tokens.bearer(rpc.metadata(context)), self._revoked
            )
        except Exception as exc:
            if not redis_link.unreachable(exc):
                raise
            # The revocation could not be read: refuse (never accept a grant unchecked).
            if self.link is not None:
                self.link.suspect()
            raise redis_link.unavailable() from None
        if not grant.allows(right):
            raise errors.ForbiddenScope()
        try:
            scope = storing.StoreScope(grant.swarm, grant.task_id, grant.task_generation)
        except ValueError:
            raise errors.ForbiddenScope() from None
        return grant, self._backend.scoped(scope)

    @rpc.handled
    async def PutObject(
        self,
        request_iterator: AsyncIterator[pb.PutObjectChunk],
        context: grpc.aio.ServicerContext[Any, Any],
    ) -> pb.ObjectRef:
        grant, store = await self._granted(context, tokens.Right.WRITE)
        first = await anext(aiter(request_iterator), None)
        if first is None or first.WhichOneof("chunk") != "header":
            raise errors.Malformed("malformed", "the first message must be the object header")
        sha256 = _name(first.header.sha256)
        size = first.header.size
        if size < 0:
            raise errors.Malformed("malformed", "object size must not be negative")
        if size > self._max:
            raise errors.TooLarge("object_too_large", "object is over the size limit")

        async def chunks() -> AsyncIterator[bytes]:
            async for message in request_iterator:
                if message.WhichOneof("chunk") != "data":
                    raise errors.Malformed("malformed", "only the first message may be a header")
                yield message.data

        try:
            ref = await store.put_object(chunks(), sha256=sha256, size=size, max_size=self._max)
        except storing.ObjectTooLarge:
            raise errors.TooLarge("object_too_large", "object is over the size limit") from None
        except storing.ObjectCorrupt:
            raise errors.Malformed(
                "corrupt_object", "object content does not match its sha256 and size"
            ) from None
        except storing.InvalidName:
            raise errors.Malformed(
                "invalid_name", "object name must be a lowercase hex sha256"
            ) from None
        logs.event(
            log,
            "object_stored",
            execution_id=grant.execution_id,
            size=ref.size,
            existed=ref.existed,
        )
        return pb.ObjectRef(sha256=ref.sha256, size=ref.size, existed=ref.existed)

    @rpc.handled
    async def CommitCheckpoint(
        self, request: pb.CommitCheckpointRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.CommitCheckpointResponse:
        grant, store = await self._granted(context, tokens.Right.WRITE)
        try:
            record = json.loads(request.record_json)
        except ValueError:
            raise errors.Malformed("invalid_record", "the record is not JSON") from None
        if not isinstance(record, dict):
            raise errors.Malformed("invalid_record", "the record is not a JSON object")
        record["committed"] = True
        problem = record_schema.check(record)
        if problem is not None:
            raise errors.Malformed(problem.value, problem.value)
        authority = record["authority"]
        generation = authority.get("execution_generation", authority["task_generation"])
        if (
            authority["swarm"] != grant.swarm
            or authority["seat"] != grant.seat
            or authority["task_id"] != grant.task_id
            or authority["task_generation"] != grant.task_generation
            or authority["execution_id"] != grant.execution_id
            or generation != grant.execution_generation
        ):
            raise errors.ForbiddenScope()
        checkpoint_id = record["checkpoint_id"]
        # Every object the record's artifacts are stored in (a version 3 chain: each segment),
        # each asked once, all at once where the store can (a long chain has thousands).
        names = sorted({sha256 for _role, sha256, _size in records.stored_objects(record)})
        if storing.batched(store):
            present = await store.objects_exist(names)
            for found in present:
                if isinstance(found, storing.StoreError):
                    raise found  # as `object_exists` itself raises it
        else:
            present = [await store.object_exists(name) for name in names]
        if not all(present):
            raise errors.Refused("missing_object", "missing_object")
        manifest_sha = records.record_sha256(record)
        existing = await store.get_manifest(checkpoint_id)
        if existing is None:
            await store.put_manifest(checkpoint_id, records.encode_manifest(record))
        elif _stored_sha256(existing) != manifest_sha:
            # Compared by the record's hash, not the stored bytes: the same record committed
            # again is the same checkpoint, stored packed or (before packing) as plain JSON.
            raise errors.Refused(
                "already_committed", "a different record is already committed under this id"
            )
        logs.event(
            log,
            "checkpoint_committed",
            execution_id=grant.execution_id,
            checkpoint_id=checkpoint_id,
        )
        return pb.CommitCheckpointResponse(
            checkpoint_id=checkpoint_id, manifest_sha256=manifest_sha
        )

    @rpc.handled
    async def ListCheckpoints(
        self, request: pb.ListCheckpointsRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.ListCheckpointsResponse:
        grant, store = await self._granted(context, tokens.Right.READ)
        if not request.compatibility_key:
            raise errors.Malformed("malformed", "compatibility_key is required")
        found = await validation.list_checkpoints(
            store,
            request.compatibility_key,
            grant.execution_generation,
            verified_only=request.verified_only,
        )
        return pb.ListCheckpointsResponse(checkpoints=[_summary_pb(s) for s in found])

    @rpc.handled
    async def GetRecord(
        self, request: pb.GetRecordRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.GetRecordResponse:
        _, store = await self._granted(context, tokens.Right.READ)
        try:
            data = await store.get_manifest(request.checkpoint_id)
        except storing.InvalidName:
            raise errors.Malformed("invalid_name", "checkpoint id is not a valid name") from None
        if data is None:
            raise errors.NotFound("manifest_absent", "manifest_absent")
        try:
            record, manifest_sha = records.decode_manifest(data)
        except records.ManifestError:
            raise errors.Refused("corrupt_manifest", "corrupt_manifest") from None
        return pb.GetRecordResponse(
            record_json=json.dumps(record, sort_keys=True), manifest_sha256=manifest_sha
        )

    @rpc.handled
    async def Verify(
        self, request: pb.VerifyRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> types_pb2.Verdict:
        grant, store = await self._granted(context, tokens.Right.READ)
        if not request.checkpoint_id:
            raise errors.Malformed("malformed", "checkpoint_id is required")
        verdict = await validation.Validator(store).verify(
            validation.Expectation(request.checkpoint_id, grant.execution_generation)
        )
        return types_pb2.Verdict(
            ok=verdict.ok, reason=verdict.reason.value if verdict.reason else ""
        )

    @rpc.handled
    async def FetchObject(
        self, request: pb.FetchObjectRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> AsyncIterator[pb.ObjectChunk]:
        _, store = await self._granted(context, tokens.Right.READ)
        sha256 = _name(request.sha256)
        try:
            async for chunk in store.read_object(sha256, FETCH_CHUNK):
                yield pb.ObjectChunk(data=chunk)
        except storing.ObjectMissing:
            raise errors.NotFound("missing_object", "missing_object") from None


async def open_service(conf: settings.StoreSettings) -> CheckpointStoreService:
    """Build the service from its settings (the backend and the Redis revocation list, with a
    `RedisLink` the caller starts). Connects to nothing: Redis may be down at start."""
    backend = backends.open_backend(
        str(conf.storage.checkpoint_root) if conf.storage.checkpoint_root else None,
        conf.storage.checkpoint_bucket,
        conf.storage.s3_endpoint_url,
    )
    if backend is None:
        raise settings.SettingsError("no checkpoint storage is configured")
    client = redis_link.connect(conf.redis_url)
    return CheckpointStoreService(
        backend,
        conf.grant_key,
        revocations.RedisRevocations(client),
        conf.storage.max_object_bytes,
        client,
        redis_link.RedisLink(client),
    )
