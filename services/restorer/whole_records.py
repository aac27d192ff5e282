"""A capture laid out as a schema version 2 record: every artifact one whole object.

The writer before append-only checkpoints (`chaining`): each session file, the transcript and
one bundle of every commit since the base are stored whole again at every capture. Kept to write
version 2 checkpoints and to measure append-only ones against (`bench/continuity.py`); the
source section it builds also stands for the source's state when a capture compares itself with
the last one.
"""

from __future__ import annotations

from services.common.checkpoints import records
from services.restorer import source_records

Native = tuple[records.Native, list[tuple[records.NativeFile, bytes]]]
"""A qualified native session: its record section, and each file with its bytes."""


def source_of(
    captured: source_records.SourceCapture | None, repository: str
) -> tuple[records.Source | None, dict[str, bytes]]:
    """The source section of a version 2 record and its objects by SHA-256 (with no bundle
    when the capture made none: the section then stands for the source's state only).

    Args:
        captured: the source capture, or None when the worktree has no repository.
        repository: the repository the record names.
    """
    if captured is None:
        return None, {}
    objects: dict[str, bytes] = {}

    def blob(data: bytes | None) -> records.Blob | None:
        if data is None:
            return None
        found = records.Blob.of(data)
        objects[found.sha256] = data
        return found

    untracked = []
    for item in captured.untracked:
        found = records.Blob.of(item.data)
        objects[found.sha256] = item.data
        untracked.append(records.UntrackedFile(item.path, found, item.mode))
    recorded = records.Source(
        repository=repository,
        base_commit=captured.base_commit,
        head_commit=captured.head_commit,
        branch=captured.branch or None,
        bundle=blob(captured.bundle),
        patch=blob(captured.patch),
        untracked=tuple(untracked),
    )
    return recorded, objects


def objects_of(
    archive: bytes, native: Native | None, source_objects: dict[str, bytes]
) -> dict[str, bytes]:
    """Every object of a version 2 record by SHA-256: the transcript, each session file and
    the source's objects, all uploaded whole."""
    objects = {records.Blob.of(archive).sha256: archive, **source_objects}
    if native is not None:
        objects.update({item.blob.sha256: data for item, data in native[1]})
    return objects
