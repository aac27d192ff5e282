"""Chains (schema version 3): a file or transcript stored as ordered content-addressed segments.

A chained item names its whole size and SHA-256 and the segments whose bytes, in order, make it.
A capture extends the previous checkpoint's chain with only the bytes appended since: when the
item's first bytes still hash to the previous whole hash, the previous segments are kept and the
new bytes become new segments (split at a size limit); otherwise the item was rewritten (a
compacted session, a compressed rollout) and it is stored whole again as a new chain.

A long chain is not listed segment by segment: its segments, in runs, are kept in
content-addressed index objects (`chain_indexes`), and a record names those (`Chain.runs`, a
record's `index`) and lists inline only the segments not yet in a run (`Chain.segments`, a
record's `segments`). A record still needs no other record to restore: only objects.

Pure: no I/O.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Iterator, Mapping
from typing import Any, Final

MAX_SEGMENT_BYTES: Final = 64 * 1024 * 1024
"""The largest segment a version 3 record may name (the schema's limit): a restore holds one
segment in memory at a time, so a record cannot make it hold more."""

SEGMENT_BYTES: Final = 8 * 1024 * 1024
"""Where a writer splits appended bytes (or less, under a smaller store object limit): one S3
PUT each, and a restore's reads stay well under `MAX_SEGMENT_BYTES`."""

EMPTY_SHA256: Final = hashlib.sha256(b"").hexdigest()


@dataclasses.dataclass(frozen=True)
class Segment:
    """One stored object of a chain."""

    sha256: str
    size: int

    def to_json(self) -> dict[str, Any]:
        """The segment as a record names it."""
        return {"sha256": self.sha256, "size": self.size}


@dataclasses.dataclass(frozen=True)
class Run:
    """An index object of a chain (`chain_indexes`): its name and size, its `level` (1 lists
    segments, each higher level lists runs of the level below) and the chain bytes it covers."""

    sha256: str
    size: int
    level: int
    bytes: int

    def to_json(self) -> dict[str, Any]:
        """The run as a record's `index` names it."""
        return {"sha256": self.sha256, "size": self.size, "level": self.level, "bytes": self.bytes}


@dataclasses.dataclass(frozen=True)
class Chain:
    """A chained item: its whole SHA-256 and size, and its parts in order: the segments in
    `runs` (index objects) first, then `segments`, listed inline."""

    sha256: str
    size: int
    segments: tuple[Segment, ...]
    runs: tuple[Run, ...] = ()

    @classmethod
    def from_json(cls, item: Mapping[str, Any]) -> Chain:
        """The chain of a schema-valid version 3 item (a native file or the transcript)."""
        return cls(
            item["sha256"],
            item["size"],
            tuple(Segment(s["sha256"], s["size"]) for s in item.get("segments", ())),
            tuple(
                Run(r["sha256"], r["size"], r["level"], r["bytes"]) for r in item.get("index", ())
            ),
        )

    def to_json(self) -> dict[str, Any]:
        """The chain's fields as a record holds them (whole hash, size, index, segments); an
        indexed chain whose segments are all in runs lists no inline segments."""
        out: dict[str, Any] = {"sha256": self.sha256, "size": self.size}
        if self.runs:
            out["index"] = [r.to_json() for r in self.runs]
        if self.segments or not self.runs:
            out["segments"] = [s.to_json() for s in self.segments]
        return out


@dataclasses.dataclass(frozen=True)
class Extension:
    """A chain extended to new bytes: `new` holds the segments the previous chain did not have,
    with their bytes (views into the data given), in chain order."""

    chain: Chain
    new: tuple[tuple[Segment, memoryview], ...]
    appended: bool


def extend(previous: Chain | None, data: bytes, limit: int = SEGMENT_BYTES) -> Extension:
    """The chain of `data`, reusing `previous` when `data` only appended to it.

    Hashes the previous bytes once (to tell an append from a rewrite) and new bytes twice (the
    whole hash, and a new segment's own), in large updates that release the GIL: call it in a
    worker thread for large data.

    Args:
        previous: the same item's chain in the previous checkpoint, or None.
        data: the item's bytes now.
        limit: the largest segment to make (1 to `MAX_SEGMENT_BYTES`).

    Returns:
        `appended` is True when the previous segments were kept as the chain's start.

    Raises:
        ValueError: `limit` is out of range.
    """
    if not 0 < limit <= MAX_SEGMENT_BYTES:
        raise ValueError("a segment limit is between 1 byte and MAX_SEGMENT_BYTES")
    view = memoryview(data)
    # An empty previous item has nothing worth keeping: its one empty segment is dropped.
    if previous is not None and 0 < previous.size <= len(view):
        whole = hashlib.sha256(view[: previous.size])
        if whole.hexdigest() == previous.sha256:
            if previous.size == len(view):
                return Extension(previous, (), True)
            whole.update(view[previous.size :])
            new = _split(view, previous.size, limit)
            chain = Chain(
                whole.hexdigest(),
                len(view),
                previous.segments + tuple(s for s, _ in new),
                previous.runs,
            )
            return Extension(chain, new, True)
    new = _split(view, 0, limit) or ((Segment(EMPTY_SHA256, 0), view[:0]),)
    whole_sha256 = new[0][0].sha256 if len(new) == 1 else hashlib.sha256(view).hexdigest()
    return Extension(Chain(whole_sha256, len(view), tuple(s for s, _ in new)), new, False)


def _split(view: memoryview, start: int, limit: int) -> tuple[tuple[Segment, memoryview], ...]:
    """Segments of at most `limit` bytes covering `view[start:]`."""
    out = []
    for offset in range(start, len(view), limit):
        part = view[offset : offset + limit]
        out.append((Segment(hashlib.sha256(part).hexdigest(), len(part)), part))
    return tuple(out)


# --- chains as a version 3 record holds them ----------------------------------------------


def transcript_chain(record: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The transcript of a schema-valid record; in version 3 as a chain: its own segments, or,
    when it names `same_as` (the archive is byte for byte a native session file, as a Claude
    Code or Codex session usually is), that file's segments under the transcript's whole hash
    and size. None when there is no transcript or `same_as` names no file of the record."""
    transcript = record.get("transcript")
    if transcript is None or "same_as" not in transcript:
        return transcript
    files = (record.get("native") or {}).get("files", [])
    for item in files:
        if item["path"] == transcript["same_as"]:
            found = {"sha256": transcript["sha256"], "size": transcript["size"]}
            found.update({k: item[k] for k in ("index", "segments") if k in item})
            return found
    return None


def dangling(record: Mapping[str, Any]) -> bool:
    """Whether a version 3 transcript names `same_as` a file the record does not hold."""
    transcript = record.get("transcript")
    return (
        record.get("schema_version") == 3
        and transcript is not None
        and transcript_chain(record) is None
    )


def chained_items(record: Mapping[str, Any]) -> Iterator[tuple[str, Mapping[str, Any]]]:
    """(role, chain) of every chained item of a schema-valid version 3 record: the transcript
    (see `transcript_chain`) and each native session file. Nothing for versions 1 and 2."""
    if record.get("schema_version") != 3:
        return
    transcript = transcript_chain(record)
    if transcript is not None:
        yield "transcript", transcript
    native = record.get("native")
    if native is not None:
        for item in native["files"]:
            yield "native_session", item


def listed(item: Mapping[str, Any]) -> Iterator[tuple[str, int]]:
    """(sha256, size) of every object a chained item names in the record itself: its index
    objects (`index`), then its inline segments. The segments an index object lists are named
    there, not here (`index_reading` reads them)."""
    for run in item.get("index", ()):
        yield run["sha256"], run["size"]
    for segment in item.get("segments", ()):
        yield segment["sha256"], segment["size"]


def misplaced_empty_segment(item: Mapping[str, Any]) -> bool:
    """Whether a chain holds an empty segment beside others (an empty item is one empty
    segment; anywhere else, an indexed chain included, an empty segment only pads it)."""
    segments = item.get("segments", ())
    others = len(segments) > 1 or "index" in item
    return others and any(s["size"] == 0 for s in segments)


def disagrees(item: Mapping[str, Any]) -> bool:
    """Whether a chain contradicts itself without reading a byte: its runs and inline
    segments do not add up to its whole size, or its one segment is not the whole item."""
    segments = item.get("segments", ())
    runs = item.get("index", ())
    if sum(r["bytes"] for r in runs) + sum(s["size"] for s in segments) != item["size"]:
        return True
    return not runs and len(segments) == 1 and segments[0]["sha256"] != item["sha256"]


def misreferenced(record: Mapping[str, Any]) -> bool:
    """Whether a `same_as` transcript names a file whose whole hash or size is not its own."""
    transcript = record.get("transcript")
    if record.get("schema_version") != 3 or transcript is None:
        return False
    reference = transcript.get("same_as")
    files = (record.get("native") or {}).get("files", [])
    return any(
        (f["sha256"], f["size"]) != (transcript["sha256"], transcript["size"])
        for f in files
        if reference is not None and f["path"] == reference
    )
