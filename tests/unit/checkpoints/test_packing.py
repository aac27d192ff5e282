"""Packed manifests: deflated against format 1's fixed dictionary, bounded when unpacked."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys

import pytest

from services.common.checkpoints import packing, records
from tests.unit.checkpoints import material


def test_format_1_dictionary_never_changes() -> None:
    """Every manifest packed with format 1 needs this exact dictionary to unpack: a new
    dictionary is a new format byte, never an edit of this one."""
    assert packing.FORMAT == 1
    assert hashlib.sha256(packing.DICTIONARY).hexdigest() == (
        "3cb2de7bc5b8675832064c911dc442311dc7b3a35ab20a936857e30b6e184714"
    )


@pytest.mark.parametrize("record", [material.native_record(), material.context_record()])
def test_a_packed_manifest_decodes_to_its_record_and_hash(record: dict[str, object]) -> None:
    """encode_manifest packs; decode_manifest returns the record and the hash of its canonical
    bytes, as for a plain manifest."""
    data = records.encode_manifest(record)
    assert packing.is_packed(data)
    decoded, claimed = records.decode_manifest(data)
    assert decoded == record
    assert claimed == records.record_sha256(record)


def test_a_plain_json_manifest_still_decodes() -> None:
    """Manifests stored before packing are plain JSON; they read as before."""
    record = material.native_record()
    plain = records.canonical_bytes(
        {"manifest_sha256": records.record_sha256(record), "record": record}
    )
    assert not packing.is_packed(plain)
    assert records.decode_manifest(plain) == (record, records.record_sha256(record))


def test_packing_takes_a_record_to_well_under_half_its_json() -> None:
    """The point of packing: a record's structure is in the dictionary, so what is stored is
    mostly its hashes."""
    record = material.native_record()
    plain = records.canonical_bytes(
        {"manifest_sha256": records.record_sha256(record), "record": record}
    )
    assert len(records.encode_manifest(record)) < len(plain) * 0.45


@pytest.mark.parametrize(
    "data",
    [
        pytest.param(packing.MAGIC, id="magic-only"),
        pytest.param(packing.MAGIC + b"\x01", id="empty-stream"),
        pytest.param(packing.MAGIC + b"\x01\xff\xff\xff", id="not-deflate"),
        pytest.param(packing.pack(b"{}")[:-1], id="truncated"),
        pytest.param(packing.pack(b"{}") + b"x", id="trailing-bytes"),
        pytest.param(b"AHCM\x00" + packing.pack(b"{}")[5:], id="unknown-format"),
    ],
)
def test_damaged_packed_bytes_are_refused(data: bytes) -> None:
    """Damaged packed bytes are a ManifestError (corrupt_manifest to the Validator)."""
    with pytest.raises(records.ManifestError):
        records.decode_manifest(data)


def test_unpacking_stops_at_the_limit() -> None:
    """A few KiB that would inflate to 64 MiB are refused after limit + 1 bytes."""
    bomb = packing.pack(b" " * (64 << 20))
    assert len(bomb) < 128 * 1024
    with pytest.raises(ValueError, match="size limit"):
        packing.unpack(bomb, 1 << 20)


def test_an_operator_prints_a_stored_manifest_as_json() -> None:
    """`python3 -m services.common.checkpoints.packing < MANIFEST` (docs/swarm-v2/checkpoints.md)
    prints the manifest, packed or not, as JSON; damaged bytes exit 1 with one line."""
    record = material.native_record()
    for data in (records.encode_manifest(record), records.canonical_bytes({"record": record})):
        shown = subprocess.run(
            [sys.executable, "-m", "services.common.checkpoints.packing"],
            input=data,
            capture_output=True,
            check=True,
        )
        assert json.loads(shown.stdout)["record"] == record
    damaged = subprocess.run(
        [sys.executable, "-m", "services.common.checkpoints.packing"],
        input=packing.MAGIC + b"\x01junk",
        capture_output=True,
    )
    assert damaged.returncode == 1
    assert damaged.stderr.decode().count("\n") == 1
