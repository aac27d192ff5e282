"""Validator.verify: every refusal reason of the spec, each from a crafted record."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from typing import Any

import pytest

from services.common.checkpoints import reasons, record_schema, records, storing, validation
from tests.support import memory_store
from tests.unit.checkpoints import material

Reason = reasons.Reason
Mutation = Callable[[dict[str, Any]], object]


async def verdict_of(
    record: dict[str, Any],
    store: memory_store.MemoryStore | None = None,
    expectation: validation.Expectation = material.EXPECTED,
) -> validation.Verdict:
    store = store if store is not None else material.stocked_store()
    material.commit(store, record)
    return await validation.Validator(store).verify(expectation)


async def test_a_complete_native_checkpoint_verifies() -> None:
    """A checkpoint is authoritative when its record and every listed artifact match."""
    assert await verdict_of(material.native_record()) == validation.Verdict.passed()


async def test_a_context_only_checkpoint_without_source_verifies() -> None:
    """A context only checkpoint needs only its transcript; `source` may be null."""
    assert (await verdict_of(material.context_record())).ok


async def test_a_legacy_version_1_record_validates_with_its_task_generation() -> None:
    """Records written before execution_generation existed still validate, by reading the
    task generation in its place."""
    store = material.stocked_store()
    material.commit(store, material.legacy_record())
    validator = validation.Validator(store)
    assert (await validator.verify(validation.Expectation("ckpt-7", 1))).ok
    refused = await validator.verify(validation.Expectation("ckpt-7", 3))
    assert refused.reason is Reason.IDENTITY_MISMATCH


async def test_manifest_absent() -> None:
    """manifest_absent: the checkpoint record is missing."""
    store = material.stocked_store()
    verdict = await validation.Validator(store).verify(material.EXPECTED)
    assert verdict.reason is Reason.MANIFEST_ABSENT


async def test_manifest_absent_for_a_path_like_checkpoint_id() -> None:
    """manifest_absent: no manifest can exist under a name the store refuses."""
    store = material.stocked_store()
    expectation = validation.Expectation("../ckpt-7", 3)
    verdict = await validation.Validator(store).verify(expectation)
    assert verdict.reason is Reason.MANIFEST_ABSENT


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"not json",
        b"\xff\xfe{}",
        b"[]",
        b'{"record": {}}',
        b'{"manifest_sha256": 5, "record": {}}',
        b'{"manifest_sha256": "00", "record": []}',
        b'{"manifest_sha256": "00", "record": {"a": NaN}}',
        b'{"manifest_sha256": "00", "record": {}, "extra": 1}',
        b'{"manifest_sha256": "00", "record": {"a": "\\ud800"}}',
        b"[" * 100_000 + b"]" * 100_000,
    ],
    ids=range(11),
)
async def test_corrupt_manifest_when_it_does_not_parse(data: bytes) -> None:
    """corrupt_manifest: the stored manifest is not a record and its hash."""
    store = material.stocked_store()
    store.manifests["ckpt-7"] = data
    verdict = await validation.Validator(store).verify(material.EXPECTED)
    assert verdict.reason is Reason.CORRUPT_MANIFEST


async def test_corrupt_manifest_when_the_record_does_not_match_its_stored_hash() -> None:
    """corrupt_manifest: the record does not match its stored hash."""
    store = material.stocked_store()
    record = material.native_record()
    manifest = {"manifest_sha256": records.record_sha256(record), "record": record}
    manifest["record"] = {**record, "sequence": 8}
    store.manifests["ckpt-7"] = json.dumps(manifest).encode()
    verdict = await validation.Validator(store).verify(material.EXPECTED)
    assert verdict.reason is Reason.CORRUPT_MANIFEST


@pytest.mark.parametrize("version", [0, 4, "2", None, True, 2.0])
async def test_unsupported_version(version: object) -> None:
    """unsupported_version: the record does not name a supported schema version."""
    verdict = await verdict_of(material.native_record(schema_version=version))
    assert verdict.reason is Reason.UNSUPPORTED_VERSION


async def test_unsupported_version_when_schema_version_is_absent() -> None:
    """unsupported_version: a record without schema_version has no supported version."""
    record = material.native_record()
    del record["schema_version"]
    assert (await verdict_of(record)).reason is Reason.UNSUPPORTED_VERSION


def _native_path(path: str) -> Mutation:
    return lambda r: r["native"]["files"][0].update(path=path)


def _untracked_path(path: str) -> Mutation:
    return lambda r: r["source"]["untracked"][0].update(path=path)


INVALID: dict[str, Mutation] = {
    "dotdot": _native_path("projects/../../etc/passwd"),
    "absolute": _native_path("/etc/passwd"),
    "backslash": _untracked_path("notes\\todo.txt"),
    "empty segment": _untracked_path("notes//todo.txt"),
    "trailing slash": _untracked_path("notes/"),
    "git dir": _untracked_path(".git/hooks/post-checkout"),
    "nested git dir": _untracked_path("vendor/.git/config"),
    "newline": _untracked_path("notes/todo.txt\n"),
    "extra field": lambda r: r.update(surprise=1),
    "v1 with execution_generation": lambda r: r.update(schema_version=1),
    "v2 without execution_generation": lambda r: r["authority"].pop("execution_generation"),
    "float sequence": lambda r: r.update(sequence=7.0),
    "negative size": lambda r: r["transcript"].update(size=-1),
    "upper-case hash": lambda r: r["transcript"].update(sha256="A" * 64),
    "bad continuity": lambda r: r.update(continuity="resumed"),
    "native on context_only": lambda r: r.update(continuity="context_only"),
    "committed as text": lambda r: r.update(committed="true"),
    "unknown role": lambda r: r["inventory"][0].update(role="secrets"),
    "mode too wide": lambda r: r["source"]["untracked"][0].update(mode=0o4755),
    "created_at not a time": lambda r: r.update(created_at="yesterday"),
    "swarm path-like": lambda r: r["authority"].update(swarm="../other"),
    "duplicate path": lambda r: r["source"]["untracked"].append(r["source"]["untracked"][0]),
    "head without bundle": lambda r: r["source"].update(bundle=None),
    "record is deep": lambda r: r.update(native=json.loads("[" * 500 + "]" * 500)),
}


@pytest.mark.parametrize("mutate", INVALID.values(), ids=INVALID.keys())
async def test_invalid_record(mutate: Mutation) -> None:
    """invalid_record: the record does not satisfy its checkpoint schema version (including
    paths that are absolute, climb with .., use backslashes or empty segments, or reach .git)."""
    record = material.native_record()
    mutate(record)
    assert (await verdict_of(record)).reason is Reason.INVALID_RECORD


async def test_not_committed() -> None:
    """not_committed: the record was never committed."""
    verdict = await verdict_of(material.native_record(committed=False))
    assert verdict.reason is Reason.NOT_COMMITTED


@pytest.mark.parametrize(
    "authority",
    [{"swarm": "other"}, {"task_id": "t-eng-3"}, {"task_generation": 2}, {"task_generation": 0}],
    ids=["swarm", "task", "newer task generation", "older task generation"],
)
async def test_scope_mismatch(authority: dict[str, Any]) -> None:
    """scope_mismatch: the record belongs to another task or a newer task generation; the task
    generation is checked against the store's scope."""
    record = material.native_record()
    record["authority"].update(authority)
    assert (await verdict_of(record)).reason is Reason.SCOPE_MISMATCH


async def test_identity_mismatch_for_another_checkpoint_id() -> None:
    """identity_mismatch: the record names another checkpoint id than the one asked for."""
    store = material.stocked_store()
    material.commit(store, material.native_record(checkpoint_id="ckpt-6"), name="ckpt-7")
    verdict = await validation.Validator(store).verify(material.EXPECTED)
    assert verdict.reason is Reason.IDENTITY_MISMATCH


async def test_identity_mismatch_for_a_different_execution_generation() -> None:
    """identity_mismatch: the execution generation is checked against the attempt's own."""
    expectation = validation.Expectation("ckpt-7", 4)
    verdict = await verdict_of(material.native_record(), expectation=expectation)
    assert verdict.reason is Reason.IDENTITY_MISMATCH


def _drop_role(role: str) -> Mutation:
    return lambda r: r.update(inventory=[e for e in r["inventory"] if e["role"] != role])


MISSING_MATERIAL: dict[str, Mutation] = {
    **{role: _drop_role(role) for role in records.ROLES},
    "no transcript section": lambda r: r.update(transcript=None),
    "transcript section absent": lambda r: r.pop("transcript"),
    "native continuity without native section": lambda r: r.update(native=None),
    "native session with no files": lambda r: (
        r["native"].update(files=[]),
        _drop_role("native_session")(r),
    ),
}


@pytest.mark.parametrize("mutate", MISSING_MATERIAL.values(), ids=MISSING_MATERIAL.keys())
async def test_missing_material(mutate: Mutation) -> None:
    """missing_material: the record lacks a required artifact role."""
    record = material.native_record()
    mutate(record)
    assert (await verdict_of(record)).reason is Reason.MISSING_MATERIAL


@pytest.mark.parametrize("absent", [True, False], ids=["absent", "null"])
async def test_missing_watermark(absent: bool) -> None:
    """missing_watermark: the record lacks a durable transcript cursor."""
    record = material.native_record()
    if absent:
        del record["transcript"]["watermark"]
    else:
        record["transcript"]["watermark"] = None
    assert (await verdict_of(record)).reason is Reason.MISSING_WATERMARK


def _extra_entry(role: str) -> Mutation:
    entry = {"role": role, "sha256": "c" * 64, "size": 3}
    return lambda r: r["inventory"].append(entry)


INVENTORY_MISMATCH: dict[str, Mutation] = {
    "entry no section names": _extra_entry("untracked"),
    "size differs": lambda r: r["inventory"][0].update(size=r["inventory"][0]["size"] + 1),
    "hash differs": lambda r: r["inventory"][0].update(sha256="d" * 64),
    "roles swapped": lambda r: [
        e.update(role={"source_bundle": "source_patch", "source_patch": "source_bundle"}[e["role"]])
        for e in r["inventory"]
        if e["role"] in ("source_bundle", "source_patch")
    ],
    "section names an unlisted object": lambda r: r["source"]["untracked"].append(
        {"path": "notes/more.txt", "sha256": "e" * 64, "size": 1, "mode": 420}
    ),
    "context only with a native entry": lambda r: r.update(continuity="context_only", native=None),
}


@pytest.mark.parametrize("mutate", INVENTORY_MISMATCH.values(), ids=INVENTORY_MISMATCH.keys())
async def test_inventory_mismatch(mutate: Mutation) -> None:
    """inventory_mismatch: the record's hashes disagree with its inventory."""
    record = material.native_record()
    mutate(record)
    assert (await verdict_of(record)).reason is Reason.INVENTORY_MISMATCH


async def test_missing_object() -> None:
    """missing_object: an artifact the record lists is missing from the store."""
    store = material.stocked_store()
    del store.objects[hashlib.sha256(material.PATCH).hexdigest()]
    assert (await verdict_of(material.native_record(), store)).reason is Reason.MISSING_OBJECT


async def test_missing_object_outranks_a_corrupt_one() -> None:
    """missing_object is reported whatever else is wrong with the other objects."""
    store = material.stocked_store()
    store.objects[hashlib.sha256(material.BUNDLE).hexdigest()] = b"changed"
    del store.objects[hashlib.sha256(material.UNTRACKED).hexdigest()]
    assert (await verdict_of(material.native_record(), store)).reason is Reason.MISSING_OBJECT


@pytest.mark.parametrize("change", [b"", b"x", b"\n"], ids=["emptied", "replaced", "grown"])
async def test_corrupt_object(change: bytes) -> None:
    """corrupt_object: an artifact's content no longer matches its hash."""
    store = material.stocked_store()
    sha256 = hashlib.sha256(material.TRANSCRIPT).hexdigest()
    store.objects[sha256] = change if change != b"\n" else material.TRANSCRIPT + change
    assert (await verdict_of(material.native_record(), store)).reason is Reason.CORRUPT_OBJECT


async def test_the_verdict_names_only_its_reason() -> None:
    """The verdict names no record values or paths: its text is the reason code alone."""
    record = material.native_record(committed=False)
    verdict = await verdict_of(record)
    assert repr(verdict) == str(verdict) == "Verdict(not_committed)"
    assert repr(validation.Verdict.passed()) == "Verdict(ok)"
    with pytest.raises(ValueError, match="exactly when"):
        validation.Verdict(ok=True, reason=Reason.CORRUPT_OBJECT)


async def test_verify_record_skips_the_objects() -> None:
    """verify_record runs every record check but reads no object."""
    store = material.stocked_store()
    store.objects.clear()
    material.commit(store, material.native_record())
    validator = validation.Validator(store)
    assert (await validator.verify_record(material.EXPECTED)).ok
    assert (await validator.verify(material.EXPECTED)).reason is Reason.MISSING_OBJECT


async def test_a_symlinked_object_is_corrupt() -> None:
    """A store entry that is not a plain object (UnsafePath) is refused as corrupt_object."""

    class Linked(memory_store.MemoryStore):
        async def digest_object(self, sha256: str) -> tuple[str, int] | None:
            raise storing.UnsafePath("a link")

    store = Linked(material.SCOPE)
    store.objects = material.stocked_store().objects
    assert (await verdict_of(material.native_record(), store)).reason is Reason.CORRUPT_OBJECT


async def test_storage_failures_propagate() -> None:
    """A failing store (not a hostile checkpoint) raises instead of posing as a verdict."""

    class Broken(memory_store.MemoryStore):
        async def digest_object(self, sha256: str) -> tuple[str, int] | None:
            raise OSError("disk on fire")

    store = Broken(material.SCOPE)
    store.objects = material.stocked_store().objects
    with pytest.raises(OSError, match="disk on fire"):
        await verdict_of(material.native_record(), store)


def test_the_reasons_are_exactly_the_spec_codes() -> None:
    """The verdict codes are the spec's refusal reasons, spelled verbatim."""
    assert {r.value for r in Reason} == {
        "manifest_absent",
        "corrupt_manifest",
        "missing_object",
        "corrupt_object",
        "unsupported_version",
        "invalid_record",
        "not_committed",
        "missing_material",
        "missing_watermark",
        "inventory_mismatch",
        "scope_mismatch",
        "identity_mismatch",
    }


#: Where the fast validator (jsonschema-rs) and the Python one could part: integers written as
#: floats or booleans at any depth, and patterns near line ends or outside ASCII.
DIFFERENTIAL: dict[str, Mutation] = {
    **INVALID,
    "float size": lambda r: r["transcript"].update(size=float(r["transcript"]["size"])),
    "boolean size": lambda r: r["transcript"].update(size=True),
    "float mode": lambda r: r["source"]["untracked"][0].update(mode=420.0),
    "float watermark": lambda r: r.update(watermark=float(r["watermark"])),
    "newline in id": lambda r: r.update(checkpoint_id=r["checkpoint_id"] + "\n"),
    "non-ASCII digit in hash": lambda r: r["transcript"].update(sha256="\u0663" * 64),
    "non-ASCII seat": lambda r: r["authority"].update(seat="s\u00e9at"),
}


@pytest.mark.parametrize(
    "mutate", [None, *DIFFERENTIAL.values()], ids=["valid", *DIFFERENTIAL.keys()]
)
def test_the_checked_schema_is_the_published_one(mutate: Mutation | None) -> None:
    """The schema check runs on jsonschema-rs, with floats sent to the Python validator as well
    (`record_schema._schema_valid`): every record, valid or not, gets the answer the published
    schema gives under the Python validator with strict integers."""
    published = record_schema._STRICT(record_schema.load_schema())
    for record in (material.native_record(), material.context_record(), material.legacy_record()):
        if mutate is not None:
            try:
                mutate(record)
            except (KeyError, IndexError, TypeError, AttributeError):
                continue  # a mutation of a field this record kind lacks
        try:
            expected = published.is_valid(record)
        except RecursionError:
            expected = False
        assert record_schema._schema_valid(record) == expected
