"""Building schema version 3 records: native files and the transcript as chains, committed
source as a chain of incremental git bundles.

The layout mirrors version 2 (`records.new_record`) section by section; what changes is that a
chained item lists its segments beside its whole hash and size, and `source.bundles` lists the
bundles to apply in order (each bundle's prerequisites are the tips of the bundles before it,
or the base commit). The inventory lists each artifact once (a chained item by its whole hash
and size, not segment by segment, so a record grows by one segment entry per append, not
three); it is derived from the sections, so it always agrees with them.

Pure: no I/O.
"""

from __future__ import annotations

import dataclasses
import datetime
from typing import Any

from services.common.checkpoints import chains, record_schema, records

VERSION = 3


@dataclasses.dataclass(frozen=True)
class ChainedFile:
    """One native session file, its path relative to the harness home, as a chain."""

    path: str
    chain: chains.Chain


@dataclasses.dataclass(frozen=True)
class ChainedNative:
    """The captured native session, its files chained."""

    harness: str
    harness_version: str
    native_session_id: str
    files: tuple[ChainedFile, ...]


@dataclasses.dataclass(frozen=True)
class Bundle:
    """One incremental git bundle: the object, and `tip`, the commit it brings (its HEAD)."""

    sha256: str
    size: int
    tip: str

    def to_json(self) -> dict[str, Any]:
        """The bundle as `source.bundles` lists it."""
        return {"sha256": self.sha256, "size": self.size, "tip": self.tip}


@dataclasses.dataclass(frozen=True)
class ChainedSource:
    """The captured source state; `bundles` applied in order bring `head_commit` (none when
    head is the base)."""

    repository: str
    base_commit: str
    head_commit: str
    branch: str | None = None
    bundles: tuple[Bundle, ...] = ()
    patch: records.Blob | None = None
    untracked: tuple[records.UntrackedFile, ...] = ()


def new_record(
    *,
    checkpoint_id: str,
    sequence: int,
    authority: records.Authority,
    project: str,
    compatibility_key: str,
    transcript: chains.Chain,
    watermark: int,
    native: ChainedNative | None = None,
    source: ChainedSource | None = None,
    created_at: str | None = None,
    committed: bool = True,
) -> dict[str, Any]:
    """A valid schema version 3 record; continuity is `native` exactly when `native` is given.

    Raises:
        ValueError: the arguments do not make a valid record (an unsafe path, a bad name, a
            segment over `chains.MAX_SEGMENT_BYTES`, a chain that does not add up).
    """
    if created_at is None:
        now = datetime.datetime.now(datetime.UTC)
        created_at = now.strftime("%Y-%m-%dT%H:%M:%SZ")
    record: dict[str, Any] = {
        "schema_version": VERSION,
        "checkpoint_id": checkpoint_id,
        "committed": committed,
        "sequence": sequence,
        "created_at": created_at,
        "authority": dataclasses.asdict(authority),
        "project": project,
        "compatibility_key": compatibility_key,
        "continuity": "context_only" if native is None else "native",
        "native": None,
        "transcript": {**_transcript(transcript, native), "watermark": watermark},
        "source": None,
    }
    if native is not None:
        record["native"] = {
            "harness": native.harness,
            "harness_version": native.harness_version,
            "native_session_id": native.native_session_id,
            "files": [{"path": f.path, **f.chain.to_json()} for f in native.files],
        }
    if source is not None:
        record["source"] = {
            "repository": source.repository,
            "base_commit": source.base_commit,
            "head_commit": source.head_commit,
            "branch": source.branch,
            "bundles": [b.to_json() for b in source.bundles],
            "patch": None
            if source.patch is None
            else {"sha256": source.patch.sha256, "size": source.patch.size},
            "untracked": [
                {"path": f.path, "sha256": f.blob.sha256, "size": f.blob.size, "mode": f.mode}
                for f in source.untracked
            ],
        }
    entries = dict.fromkeys(records.named_objects(record))
    record["inventory"] = [{"role": r, "sha256": s, "size": n} for r, s, n in entries]
    if (
        record_schema.check(record) is not None
        or chains.misreferenced(record)
        or any(chains.disagrees(item) for _, item in chains.chained_items(record))
    ):
        raise ValueError("these arguments do not make a valid checkpoint record")
    return record


def _transcript(transcript: chains.Chain, native: ChainedNative | None) -> dict[str, Any]:
    """The transcript's chain; or, when a session file holds the very same bytes (a session
    file usually is its own transcript), a reference to that file, so a record does not list
    the same segments twice."""
    for item in native.files if native is not None else ():
        if (item.chain.sha256, item.chain.size) == (transcript.sha256, transcript.size):
            return {"sha256": transcript.sha256, "size": transcript.size, "same_as": item.path}
    return transcript.to_json()
