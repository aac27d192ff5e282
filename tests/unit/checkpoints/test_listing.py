"""list_checkpoints: complete, compatible checkpoints of one attempt, newest first."""

from __future__ import annotations

import hashlib

from services.common.checkpoints import validation
from tests.unit.checkpoints import material


async def test_lists_committed_matching_checkpoints_newest_first() -> None:
    """Checkpoints are offered only when captured under the same compatibility key; the
    newest complete one comes first (by sequence, then created_at)."""
    store = material.stocked_store()
    material.commit(store, material.native_record(checkpoint_id="ckpt-5", sequence=5))
    material.commit(store, material.context_record(checkpoint_id="ckpt-7", sequence=7))
    material.commit(
        store,
        material.native_record(
            checkpoint_id="ckpt-7b", sequence=7, created_at="2026-12-02T16:00:00Z"
        ),
    )
    material.commit(store, material.native_record(checkpoint_id="ckpt-8", committed=False))
    material.commit(
        store, material.native_record(checkpoint_id="ckpt-9", compatibility_key="other:1")
    )
    newer = material.native_record(checkpoint_id="ckpt-10", sequence=10)
    newer["authority"]["execution_generation"] = 4
    material.commit(store, newer)
    store.manifests["ckpt-11"] = b"garbage"

    listed = await validation.list_checkpoints(
        store, "registry.local/agent-worker:1.4.2", 3, verified_only=False
    )
    assert [s.checkpoint_id for s in listed] == ["ckpt-7b", "ckpt-7", "ckpt-5"]
    assert [s.continuity for s in listed] == ["native", "context_only", "native"]


async def test_verified_only_reads_the_objects() -> None:
    """With verified_only, a checkpoint whose objects do not verify is left out."""
    store = material.stocked_store()
    material.commit(store, material.native_record(checkpoint_id="ckpt-5", sequence=5))
    material.commit(store, material.context_record(checkpoint_id="ckpt-6", sequence=6))
    store.objects[hashlib.sha256(material.SESSION).hexdigest()] = b"changed"

    key = "registry.local/agent-worker:1.4.2"
    all_listed = await validation.list_checkpoints(store, key, 3, verified_only=False)
    verified = await validation.list_checkpoints(store, key, 3, verified_only=True)
    assert [s.checkpoint_id for s in all_listed] == ["ckpt-6", "ckpt-5"]
    assert [s.checkpoint_id for s in verified] == ["ckpt-6"]


async def test_an_empty_store_lists_nothing() -> None:
    """No checkpoint, no offer: every failure waits for a decision and only fresh succeeds."""
    store = material.stocked_store()
    assert await validation.list_checkpoints(store, "k", 3, verified_only=True) == []
