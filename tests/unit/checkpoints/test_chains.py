"""Chains (schema version 3): a capture stores only what was appended since the previous one.

Issue 21: "Session files and the transcript are stored as ordered chains of content-addressed
segments: a capture uploads only the bytes appended since the previous checkpoint of the same
attempt, and its record lists every segment. A file that was rewritten rather than appended
is stored whole again." Pure logic: no store.
"""

from __future__ import annotations

import hashlib

import pytest

from services.common.checkpoints import chained_records, chains, reasons, record_schema, records
from tests.unit.checkpoints import material


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _joined(extension: chains.Extension, *earlier: chains.Extension) -> dict[str, bytes]:
    """Every segment's bytes the extensions made, by name."""
    found: dict[str, bytes] = {}
    for ext in (*earlier, extension):
        found.update({segment.sha256: bytes(data) for segment, data in ext.new})
    return found


def test_a_first_chain_is_the_whole_item_in_one_segment() -> None:
    """With nothing before it, the item is one new segment, which is the whole item."""
    data = b'{"n":1}\n{"n":2}\n'
    first = chains.extend(None, data)
    assert not first.appended
    assert first.chain == chains.Chain(_sha(data), len(data), (chains.Segment(_sha(data), 16),))
    assert [bytes(d) for _, d in first.new] == [data]


def test_appended_bytes_become_a_new_segment_after_the_kept_ones() -> None:
    """Only the bytes appended since the previous chain are new; the previous segments stay
    first, and the whole hash and size are the new item's."""
    start = b'{"n":1}\n'
    grown = start + b'{"n":2}\n{"n":3}\n'
    first = chains.extend(None, start)
    second = chains.extend(first.chain, grown)
    assert second.appended
    assert second.chain.segments[0] == first.chain.segments[0]
    assert [bytes(d) for _, d in second.new] == [grown[len(start) :]]
    assert (second.chain.sha256, second.chain.size) == (_sha(grown), len(grown))
    segments = _joined(second, first)
    assert b"".join(segments[s.sha256] for s in second.chain.segments) == grown


def test_an_unchanged_item_keeps_its_chain_and_adds_nothing() -> None:
    """No appended byte, no new segment."""
    first = chains.extend(None, b"same\n")
    again = chains.extend(first.chain, b"same\n")
    assert again.chain == first.chain and again.new == () and again.appended


@pytest.mark.parametrize(
    "rewritten",
    [b"SAME\nmore\n", b"sa", b"", b"compacted summary\n"],
    ids=["first-bytes-changed", "truncated", "emptied", "compacted"],
)
def test_a_rewritten_item_is_stored_whole_again(rewritten: bytes) -> None:
    """A file whose first bytes no longer hash to the previous whole hash (a compacted session,
    a `.zst` rollout, a truncation) starts a new chain holding all of it."""
    first = chains.extend(None, b"same\n")
    again = chains.extend(first.chain, rewritten)
    assert not again.appended
    assert again.chain.sha256 == _sha(rewritten) and again.chain.size == len(rewritten)
    assert b"".join(bytes(d) for _, d in again.new) == rewritten


def test_large_appends_are_split_at_the_segment_limit() -> None:
    """Segment size is bounded: an append larger than the limit is split, in order."""
    first = chains.extend(None, b"a" * 10, limit=4)
    assert [s.size for s in first.chain.segments] == [4, 4, 2]
    grown = b"a" * 10 + bytes(range(9))
    second = chains.extend(first.chain, grown, limit=4)
    assert [s.size for s in second.chain.segments] == [4, 4, 2, 4, 4, 1]
    segments = _joined(second, first)
    assert b"".join(segments[s.sha256] for s in second.chain.segments) == grown
    assert second.chain.sha256 == _sha(grown)


def test_an_empty_item_is_one_empty_segment_dropped_once_it_grows() -> None:
    """An empty item is one empty segment; once bytes arrive the chain holds only them."""
    empty = chains.extend(None, b"")
    assert empty.chain.segments == (chains.Segment(chains.EMPTY_SHA256, 0),)
    grown = chains.extend(empty.chain, b"x\n")
    assert grown.chain.segments == (chains.Segment(_sha(b"x\n"), 2),)


@pytest.mark.parametrize("limit", [0, -1, chains.MAX_SEGMENT_BYTES + 1])
def test_a_segment_limit_out_of_range_is_refused(limit: int) -> None:
    """Segments are at least a byte and at most the format's limit."""
    with pytest.raises(ValueError, match="segment limit"):
        chains.extend(None, b"x", limit=limit)


def _record(transcript: chains.Chain, session: chains.Chain) -> dict[str, object]:
    return chained_records.new_record(
        checkpoint_id="ckpt-7",
        sequence=7,
        created_at="2026-12-02T15:00:00Z",
        authority=material.AUTHORITY,
        project="app",
        compatibility_key="registry.local/agent-worker:1.4.2",
        transcript=transcript,
        watermark=3,
        native=chained_records.ChainedNative(
            "claude_code",
            "2.1.3",
            "0b0c7a1e-1111-2222-3333-444455556666",
            (chained_records.ChainedFile(".claude/projects/-w/0b0c.jsonl", session),),
        ),
        source=chained_records.ChainedSource(
            repository="https://git.example/app.git",
            base_commit=material.BASE,
            head_commit=material.HEAD,
            bundles=(
                chained_records.Bundle(_sha(b"b1"), 2, "c" * 40),
                chained_records.Bundle(_sha(b"b2"), 2, material.HEAD),
            ),
        ),
    )


def test_a_version_3_record_lists_every_segment_and_each_artifact_once() -> None:
    """The record lists every segment of every chain (the whole chain: a record is
    self-sufficient), in its section; the inventory lists each artifact once (a chained item
    by its whole hash and size) and every bundle. It is a valid version 3 record, and
    summarises like the others."""
    first = chains.extend(None, b"a\n", limit=1)
    second = chains.extend(first.chain, b"a\nb\nc\n", limit=4)
    record = _record(second.chain, second.chain)
    assert record["schema_version"] == 3 and record_schema.check(record) is None
    # The transcript is the session file's bytes: it names the file, not the segments again.
    assert record["transcript"] == {  # type: ignore[comparison-overlap]
        "sha256": second.chain.sha256,
        "size": second.chain.size,
        "same_as": ".claude/projects/-w/0b0c.jsonl",
        "watermark": 3,
    }
    whole = ("transcript", second.chain.sha256, second.chain.size)
    assert whole in set(records.inventory(record))
    assert ("native_session", *whole[1:]) in set(records.inventory(record))
    assert sorted(records.inventory(record)) == sorted(records.named_objects(record))
    stored = set(records.stored_objects(record))
    segments = {(s.sha256, s.size) for s in second.chain.segments}
    assert {(sha, size) for role, sha, size in stored if role == "transcript"} == segments
    assert {(sha, size) for role, sha, size in stored if role == "native_session"} == segments
    assert len([r for r, _, _ in stored if r == "source_bundle"]) == 2
    summary = records.Summary.from_record(record)
    assert (summary.watermark, summary.execution_generation) == (3, 3)


def test_the_builder_refuses_a_chain_that_does_not_add_up() -> None:
    """A chain whose segments do not add up to its whole size is no record to write."""
    chain = chains.extend(None, b"abcd", limit=2).chain
    broken = chains.Chain(chain.sha256, 5, chain.segments)
    with pytest.raises(ValueError, match="valid checkpoint record"):
        _record(broken, chain)


def test_a_segment_over_the_size_limit_breaks_the_schema() -> None:
    """A segment over `chains.MAX_SEGMENT_BYTES` is `invalid_record`, like any record that
    breaks its schema version."""
    chain = chains.extend(None, b"abcd", limit=2).chain
    record = _record(chain, chains.extend(None, b"other").chain)
    big = chains.MAX_SEGMENT_BYTES + 1
    record["transcript"]["segments"][0]["size"] = big  # type: ignore[index]
    record["transcript"]["size"] = big + 2  # type: ignore[index]
    assert record_schema.check(record) is reasons.Reason.INVALID_RECORD


def test_an_empty_segment_beside_others_breaks_the_record() -> None:
    """An empty segment only pads a chain; only an empty item is one empty segment."""
    chain = chains.extend(None, b"abcd", limit=2).chain
    record = _record(chain, chains.extend(None, b"other").chain)
    record["transcript"]["segments"].append(  # type: ignore[index]
        {"sha256": chains.EMPTY_SHA256, "size": 0}
    )
    assert record_schema.check(record) is reasons.Reason.INVALID_RECORD
