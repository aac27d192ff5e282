"""The checkpoint record: canonical bytes, the stored manifest, summaries and builders.

Pure: no I/O. The format is docs/swarm-v2/schemas/checkpoint.json; a record is checked against
it by `record_schema.check`.
Version 3 stores files, the transcript and committed source as chains (`chains`); its record
builder is `chained_records.new_record`. `new_record` here writes version 2, whole objects.
"""

from __future__ import annotations

import dataclasses
import datetime
import hashlib
import json
from collections.abc import Iterator, Mapping
from typing import Any, Final

from services.common.checkpoints import chains, packing, record_schema, storing

CURRENT_SCHEMA_VERSION: Final = 3
WHOLE_OBJECTS_VERSION: Final = 2
"""The newest version that stores each file, the transcript and the bundle as one object."""
ROLES: Final = ("transcript", "native_session", "source_bundle", "source_patch", "untracked")

Entry = tuple[str, str, int]
"""An object as the record names it: (role, sha256, size)."""


class ManifestError(ValueError):
    """The bytes are not a manifest `{"manifest_sha256": <hex>, "record": {…}}`."""


def canonical_bytes(record: Mapping[str, Any]) -> bytes:
    """The bytes the manifest hash is taken over: sorted keys, no whitespace, UTF-8.

    Raises:
        ValueError: the record holds something JSON cannot carry (NaN, a lone surrogate).
    """
    text = json.dumps(
        record, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    )
    return text.encode()


def record_sha256(record: Mapping[str, Any]) -> str:
    """Lowercase hex SHA-256 of the record's canonical bytes."""
    return hashlib.sha256(canonical_bytes(record)).hexdigest()


def encode_manifest(record: Mapping[str, Any]) -> bytes:
    """The stored manifest of `record`: the record and the hash of its canonical bytes, packed
    (`packing`: about a quarter of the JSON's size)."""
    manifest = {"manifest_sha256": record_sha256(record), "record": record}
    return packing.pack(canonical_bytes(manifest))


def _refuse_constant(name: str) -> Any:
    raise ManifestError("a manifest holds no NaN or Infinity")


def decode_manifest(data: bytes) -> tuple[dict[str, Any], str]:
    """Split a stored manifest into its record and the hash it claims (not yet compared).

    A manifest is read packed (`packing`) or as plain JSON (as every manifest was stored before
    packing).

    Raises:
        ManifestError: the bytes are not UTF-8 JSON of the manifest's shape, packed or not.
    """
    if packing.is_packed(data):
        try:
            data = packing.unpack(data, storing.MAX_MANIFEST_BYTES)
        except ValueError as error:
            raise ManifestError(str(error)) from None
    try:
        manifest = json.loads(data.decode("utf-8"), parse_constant=_refuse_constant)
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as error:
        # No detail of the content goes into the message: it may hold conversation paths.
        raise ManifestError("the manifest is not UTF-8 JSON") from error
    if not isinstance(manifest, dict) or set(manifest) != {"manifest_sha256", "record"}:
        raise ManifestError("a manifest holds exactly manifest_sha256 and record")
    record, claimed = manifest["record"], manifest["manifest_sha256"]
    if not isinstance(record, dict) or not isinstance(claimed, str):
        raise ManifestError("the manifest's record is not an object or its hash not a string")
    return record, claimed


def execution_generation(record: Mapping[str, Any]) -> int:
    """The attempt's generation; version 1 records read the task generation in its place."""
    authority = record["authority"]
    generation = authority.get("execution_generation", authority["task_generation"])
    return int(generation)


def named_objects(record: Mapping[str, Any]) -> Iterator[Entry]:
    """Every artifact a section of a schema-valid record names, with the role it plays: what
    the inventory must list. A version 3 chained item (a native session file, the transcript)
    is named by its whole hash and size; its segments are in `stored_objects`."""
    transcript = record.get("transcript")
    if transcript is not None:
        yield "transcript", transcript["sha256"], transcript["size"]
    native = record.get("native")
    if native is not None:
        for item in native["files"]:
            yield "native_session", item["sha256"], item["size"]
    source = record.get("source")
    if source is not None:
        if "bundles" in source:
            bundles = source["bundles"]  # version 3: the bundle chain, in order
        else:
            bundles = [] if source.get("bundle") is None else [source["bundle"]]
        for bundle in bundles:
            yield "source_bundle", bundle["sha256"], bundle["size"]
        patch = source.get("patch")
        if patch is not None:
            yield "source_patch", patch["sha256"], patch["size"]
        for item in source.get("untracked", []):
            yield "untracked", item["sha256"], item["size"]


def stored_objects(record: Mapping[str, Any]) -> Iterator[Entry]:
    """Every object the store holds for a schema-valid record, with the role of the artifact
    it belongs to: the inventory of a version 1 or 2 record (each artifact one object); for
    version 3, each chained item's index objects and inline segments in place of the item
    (the segments an index object lists are named there: `index_reading.expand`), and every
    other artifact."""
    if record.get("schema_version") != 3:
        yield from inventory(record)
        return
    chained = {role for role, _ in chains.chained_items(record)}
    for role, item in chains.chained_items(record):
        for sha256, size in chains.listed(item):
            yield role, sha256, size
    for role, sha256, size in named_objects(record):
        if role not in chained:
            yield role, sha256, size


def inventory(record: Mapping[str, Any]) -> Iterator[Entry]:
    """The inventory of a schema-valid record as (role, sha256, size)."""
    for item in record["inventory"]:
        yield item["role"], item["sha256"], item["size"]


@dataclasses.dataclass(frozen=True)
class Summary:
    """A checkpoint as listed: the record values an authorised caller may see."""

    checkpoint_id: str
    continuity: str
    compatibility_key: str
    native_session_id: str | None
    watermark: int | None
    sequence: int
    created_at: str
    task_generation: int
    execution_generation: int
    project: str

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> Summary:
        """Summarise a schema-valid record (any supported version)."""
        native = record.get("native")
        transcript = record.get("transcript")
        return cls(
            checkpoint_id=record["checkpoint_id"],
            continuity=record["continuity"],
            compatibility_key=record["compatibility_key"],
            native_session_id=None if native is None else native["native_session_id"],
            watermark=None if transcript is None else transcript.get("watermark"),
            sequence=record["sequence"],
            created_at=record["created_at"],
            task_generation=record["authority"]["task_generation"],
            execution_generation=execution_generation(record),
            project=record["project"],
        )

    def newness(self) -> tuple[int, datetime.datetime]:
        """Sort key: higher sequence is newer, then later created_at."""
        try:
            created = datetime.datetime.fromisoformat(self.created_at)
        except ValueError:
            created = datetime.datetime.min
        if created.tzinfo is None:
            # Without an offset it reads as UTC, so any two created_at values compare.
            created = created.replace(tzinfo=datetime.UTC)
        return self.sequence, created


def provisional_summary(record: Mapping[str, Any]) -> Summary | None:
    """The summary a record would have if it passed its checks, read without checking it
    (for ordering and filtering before the one chosen is checked); None when the fields a
    summary reads are missing or of the wrong type, which the schema refuses anyway."""
    try:
        summary = Summary.from_record(record)
        summary.newness()
    except (KeyError, TypeError, AttributeError, ValueError):
        return None
    if type(summary.sequence) is not int or not isinstance(summary.compatibility_key, str):
        return None
    return summary


# Builders for writers and tests: they describe captured material, new_record lays it out.


@dataclasses.dataclass(frozen=True)
class Blob:
    """One object by hash and size."""

    sha256: str
    size: int

    @classmethod
    def of(cls, data: bytes) -> Blob:
        """The blob that names `data`."""
        return cls(hashlib.sha256(data).hexdigest(), len(data))


@dataclasses.dataclass(frozen=True)
class NativeFile:
    """One native session file, its path relative to the harness home."""

    path: str
    blob: Blob


@dataclasses.dataclass(frozen=True)
class UntrackedFile:
    """One untracked worktree file, its path relative to the worktree, `mode` its permissions."""

    path: str
    blob: Blob
    mode: int = 0o644


@dataclasses.dataclass(frozen=True)
class Native:
    """The captured native session."""

    harness: str
    harness_version: str
    native_session_id: str
    files: tuple[NativeFile, ...]


@dataclasses.dataclass(frozen=True)
class Source:
    """The captured source state; `head_commit` defaults to `base_commit` (no bundle)."""

    repository: str
    base_commit: str
    head_commit: str | None = None
    branch: str | None = None
    bundle: Blob | None = None
    patch: Blob | None = None
    untracked: tuple[UntrackedFile, ...] = ()


@dataclasses.dataclass(frozen=True)
class Authority:
    """Who captured the checkpoint."""

    swarm: str
    seat: str
    task_id: str
    task_generation: int
    execution_id: str
    execution_generation: int


def _blob(blob: Blob) -> dict[str, Any]:
    return {"sha256": blob.sha256, "size": blob.size}


def new_record(
    *,
    checkpoint_id: str,
    sequence: int,
    authority: Authority,
    project: str,
    compatibility_key: str,
    transcript: Blob,
    watermark: int,
    native: Native | None = None,
    source: Source | None = None,
    created_at: str | None = None,
    committed: bool = True,
) -> dict[str, Any]:
    """A valid schema version 2 record (whole objects); continuity is `native` exactly when
    `native` is given. Version 3 records are built by `chained_records.new_record`.

    The inventory is derived from the sections, so it always agrees with them.

    Raises:
        ValueError: the arguments do not make a valid record (an unsafe path, a bad name).
    """
    if created_at is None:
        now = datetime.datetime.now(datetime.UTC)
        created_at = now.strftime("%Y-%m-%dT%H:%M:%SZ")
    record: dict[str, Any] = {
        "schema_version": WHOLE_OBJECTS_VERSION,
        "checkpoint_id": checkpoint_id,
        "committed": committed,
        "sequence": sequence,
        "created_at": created_at,
        "authority": dataclasses.asdict(authority),
        "project": project,
        "compatibility_key": compatibility_key,
        "continuity": "context_only" if native is None else "native",
        "native": None,
        "transcript": {**_blob(transcript), "watermark": watermark},
        "source": None,
    }
    if native is not None:
        record["native"] = {
            "harness": native.harness,
            "harness_version": native.harness_version,
            "native_session_id": native.native_session_id,
            "files": [{"path": f.path, **_blob(f.blob)} for f in native.files],
        }
    if source is not None:
        record["source"] = {
            "repository": source.repository,
            "base_commit": source.base_commit,
            "head_commit": source.head_commit or source.base_commit,
            "branch": source.branch,
            "bundle": None if source.bundle is None else _blob(source.bundle),
            "patch": None if source.patch is None else _blob(source.patch),
            "untracked": [
                {"path": f.path, **_blob(f.blob), "mode": f.mode} for f in source.untracked
            ],
        }
    entries = dict.fromkeys(named_objects(record))
    record["inventory"] = [{"role": r, "sha256": s, "size": n} for r, s, n in entries]
    if record_schema.check(record) is not None:
        raise ValueError("these arguments do not make a valid checkpoint record")
    return record
