"""The checkpoint record's schema check: the packaged JSON Schema and the record's own rules.

Pure: no I/O beyond reading the packaged schema once at import.
The format is docs/swarm-v2/schemas/checkpoint.json; this package holds an identical copy
(`checkpoint.schema.json`). The record's bytes, manifest and summaries are in `records`.
"""

from __future__ import annotations

import importlib.resources
import json
from collections.abc import Mapping
from typing import Any, Final

import jsonschema
import jsonschema_rs

from services.common.checkpoints import chains, reasons

SCHEMA_VERSIONS: Final = frozenset({1, 2, 3})


def load_schema() -> dict[str, Any]:
    """The checkpoint JSON Schema as packaged with this module."""
    text = importlib.resources.files(__package__).joinpath("checkpoint.schema.json").read_text()
    schema: dict[str, Any] = json.loads(text)
    return schema


def _strict_integer(checker: Any, instance: object) -> bool:
    # JSON Schema counts 1.0 as an integer; a record's counters and sizes must be real integers.
    return isinstance(instance, int) and not isinstance(instance, bool)


_STRICT = jsonschema.validators.extend(
    jsonschema.Draft202012Validator,
    type_checker=jsonschema.Draft202012Validator.TYPE_CHECKER.redefine("integer", _strict_integer),
)


_SCHEMA: Final = load_schema()
_EXACT: Final = _STRICT(_SCHEMA)
_FAST: Final = jsonschema_rs.Draft202012Validator(_SCHEMA, validate_formats=False)


def _holds_float(record: Mapping[str, Any]) -> bool:
    """Whether a float appears anywhere in the record (walked without recursion)."""
    pending: list[Any] = [record]
    while pending:
        node = pending.pop()
        if type(node) in _LEAVES:
            continue  # the most of a record, passed over with one lookup
        if isinstance(node, float):
            return True
        if isinstance(node, dict):
            pending.extend(node.values())
        elif isinstance(node, list):
            pending.extend(node)
    return False


_LEAVES: Final = frozenset({str, int, bool, type(None)})


def _schema_valid(record: Mapping[str, Any]) -> bool:
    """The schema's answer. jsonschema-rs gives it about 75 times faster than the Python
    validator (half a millisecond a record was a sixth of a native storm's CPU); it counts 1.0
    as an integer, as the standard does, so a record holding any float is answered by the
    strict Python validator as well. A record nested too deep for either is invalid."""
    try:
        if not _FAST.is_valid(record):
            return False
        return not _holds_float(record) or _EXACT.is_valid(record)
    except (RecursionError, ValueError):
        return False


def check(record: Mapping[str, Any]) -> reasons.Reason | None:
    """Whether `record` satisfies a supported schema version.

    Returns:
        `unsupported_version` for a schema_version other than 1, 2 or 3, `invalid_record` when
        the record breaks the schema or its own rules (duplicate paths, a head commit without
        a bundle, an empty segment beside others), None when valid.
    """
    version = record.get("schema_version")
    if type(version) is not int or version not in SCHEMA_VERSIONS:
        return reasons.Reason.UNSUPPORTED_VERSION
    if not _schema_valid(record):
        return reasons.Reason.INVALID_RECORD
    if not _consistent(record):
        return reasons.Reason.INVALID_RECORD
    return None


def _consistent(record: Mapping[str, Any]) -> bool:
    if chains.dangling(record):
        return False  # a transcript that is "the same as" a file the record does not hold
    if any(chains.misplaced_empty_segment(item) for _, item in chains.chained_items(record)):
        return False
    native = record.get("native") or {}
    paths = [f["path"] for f in native.get("files", [])]
    if len(paths) != len(set(paths)):
        return False
    source = record.get("source")
    if source is None:
        return True
    paths = [f["path"] for f in source.get("untracked", [])]
    if len(paths) != len(set(paths)):
        return False
    # Without a bundle the restore can only check out base_commit, so head must be the same.
    bundled = bool(source.get("bundles")) or source.get("bundle") is not None
    return bundled or source["head_commit"] == source["base_commit"]
