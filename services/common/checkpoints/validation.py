"""Validator.verify: whether a checkpoint is authoritative, as a verdict that names only a reason.

"A checkpoint is authoritative only when its record and every artifact it lists are present and
match their hashes." The checks run in the spec's order, each refusal a reason of the spec, and no
record value or path ever reaches the verdict. Hostile records and bytes never raise: every shape
the schema does not expect ends in a reason. Errors of the storage itself (a lost connection)
do propagate: they say nothing about the checkpoint.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Awaitable, Callable, Iterator, Mapping
from typing import Any

from services.common.checkpoints import reasons, records, storing


@dataclasses.dataclass(frozen=True, repr=False)
class Verdict:
    """The outcome of `Validator.verify`: ok, or the reason it is not."""

    ok: bool
    reason: reasons.Reason | None = None

    def __post_init__(self) -> None:
        if self.ok != (self.reason is None):
            raise ValueError("a verdict is ok exactly when it has no reason")

    @classmethod
    def passed(cls) -> Verdict:
        """The verdict of an authoritative checkpoint."""
        return cls(ok=True)

    @classmethod
    def refused(cls, reason: reasons.Reason) -> Verdict:
        """The verdict of a checkpoint refused for `reason`."""
        return cls(ok=False, reason=reason)

    def __repr__(self) -> str:
        return "Verdict(ok)" if self.reason is None else f"Verdict({self.reason.value})"

    __str__ = __repr__


@dataclasses.dataclass(frozen=True)
class Expectation:
    """What the verifying attempt expects: the directive's checkpoint and its own generation."""

    checkpoint_id: str
    execution_generation: int


class _Refusal(Exception):
    def __init__(self, reason: reasons.Reason) -> None:
        super().__init__(reason.value)
        self.reason = reason


BATCH_BYTES = 4 * 1024 * 1024
"""A checkpoint whose objects add up to no more than this is hashed in one call of a store with
`storing.BatchedReads`; larger ones are hashed `concurrency` objects at a time."""


class Validator:
    """Verifies checkpoints through one granted store.

    Args:
        store: the attempt's granted store; its scope is the task generation checked.
        concurrency: objects hashed at once; each holds one read buffer, so memory stays flat.
    """

    def __init__(self, store: storing.ArtifactStore, *, concurrency: int = 2) -> None:
        if concurrency < 1:
            raise ValueError("concurrency must be at least 1")
        self._store = store
        self._concurrency = concurrency

    async def verify(self, expectation: Expectation) -> Verdict:
        """The verdict on the record and every object it lists."""
        try:
            record = await self._record(expectation)
            await self._check_objects(record)
        except _Refusal as refusal:
            return Verdict.refused(refusal.reason)
        return Verdict.passed()

    async def verify_record(self, expectation: Expectation) -> Verdict:
        """The verdict on the record alone: every check except reading the objects."""
        try:
            await self._record(expectation)
        except _Refusal as refusal:
            return Verdict.refused(refusal.reason)
        return Verdict.passed()

    async def summary(self, expectation: Expectation, *, verified: bool) -> records.Summary | None:
        """The summary of a checkpoint that passes (with its objects when `verified`), or None."""
        try:
            record = await self._record(expectation)
            if verified:
                await self._check_objects(record)
        except _Refusal:
            return None
        return records.Summary.from_record(record)

    async def verify_manifest(self, expectation: Expectation, data: bytes) -> Verdict:
        """`verify` of a manifest the caller has already read (its bytes): the same checks in
        the same order, without reading the manifest again."""
        try:
            record = self._checked(expectation, data)
            await self._check_objects(record)
        except _Refusal as refusal:
            return Verdict.refused(refusal.reason)
        return Verdict.passed()

    async def _record(self, expectation: Expectation) -> Mapping[str, Any]:
        return self._checked(expectation, await _manifest(self._store, expectation.checkpoint_id))

    def _checked(self, expectation: Expectation, data: bytes) -> Mapping[str, Any]:
        """The record of a manifest's bytes once every record check passed (hash, schema,
        then `_check_record`)."""
        try:
            record, claimed = records.decode_manifest(data)
            matches = records.record_sha256(record) == claimed
        except (ValueError, RecursionError):
            raise _Refusal(reasons.Reason.CORRUPT_MANIFEST) from None
        if not matches:
            raise _Refusal(reasons.Reason.CORRUPT_MANIFEST)
        problem = records.check(record)
        if problem is not None:
            raise _Refusal(problem)
        _check_record(record, self._store.scope, expectation)
        return record

    async def _check_objects(self, record: Mapping[str, Any]) -> None:
        wanted: dict[str, set[int]] = {}
        for _role, sha256, size in records.inventory(record):
            wanted.setdefault(sha256, set()).add(size)
        names = sorted(wanted)
        store = self._store
        if storing.batched(store) and sum(max(sizes) for sizes in wanted.values()) <= BATCH_BYTES:
            # Small objects of a local store: hashed all in one call, not one hop each. The
            # same verdict: a missing object outranks a changed one.
            digests = await store.digest_objects(names)
            if any(d is None for d in digests):
                raise _Refusal(reasons.Reason.MISSING_OBJECT)
            for name, digest in zip(names, digests, strict=True):
                # A StoreError in a digest's place (an unsafe path) is a changed object.
                if (
                    not isinstance(digest, tuple)
                    or digest[0] != name
                    or wanted[name] != {digest[1]}
                ):
                    raise _Refusal(reasons.Reason.CORRUPT_OBJECT)
            return

        # Presence first (cheap), so a missing object is reported as missing whatever else is
        # wrong, then the hashing, which stops at the first object that does not match.
        async def present(sha256: str) -> bool:
            try:
                return await self._store.object_exists(sha256)
            except storing.UnsafePath:
                return True  # something is there; hashing it below refuses it as corrupt

        if not all(await self._each(present, names)):
            raise _Refusal(reasons.Reason.MISSING_OBJECT)

        async def matches(sha256: str) -> bool:
            try:
                digest = await self._store.digest_object(sha256)
            except storing.UnsafePath:
                return False
            if digest is None:
                raise _Refusal(reasons.Reason.MISSING_OBJECT)
            return digest[0] == sha256 and wanted[sha256] == {digest[1]}

        await self._each(matches, names, stop=reasons.Reason.CORRUPT_OBJECT)

    async def _each(
        self,
        check: Callable[[str], Awaitable[bool]],
        names: list[str],
        *,
        stop: reasons.Reason | None = None,
    ) -> list[bool]:
        """`check(name)` for every name, `concurrency` at a time, results in order.

        With `stop`, a false result refuses with that reason and cancels the checks still running.
        """
        results = [False] * len(names)
        queue: Iterator[int] = iter(range(len(names)))

        async def worker() -> None:
            for index in queue:
                results[index] = await check(names[index])
                if stop is not None and not results[index]:
                    raise _Refusal(stop)

        tasks = [asyncio.create_task(worker()) for _ in range(min(self._concurrency, len(names)))]
        try:
            if tasks:
                await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        errors = [e for t in tasks if not t.cancelled() and (e := t.exception()) is not None]
        refusals = [e.reason for e in errors if isinstance(e, _Refusal)]
        others = [e for e in errors if not isinstance(e, _Refusal)]
        if others:
            raise others[0]
        if refusals:
            # A vanished object outranks a changed one, whichever worker saw it first.
            raise _Refusal(min(refusals, key=lambda r: r is not reasons.Reason.MISSING_OBJECT))
        return results


async def _manifest(store: storing.ArtifactStore, checkpoint_id: str) -> bytes:
    """A checkpoint's manifest bytes; refused as absent or corrupt as `Validator.verify` does."""
    try:
        data = await store.get_manifest(checkpoint_id)
    except storing.InvalidName:
        # No manifest can exist under a name the store refuses.
        raise _Refusal(reasons.Reason.MANIFEST_ABSENT) from None
    except (storing.ObjectTooLarge, storing.UnsafePath):
        raise _Refusal(reasons.Reason.CORRUPT_MANIFEST) from None
    if data is None:
        raise _Refusal(reasons.Reason.MANIFEST_ABSENT)
    return data


def _check_record(
    record: Mapping[str, Any], scope: storing.StoreScope, expectation: Expectation
) -> None:
    """The checks after the schema: committed, scope, identity, material, watermark, inventory."""
    if record["committed"] is not True:
        raise _Refusal(reasons.Reason.NOT_COMMITTED)
    authority = record["authority"]
    if (
        authority["swarm"] != scope.swarm
        or authority["task_id"] != scope.task_id
        or authority["task_generation"] != scope.task_generation
    ):
        raise _Refusal(reasons.Reason.SCOPE_MISMATCH)
    if (
        record["checkpoint_id"] != expectation.checkpoint_id
        or records.execution_generation(record) != expectation.execution_generation
    ):
        raise _Refusal(reasons.Reason.IDENTITY_MISMATCH)
    listed = set(records.inventory(record))
    roles = {role for role, _sha256, _size in listed}
    if not _required_roles(record) <= roles:
        raise _Refusal(reasons.Reason.MISSING_MATERIAL)
    if record["transcript"].get("watermark") is None:
        raise _Refusal(reasons.Reason.MISSING_WATERMARK)
    if set(records.named_objects(record)) != listed:
        raise _Refusal(reasons.Reason.INVENTORY_MISMATCH)


def _required_roles(record: Mapping[str, Any]) -> set[str]:
    transcript, native, source = (record.get(k) for k in ("transcript", "native", "source"))
    if transcript is None or (record["continuity"] == "native" and native is None):
        # The section itself is missing, so nothing in the inventory can stand for it.
        return {"<absent>"}
    required = {"transcript"}
    if record["continuity"] == "native":
        required.add("native_session")
    if source is not None:
        if source.get("bundle") is not None:
            required.add("source_bundle")
        if source.get("patch") is not None:
            required.add("source_patch")
        if source.get("untracked"):
            required.add("untracked")
    return required


async def list_checkpoints(
    store: storing.ArtifactStore,
    compatibility_key: str,
    execution_generation: int,
    *,
    verified_only: bool,
) -> list[records.Summary]:
    """The store's complete checkpoints of one compatibility key and attempt, newest first.

    Every listed record passed the record checks of `Validator.verify` (committed, in this
    store's scope, of this execution generation, with its material and watermark); with
    `verified_only` its objects were read and matched too.
    """
    validator = Validator(store)
    found: list[records.Summary] = []
    for checkpoint_id in await store.list_checkpoint_ids():
        expectation = Expectation(checkpoint_id, execution_generation)
        summary = await validator.summary(expectation, verified=False)
        if summary is not None and summary.compatibility_key == compatibility_key:
            found.append(summary)
    found.sort(key=records.Summary.newness, reverse=True)
    if not verified_only:
        return found
    # Objects are read only for records that already qualify, newest first.
    verified: list[records.Summary] = []
    for summary in found:
        expectation = Expectation(summary.checkpoint_id, execution_generation)
        if (await validator.verify(expectation)).ok:
            verified.append(summary)
    return verified


async def newest_verified(
    store: storing.ArtifactStore,
    compatibility_key: str,
    execution_generation: int,
    wanted: Callable[[records.Summary], bool] = lambda summary: True,
    *,
    concurrency: int = 8,
) -> records.Summary | None:
    """The newest checkpoint `list_checkpoints(..., verified_only=True)` lists that is also
    `wanted`, found without checking every record: the same answer, at the cost of one
    verification when the newest candidate passes.

    Every manifest is read and parsed (nothing else says which is newest), and ordered as
    `list_checkpoints` orders what passes; records of another compatibility key, or not
    `wanted`, are passed over on what they claim. Then, newest first, each candidate is
    verified like `Validator.verify` (manifest hash, schema, record checks, objects) until one
    passes. A candidate that fails is passed over as `list_checkpoints` leaves it out, so a
    corrupt, invalid or incomplete newest checkpoint falls through to the next one.
    """
    ids: list[str]
    manifests: list[bytes | None]
    if storing.batched(store):
        # A local store: listed and read in one call. An unreadable manifest is passed over
        # as `_manifest` refuses it below.
        batch = await store.get_manifests()
        ids = [i for i, _ in batch]
        manifests = [data if isinstance(data, bytes) else None for _, data in batch]
    else:
        ids = await store.list_checkpoint_ids()
        limit = asyncio.Semaphore(concurrency)

        async def read(checkpoint_id: str) -> bytes | None:
            async with limit:
                try:
                    return await _manifest(store, checkpoint_id)
                except _Refusal:
                    return None

        manifests = list(await asyncio.gather(*(read(i) for i in ids)))
    candidates: list[tuple[records.Summary, str, bytes]] = []
    for checkpoint_id, data in zip(ids, manifests, strict=True):
        if data is None:
            continue
        try:
            record, _ = records.decode_manifest(data)
        except (records.ManifestError, RecursionError):
            continue
        claimed = records.provisional_summary(record)
        if claimed is None or claimed.compatibility_key != compatibility_key:
            continue
        if wanted(claimed):
            candidates.append((claimed, checkpoint_id, data))
    # Stable, like `list_checkpoints`: equally new records keep the listing's order.
    candidates.sort(key=lambda found: found[0].newness(), reverse=True)
    validator = Validator(store)
    for claimed, checkpoint_id, data in candidates:
        expectation = Expectation(checkpoint_id, execution_generation)
        if (await validator.verify_manifest(expectation, data)).ok:
            return claimed
    return None
