"""A capture laid out as a schema version 3 record: chains extended from the previous checkpoint.

The previous checkpoint is the newest of the attempt's own checkpoints (ids
`ckpt-{execution_id}-{n}`) whose record passes the record checks, found in the store, so a
restarted sidecar or a one-shot `capture` also stores only what was appended since. The
`Capturer` keeps the record it wrote last as a faster path to the same answer.

Against it, each native session file and the transcript keep their previous segments when
their first bytes are unchanged and add segments for the bytes appended (a rewritten file is
stored whole again, `chains.extend`), committed source extends its bundle chain
(`bundles.extend`), and untracked files and the patch stay one object each. Only objects the
previous record does not list are uploaded: that record was written after every object it
lists, and checkpoint objects are never deleted.

A chain's inline segments are folded into index objects once enough of them wait
(`chain_indexes.fold`): the new index objects are uploaded with the new segments, and the record
names the index objects, so it grows with the logarithm of a chain's segments, not with their
number. Extending a chain needs only the previous record: its runs are kept as they are.
"""

from __future__ import annotations

import asyncio
import dataclasses
import pathlib
import re
from collections.abc import Mapping, Sequence
from typing import Any

from services.common.checkpoints import (
    chain_indexes,
    chained_records,
    chains,
    records,
    storing,
    validation,
)
from services.restorer import bundles, launching, source_records

_LOOKBACK = 8
"""How many of the attempt's newest checkpoints are tried before starting every chain anew."""


@dataclasses.dataclass(frozen=True)
class Previous:
    """What a capture extends: the previous checkpoint's chains and every object it lists."""

    files: Mapping[str, chains.Chain]
    transcript: chains.Chain | None
    base_commit: str | None
    bundles: tuple[chained_records.Bundle, ...]
    stored: frozenset[str]

    @classmethod
    def nothing(cls) -> Previous:
        """No previous checkpoint: every chain starts anew and every object is uploaded."""
        return cls({}, None, None, (), frozenset())

    @classmethod
    def of(cls, record: Mapping[str, Any]) -> Previous:
        """The previous state a checked record describes; a version 1 or 2 record has no
        chains to extend, only objects already stored."""
        stored = frozenset(sha256 for _, sha256, _ in records.stored_objects(record))
        if record["schema_version"] != chained_records.VERSION:
            return cls({}, None, None, (), stored)
        native = record.get("native")
        files = {f["path"]: chains.Chain.from_json(f) for f in native["files"]} if native else {}
        transcript = chains.transcript_chain(record)
        captured = record.get("source")
        return cls(
            files=files,
            transcript=None if transcript is None else chains.Chain.from_json(transcript),
            base_commit=None if captured is None else captured["base_commit"],
            bundles=tuple(
                chained_records.Bundle(b["sha256"], b["size"], b["tip"])
                for b in (captured or {}).get("bundles", ())
            ),
            stored=stored,
        )


async def find_previous(store: storing.ArtifactStore, scope: launching.Scope) -> Previous | None:
    """The attempt's newest checkpoint in the store that passes the record checks, or None."""
    mine = re.compile(rf"ckpt-{re.escape(scope.execution_id)}-(\d+)")
    ids = await store.list_checkpoint_ids()
    newest = sorted(((int(m.group(1)), i) for i in ids if (m := mine.fullmatch(i))), reverse=True)
    validator = validation.Validator(store)
    for _, checkpoint_id in newest[:_LOOKBACK]:
        expectation = validation.Expectation(checkpoint_id, scope.execution_generation)
        record = await validator.checked_record(expectation)
        if record is not None and record["authority"]["execution_id"] == scope.execution_id:
            return Previous.of(record)
    return None


@dataclasses.dataclass(frozen=True)
class SessionFile:
    """One captured native session file: its path, bytes and whole blob."""

    path: str
    data: bytes = dataclasses.field(repr=False)
    blob: records.Blob


def session_files(placed: Sequence[tuple[records.NativeFile, bytes]]) -> list[SessionFile]:
    """The captured session files (each with its bytes), as `lay_out` takes them."""
    return [SessionFile(item.path, data, item.blob) for item, data in placed]


@dataclasses.dataclass(frozen=True)
class Layout:
    """The chained sections of a version 3 record, and the objects to upload for them."""

    transcript: chains.Chain
    files: tuple[chained_records.ChainedFile, ...]
    source: chained_records.ChainedSource | None
    uploads: dict[str, bytes]

    def native(self, captured: records.Native) -> chained_records.ChainedNative:
        """The native section: the captured session's harness and id, its files chained."""
        return chained_records.ChainedNative(
            harness=captured.harness,
            harness_version=captured.harness_version,
            native_session_id=captured.native_session_id,
            files=self.files,
        )


class _Chainer:
    """Extends chains in worker threads; an item whose bytes equal another's (the transcript
    and the session file it was read from) is extended once."""

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._done: dict[tuple[chains.Chain | None, records.Blob], chains.Extension] = {}

    async def extend(
        self, previous: chains.Chain | None, data: bytes, blob: records.Blob
    ) -> chains.Extension:
        key = (previous, blob)
        found = self._done.get(key)
        if found is None:
            if previous is not None and (previous.sha256, previous.size) == (
                blob.sha256,
                blob.size,
            ):
                found = chains.Extension(previous, (), True)
            else:
                found = await asyncio.to_thread(chains.extend, previous, data, self._limit)
            self._done[key] = found
        return found


async def lay_out(
    previous: Previous | None,
    *,
    archive: bytes,
    files: Sequence[SessionFile],
    captured: source_records.SourceCapture | None,
    repository: str,
    worktree: pathlib.Path,
    limit: int,
) -> Layout:
    """Chain the transcript `archive`, the session `files` and the source against `previous`.

    Args:
        previous: the previous checkpoint of the attempt, or None (every chain starts anew).
        archive: the archived transcript.
        files: the native session files (empty for a context only capture).
        captured: the source capture (made without its bundle), or None without a repository.
        repository: the repository the record names for the source.
        worktree: the captured worktree, where the bundles are made.
        limit: the largest segment to make.

    Raises:
        source_records.SourceError: the bundle chain could not be extended.
    """
    last = previous or Previous.nothing()
    uploads: dict[str, bytes] = {}
    chainer = _Chainer(limit)

    def keep(extension: chains.Extension) -> chains.Chain:
        for segment, data in extension.new:
            if segment.sha256 not in last.stored:
                uploads.setdefault(segment.sha256, bytes(data))
        chain, made = chain_indexes.fold(extension.chain)
        for run, index in made:
            if run.sha256 not in last.stored:
                uploads.setdefault(run.sha256, index)
        return chain

    transcript = keep(await chainer.extend(last.transcript, archive, records.Blob.of(archive)))
    chained = tuple(
        [
            chained_records.ChainedFile(
                f.path, keep(await chainer.extend(last.files.get(f.path), f.data, f.blob))
            )
            for f in files
        ]
    )
    if captured is None:
        return Layout(transcript, chained, None, uploads)
    links, made = await bundles.extend(worktree, captured, last.base_commit, last.bundles)
    uploads.update({sha: data for sha, data in made.items() if sha not in last.stored})
    untracked = []
    for item in captured.untracked:
        blob = records.Blob.of(item.data)
        if blob.sha256 not in last.stored:
            uploads.setdefault(blob.sha256, item.data)
        untracked.append(records.UntrackedFile(item.path, blob, item.mode))
    patch = None if captured.patch is None else records.Blob.of(captured.patch)
    if patch is not None and captured.patch is not None and patch.sha256 not in last.stored:
        uploads.setdefault(patch.sha256, captured.patch)
    laid = chained_records.ChainedSource(
        repository=repository,
        base_commit=captured.base_commit,
        head_commit=captured.head_commit,
        branch=captured.branch or None,
        bundles=links,
        patch=patch,
        untracked=tuple(untracked),
    )
    return Layout(transcript, chained, laid, uploads)
