"""newest_verified: the checkpoint a decision picks, found by checking only the one chosen.

Spec, "Decide": "the newest complete checkpoint compatible with the current worker image is a
native one"; "resume picks the newest complete, compatible checkpoint of the fenced attempt".
Issue 10 item 5: the newest compatible checkpoint is found without validating every record of
the task each time; only the chosen one is validated, and an invalid newest one falls through
to the same choice as before.
"""

from __future__ import annotations

import collections
import hashlib
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import pytest

from services.common.checkpoints import record_schema, records, validation
from services.controller import deciding
from services.controller.state import records as state
from tests.support import memory_store
from tests.unit.checkpoints import material

KEY = "registry.local/agent-worker:1.4.2"
GENERATION = 3


def usable(summary: records.Summary) -> bool:
    return deciding.holds_conversation(summary.watermark)


async def before(store: memory_store.MemoryStore) -> records.Summary | None:
    """The choice as the controller made it before: every record listed and verified."""
    listed = await validation.list_checkpoints(store, KEY, GENERATION, verified_only=True)
    found = deciding.usable(listed)
    assert found is None or isinstance(found, records.Summary)
    return found


@pytest.fixture
def checked(monkeypatch: pytest.MonkeyPatch) -> Iterator[collections.Counter[str]]:
    """How many times each checkpoint's record went through the schema check."""
    counts: collections.Counter[str] = collections.Counter()
    original = record_schema.check

    def counting(record: Mapping[str, Any]) -> Any:
        counts[str(record.get("checkpoint_id"))] += 1
        return original(record)

    monkeypatch.setattr(record_schema, "check", counting)
    yield counts


def with_native(store: memory_store.MemoryStore, *ids_sequences: tuple[str, int]) -> None:
    for checkpoint_id, sequence in ids_sequences:
        material.commit(
            store, material.native_record(checkpoint_id=checkpoint_id, sequence=sequence)
        )


def invalid_but_hashed(checkpoint_id: str, sequence: int) -> dict[str, Any]:
    """A record whose manifest hash matches but which breaks the schema (invalid_record)."""
    return material.native_record(checkpoint_id=checkpoint_id, sequence=sequence, surprise=1)


def corrupt_objects(store: memory_store.MemoryStore) -> None:
    store.objects[hashlib.sha256(material.SESSION).hexdigest()] = b"changed"


Stock = Callable[[memory_store.MemoryStore], None]


def newest_with(**fields: Any) -> Stock:
    """ckpt-5, and a newer ckpt-9 with `fields` changed (and its manifest hash matching)."""

    def stock(store: memory_store.MemoryStore) -> None:
        with_native(store, ("ckpt-5", 5))
        record = material.native_record(checkpoint_id="ckpt-9", sequence=9, **fields)
        material.commit(store, record)

    return stock


STORES: dict[str, Stock] = {
    "valid newest": lambda s: with_native(s, ("ckpt-5", 5), ("ckpt-6", 6), ("ckpt-7", 7)),
    "invalid newest": lambda s: (
        with_native(s, ("ckpt-5", 5), ("ckpt-6", 6)),
        material.commit(s, invalid_but_hashed("ckpt-9", 9)),
    ),
    "corrupt manifest newest": lambda s: (
        with_native(s, ("ckpt-5", 5)),
        s.manifests.__setitem__("ckpt-9", b"garbage"),
    ),
    "tampered record newest": lambda s: (
        with_native(s, ("ckpt-5", 5)),
        s.manifests.__setitem__(
            "ckpt-9",
            records.canonical_bytes(
                {"manifest_sha256": "0" * 64, "record": material.native_record(sequence=9)}
            ),
        ),
    ),
    "newest named under another id": lambda s: (
        with_native(s, ("ckpt-5", 5)),
        material.commit(s, material.native_record(checkpoint_id="ckpt-9", sequence=9), "x-9"),
    ),
    "uncommitted newest": lambda s: (
        with_native(s, ("ckpt-5", 5)),
        material.commit(s, material.native_record(checkpoint_id="ckpt-9", committed=False)),
    ),
    "newest of another attempt": newest_with(
        authority={**material.native_record()["authority"], "execution_generation": 4}
    ),
    "newest of another image": newest_with(compatibility_key="x:1"),
    "newest holds no conversation": newest_with(
        transcript={**material.native_record()["transcript"], "watermark": 0}
    ),
    "every object corrupt": lambda s: (with_native(s, ("ckpt-5", 5)), corrupt_objects(s)),
    "context-only newest, same sequence, later": lambda s: (
        with_native(s, ("ckpt-7", 7)),
        material.commit(
            s,
            material.context_record(checkpoint_id="ckpt-7b", created_at="2026-12-02T16:00:00Z"),
        ),
    ),
    "empty": lambda s: None,
}


@pytest.mark.parametrize("name", sorted(STORES))
async def test_the_same_checkpoint_as_listing_and_verifying_every_one(name: str) -> None:
    """Whatever the newest record is (valid, invalid, corrupt, of another image or attempt,
    without a conversation), the choice equals the newest usable one of the fully verified
    list, and so does the decision made from it."""
    store = material.stocked_store()
    STORES[name](store)
    found = await validation.newest_verified(store, KEY, GENERATION, usable)
    assert found == await before(store)
    fence = state.Fence(
        execution_id=state.ExecutionId("e-42"),
        swarm="example",
        generation=GENERATION,
        seat=state.SeatName("eng-2"),
        reason="oom_killed",
        controller_epoch=1,
        native_session_id="0b0c7a1e-1111-2222-3333-444455556666",
        archive_watermark=400,
        fenced_at="2026-12-02T15:00:00Z",
        task_id="t-eng-2",
        task_generation=1,
        releases=(),
    )
    switches = deciding.Switches(automation=True, paused=False, legacy_spawn=False)
    listed = await validation.list_checkpoints(store, KEY, GENERATION, verified_only=True)
    assert deciding.decide(fence, [found] if found else [], switches) == deciding.decide(
        fence, listed, switches
    )


async def test_only_the_chosen_record_is_schema_checked(
    checked: collections.Counter[str],
) -> None:
    """With a valid newest checkpoint, its record alone is schema-checked, once; listing and
    verifying every record checked each of them twice."""
    store = material.stocked_store()
    with_native(store, ("ckpt-5", 5), ("ckpt-6", 6), ("ckpt-7", 7))
    checked.clear()  # building the records checked them
    found = await validation.newest_verified(store, KEY, GENERATION, usable)
    assert found is not None and found.checkpoint_id == "ckpt-7"
    assert checked == {"ckpt-7": 1}
    checked.clear()
    await before(store)
    assert checked == {"ckpt-5": 2, "ckpt-6": 2, "ckpt-7": 2}


async def test_an_invalid_newest_record_falls_through_to_the_next(
    checked: collections.Counter[str],
) -> None:
    """An invalid newest record is checked, refused, and the next newest is chosen: the same
    checkpoint as before; the older ones are never checked."""
    store = material.stocked_store()
    with_native(store, ("ckpt-5", 5), ("ckpt-6", 6))
    material.commit(store, invalid_but_hashed("ckpt-9", 9))
    checked.clear()  # building the records checked them
    found = await validation.newest_verified(store, KEY, GENERATION, usable)
    assert found is not None and found.checkpoint_id == "ckpt-6"
    assert checked == {"ckpt-9": 1, "ckpt-6": 1}


async def test_records_passed_over_are_not_checked(checked: collections.Counter[str]) -> None:
    """Records of another image, or without a conversation record, are passed over on what
    they claim: never schema-checked, never verified."""
    store = material.stocked_store()
    with_native(store, ("ckpt-5", 5))
    material.commit(
        store, material.native_record(checkpoint_id="ckpt-8", sequence=8, compatibility_key="x:1")
    )
    checked.clear()  # building the records checked them
    found = await validation.newest_verified(store, KEY, GENERATION, lambda s: s.sequence < 8)
    assert found is not None and found.checkpoint_id == "ckpt-5"
    assert checked == {"ckpt-5": 1}
