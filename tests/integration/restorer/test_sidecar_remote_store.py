"""The remote ArtifactStore: the ArtifactStore port over the real checkpoint-store service.

Used when `checkpoint_remote` is true. The Validator reads through it exactly as through a
local folder; errors map onto the port's own (missing, corrupt, invalid name).
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from services.common import tokens
from services.common.checkpoints import records, storing, validation
from services.restorer import remote_store
from tests.support import store_server

SCOPE = storing.StoreScope("example", "t-eng-2", 1)
AUTHORITY = records.Authority("example", "eng-2", "t-eng-2", 1, "e-42", 3)


async def _chunks(*parts: bytes) -> AsyncIterator[bytes]:
    for part in parts:
        yield part


def _store(server: store_server.StoreServer, *rights: tokens.Right) -> remote_store.RemoteStore:
    _, grant = server.grant(*rights)
    return remote_store.RemoteStore(
        server.channel, grant, SCOPE, compatibility_key="registry.local/agent-worker:1.4.2"
    )


async def test_objects_and_records_round_trip_and_verify(
    store_server: store_server.StoreServer,
) -> None:
    """Objects first, record last; the Validator verifies the checkpoint through the service."""
    store = _store(store_server)
    transcript = b'{"n":1}\n'
    blob = records.Blob.of(transcript)
    ref = await store.put_object(
        _chunks(transcript[:3], transcript[3:]),
        sha256=blob.sha256,
        size=blob.size,
        max_size=1 << 20,
    )
    assert (ref.sha256, ref.existed) == (blob.sha256, False)
    assert await store.object_exists(blob.sha256)
    assert await store.digest_object(blob.sha256) == (blob.sha256, blob.size)
    assert b"".join([c async for c in store.read_object(blob.sha256)]) == transcript
    record = records.new_record(
        checkpoint_id="ckpt-e-42-1",
        sequence=1,
        authority=AUTHORITY,
        project="app",
        compatibility_key="registry.local/agent-worker:1.4.2",
        transcript=blob,
        watermark=1,
    )
    await store.put_manifest("ckpt-e-42-1", records.encode_manifest(record))
    assert await store.get_manifest("ckpt-e-42-1") == records.encode_manifest(record)
    assert await store.list_checkpoint_ids() == ["ckpt-e-42-1"]
    verdict = await validation.Validator(store).verify(validation.Expectation("ckpt-e-42-1", 3))
    assert verdict.ok
    assert await store.get_manifest("ckpt-nope") is None


async def test_errors_map_onto_the_port(store_server: store_server.StoreServer) -> None:
    """Missing objects, wrong hashes and unsafe names are the port's errors; a read grant
    cannot write (the service refuses it: the remote store says so without the grant)."""
    store = _store(store_server)
    absent = "0" * 64
    assert not await store.object_exists(absent)
    assert await store.digest_object(absent) is None
    with pytest.raises(storing.ObjectMissing):
        async for _ in store.read_object(absent):
            pass
    with pytest.raises(storing.ObjectCorrupt):
        await store.put_object(_chunks(b"abc"), sha256=absent, size=3, max_size=10)
    with pytest.raises(storing.InvalidName):
        await store.object_exists("../../etc/passwd")
    reader = _store(store_server, tokens.Right.READ)
    data = b"x"
    blob = records.Blob.of(data)
    with pytest.raises(remote_store.RemoteStoreError) as refused:
        await reader.put_object(_chunks(data), sha256=blob.sha256, size=1, max_size=10)
    assert refused.value.reason == "forbidden_scope"
    assert "eyJ" not in str(refused.value) and "eyJ" not in repr(reader)
