"""Validator.verify on version 3 records: every segment and every chain, with the spec's reasons.

"A checkpoint is authoritative only when its record and every artifact it lists are present and
match their hashes." Issue 21: a missing segment is `missing_object`, a changed one
`corrupt_object`, a chain that disagrees with the inventory or with its own whole size or hash
(a segment swapped, reordered or dropped) `inventory_mismatch`, a segment over the size limit
`invalid_record`. Pure logic over an in-memory store; the real stores are in
tests/integration/restorer/test_append_only.py.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from services.common.checkpoints import chained_records, chains, records, validation
from services.common.checkpoints.reasons import Reason
from tests.support import memory_store
from tests.unit.checkpoints import material

SESSION = b"".join(b'{"n":%d,"text":"record %d"}\n' % (n, n) for n in range(12))
PIECES = (SESSION[:100], SESSION[100:200], SESSION[200:])
OTHER = b'{"tool":"output"}\n'
BUNDLES = (b"# v2 git bundle\none\n", b"# v2 git bundle\ntwo\n")


def _chain() -> chains.Chain:
    """The session captured three times: three segments, one per growth."""
    chain: chains.Chain | None = None
    grown = b""
    for piece in PIECES:
        grown += piece
        chain = chains.extend(chain, grown).chain
    assert chain is not None and len(chain.segments) == 3
    return chain


def v3_record() -> dict[str, Any]:
    chain = _chain()
    other = chains.extend(None, OTHER).chain
    return chained_records.new_record(
        checkpoint_id="ckpt-7",
        sequence=7,
        created_at="2026-12-02T15:00:00Z",
        authority=material.AUTHORITY,
        project="app",
        compatibility_key="registry.local/agent-worker:1.4.2",
        transcript=chain,
        watermark=12,
        native=chained_records.ChainedNative(
            "claude_code",
            "2.1.3",
            "0b0c7a1e-1111-2222-3333-444455556666",
            (
                chained_records.ChainedFile(".claude/projects/-w/0b0c.jsonl", chain),
                chained_records.ChainedFile(".claude/projects/-w/0b0c/tool.txt", other),
            ),
        ),
        source=chained_records.ChainedSource(
            repository="https://git.example/app.git",
            base_commit=material.BASE,
            head_commit=material.HEAD,
            branch="main",
            bundles=tuple(
                chained_records.Bundle(records.Blob.of(b).sha256, len(b), tip)
                for b, tip in zip(BUNDLES, ("c" * 40, material.HEAD), strict=True)
            ),
            patch=records.Blob.of(material.PATCH),
            untracked=(
                records.UntrackedFile("notes/todo.txt", records.Blob.of(material.UNTRACKED)),
            ),
        ),
    )


def _stocked(record: dict[str, Any]) -> memory_store.MemoryStore:
    store = memory_store.MemoryStore(material.SCOPE)
    for data in (*PIECES, OTHER, *BUNDLES, material.PATCH, material.UNTRACKED):
        store.add(data)
    material.commit(store, record)
    return store


async def _verdict(
    change: Callable[[dict[str, Any]], None] = lambda r: None,
    plant: Callable[[memory_store.MemoryStore], object] = lambda s: None,
) -> validation.Verdict:
    record = v3_record()
    store = _stocked(record)
    change(record)
    material.commit(store, record)
    plant(store)
    return await validation.Validator(store).verify(material.EXPECTED)


def _segment(index: int) -> str:
    return records.Blob.of(PIECES[index]).sha256


async def test_a_chained_checkpoint_verifies() -> None:
    """Every segment present and intact, every chain whole: the checkpoint is authoritative."""
    assert (await _verdict()).ok


async def test_a_missing_segment_is_missing_object() -> None:
    """A segment the record lists that the store does not hold: `missing_object`."""
    verdict = await _verdict(plant=lambda s: s.objects.pop(_segment(1)))
    assert verdict.reason is Reason.MISSING_OBJECT


async def test_a_changed_segment_is_corrupt_object() -> None:
    """A stored segment whose bytes changed (same size): `corrupt_object`."""

    def change(store: memory_store.MemoryStore) -> None:
        store.objects[_segment(1)] = b"x" * len(PIECES[1])

    assert (await _verdict(plant=change)).reason is Reason.CORRUPT_OBJECT


def _both(change: Callable[[list[Any]], object]) -> Callable[[dict[str, Any]], None]:
    """Apply `change` to the session file's segment list, which the transcript shares (it is
    `same_as` the session file)."""

    def apply(record: dict[str, Any]) -> None:
        assert record["transcript"]["same_as"] == record["native"]["files"][0]["path"]
        change(record["native"]["files"][0]["segments"])

    return apply


def _swap(first: int, second: int) -> Callable[[dict[str, Any]], None]:
    def change(segments: list[Any]) -> None:
        segments[first], segments[second] = segments[second], segments[first]

    return _both(change)


async def test_swapped_segments_are_inventory_mismatch() -> None:
    """Two segments swapped: each is intact, but in that order they are not the item the
    record names."""
    assert (await _verdict(_swap(0, 1))).reason is Reason.INVENTORY_MISMATCH


async def test_reordered_segments_are_inventory_mismatch() -> None:
    """The chain reordered (last first): `inventory_mismatch`."""

    def rotate(segments: list[Any]) -> None:
        segments.append(segments.pop(0))

    assert (await _verdict(_both(rotate))).reason is Reason.INVENTORY_MISMATCH


async def test_a_dropped_segment_is_inventory_mismatch() -> None:
    """A segment dropped from a chain: the chain no longer adds up to its whole size."""
    assert (await _verdict(_both(lambda segments: segments.pop(1)))).reason is (
        Reason.INVENTORY_MISMATCH
    )


async def test_a_chain_the_inventory_does_not_list_is_inventory_mismatch() -> None:
    """The inventory names each chained item by its whole hash and size: a chain whose whole
    (and segments) are not the ones the inventory lists is refused."""

    def change(record: dict[str, Any]) -> None:
        record["inventory"] = [e for e in record["inventory"] if e["role"] != "transcript"]
        record["inventory"].append({"role": "transcript", "sha256": "0" * 64, "size": 1})

    assert (await _verdict(change)).reason is Reason.INVENTORY_MISMATCH


async def test_a_whole_hash_that_is_not_the_chains_is_inventory_mismatch() -> None:
    """Segments intact and in order, but the whole hash is another item's."""

    def change(record: dict[str, Any]) -> None:
        record["native"]["files"][0]["sha256"] = record["transcript"]["sha256"] = "0" * 64
        for entry in record["inventory"]:
            if entry["role"] in ("transcript", "native_session") and entry["size"] > 100:
                entry["sha256"] = "0" * 64

    assert (await _verdict(change)).reason is Reason.INVENTORY_MISMATCH


async def test_a_one_segment_chain_must_be_its_whole_item() -> None:
    """A chain of one segment is its item: a different whole hash needs no read to refuse."""

    def change(record: dict[str, Any]) -> None:
        record["native"]["files"][1]["sha256"] = "0" * 64

    assert (await _verdict(change)).reason is Reason.INVENTORY_MISMATCH


async def test_a_segment_over_the_size_limit_is_invalid_record() -> None:
    """A segment over the format's limit (64 MiB) is refused as breaking the schema before any
    object is read."""

    def change(record: dict[str, Any]) -> None:
        big = chains.MAX_SEGMENT_BYTES + 1
        item = record["native"]["files"][0]
        item["size"] += big - item["segments"][0]["size"]
        item["segments"][0]["size"] = big

    assert (await _verdict(change)).reason is Reason.INVALID_RECORD


async def test_a_missing_segment_outranks_a_swapped_chain() -> None:
    """Presence is checked first: a chain out of order that also lost a segment is
    `missing_object`."""
    verdict = await _verdict(_swap(0, 2), plant=lambda s: s.objects.pop(_segment(1)))
    assert verdict.reason is Reason.MISSING_OBJECT


async def test_a_changed_segment_outranks_a_swapped_chain() -> None:
    """A changed segment is `corrupt_object` even in a chain that is also out of order."""

    def plant(store: memory_store.MemoryStore) -> None:
        store.objects[_segment(2)] = b"x" * len(PIECES[2])

    assert (await _verdict(_swap(0, 1), plant)).reason is Reason.CORRUPT_OBJECT


async def test_a_changed_bundle_is_corrupt_object() -> None:
    """A bundle of the bundle chain is an object like any other."""

    def plant(store: memory_store.MemoryStore) -> None:
        store.objects[records.Blob.of(BUNDLES[1]).sha256] = b"y" * len(BUNDLES[1])

    assert (await _verdict(plant=plant)).reason is Reason.CORRUPT_OBJECT


async def test_bundles_require_the_bundle_role() -> None:
    """A head commit past the base needs its bundles: none listed is `invalid_record`
    (as in version 2), and bundles the inventory lacks are `missing_material`."""

    def no_bundles(record: dict[str, Any]) -> None:
        record["source"]["bundles"] = []
        record["inventory"] = [e for e in record["inventory"] if e["role"] != "source_bundle"]

    assert (await _verdict(no_bundles)).reason is Reason.INVALID_RECORD

    def unlisted(record: dict[str, Any]) -> None:
        record["inventory"] = [e for e in record["inventory"] if e["role"] != "source_bundle"]

    assert (await _verdict(unlisted)).reason is Reason.MISSING_MATERIAL


async def test_a_transcript_is_the_same_as_its_session_file() -> None:
    """The transcript names the session file whose bytes it is (`same_as`): its segments are
    listed once. A file the record does not hold is `invalid_record`; one whose whole hash
    is not the transcript's, `inventory_mismatch`."""
    assert "segments" not in v3_record()["transcript"]

    def elsewhere(record: dict[str, Any]) -> None:
        record["transcript"]["same_as"] = "no/such/file.jsonl"

    assert (await _verdict(elsewhere)).reason is Reason.INVALID_RECORD

    def other(record: dict[str, Any]) -> None:
        record["transcript"]["same_as"] = record["native"]["files"][1]["path"]

    assert (await _verdict(other)).reason is Reason.INVENTORY_MISMATCH


async def test_a_context_only_transcript_lists_its_own_segments() -> None:
    """Without a native session the transcript is its own chain, checked the same way."""

    def context_only(record: dict[str, Any]) -> None:
        files = record["native"]["files"]
        record["transcript"] = {
            "sha256": files[0]["sha256"],
            "size": files[0]["size"],
            "segments": files[0]["segments"],
            "watermark": 12,
        }
        record["continuity"], record["native"] = "context_only", None
        record["inventory"] = [e for e in record["inventory"] if e["role"] != "native_session"]

    assert (await _verdict(context_only)).ok

    def swapped(record: dict[str, Any]) -> None:
        context_only(record)
        segments = record["transcript"]["segments"]
        segments[0], segments[1] = segments[1], segments[0]

    assert (await _verdict(swapped)).reason is Reason.INVENTORY_MISMATCH
