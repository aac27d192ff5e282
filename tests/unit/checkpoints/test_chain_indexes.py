"""Chain index objects (schema version 3): records that grow with the logarithm of their segments.

Issue 21 (build points 1 and 4, long chains): a capture about once a second leaves thousands of
small segments; a record lists a long chain's segments through content-addressed index objects,
so it names about log2(n) of them, each written once. `Validator.verify` checks every index
object and every segment with the spec's reasons: a missing one is `missing_object`, a changed
one `corrupt_object`, runs that do not make the item `inventory_mismatch`, an index object that
is not one (forged, wrong level, absurdly repeated) `invalid_record`. Pure logic over an
in-memory store; the real stores are in tests/integration/restorer/test_chain_indexes.py.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Callable
from typing import Any

import pytest

from services.common.checkpoints import (
    chain_indexes,
    chained_records,
    chains,
    index_reading,
    records,
    validation,
)
from services.common.checkpoints.reasons import Reason
from tests.support import memory_store
from tests.unit.checkpoints import material

PATH = ".claude/projects/-w/0b0c.jsonl"


def _piece(n: int) -> bytes:
    return b'{"n":%d,"text":"%s"}\n' % (n, b"x" * (n % 7 + 1))


class Grown:
    """A session captured after each of `captures` appends, as the writer folds it: the
    chain, every object stored (segments and index objects, by name) and every index object
    each capture made."""

    def __init__(self, captures: int) -> None:
        self.objects: dict[str, bytes] = {}
        self.made: list[str] = []
        chain: chains.Chain | None = None
        data = b""
        for n in range(captures):
            data += _piece(n)
            extension = chains.extend(chain, data)
            for segment, part in extension.new:
                self.objects[segment.sha256] = bytes(part)
            chain, made = chain_indexes.fold(extension.chain)
            for run, index in made:
                self.objects[run.sha256] = index
                self.made.append(run.sha256)
        assert chain is not None
        self.chain = chain
        self.data = data


def _record(chain: chains.Chain, *, context_only: bool = False) -> dict[str, Any]:
    native = chained_records.ChainedNative(
        "claude_code",
        "2.1.3",
        "0b0c7a1e-1111-2222-3333-444455556666",
        (chained_records.ChainedFile(PATH, chain),),
    )
    return chained_records.new_record(
        checkpoint_id="ckpt-7",
        sequence=7,
        created_at="2026-12-02T15:00:00Z",
        authority=material.AUTHORITY,
        project="app",
        compatibility_key="registry.local/agent-worker:1.4.2",
        transcript=chain,
        watermark=12,
        native=None if context_only else native,
    )


# --- the writer: folding -------------------------------------------------------------------


@pytest.mark.parametrize("captures", [7, 8, 100, 1000, 5000])
def test_a_record_names_at_most_one_run_per_level(captures: int) -> None:
    """Fewer than `LEAF_SEGMENTS` segments stay inline; the rest are in runs of strictly
    falling level, at most about log2(n / LEAF_SEGMENTS) + 1 of them, that cover the chain."""
    grown = Grown(captures)
    chain = grown.chain
    assert len(chain.segments) < chain_indexes.LEAF_SEGMENTS
    levels = [run.level for run in chain.runs]
    assert levels == sorted(set(levels), reverse=True)
    assert len(chain.runs) <= math.log2(captures / chain_indexes.LEAF_SEGMENTS + 1) + 1
    assert sum(r.bytes for r in chain.runs) + sum(s.size for s in chain.segments) == len(grown.data)
    assert bool(chain.runs) == (captures >= chain_indexes.LEAF_SEGMENTS)


def test_a_records_size_grows_with_the_logarithm_of_its_segments() -> None:
    """From 100 to 5,000 captures (50 times the segments) the record grows by well under a
    kilobyte; listing every segment (about 90 bytes each) it would grow by over 400 KiB."""
    sizes = {n: len(records.encode_manifest(_record(Grown(n).chain))) for n in (100, 5000)}
    assert sizes[5000] - sizes[100] < 1024
    assert sizes[5000] < 4096


def test_each_index_object_is_written_once_and_they_stay_small() -> None:
    """Index objects are never rewritten (each capture makes only new ones), and all of them
    together hold about 53 bytes per segment (40 in level 1 objects, 13 above them with
    `LEAF_SEGMENTS` 8): a small fixed share of what the chain stores."""
    grown = Grown(2000)
    assert len(grown.made) == len(set(grown.made))
    index_bytes = sum(len(grown.objects[name]) for name in grown.made)
    assert index_bytes <= 2000 * 56


def test_folding_is_deterministic_and_keeps_the_chain() -> None:
    """The same chain always folds to the same index objects (a transcript and the session
    file it is the same as fold alike), and an indexed chain round-trips through a record."""
    grown = Grown(40)
    again = Grown(40)
    assert grown.chain == again.chain and grown.made == again.made
    item = _record(grown.chain)["native"]["files"][0]
    assert chains.Chain.from_json(item) == grown.chain
    assert "index" in item


def test_extending_an_indexed_chain_keeps_its_runs() -> None:
    """An append keeps the previous runs as they are and adds segments after the inline ones;
    a rewrite starts a new chain with no runs."""
    grown = Grown(20)
    longer = grown.data + b'{"n":"more"}\n'
    extension = chains.extend(grown.chain, longer)
    assert extension.appended and extension.chain.runs == grown.chain.runs
    assert extension.chain.segments[: len(grown.chain.segments)] == grown.chain.segments
    rewritten = chains.extend(grown.chain, b"compacted\n" + longer)
    assert not rewritten.appended and rewritten.chain.runs == ()


# --- the format: parsing -------------------------------------------------------------------


def test_index_objects_round_trip() -> None:
    segments = (chains.Segment("a" * 64, 10), chains.Segment("b" * 64, 20))
    assert chain_indexes.parse(chain_indexes.encode_segments(segments), 1) == segments
    leaf = chain_indexes.encode_segments(segments)
    run = chains.Run("c" * 64, len(leaf), 1, 30)
    assert chain_indexes.parse(chain_indexes.encode_runs(2, [run, run]), 2) == (run, run)


_LEAF = chain_indexes.encode_segments([chains.Segment("a" * 64, 10)])
MALFORMED: dict[str, tuple[bytes, int]] = {
    "not an index object": (b'{"segments": []}', 1),
    "another level than named": (_LEAF, 2),
    "no entries": (chain_indexes.MAGIC + bytes([1]), 1),
    "a partial entry": (_LEAF[:-1], 1),
    "an empty segment": (chain_indexes.encode_segments([chains.Segment("a" * 64, 0)]), 1),
    "a segment over the size limit": (
        chain_indexes.encode_segments([chains.Segment("a" * 64, chains.MAX_SEGMENT_BYTES + 1)]),
        1,
    ),
    "a run over the size limit": (
        chain_indexes.encode_runs(
            2, [chains.Run("a" * 64, chain_indexes.MAX_INDEX_BYTES + 1, 1, 5)]
        ),
        2,
    ),
    "absurd depth": (chain_indexes.MAGIC + bytes([41]) + b"\0" * 48, 41),
}


@pytest.mark.parametrize("name", sorted(MALFORMED))
def test_malformed_index_objects_are_refused(name: str) -> None:
    data, level = MALFORMED[name]
    with pytest.raises(chain_indexes.Malformed):
        chain_indexes.parse(data, level)


# --- the Validator -------------------------------------------------------------------------


def _stocked(grown: Grown, record: dict[str, Any]) -> memory_store.MemoryStore:
    store = memory_store.MemoryStore(material.SCOPE)
    store.objects.update(grown.objects)
    material.commit(store, record)
    return store


GROWN = Grown(108)
"""13 level 1 runs (8 + 4 + 1: runs of levels 4, 3 and 1) and 4 segments inline."""


async def _verdict(
    change: Callable[[dict[str, Any], memory_store.MemoryStore], None] = lambda r, s: None,
    *,
    context_only: bool = False,
) -> validation.Verdict:
    record = _record(GROWN.chain, context_only=context_only)
    store = _stocked(GROWN, record)
    change(record, store)
    material.commit(store, record)
    return await validation.Validator(store).verify(material.EXPECTED)


def _item(record: dict[str, Any]) -> dict[str, Any]:
    item: dict[str, Any] = record["native"]["files"][0]
    return item


def _leaf_of(store: memory_store.MemoryStore, ref: dict[str, Any]) -> str:
    """The name of the first level 1 index object under `ref`."""
    name, level = ref["sha256"], ref["level"]
    while level > 1:
        runs = chain_indexes.parse(store.objects[name], level)
        name, level = runs[0].sha256, level - 1
    return name


async def test_an_indexed_chain_verifies_and_expands_to_every_segment() -> None:
    """Every index object and segment present and intact: the checkpoint is authoritative,
    and the chain listed in full is the session's segments in order."""
    assert (await _verdict()).ok
    for context_only in (False, True):
        assert (await _verdict(context_only=context_only)).ok
    record = _record(GROWN.chain)
    expanded = await index_reading.expand(_stocked(GROWN, record), record)
    assert not isinstance(expanded, Reason)
    names = [s["sha256"] for s in _item(dict(expanded))["segments"]]
    assert b"".join(GROWN.objects[n] for n in names) == GROWN.data


async def test_a_missing_index_object_is_missing_object() -> None:
    def change(record: dict[str, Any], store: memory_store.MemoryStore) -> None:
        del store.objects[_item(record)["index"][0]["sha256"]]

    assert (await _verdict(change)).reason is Reason.MISSING_OBJECT


async def test_a_changed_index_object_is_corrupt_object() -> None:
    def change(record: dict[str, Any], store: memory_store.MemoryStore) -> None:
        name = _leaf_of(store, _item(record)["index"][0])
        data = bytearray(store.objects[name])
        data[-1] ^= 1
        store.objects[name] = bytes(data)

    assert (await _verdict(change)).reason is Reason.CORRUPT_OBJECT


async def test_a_missing_or_changed_segment_behind_an_index_is_refused() -> None:
    """A segment an index object lists is checked like one the record lists."""

    def segment(store: memory_store.MemoryStore, record: dict[str, Any]) -> str:
        leaf = _leaf_of(store, _item(record)["index"][0])
        return chain_indexes.parse(store.objects[leaf], 1)[3].sha256

    def drop(record: dict[str, Any], store: memory_store.MemoryStore) -> None:
        del store.objects[segment(store, record)]

    def damage(record: dict[str, Any], store: memory_store.MemoryStore) -> None:
        name = segment(store, record)
        store.objects[name] = b"y" * len(store.objects[name])

    assert (await _verdict(drop)).reason is Reason.MISSING_OBJECT
    assert (await _verdict(damage)).reason is Reason.CORRUPT_OBJECT


def _forge_leaf(
    record: dict[str, Any],
    store: memory_store.MemoryStore,
    edit: Callable[[list[chains.Segment]], None],
) -> None:
    """Replace the record's lowest run (a level 1 index object) with a forged one, stored
    under its own hash so it reads intact, and the record's reference to it."""
    item = _item(record)
    ref = next(r for r in item["index"] if r["level"] == 1)
    segments = list(chain_indexes.parse(store.objects[ref["sha256"]], 1))
    edit(segments)
    forged = chain_indexes.encode_segments(segments)
    ref.update(sha256=store.add(forged), size=len(forged), bytes=sum(s.size for s in segments))
    item["size"] = sum(r["bytes"] for r in item["index"]) + sum(
        s["size"] for s in item.get("segments", ())
    )
    record["transcript"]["size"] = item["size"]
    for entry in record["inventory"]:
        entry["size"] = item["size"]


HOSTILE: dict[str, Callable[[list[chains.Segment]], None]] = {
    "segments swapped": lambda s: s.insert(0, s.pop(1)),
    "segments reordered": lambda s: s.append(s.pop(0)),
    "a segment dropped": lambda s: s.pop(2),
    "a segment repeated": lambda s: s.insert(0, s[0]),
}


@pytest.mark.parametrize("name", sorted(HOSTILE))
async def test_a_forged_index_object_is_inventory_mismatch(name: str) -> None:
    """An index object forged to list the chain's own segments swapped, reordered, dropped or
    repeated (the record naming it, its sizes made to add up): each segment is intact, but in
    that order they are not the item the record names."""
    verdict = await _verdict(lambda r, s: _forge_leaf(r, s, HOSTILE[name]))
    assert verdict.reason is Reason.INVENTORY_MISMATCH


async def test_an_indexed_segment_over_the_size_limit_is_invalid_record() -> None:
    """An index object forged to list a segment over 64 MiB (its sizes made to add up): the
    same limit as for a segment the record lists, refused before any segment is read."""

    def oversize(segments: list[chains.Segment]) -> None:
        segments[0] = chains.Segment(segments[0].sha256, chains.MAX_SEGMENT_BYTES + 1)

    verdict = await _verdict(lambda r, s: _forge_leaf(r, s, oversize))
    assert verdict.reason is Reason.INVALID_RECORD


async def test_runs_swapped_inside_an_index_object_are_inventory_mismatch() -> None:
    """A level 2 or higher index object forged to list its two runs the other way round."""

    def change(record: dict[str, Any], store: memory_store.MemoryStore) -> None:
        ref = _item(record)["index"][0]
        runs = list(chain_indexes.parse(store.objects[ref["sha256"]], ref["level"]))
        forged = chain_indexes.encode_runs(ref["level"], runs[::-1])
        ref.update(sha256=store.add(forged), size=len(forged))

    assert (await _verdict(change)).reason is Reason.INVENTORY_MISMATCH


async def test_runs_reordered_in_the_record_are_inventory_mismatch() -> None:
    def change(record: dict[str, Any], store: memory_store.MemoryStore) -> None:
        _item(record)["index"].reverse()

    assert len(_item(_record(GROWN.chain))["index"]) >= 2
    assert (await _verdict(change)).reason is Reason.INVENTORY_MISMATCH


async def test_a_run_that_does_not_cover_its_claimed_bytes_is_inventory_mismatch() -> None:
    """A reference whose `bytes` differ from what its index object covers (the item's size
    moved with it, so the record alone adds up)."""

    def change(record: dict[str, Any], store: memory_store.MemoryStore) -> None:
        item = _item(record)
        item["index"][0]["bytes"] += 1
        item["size"] += 1
        record["transcript"]["size"] += 1
        for entry in record["inventory"]:
            entry["size"] += 1

    assert (await _verdict(change)).reason is Reason.INVENTORY_MISMATCH


async def test_runs_that_do_not_add_up_to_the_item_are_refused_unread() -> None:
    """Runs and inline segments must add up to the item's size: no read is needed to refuse
    a dropped run."""

    def change(record: dict[str, Any], store: memory_store.MemoryStore) -> None:
        _item(record)["index"].pop(0)
        store.objects.clear()  # nothing is read: not even a missing object is noticed

    assert (await _verdict(change)).reason is Reason.INVENTORY_MISMATCH


async def test_an_index_object_named_at_another_level_is_invalid_record() -> None:
    def change(record: dict[str, Any], store: memory_store.MemoryStore) -> None:
        _item(record)["index"][0]["level"] += 1

    assert (await _verdict(change)).reason is Reason.INVALID_RECORD


async def test_an_intact_object_that_is_no_index_is_invalid_record() -> None:
    """Bytes stored under their own hash (so intact) that are not an index object."""

    def change(record: dict[str, Any], store: memory_store.MemoryStore) -> None:
        junk = b"not an index object, but intact"
        _item(record)["index"][0].update(sha256=store.add(junk), size=len(junk))

    assert (await _verdict(change)).reason is Reason.INVALID_RECORD


async def test_an_index_repeating_itself_to_absurd_size_is_invalid_record() -> None:
    """A few tiny index objects that name the same run twice at each level would list
    2^39 segments: refused once the chain passes `MAX_CHAIN_SEGMENTS`, before it is walked
    to its end."""

    def change(record: dict[str, Any], store: memory_store.MemoryStore) -> None:
        item = _item(record)
        segment = next(s for s in GROWN.chain.segments)
        leaf = chain_indexes.encode_segments([segment])
        run = chains.Run(store.add(leaf), len(leaf), 1, segment.size)
        for level in range(2, chain_indexes.MAX_LEVEL + 1):
            data = chain_indexes.encode_runs(level, [run, run])
            run = chains.Run(store.add(data), len(data), level, run.bytes * 2)
        item["index"] = [run.to_json()]
        item.pop("segments", None)
        item["size"] = record["transcript"]["size"] = run.bytes
        for entry in record["inventory"]:
            entry["size"] = run.bytes

    assert (await _verdict(change)).reason is Reason.INVALID_RECORD


async def test_an_index_reference_over_the_size_limit_is_invalid_record() -> None:
    """The schema bounds an index object (1 MiB) and its level (40) before any read."""

    def big(record: dict[str, Any], store: memory_store.MemoryStore) -> None:
        _item(record)["index"][0]["size"] = chain_indexes.MAX_INDEX_BYTES + 1

    def deep(record: dict[str, Any], store: memory_store.MemoryStore) -> None:
        _item(record)["index"][0]["level"] = chain_indexes.MAX_LEVEL + 1

    assert (await _verdict(big)).reason is Reason.INVALID_RECORD
    assert (await _verdict(deep)).reason is Reason.INVALID_RECORD


async def test_an_empty_inline_segment_beside_an_index_is_invalid_record() -> None:
    def change(record: dict[str, Any], store: memory_store.MemoryStore) -> None:
        empty = {"sha256": chains.EMPTY_SHA256, "size": 0}
        _item(record).setdefault("segments", []).append(empty)

    assert (await _verdict(change)).reason is Reason.INVALID_RECORD


async def test_a_missing_object_the_record_names_outranks_a_forged_index() -> None:
    """Presence first: with an index object that is no index and an inline segment gone,
    the verdict is `missing_object`."""

    def change(record: dict[str, Any], store: memory_store.MemoryStore) -> None:
        junk = b"not an index object, but intact"
        item = _item(record)
        item["index"][0].update(sha256=store.add(junk), size=len(junk))
        del store.objects[item["segments"][0]["sha256"]]

    assert _item(_record(GROWN.chain)).get("segments")
    assert (await _verdict(change)).reason is Reason.MISSING_OBJECT


def test_an_index_object_names_no_struct_padding() -> None:
    """The format is fixed-width: 6 header bytes, 40 bytes a segment, 48 bytes a run."""
    assert chain_indexes.HEADER_BYTES == 6
    assert len(chain_indexes.encode_segments([chains.Segment("a" * 64, 1)] * 3)) == 6 + 3 * 40
    run = chains.Run("a" * 64, 46, 1, 1)
    assert len(chain_indexes.encode_runs(2, [run, run])) == 6 + 2 * 48
    assert struct.calcsize(">32sQQ") == 48
