"""Reading a version 3 record's chain index objects: the record with every chain listed in full.

A chained item may name index objects (`chain_indexes`) in place of most of its segments. Both
`Validator.verify` and the restore need the segments themselves, so `expand` reads every index
object the record names, and the ones those name, level by level (`concurrency` reads at a
time; a store with `storing.BatchedReads` in a few calls), hashes each one as `fetching` hashes
an object, parses it, and returns a copy of the record whose chained items list every segment
inline (`segments`, no `index`): what a record that needs no index would hold.

The refusals, each a reason of the spec (spec: "Refusals"):

- `missing_object`: an index object is not in the store;
- `corrupt_object`: its bytes or size no longer match its hash;
- `invalid_record`: its (intact) bytes are not an index object of the level its reference
  names, or list a segment or run over the size limits, or the chain would pass
  `chain_indexes.MAX_CHAIN_SEGMENTS` (the writer named something no valid record holds);
- `inventory_mismatch`: the runs a reference or index object names do not cover the bytes it
  claims (a run dropped, added or swapped for another of other bytes).

A record's refusal is returned, never raised; an error of the storage itself propagates.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
from collections.abc import AsyncGenerator, Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

from services.common.checkpoints import chain_indexes, chains, reasons, storing

Reason = reasons.Reason
_Key = tuple[str, int, int]
"""An index object as a reference names it: (sha256, size, level)."""


@runtime_checkable
class KnownBytes(Protocol):
    """A store that already holds some objects' bytes, read and hashed (a restore's early
    reads): `expand` takes them from there rather than reading them again. Optional."""

    async def known_bytes(self, sha256: str) -> bytes | None:
        """The bytes of `sha256`, already checked against that hash, or None."""
        ...


class _Refused(Exception):
    def __init__(self, reason: Reason) -> None:
        super().__init__(reason.value)
        self.reason = reason


def indexed(record: Mapping[str, Any]) -> bool:
    """Whether a schema-valid record names any index object."""
    return any("index" in item for _role, item in chains.chained_items(record))


async def expand(
    store: storing.ArtifactStore, record: Mapping[str, Any], *, concurrency: int = 8
) -> Mapping[str, Any] | Reason:
    """The record with each indexed chain listed in full, or the reason it cannot be.

    A record that names no index object is returned as it is.

    Args:
        store: the granted store the index objects are read from.
        record: a record that passed the record checks of `Validator.verify`.
        concurrency: index objects read at once.
    """
    if not indexed(record):
        return record
    nodes: dict[_Key, tuple[chains.Segment, ...] | tuple[chains.Run, ...]] = {}
    try:
        wanted = {
            (r["sha256"], r["size"], r["level"])
            for _role, item in chains.chained_items(record)
            for r in item.get("index", ())
        }
        while wanted:
            await _read_level(store, sorted(wanted), nodes, concurrency)
            wanted = {
                (r.sha256, r.size, r.level)
                for key in wanted
                for r in nodes[key]
                if isinstance(r, chains.Run) and (r.sha256, r.size, r.level) not in nodes
            }
        return _expanded(record, nodes)
    except _Refused as refused:
        return refused.reason


def _expanded(
    record: Mapping[str, Any],
    nodes: Mapping[_Key, tuple[chains.Segment, ...] | tuple[chains.Run, ...]],
) -> dict[str, Any]:
    out = dict(record)  # a shallow copy: only the chained sections are replaced
    native = record.get("native")
    if native is not None:
        out["native"] = {**native, "files": [_listed(item, nodes) for item in native["files"]]}
    transcript = record.get("transcript")
    if transcript is not None and "index" in transcript:
        out["transcript"] = _listed(transcript, nodes)
    return out


def _listed(
    item: Mapping[str, Any],
    nodes: Mapping[_Key, tuple[chains.Segment, ...] | tuple[chains.Run, ...]],
) -> dict[str, Any]:
    """The chained item with its runs replaced by the segments they hold, in order."""
    if "index" not in item:
        return dict(item)
    segments: list[dict[str, Any]] = []
    for ref in item["index"]:
        run = chains.Run(ref["sha256"], ref["size"], ref["level"], ref["bytes"])
        segments.extend(_segments(run, nodes, chain_indexes.MAX_CHAIN_SEGMENTS - len(segments)))
    segments.extend(item.get("segments", ()))
    if len(segments) > chain_indexes.MAX_CHAIN_SEGMENTS:
        raise _Refused(Reason.INVALID_RECORD)
    out = {k: v for k, v in item.items() if k != "index"}
    out["segments"] = segments
    return out


def _segments(
    top: chains.Run,
    nodes: Mapping[_Key, tuple[chains.Segment, ...] | tuple[chains.Run, ...]],
    room: int,
) -> list[dict[str, Any]]:
    """The segments under `top`, in order (depth first, without recursion); refused once
    they pass `room` or a run does not cover the bytes it claims."""
    out: list[dict[str, Any]] = []
    pending: list[chains.Run] = [top]
    while pending:
        run = pending.pop()
        entries = nodes[(run.sha256, run.size, run.level)]
        covered = sum(e.size if isinstance(e, chains.Segment) else e.bytes for e in entries)
        if covered != run.bytes:
            raise _Refused(Reason.INVENTORY_MISMATCH)
        if run.level == 1:
            if len(out) + len(entries) > room:
                raise _Refused(Reason.INVALID_RECORD)
            out.extend({"sha256": s.sha256, "size": s.size} for s in entries)
        else:
            pending.extend(reversed([e for e in entries if isinstance(e, chains.Run)]))
    return out


async def _read_level(
    store: storing.ArtifactStore,
    keys: Sequence[_Key],
    nodes: dict[_Key, tuple[chains.Segment, ...] | tuple[chains.Run, ...]],
    concurrency: int,
) -> None:
    """Read, check and parse every index object of `keys` into `nodes`."""
    found: dict[_Key, bytes | Reason] = {}
    unknown = list(keys)
    if isinstance(store, KnownBytes):
        unknown = []
        for key in keys:
            known = await store.known_bytes(key[0])
            if known is None:
                unknown.append(key)
            else:
                found[key] = _judged(key, known)
    if storing.batched(store):
        for start in range(0, len(unknown), 1024):
            batch = unknown[start : start + 1024]
            read = await store.read_objects([(sha, size) for sha, size, _ in batch])
            for key, data in zip(batch, read, strict=True):
                found[key] = _judged(key, data)
    else:
        gate = asyncio.Semaphore(concurrency)

        async def one(key: _Key) -> None:
            async with gate:
                found[key] = await _read(store, key[0], key[1])

        await asyncio.gather(*(one(key) for key in unknown))
    results = [found[key] for key in keys]
    # The reason that outranks the others, as `object_checks` ranks them.
    for reason in (Reason.MISSING_OBJECT, Reason.CORRUPT_OBJECT):
        if reason in results:
            raise _Refused(reason)
    for key in keys:
        checked = found[key]
        assert isinstance(checked, bytes)
        try:
            nodes[key] = chain_indexes.parse(checked, key[2])
        except chain_indexes.Malformed:
            raise _Refused(Reason.INVALID_RECORD) from None


def _judged(key: _Key, data: bytes | storing.StoreError | None) -> bytes | Reason:
    if data is None:
        return Reason.MISSING_OBJECT
    if not isinstance(data, bytes) or len(data) != key[1]:
        return Reason.CORRUPT_OBJECT
    if hashlib.sha256(data).hexdigest() != key[0]:
        return Reason.CORRUPT_OBJECT
    return data


async def _read(store: storing.ArtifactStore, sha256: str, size: int) -> bytes | Reason:
    """One index object's bytes, or why they cannot be used (never more than `size` + 1
    bytes held)."""
    parts: list[bytes] = []
    received = 0
    try:
        async with contextlib.aclosing(_chunks(store, sha256)) as chunks:
            async for chunk in chunks:
                received += len(chunk)
                if received > size:
                    return Reason.CORRUPT_OBJECT
                parts.append(bytes(chunk))
    except storing.ObjectMissing:
        return Reason.MISSING_OBJECT
    except (storing.UnsafePath, storing.InvalidName, storing.ObjectCorrupt):
        return Reason.CORRUPT_OBJECT
    return _judged((sha256, size, 0), b"".join(parts))


async def _chunks(store: storing.ArtifactStore, sha256: str) -> AsyncGenerator[bytes, None]:
    async for chunk in store.read_object(sha256):
        yield chunk
