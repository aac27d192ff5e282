"""The checkpoint record: canonical bytes, the stored manifest, summaries and the builder."""

from __future__ import annotations

import hashlib
import json

import pytest

from services.common.checkpoints import packing, reasons, record_schema, records
from tests.unit.checkpoints import material


def test_the_manifest_hash_is_taken_over_canonical_record_bytes() -> None:
    """The stored hash is the SHA-256 of json.dumps(sort_keys, compact, ensure_ascii=False)."""
    record = material.native_record()
    canonical = json.dumps(record, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    assert records.canonical_bytes(record) == canonical.encode()
    manifest = json.loads(packing.unpack(records.encode_manifest(record), 1 << 20))
    assert manifest == {
        "manifest_sha256": hashlib.sha256(canonical.encode()).hexdigest(),
        "record": record,
    }


def test_decode_manifest_returns_the_record_and_its_claimed_hash() -> None:
    """decode_manifest splits a manifest; comparing the hash is the Validator's job."""
    record = material.native_record()
    decoded, claimed = records.decode_manifest(records.encode_manifest(record))
    assert decoded == record
    assert claimed == records.record_sha256(record)


@pytest.mark.parametrize(
    "data", [b"{", b"\x80", b"1", b'{"record": {}}', b'{"manifest_sha256": "x", "record": 1}']
)
def test_decode_manifest_refuses_what_is_not_a_manifest(data: bytes) -> None:
    """A manifest that does not parse raises ManifestError, a ValueError naming no content."""
    with pytest.raises(records.ManifestError) as caught:
        records.decode_manifest(data)
    assert isinstance(caught.value, ValueError)


def test_a_summary_carries_the_listed_values() -> None:
    """Summaries carry the record values an authorised caller may see (CheckpointSummary)."""
    summary = records.Summary.from_record(material.native_record())
    assert summary == records.Summary(
        checkpoint_id="ckpt-7",
        continuity="native",
        compatibility_key="registry.local/agent-worker:1.4.2",
        native_session_id="0b0c7a1e-1111-2222-3333-444455556666",
        watermark=412,
        sequence=7,
        created_at="2026-12-02T15:00:00Z",
        task_generation=1,
        execution_generation=3,
        project="app",
    )


def test_a_legacy_summary_reads_the_task_generation_as_execution_generation() -> None:
    """Version 1 records read the task generation in place of execution_generation."""
    summary = records.Summary.from_record(material.legacy_record())
    assert summary.execution_generation == summary.task_generation == 1
    assert record_schema.check(material.legacy_record()) is None


def test_a_context_only_summary_has_no_session() -> None:
    """A context-only checkpoint names no native session."""
    summary = records.Summary.from_record(material.context_record())
    assert (summary.continuity, summary.native_session_id) == ("context_only", None)


def test_new_record_derives_a_matching_inventory() -> None:
    """new_record builds a valid version 2 record whose inventory agrees with its sections."""
    record = material.native_record()
    assert record_schema.check(record) is None
    assert record["schema_version"] == 2
    assert sorted(records.inventory(record)) == sorted(records.named_objects(record))
    assert {entry["role"] for entry in record["inventory"]} == set(records.ROLES)


def test_new_record_refuses_an_unsafe_path() -> None:
    """The builder never produces a record the schema refuses."""
    with pytest.raises(ValueError, match="valid checkpoint record"):
        records.new_record(
            checkpoint_id="ckpt-1",
            sequence=1,
            authority=material.AUTHORITY,
            project="app",
            compatibility_key="k",
            transcript=records.Blob.of(b""),
            watermark=0,
            native=records.Native(
                "claude_code", "2.1.3", "s-1", (records.NativeFile("../x", records.Blob.of(b"")),)
            ),
        )


def test_check_tells_an_unsupported_version_from_an_invalid_record() -> None:
    """unsupported_version for a version other than 1, 2 or 3; invalid_record for the rest."""
    assert record_schema.check({"schema_version": 4}) is reasons.Reason.UNSUPPORTED_VERSION
    assert record_schema.check({"schema_version": 3}) is reasons.Reason.INVALID_RECORD
    assert record_schema.check({"schema_version": 2}) is reasons.Reason.INVALID_RECORD


def test_newness_orders_by_sequence_then_created_at() -> None:
    """Newest first means by sequence, then created_at."""
    older = records.Summary.from_record(material.native_record(created_at="2026-12-02T14:00:00Z"))
    later = records.Summary.from_record(material.native_record(created_at="2026-12-02T16:00:00Z"))
    next_one = records.Summary.from_record(
        material.native_record(sequence=8, created_at="2026-12-01T00:00:00Z")
    )
    assert sorted([later, next_one, older], key=records.Summary.newness) == [
        older,
        later,
        next_one,
    ]
