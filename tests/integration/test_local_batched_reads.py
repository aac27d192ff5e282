"""A local checkpoint folder reads small checkpoints in one worker-thread call (`BatchedReads`):
the verdicts and the newest checkpoint found are the ones the one-call-per-read path gives, on
a real folder, hostile entries included."""

from __future__ import annotations

import hashlib
import pathlib
from collections.abc import AsyncIterator, Callable

import pytest

from services.common.checkpoints import local, reasons, records, storing, validation
from tests.unit.checkpoints import material

Reason = reasons.Reason
OBJECTS = material.OBJECTS


async def stocked(root: pathlib.Path) -> local.LocalStore:
    store = local.LocalFolderBackend(root).scoped(material.SCOPE)
    for data in OBJECTS:

        async def chunks(data: bytes = data) -> AsyncIterator[bytes]:
            yield data

        digest = hashlib.sha256(data).hexdigest()
        await store.put_object(chunks(), sha256=digest, size=len(data), max_size=1 << 20)
    return store


def object_file(root: pathlib.Path, data: bytes) -> pathlib.Path:
    sha256 = hashlib.sha256(data).hexdigest()
    scope = material.SCOPE
    return (
        root
        / scope.swarm
        / scope.task_id
        / str(scope.task_generation)
        / "objects"
        / sha256[:2]
        / sha256
    )


def _missing(root: pathlib.Path) -> None:
    object_file(root, material.PATCH).unlink()


def _changed(root: pathlib.Path) -> None:
    object_file(root, material.TRANSCRIPT).write_bytes(b"x" * len(material.TRANSCRIPT))


def _grown(root: pathlib.Path) -> None:
    object_file(root, material.SESSION).write_bytes(material.SESSION + b"\n")


def _missing_and_changed(root: pathlib.Path) -> None:
    object_file(root, material.BUNDLE).write_bytes(b"changed")
    object_file(root, material.UNTRACKED).unlink()


def _linked(root: pathlib.Path) -> None:
    target = object_file(root, material.TRANSCRIPT)
    outside = root / "elsewhere"
    outside.write_bytes(material.TRANSCRIPT)
    target.unlink()
    target.symlink_to(outside)


CASES: dict[str, tuple[Callable[[pathlib.Path], None] | None, validation.Verdict]] = {
    "intact": (None, validation.Verdict.passed()),
    "missing": (_missing, validation.Verdict.refused(Reason.MISSING_OBJECT)),
    "changed": (_changed, validation.Verdict.refused(Reason.CORRUPT_OBJECT)),
    "grown": (_grown, validation.Verdict.refused(Reason.CORRUPT_OBJECT)),
    "missing outranks changed": (
        _missing_and_changed,
        validation.Verdict.refused(Reason.MISSING_OBJECT),
    ),
    "symlinked": (_linked, validation.Verdict.refused(Reason.CORRUPT_OBJECT)),
}


@pytest.mark.parametrize("case", sorted(CASES))
async def test_a_batched_verdict_is_the_one_read_by_read(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch, case: str
) -> None:
    """Spec refusals missing_object and corrupt_object (a link out of the store included), and
    a pass, through one call for all objects and through one call per object."""
    change, expected = CASES[case]
    store = await stocked(tmp_path)
    record = material.native_record()
    await store.put_manifest(record["checkpoint_id"], records.encode_manifest(record))
    if change is not None:
        change(tmp_path)
    assert isinstance(store, storing.BatchedReads)
    batched = await validation.Validator(store).verify(material.EXPECTED)
    monkeypatch.setattr(validation, "BATCH_BYTES", -1)  # every checkpoint read object by object
    one_by_one = await validation.Validator(store).verify(material.EXPECTED)
    assert batched == one_by_one == expected


async def test_the_newest_checkpoint_found_in_one_call_is_the_listings(
    tmp_path: pathlib.Path,
) -> None:
    """`newest_verified` over the batched manifests passes over a corrupt newest manifest, an
    oversize one and a linked one as the verified listing leaves them out."""
    store = await stocked(tmp_path)
    for sequence in (5, 6, 7):
        record = material.native_record(checkpoint_id=f"ckpt-{sequence}", sequence=sequence)
        await store.put_manifest(record["checkpoint_id"], records.encode_manifest(record))
    folder = object_file(tmp_path, material.PATCH).parents[2] / "records"
    (folder / "ckpt-9.json").write_bytes(b"{not json")
    (folder / "ckpt-8.json").symlink_to(folder / "ckpt-7.json")
    (folder / "ckpt-90.json").write_bytes(b" " * (storing.MAX_MANIFEST_BYTES + 1))
    batch = await store.get_manifests()
    assert [i for i, _ in batch] == await store.list_checkpoint_ids()
    assert isinstance(dict(batch)["ckpt-90"], storing.ObjectTooLarge)
    listed = await validation.list_checkpoints(
        store, material.native_record()["compatibility_key"], 3, verified_only=True
    )
    found = await validation.newest_verified(
        store, material.native_record()["compatibility_key"], 3
    )
    assert found is not None and listed and found == listed[0]
    assert found.checkpoint_id == "ckpt-7"
