"""The checkpoint-store service over real gRPC on loopback, a real backend and real Redis.

Spec: "The worker reads and writes checkpoints through the controller's scoped upload route";
every call needs a grant; refusals leave nothing stored.
"""

from __future__ import annotations

import hashlib
import json
import pathlib
from collections.abc import AsyncIterator, Iterable
from typing import Any

import grpc
import pytest
from agentihooks.swarm.v2 import checkpoint_store_pb2 as pb
from agentihooks.swarm.v2 import checkpoint_store_pb2_grpc as pb_grpc

from services.common import rpc, tokens
from services.common.checkpoints import packing, records, s3, storing
from tests.support import redis_server, store_server
from tests.support import s3 as s3_support
from tests.unit.checkpoints import material

OBJECTS = material.OBJECTS
KEY = "registry.local/agent-worker:1.4.2"


def _md(token: str) -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {token}"),)


async def _chunks(
    data: bytes, sha256: str | None = None, size: int | None = None, piece: int = 1000
) -> AsyncIterator[pb.PutObjectChunk]:
    yield pb.PutObjectChunk(
        header=pb.PutObjectHeader(
            sha256=sha256 or hashlib.sha256(data).hexdigest(),
            size=len(data) if size is None else size,
        )
    )
    for i in range(0, len(data), piece):
        yield pb.PutObjectChunk(data=data[i : i + piece])


async def _upload_all(
    stub: pb_grpc.CheckpointStoreStub, token: str, objects: Iterable[bytes] = OBJECTS
) -> None:
    for data in objects:
        ref = await stub.PutObject(_chunks(data), metadata=_md(token))
        assert ref.sha256 == hashlib.sha256(data).hexdigest() and ref.size == len(data)


def _files(root: pathlib.Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


def _entries(root: pathlib.Path) -> list[str]:
    """Every file and folder below the store's root: a refused upload leaves neither."""
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


def _reason(exc: grpc.aio.AioRpcError) -> str | None:
    for key, value in exc.trailing_metadata() or ():
        if key == rpc.REASON_KEY:
            return str(value)
    return None


async def _refused(call: Any, code: grpc.StatusCode) -> grpc.aio.AioRpcError:
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await call
    assert info.value.code() == code, info.value.details()
    return info.value


async def test_upload_commit_list_verify_fetch(store_server: store_server.StoreServer) -> None:
    """Objects first, record last; the committed checkpoint lists, verifies and fetches."""
    stub = pb_grpc.CheckpointStoreStub(store_server.channel)
    _, token = store_server.grant()
    await _upload_all(stub, token)
    again = await stub.PutObject(_chunks(material.SESSION), metadata=_md(token))
    assert again.existed
    record = material.native_record(committed=False)
    committed = await stub.CommitCheckpoint(
        pb.CommitCheckpointRequest(record_json=json.dumps(record)), metadata=_md(token)
    )
    assert committed.checkpoint_id == "ckpt-7"
    listed = await stub.ListCheckpoints(
        pb.ListCheckpointsRequest(compatibility_key=KEY, verified_only=True), metadata=_md(token)
    )
    assert [c.checkpoint_id for c in listed.checkpoints] == ["ckpt-7"]
    assert listed.checkpoints[0].continuity == "native"
    assert listed.checkpoints[0].watermark == 412
    other_key = await stub.ListCheckpoints(
        pb.ListCheckpointsRequest(compatibility_key="registry.local/agent-worker:9"),
        metadata=_md(token),
    )
    assert list(other_key.checkpoints) == []
    verdict = await stub.Verify(pb.VerifyRequest(checkpoint_id="ckpt-7"), metadata=_md(token))
    assert verdict.ok and verdict.reason == ""
    got = await stub.GetRecord(pb.GetRecordRequest(checkpoint_id="ckpt-7"), metadata=_md(token))
    assert json.loads(got.record_json)["committed"] is True
    assert got.manifest_sha256 == committed.manifest_sha256
    sha = hashlib.sha256(material.TRANSCRIPT).hexdigest()
    fetched = b"".join(
        [
            c.data
            async for c in stub.FetchObject(pb.FetchObjectRequest(sha256=sha), metadata=_md(token))
        ]
    )
    assert fetched == material.TRANSCRIPT


async def test_listing_is_newest_first(store_server: store_server.StoreServer) -> None:
    """ListCheckpoints: an attempt's complete checkpoints, newest first."""
    stub = pb_grpc.CheckpointStoreStub(store_server.channel)
    _, token = store_server.grant()
    await _upload_all(stub, token)
    for n in (3, 9, 5):
        record = material.native_record(checkpoint_id=f"ckpt-{n}", sequence=n)
        await stub.CommitCheckpoint(
            pb.CommitCheckpointRequest(record_json=json.dumps(record)), metadata=_md(token)
        )
    listed = await stub.ListCheckpoints(
        pb.ListCheckpointsRequest(compatibility_key=KEY), metadata=_md(token)
    )
    assert [c.checkpoint_id for c in listed.checkpoints] == ["ckpt-9", "ckpt-5", "ckpt-3"]


async def test_grant_for_another_task_sees_nothing_and_cannot_commit_here(
    store_server: store_server.StoreServer,
) -> None:
    """The grant scopes storage paths: another task's grant finds nothing of this one."""
    stub = pb_grpc.CheckpointStoreStub(store_server.channel)
    _, token = store_server.grant()
    await _upload_all(stub, token)
    record = material.native_record()
    await stub.CommitCheckpoint(
        pb.CommitCheckpointRequest(record_json=json.dumps(record)), metadata=_md(token)
    )
    before = _files(store_server.root)
    _, other = store_server.grant(task_id="t-other")
    verdict = await stub.Verify(pb.VerifyRequest(checkpoint_id="ckpt-7"), metadata=_md(other))
    assert not verdict.ok and verdict.reason == "manifest_absent"
    await _refused(
        stub.GetRecord(pb.GetRecordRequest(checkpoint_id="ckpt-7"), metadata=_md(other)),
        grpc.StatusCode.NOT_FOUND,
    )
    sha = hashlib.sha256(material.TRANSCRIPT).hexdigest()
    stream = stub.FetchObject(pb.FetchObjectRequest(sha256=sha), metadata=_md(other))
    with pytest.raises(grpc.aio.AioRpcError) as info:
        async for _ in stream:
            pass
    assert info.value.code() == grpc.StatusCode.NOT_FOUND
    # A record naming this task, committed with the other task's grant: forbidden_scope.
    exc = await _refused(
        stub.CommitCheckpoint(
            pb.CommitCheckpointRequest(record_json=json.dumps(record)), metadata=_md(other)
        ),
        grpc.StatusCode.PERMISSION_DENIED,
    )
    assert _reason(exc) == "forbidden_scope"
    assert _files(store_server.root) == before


async def test_read_grant_cannot_write(store_server: store_server.StoreServer) -> None:
    """A read grant used to write is refused with forbidden_scope and nothing is stored."""
    stub = pb_grpc.CheckpointStoreStub(store_server.channel)
    _, token = store_server.grant(tokens.Right.READ)
    exc = await _refused(
        stub.PutObject(_chunks(material.TRANSCRIPT), metadata=_md(token)),
        grpc.StatusCode.PERMISSION_DENIED,
    )
    assert _reason(exc) == "forbidden_scope"
    exc = await _refused(
        stub.CommitCheckpoint(
            pb.CommitCheckpointRequest(record_json=json.dumps(material.native_record())),
            metadata=_md(token),
        ),
        grpc.StatusCode.PERMISSION_DENIED,
    )
    assert _files(store_server.root) == []


async def test_revoked_grant_is_refused_on_its_next_call(
    store_server: store_server.StoreServer,
) -> None:
    """A revoked grant (revocation kept in Redis) is refused at once; nothing it sends is kept."""
    stub = pb_grpc.CheckpointStoreStub(store_server.channel)
    grant, token = store_server.grant()
    await stub.PutObject(_chunks(material.TRANSCRIPT), metadata=_md(token))
    before = _files(store_server.root)
    await store_server.revoked.revoke(grant.swarm, grant.grant_id, grant.expires_at)
    exc = await _refused(
        stub.PutObject(_chunks(material.SESSION), metadata=_md(token)),
        grpc.StatusCode.UNAUTHENTICATED,
    )
    assert "revoked" in (exc.details() or "")
    assert _files(store_server.root) == before


async def test_forged_token_is_refused(store_server: store_server.StoreServer) -> None:
    """A token not signed with the grant key is refused; its text is never echoed."""
    stub = pb_grpc.CheckpointStoreStub(store_server.channel)
    _, forged = tokens.mint_grant(
        "not-the-key-" + "z" * 32,
        swarm="example",
        seat="eng-2",
        task_id="t-eng-2",
        task_generation=1,
        execution_id="e-42",
        execution_generation=3,
        rights=frozenset({tokens.Right.WRITE, tokens.Right.READ}),
    )
    exc = await _refused(
        stub.PutObject(_chunks(material.TRANSCRIPT), metadata=_md(forged)),
        grpc.StatusCode.UNAUTHENTICATED,
    )
    assert forged not in (exc.details() or "")
    await _refused(
        stub.Verify(pb.VerifyRequest(checkpoint_id="ckpt-7"), metadata=_md("garbage")),
        grpc.StatusCode.UNAUTHENTICATED,
    )
    assert _files(store_server.root) == []


async def test_wrong_hash_is_refused_and_nothing_kept(
    store_server: store_server.StoreServer,
) -> None:
    """The hash is checked as chunks arrive; a wrong hash is refused and nothing is kept."""
    stub = pb_grpc.CheckpointStoreStub(store_server.channel)
    _, token = store_server.grant()
    exc = await _refused(
        stub.PutObject(_chunks(material.TRANSCRIPT, sha256="0" * 64), metadata=_md(token)),
        grpc.StatusCode.INVALID_ARGUMENT,
    )
    assert _reason(exc) == "corrupt_object"
    exc = await _refused(
        stub.PutObject(
            _chunks(material.TRANSCRIPT, size=len(material.TRANSCRIPT) - 3), metadata=_md(token)
        ),
        grpc.StatusCode.INVALID_ARGUMENT,
    )
    assert _entries(store_server.root) == []


async def test_object_over_the_limit_is_refused(store_server: store_server.StoreServer) -> None:
    """A size limit: an object declared over it is refused before its bytes are read."""
    stub = pb_grpc.CheckpointStoreStub(store_server.channel)
    _, token = store_server.grant()

    async def header_only() -> AsyncIterator[pb.PutObjectChunk]:
        yield pb.PutObjectChunk(
            header=pb.PutObjectHeader(sha256="f" * 64, size=store_server_limit() + 1)
        )

    exc = await _refused(
        stub.PutObject(header_only(), metadata=_md(token)), grpc.StatusCode.RESOURCE_EXHAUSTED
    )
    assert _reason(exc) == "object_too_large"
    assert _entries(store_server.root) == []


async def test_object_larger_than_declared_is_refused(
    store_server: store_server.StoreServer,
) -> None:
    """Bytes beyond the declared size are refused as they arrive; nothing stored."""
    stub = pb_grpc.CheckpointStoreStub(store_server.channel)
    _, token = store_server.grant()
    data = b"y" * 5000
    exc = await _refused(
        stub.PutObject(_chunks(data, size=100), metadata=_md(token)),
        grpc.StatusCode.INVALID_ARGUMENT,
    )
    assert _reason(exc) == "corrupt_object"
    assert _entries(store_server.root) == []


def store_server_limit() -> int:
    return store_server.MAX_OBJECT_BYTES


@pytest.mark.parametrize(
    "name", ["../../etc/passwd", "/etc/passwd", "A" * 64, "abc", "objects/" + "a" * 56]
)
async def test_path_like_object_name_is_refused(
    store_server: store_server.StoreServer, name: str
) -> None:
    """Objects are content-addressed: a path-like name is refused and touches no storage."""
    stub = pb_grpc.CheckpointStoreStub(store_server.channel)
    _, token = store_server.grant()
    exc = await _refused(
        stub.PutObject(_chunks(b"data", sha256=name), metadata=_md(token)),
        grpc.StatusCode.INVALID_ARGUMENT,
    )
    assert _reason(exc) == "invalid_name"
    stream = stub.FetchObject(pb.FetchObjectRequest(sha256=name), metadata=_md(token))
    with pytest.raises(grpc.aio.AioRpcError) as info:
        async for _ in stream:
            pass
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert _files(store_server.root) == []
    assert not (store_server.root.parent / "etc").exists()


async def test_commit_needs_every_object_first(store_server: store_server.StoreServer) -> None:
    """A record is written only after all its objects: a missing one refuses the commit."""
    stub = pb_grpc.CheckpointStoreStub(store_server.channel)
    _, token = store_server.grant()
    await _upload_all(stub, token, OBJECTS[:-1])
    exc = await _refused(
        stub.CommitCheckpoint(
            pb.CommitCheckpointRequest(record_json=json.dumps(material.native_record())),
            metadata=_md(token),
        ),
        grpc.StatusCode.FAILED_PRECONDITION,
    )
    assert _reason(exc) == "missing_object"
    listed = await stub.ListCheckpoints(
        pb.ListCheckpointsRequest(compatibility_key=KEY), metadata=_md(token)
    )
    assert list(listed.checkpoints) == []
    assert not any("records" in f for f in _files(store_server.root))


async def test_commit_refuses_invalid_and_conflicting_records(
    store_server: store_server.StoreServer,
) -> None:
    """An invalid record is refused with its verdict reason; a committed id is never replaced."""
    stub = pb_grpc.CheckpointStoreStub(store_server.channel)
    _, token = store_server.grant()
    await _upload_all(stub, token)
    bad = material.native_record(schema_version=7)
    exc = await _refused(
        stub.CommitCheckpoint(
            pb.CommitCheckpointRequest(record_json=json.dumps(bad)), metadata=_md(token)
        ),
        grpc.StatusCode.INVALID_ARGUMENT,
    )
    assert _reason(exc) == "unsupported_version"
    exc = await _refused(
        stub.CommitCheckpoint(
            pb.CommitCheckpointRequest(record_json="{not json"), metadata=_md(token)
        ),
        grpc.StatusCode.INVALID_ARGUMENT,
    )
    assert _reason(exc) == "invalid_record"
    first = material.native_record()
    await stub.CommitCheckpoint(
        pb.CommitCheckpointRequest(record_json=json.dumps(first)), metadata=_md(token)
    )
    again = await stub.CommitCheckpoint(
        pb.CommitCheckpointRequest(record_json=json.dumps(first)), metadata=_md(token)
    )
    assert again.checkpoint_id == "ckpt-7"
    changed = material.native_record(sequence=8)
    exc = await _refused(
        stub.CommitCheckpoint(
            pb.CommitCheckpointRequest(record_json=json.dumps(changed)), metadata=_md(token)
        ),
        grpc.StatusCode.FAILED_PRECONDITION,
    )
    got = await stub.GetRecord(pb.GetRecordRequest(checkpoint_id="ckpt-7"), metadata=_md(token))
    assert json.loads(got.record_json)["sequence"] == 7


async def test_store_service_over_s3(
    tmp_path: pathlib.Path, redis_server: redis_server.RedisServer, s3_bucket: s3_support.S3Bucket
) -> None:
    """The same route over the S3 backend (moto server through aioboto3)."""
    backend = s3.S3Backend(
        s3_bucket.name, endpoint_url=s3_bucket.endpoint_url, session=s3_bucket.session()
    )
    server, port, service = await store_server.start_store(tmp_path, redis_server.url, backend)
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            stub = pb_grpc.CheckpointStoreStub(channel)
            helper = store_server.StoreServer("", tmp_path, None, channel)  # type: ignore[arg-type]
            _, token = helper.grant()
            await _upload_all(stub, token)
            await stub.CommitCheckpoint(
                pb.CommitCheckpointRequest(record_json=json.dumps(material.native_record())),
                metadata=_md(token),
            )
            verdict = await stub.Verify(
                pb.VerifyRequest(checkpoint_id="ckpt-7"), metadata=_md(token)
            )
            assert verdict.ok
            with pytest.raises(grpc.aio.AioRpcError) as info:
                await stub.PutObject(_chunks(b"x", sha256="1" * 64), metadata=_md(token))
            assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert any(k.endswith("/records/ckpt-7.json") for k in s3_bucket.keys())  # noqa: SIM118
            listed = await stub.ListCheckpoints(
                pb.ListCheckpointsRequest(compatibility_key=KEY, verified_only=True),
                metadata=_md(token),
            )
            assert [c.checkpoint_id for c in listed.checkpoints] == ["ckpt-7"]
    finally:
        await server.stop(None)
        await service.aclose()


def _manifest_file(root: pathlib.Path, checkpoint_id: str) -> pathlib.Path:
    return next(root.rglob(f"records/{checkpoint_id}.json"))


async def test_manifests_are_stored_packed_and_read_plain_or_packed(
    store_server: store_server.StoreServer,
) -> None:
    """A committed manifest is stored packed (a quarter of its JSON); a manifest stored as plain
    JSON before packing still reads, verifies, and takes the same record committed again."""
    stub = pb_grpc.CheckpointStoreStub(store_server.channel)
    _, token = store_server.grant()
    await _upload_all(stub, token)
    record = material.native_record()
    committed = await stub.CommitCheckpoint(
        pb.CommitCheckpointRequest(record_json=json.dumps(record)), metadata=_md(token)
    )
    path = _manifest_file(store_server.root, "ckpt-7")
    stored = path.read_bytes()
    assert packing.is_packed(stored)
    decoded, claimed = records.decode_manifest(stored)
    assert claimed == committed.manifest_sha256 == records.record_sha256(decoded)
    plain = records.canonical_bytes({"manifest_sha256": claimed, "record": decoded})
    assert len(stored) < len(plain) / 2
    # As every manifest was stored before packing: plain JSON.
    path.write_bytes(plain)
    again = await stub.CommitCheckpoint(
        pb.CommitCheckpointRequest(record_json=json.dumps(record)), metadata=_md(token)
    )
    assert again.manifest_sha256 == committed.manifest_sha256
    assert path.read_bytes() == plain
    verdict = await stub.Verify(pb.VerifyRequest(checkpoint_id="ckpt-7"), metadata=_md(token))
    assert verdict.ok
    got = await stub.GetRecord(pb.GetRecordRequest(checkpoint_id="ckpt-7"), metadata=_md(token))
    assert got.manifest_sha256 == committed.manifest_sha256


@pytest.mark.parametrize(
    "hostile",
    [
        pytest.param(lambda good: good[:-3], id="truncated"),
        pytest.param(lambda good: good + b"\x00", id="trailing-bytes"),
        pytest.param(lambda good: good[:4] + b"\x02" + good[5:], id="unknown-format"),
        pytest.param(
            lambda good: packing.pack(b" " * (storing.MAX_MANIFEST_BYTES + 1)), id="over-the-limit"
        ),
    ],
)
async def test_a_hostile_packed_manifest_is_a_corrupt_manifest(
    store_server: store_server.StoreServer, hostile: Any
) -> None:
    """A packed manifest that is damaged, of an unknown format, or unpacks past the manifest
    limit (a few KiB inflating to more than 16 MiB) is `corrupt_manifest`, and stays as it was."""
    stub = pb_grpc.CheckpointStoreStub(store_server.channel)
    _, token = store_server.grant()
    await _upload_all(stub, token)
    await stub.CommitCheckpoint(
        pb.CommitCheckpointRequest(record_json=json.dumps(material.native_record())),
        metadata=_md(token),
    )
    path = _manifest_file(store_server.root, "ckpt-7")
    bad = hostile(path.read_bytes())
    path.write_bytes(bad)
    exc = await _refused(
        stub.GetRecord(pb.GetRecordRequest(checkpoint_id="ckpt-7"), metadata=_md(token)),
        grpc.StatusCode.FAILED_PRECONDITION,
    )
    assert _reason(exc) == "corrupt_manifest"
    verdict = await stub.Verify(pb.VerifyRequest(checkpoint_id="ckpt-7"), metadata=_md(token))
    assert (verdict.ok, verdict.reason) == (False, "corrupt_manifest")
    assert path.read_bytes() == bad
