"""Hostile input never breaks the Validator: every mutation ends in a spec verdict.

"Validator.verify ... returns a verdict that names no record values or paths" and never raises
on a hostile record or hostile bytes; a changed object or a manifest that no longer matches its
hash is never ok.
"""

from __future__ import annotations

import copy
import hashlib
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from services.common.checkpoints import reasons, record_schema, records, validation
from tests.support import memory_store
from tests.unit.checkpoints import material

SPEC_REASONS = set(reasons.Reason)
PROPERTY = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# Values that look like record material, so mutations reach the checks past the schema.
PLAUSIBLE = st.sampled_from(
    [
        1,
        2,
        0,
        -1,
        2**63,
        None,
        True,
        "",
        "a" * 64,
        "a" * 40,
        "../etc/passwd",
        "/abs",
        ".git/config",
        "native",
        "context_only",
        "transcript",
        "untracked",
        "2026-12-02T15:00:00Z",
        "ckpt-7",
        "example",
    ]
)
JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8)
    | PLAUSIBLE,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=8,
)


def _positions(node: Any) -> list[tuple[Any, Any]]:
    """Every (container, key) in a JSON tree, the root excluded."""
    found: list[tuple[Any, Any]] = []
    keys = node.keys() if isinstance(node, dict) else range(len(node))
    for key in list(keys):
        found.append((node, key))
        if isinstance(node[key], (dict, list)):
            found.extend(_positions(node[key]))
    return found


@st.composite
def mutated_records(draw: st.DrawFn) -> dict[str, Any]:
    """A valid record (native, context-only or legacy) with one to three changes."""
    base = draw(
        st.sampled_from([material.native_record, material.context_record, material.legacy_record])
    )
    record: dict[str, Any] = copy.deepcopy(base())
    for _ in range(draw(st.integers(1, 3))):
        container, key = draw(st.sampled_from(_positions(record)))
        action = draw(st.sampled_from(["replace", "delete", "add"]))
        if action == "replace":
            # Often a value taken from elsewhere in the record: it passes the schema more
            # often, so the checks after it (scope, identity, material, inventory) are reached.
            leaves = [c[k] for c, k in _positions(record) if not isinstance(c[k], (dict, list))]
            container[key] = draw(JSON | st.sampled_from(leaves) | st.none())
        elif action == "delete":
            del container[key]
        elif isinstance(container, dict):
            container[draw(st.text(max_size=8))] = draw(JSON)
        else:
            container.insert(key, draw(JSON))
        if not _positions(record):
            break
    return record


async def _verify(store: memory_store.MemoryStore) -> validation.Verdict:
    return await validation.Validator(store).verify(material.EXPECTED)


@PROPERTY
@given(mutated_records())
async def test_a_rehashed_hostile_record_gets_a_spec_verdict(record: dict[str, Any]) -> None:
    """A record a hostile writer hashed correctly still ends in a verdict of the spec."""
    store = material.stocked_store()
    store.manifests["ckpt-7"] = records.encode_manifest(record)
    generation = 1 if record.get("schema_version") == 1 else 3
    verdict = await validation.Validator(store).verify(validation.Expectation("ckpt-7", generation))
    assert isinstance(verdict, validation.Verdict)
    assert verdict.ok or verdict.reason in SPEC_REASONS
    if verdict.ok:
        assert record_schema.check(record) is None


@PROPERTY
@given(st.dictionaries(st.sampled_from(sorted(material.native_record())), JSON) | JSON)
async def test_any_json_as_a_record_gets_a_spec_verdict(value: Any) -> None:
    """Any JSON value in the record's place, correctly hashed, is refused with a spec reason."""
    store = material.stocked_store()
    claimed = hashlib.sha256(records.canonical_bytes(value)).hexdigest()
    store.manifests["ckpt-7"] = records.canonical_bytes(
        {"manifest_sha256": claimed, "record": value}
    )
    verdict = await _verify(store)
    assert not verdict.ok and verdict.reason in SPEC_REASONS


@PROPERTY
@given(
    st.sampled_from([material.native_record, material.context_record, material.legacy_record]),
    st.data(),
)
async def test_changed_manifest_bytes_are_never_ok_unless_the_record_is_unchanged(
    build: Any, data: st.DataObject
) -> None:
    """A manifest that does not match its stored hash is refused (corrupt_manifest or worse)."""
    record = build()
    original = bytearray(records.encode_manifest(record))
    changed = bytearray(original)
    for _ in range(data.draw(st.integers(1, 4))):
        action = data.draw(st.sampled_from(["flip", "truncate", "insert"]))
        at = data.draw(st.integers(0, max(len(changed) - 1, 0)))
        if action == "flip" and changed:
            changed[at] ^= data.draw(st.integers(1, 255))
        elif action == "truncate":
            del changed[at:]
        else:
            changed[at:at] = data.draw(st.binary(min_size=1, max_size=4))
    store = material.stocked_store()
    store.manifests["ckpt-7"] = bytes(changed)
    expectation = validation.Expectation("ckpt-7", records.execution_generation(record))
    verdict = await validation.Validator(store).verify(expectation)
    assert verdict.ok or verdict.reason in SPEC_REASONS
    if verdict.ok:
        assert records.decode_manifest(bytes(changed)) == records.decode_manifest(bytes(original))


@PROPERTY
@given(
    st.sampled_from([material.native_record, material.legacy_record]),
    st.sampled_from([material.TRANSCRIPT, material.SESSION, material.BUNDLE, material.PATCH]),
    st.one_of(st.none(), st.binary(max_size=64)),
)
async def test_a_changed_or_missing_object_is_never_ok(
    build: Any, victim: bytes, replacement: bytes | None
) -> None:
    """A listed artifact that is missing or no longer matches its hash is never ok."""
    record = build()
    store = material.stocked_store()
    material.commit(store, record)
    sha256 = hashlib.sha256(victim).hexdigest()
    if replacement is None:
        del store.objects[sha256]
    else:
        store.objects[sha256] = replacement if replacement != victim else victim + b"!"
    expectation = validation.Expectation("ckpt-7", records.execution_generation(record))
    verdict = await validation.Validator(store).verify(expectation)
    expected = (
        reasons.Reason.MISSING_OBJECT if replacement is None else reasons.Reason.CORRUPT_OBJECT
    )
    assert verdict == validation.Verdict.refused(expected)


@PROPERTY
@given(st.binary(max_size=256))
async def test_arbitrary_manifest_bytes_get_a_spec_verdict(data: bytes) -> None:
    """Bytes that are not a manifest at all are refused, never raised on."""
    store = material.stocked_store()
    store.manifests["ckpt-7"] = data
    verdict = await _verify(store)
    assert not verdict.ok and verdict.reason in SPEC_REASONS
