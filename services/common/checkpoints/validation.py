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
from collections.abc import Callable, Mapping
from typing import Any

from services.common.checkpoints import (
    chains,
    object_checks,
    reasons,
    record_schema,
    records,
    storing,
)


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
"""A checkpoint whose objects add up to no more than this is hashed in a few calls of a store
with `storing.BatchedReads`; larger ones are hashed `concurrency` objects or chains at a time."""


class Validator:
    """Verifies checkpoints through one granted store.

    Args:
        store: the attempt's granted store; its scope is the task generation checked.
        concurrency: objects (or chains of segments) hashed at once; each holds one read
            buffer, so memory stays flat.
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

    async def verify_written(self, expectation: Expectation, written: Mapping[str, int]) -> Verdict:
        """`verify` for a capturer that extends a checkpoint it verified itself: every record
        check, then only the objects this capture wrote (`written`: name to size), each read
        and hashed.

        Sound only when every other object the record names was verified by the same capturer
        before (objects are content-addressed and never written over): the capturer checks that
        and calls `verify` otherwise, so a capture costs what it appended, not the whole
        session again. A restore always calls `verify`.
        """
        try:
            await self._record(expectation)
            reason = await object_checks.check_named(
                self._store, written, concurrency=self._concurrency
            )
        except _Refusal as refusal:
            return Verdict.refused(refusal.reason)
        return Verdict.passed() if reason is None else Verdict.refused(reason)

    async def verify_record(self, expectation: Expectation) -> Verdict:
        """The verdict on the record alone: every check except reading the objects."""
        try:
            await self._record(expectation)
        except _Refusal as refusal:
            return Verdict.refused(refusal.reason)
        return Verdict.passed()

    async def checked_record(self, expectation: Expectation) -> Mapping[str, Any] | None:
        """The record of a checkpoint that passes every record check (its objects unread), or
        None: what a capture extends its chains from."""
        try:
            return await self._record(expectation)
        except _Refusal:
            return None

    async def summary(self, expectation: Expectation, *, verified: bool) -> records.Summary | None:
        """The summary of a checkpoint that passes (with its objects when `verified`), or None."""
        try:
            record = await self._record(expectation)
            if verified:
                await self._check_objects(record)
        except _Refusal:
            return None
        return records.Summary.from_record(record)

    async def verify_decoded(
        self, expectation: Expectation, record: dict[str, Any], claimed: str
    ) -> Verdict:
        """`verify` of a manifest the caller has already read and split
        (`records.decode_manifest`: its record and the hash it claims): the same checks in the
        same order, without reading or parsing the manifest again."""
        try:
            checked = self._checked_record(expectation, record, claimed)
            await self._check_objects(checked)
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
        except (ValueError, RecursionError):
            raise _Refusal(reasons.Reason.CORRUPT_MANIFEST) from None
        return self._checked_record(expectation, record, claimed)

    def _checked_record(
        self, expectation: Expectation, record: dict[str, Any], claimed: str
    ) -> Mapping[str, Any]:
        """`_checked` of a manifest already split into its record and claimed hash."""
        try:
            matches = records.record_sha256(record) == claimed
        except (ValueError, RecursionError):
            raise _Refusal(reasons.Reason.CORRUPT_MANIFEST) from None
        if not matches:
            raise _Refusal(reasons.Reason.CORRUPT_MANIFEST)
        problem = record_schema.check(record)
        if problem is not None:
            raise _Refusal(problem)
        _check_record(record, self._store.scope, expectation)
        return record

    async def _check_objects(self, record: Mapping[str, Any]) -> None:
        # BATCH_BYTES is read at each call, so it can be changed for a test.
        reason = await object_checks.check(
            self._store, record, concurrency=self._concurrency, batch_bytes=BATCH_BYTES
        )
        if reason is not None:
            raise _Refusal(reason)


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
    if chains.misreferenced(record) or any(
        chains.disagrees(item) for _role, item in chains.chained_items(record)
    ):
        # A segment dropped or added: the chain no longer adds up to the item it names.
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
        if source.get("bundle") is not None or source.get("bundles"):
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
    candidates: list[tuple[records.Summary, str, dict[str, Any], str]] = []
    for checkpoint_id, data in zip(ids, manifests, strict=True):
        if data is None:
            continue
        try:
            record, claimed_sha256 = records.decode_manifest(data)
        except (records.ManifestError, RecursionError):
            continue
        claimed = records.provisional_summary(record)
        if claimed is None or claimed.compatibility_key != compatibility_key:
            continue
        if wanted(claimed):
            candidates.append((claimed, checkpoint_id, record, claimed_sha256))
    # Stable, like `list_checkpoints`: equally new records keep the listing's order.
    candidates.sort(key=lambda found: found[0].newness(), reverse=True)
    validator = Validator(store)
    for claimed, checkpoint_id, record, claimed_sha256 in candidates:
        expectation = Expectation(checkpoint_id, execution_generation)
        if (await validator.verify_decoded(expectation, record, claimed_sha256)).ok:
            return claimed
    return None
