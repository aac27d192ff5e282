"""The object steps of `Validator.verify`: every listed object present, intact, every chain whole.

After the record checks, every object the record's artifacts are stored in (the inventory of a
version 1 or 2 record; for version 3, each chain's segments and the other artifacts) is read
through the granted store:

- `missing_object`: an object is not in the store, reported as missing whatever else is
  wrong (presence is checked first; a local folder, where opening an object costs what asking
  for it does, reads every object instead).
- `corrupt_object`: an object's bytes or size no longer match its hash.
- `inventory_mismatch`: a chain (schema version 3) whose segments are each intact but, read in
  order, do not make the item the record names (a segment swapped, reordered or dropped).

A chain that names index objects (`chain_indexes`) is first listed in full by reading them
(`index_reading.expand`: each one hashed, parsed, and its runs' bytes added up, with the same
reasons, and `invalid_record` for an intact index object that is not one); then every segment
is checked as above. When an index object cannot be used, an object the record names directly
that is missing still outranks that reason.

A chain of two or more segments is read as one stream and hashed once. When its bytes, in
order, hash to its whole SHA-256 and each segment has its recorded size, each segment holds the
very bytes its writer named it after (the whole hash was taken over those bytes), so hashing
each segment again would only repeat the work: verify costs one hash of each stored byte. Only
a chain that does not match is hashed segment by segment, to tell a changed segment from a
chain out of order. (A restore hashes each segment anyway as it reads it, so no byte it writes
escapes its own hash.) Objects outside chains are hashed one by one, as in version 2.

Hashing runs in worker threads with large reads (`concurrency` objects or chains at a time,
each with one buffer), so memory stays flat whatever the checkpoint's size. A failure of the
storage itself is raised, never turned into a reason.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from typing import Any

from services.common import waiting
from services.common.checkpoints import chains, index_reading, reasons, records, storing

Reason = reasons.Reason
_HASH_IN_THREAD = 64 * 1024
"""Chunks at least this large are hashed in a worker thread (hashlib drops the GIL on them)."""


@dataclasses.dataclass(frozen=True)
class _Chain:
    """A chain as read: its segments' names and sizes, and every whole hash claimed for them
    (identical segment lists, such as a transcript and the session file it was read from, are
    read once)."""

    names: tuple[str, ...]
    sizes: tuple[int, ...]
    wholes: frozenset[str]


def _chains(record: Mapping[str, Any]) -> list[_Chain]:
    found: dict[tuple[tuple[str, ...], tuple[int, ...]], set[str]] = {}
    for _role, item in chains.chained_items(record):
        segments = item["segments"]
        if len(segments) < 2:
            continue  # one segment is the whole item: its own hash says it all
        key = (tuple(s["sha256"] for s in segments), tuple(s["size"] for s in segments))
        found.setdefault(key, set()).add(item["sha256"])
    return [_Chain(names, sizes, frozenset(w)) for (names, sizes), w in found.items()]


async def check(
    store: storing.ArtifactStore,
    record: Mapping[str, Any],
    *,
    concurrency: int,
    batch_bytes: int,
) -> Reason | None:
    """The first object refusal of a record that passed its record checks, or None.

    Args:
        store: the granted store.
        record: the checked record.
        concurrency: objects or chains hashed at once.
        batch_bytes: a checkpoint of at most this many bytes in a store with
            `storing.BatchedReads` is hashed in a few calls rather than one per object.
    """
    expanded = await index_reading.expand(store, record, concurrency=concurrency)
    if isinstance(expanded, Reason):
        if expanded is not Reason.MISSING_OBJECT:
            named = sorted({sha256 for _, sha256, _ in records.stored_objects(record)})
            if await _absent(store, named, concurrency):
                return Reason.MISSING_OBJECT
        return expanded
    return await _check_listed(store, expanded, concurrency=concurrency, batch_bytes=batch_bytes)


async def check_named(
    store: storing.ArtifactStore, sized: Mapping[str, int], *, concurrency: int
) -> Reason | None:
    """The first refusal of the objects `sized` names (name to size), each read and hashed on
    its own: presence first, then contents. What a capturer checks of the objects it just
    wrote (`Validator.verify_written`)."""
    names = sorted(sized)
    if await _absent(store, names, concurrency):
        return Reason.MISSING_OBJECT
    return _first(await _pool([_object_job(store, n, sized[n]) for n in names], concurrency))


async def _check_listed(
    store: storing.ArtifactStore,
    record: Mapping[str, Any],
    *,
    concurrency: int,
    batch_bytes: int,
) -> Reason | None:
    """`check` of a record whose chains list every segment inline."""
    wanted: dict[str, set[int]] = {}
    for _role, sha256, size in records.stored_objects(record):
        wanted.setdefault(sha256, set()).add(size)
    names = sorted(wanted)
    linked = _chains(record)
    in_chains = {name for chain in linked for name in chain.names}
    plain = [name for name in names if name not in in_chains]
    # One name listed with two sizes: no stored object can match both (the larger is judged).
    sized = {name: max(sizes) for name, sizes in wanted.items()}
    twice = Reason.CORRUPT_OBJECT if any(len(s) > 1 for s in wanted.values()) else None
    batch = store if storing.batched(store) else None
    if batch is not None and sum(sized.values()) <= batch_bytes:
        # Every object is read in full here, so a missing one still outranks the rest.
        return _first([await _small(store, batch, plain, linked, sized), twice])
    jobs: list[Callable[[], Awaitable[Reason | None]]] = [
        *(_chain_job(store, chain, sized) for chain in linked),
        *(_object_job(store, name, sized[name]) for name in plain),
    ]
    if batch is not None:
        # A local folder: opening an object costs what asking for it does, so no presence
        # pass goes first; every job runs to its end, so a missing object still outranks.
        return _first([*await _pool(jobs, concurrency, stop=False), twice])
    if await _absent(store, names, concurrency):
        return Reason.MISSING_OBJECT
    if twice is not None:
        return twice
    return _first(await _pool(jobs, concurrency))


async def _absent(store: storing.ArtifactStore, names: list[str], concurrency: int) -> bool:
    """Whether any object is absent (a link or odd entry counts as present: hashing it
    refuses it as changed)."""

    def present(name: str) -> Callable[[], Awaitable[Reason | None]]:
        async def job() -> Reason | None:
            try:
                found = await store.object_exists(name)
            except storing.UnsafePath:
                return None
            return None if found else Reason.MISSING_OBJECT

        return job

    return any(await _pool([present(n) for n in names], concurrency))


async def _small(
    store: storing.ArtifactStore,
    batch: storing.BatchedReads,
    plain: list[str],
    linked: list[_Chain],
    size: Mapping[str, int],
) -> Reason | None:
    """A small checkpoint of a local store (`batch` is `store`): a few worker-thread calls in
    all, not one per object."""
    found = await batch.digest_objects(plain)
    results = [_judged(n, size[n], d) for n, d in zip(plain, found, strict=True)]
    if linked:
        digests = (
            await batch.digest_chains([c.names for c in linked])
            if storing.chained(batch)
            else [await _streamed(store, c.names) for c in linked]
        )
        for chain, digest in zip(linked, digests, strict=True):
            if isinstance(digest, storing.StoreError):
                digest = _UNREADABLE  # its segments' own digests below say which is odd
            if digest is None:
                results.append(Reason.MISSING_OBJECT)
            elif not _whole(chain, digest):
                segments = sorted(set(chain.names))
                each = await batch.digest_objects(segments)
                judged = [_judged(n, size[n], d) for n, d in zip(segments, each, strict=True)]
                results.append(_first(judged) or Reason.INVENTORY_MISMATCH)
    return _first(results)


_UNREADABLE = storing.ChainDigest("", ())
"""A chain one of whose objects is a link or an odd entry: matches no whole hash."""


def _judged(
    name: str, size: int, digest: tuple[str, int] | storing.StoreError | None
) -> Reason | None:
    if digest is None:
        return Reason.MISSING_OBJECT
    # A StoreError in a digest's place (an unsafe path) is a changed object.
    if not isinstance(digest, tuple) or digest != (name, size):
        return Reason.CORRUPT_OBJECT
    return None


def _whole(chain: _Chain, digest: storing.ChainDigest) -> bool:
    return chain.wholes == {digest.sha256} and digest.sizes == chain.sizes


def _object_job(
    store: storing.ArtifactStore, name: str, size: int
) -> Callable[[], Awaitable[Reason | None]]:
    async def job() -> Reason | None:
        try:
            digest = await store.digest_object(name)
        except storing.UnsafePath:
            return Reason.CORRUPT_OBJECT
        return _judged(name, size, digest)

    return job


def _chain_job(
    store: storing.ArtifactStore, chain: _Chain, size: Mapping[str, int]
) -> Callable[[], Awaitable[Reason | None]]:
    async def job() -> Reason | None:
        try:
            digest = await digest_chain(store, chain.names)
        except storing.UnsafePath:
            digest = _UNREADABLE
        if digest is None:
            return Reason.MISSING_OBJECT
        if _whole(chain, digest):
            return None
        # Out of order, or changed? Each segment's own hash tells.
        for name in sorted(set(chain.names)):
            reason = await _object_job(store, name, size[name])()
            if reason is not None:
                return reason
        return Reason.INVENTORY_MISMATCH

    return job


async def digest_chain(
    store: storing.ArtifactStore, names: Sequence[str]
) -> storing.ChainDigest | None:
    """The digest of a chain's objects read in order; None when one is absent.

    Raises:
        storing.StoreError: an object's read was refused (a link in a local store).
    """
    if storing.chained(store):
        (found,) = await store.digest_chains([names])
        if isinstance(found, storing.StoreError):
            raise found
        return found
    return await _streamed(store, names)


async def _streamed(
    store: storing.ArtifactStore, names: Sequence[str]
) -> storing.ChainDigest | None:
    """A chain hashed through `read_object`, one chunk in memory at a time."""
    digest, sizes = hashlib.sha256(), []
    for name in names:
        size = 0
        try:
            async for chunk in store.read_object(name):
                size += len(chunk)
                if len(chunk) >= _HASH_IN_THREAD:
                    await asyncio.to_thread(digest.update, chunk)
                else:
                    digest.update(chunk)
        except storing.ObjectMissing:
            return None
        sizes.append(size)
    return storing.ChainDigest(digest.hexdigest(), tuple(sizes))


_PRIORITY = (Reason.MISSING_OBJECT, Reason.CORRUPT_OBJECT, Reason.INVENTORY_MISMATCH)


def _first(results: Sequence[Reason | None]) -> Reason | None:
    """The reason that outranks the others: a vanished object, then a changed one, then a
    chain out of order."""
    found = {r for r in results if r is not None}
    return next((r for r in _PRIORITY if r in found), None)


class _Stop(Exception):
    pass


async def _pool(
    jobs: Sequence[Callable[[], Awaitable[Reason | None]]], concurrency: int, *, stop: bool = True
) -> list[Reason | None]:
    """Run `jobs`, `concurrency` at a time; results in order (None for jobs never run).

    With `stop`, a missing or changed object stops the jobs still running (presence was
    checked before, so nothing can outrank it but a missing object some running job finds
    too). A chain out of order never stops them, since a changed object found later outranks
    it.
    """
    results: list[Reason | None] = [None] * len(jobs)
    queue: Iterator[int] = iter(range(len(jobs)))

    async def worker() -> None:
        for index in queue:
            results[index] = await jobs[index]()
            if stop and results[index] in (Reason.MISSING_OBJECT, Reason.CORRUPT_OBJECT):
                raise _Stop

    tasks = [asyncio.create_task(worker()) for _ in range(min(concurrency, len(jobs)))]
    try:
        if tasks:
            await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
    finally:
        await waiting.cancel(tasks)
    errors = [e for t in tasks if not t.cancelled() and (e := t.exception()) is not None]
    others = [e for e in errors if not isinstance(e, _Stop)]
    if others:
        raise others[0]
    return results
