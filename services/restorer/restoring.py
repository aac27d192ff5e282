"""The restore, in the spec's order, as an async generator of steps ending in Ready or Refused.

"The worker entry point runs the restore after its checkout is prepared and before the
supervisor starts the harness": verify → registration → native state → source → continuation.

- verify: `Validator.verify` through the store granted to this attempt; with no store and a
  directive naming a checkpoint, `no checkpoint store is configured for this worker`.
- registration: the checkpoint's project must be one of the registration's projects.
- native (native directives): the checkpoint must be native (`context_only`), its session the
  directive's (`conversation_mismatch`), the harness version qualified (`unqualified_version`)
  and equal to the captured one (`version_changed`); only then do the session files land in the
  harness home (`native_restoring`). Every native check runs before anything is written, and
  native state lands before source state, so each of these refusals leaves the work tree and
  the harness home untouched.
- source: committed and uncommitted source applied to the worktree (cloned first when it has
  no repository); any failure is `source: …` (`source_restoring`).
- continuation (reconstructed directives): `continuation.txt`, mode 0600, owned by the worker
  user, passed as the opening prompt after the line `Continue from this recorded conversation.
  Native resume was unavailable.`: as the command's last argument when one argument can carry
  it, else on the command's standard input, read from `continuation.txt` (`Ready.stdin_path`;
  the harness adapter gives the command that reads its prompt there). A command that has no
  such way (an interactive session) is refused with `TOO_LONG`.

A refusal stops the restore: it never falls back on its own to a weaker kind of continuity.
Objects are fetched from the store by SHA-256 and hashed as they are read (a version 3 file
or transcript is its chain's segments, joined in order, a long chain's listed from its index
objects first, `index_reading`; its bundles are applied in order); the
Validator's verdict on an object read early comes from that same read
(`fetching.VerifyingStore`), as does its check of each chain end to end, so the bytes written
are the bytes verified, and an object read later is hashed again, so bytes
that changed after the verification are refused (`corrupt_object`), never written.

Three things start while the Validator runs, because they need no verdict and write nothing it
guards: reading the objects the restore will write (`fetching.Objects`), reading the harness
version for a native restore, and cloning the registered project into a scratch folder when
the worktree has no repository (`checkouts.EarlyClone`); a refused restore discards them.
Once verified, the untracked files are written ahead into a staging folder of the attempt
folder while the checkout is made (`source.StagedUntracked`), then moved into place with
every path check.

Where the spec's table has no row, the closest row is used and said so where it happens.

What the restore is given and what it answers (`Attempt`, `Step`, `Ready`, `Refused`, the
restorer's own refusal reasons) are in `restores`.
"""

from __future__ import annotations

import logging
import os
from collections.abc import AsyncIterator, Mapping
from typing import Any

from services.common import directives, logs
from services.common.checkpoints import chains, index_reading, reasons, records, storing, validation
from services.restorer import (
    fetching,
    launching,
    native_restoring,
    restores,
    source_restoring,
    transcripts,
)
from services.restorer.harness import base as harness_base

log = logging.getLogger("services.restorer")
Continuity = directives.Continuity

VERIFY_CONCURRENCY = fetching.CONCURRENCY
"""Objects the Validator checks at once (most answer from reads already under way)."""


# --- the restore -----------------------------------------------------------------------------


async def restore(
    launch: launching.LaunchRecord,
    attempt: restores.Attempt,
    store: storing.ArtifactStore | None,
) -> AsyncIterator[restores.Event]:
    """Restore what the directive promises; yields each step, then one Ready or Refused.

    Args:
        launch: the attempt's launch record (its directive's fields already agree).
        attempt: the worktree, the attempt folder and the harness home.
        store: the store granted to this attempt, or None when none is configured.
    """
    run = _Run(launch, attempt, store)
    try:
        async for step in run.steps():
            yield step
    except restores.Stop as stop:
        yield restores.Refused(stop.reason)
        return
    finally:
        await run.close()
    yield run.ready()


class _Run:
    """One restore's state between its steps."""

    def __init__(
        self,
        launch: launching.LaunchRecord,
        attempt: restores.Attempt,
        store: storing.ArtifactStore | None,
    ) -> None:
        self.launch = launch
        self.directive = launch.directive
        self.attempt = attempt
        self.store = store
        self.record: Mapping[str, Any] = {}
        self.command: tuple[str, ...] = launch.command
        self.stdin_path: str | None = None
        self._objects = None if store is None else fetching.Objects(store)
        self._native_step = native_restoring.NativeStep(launch, attempt)
        self._source_step = source_restoring.SourceStep(launch, attempt)

    async def steps(self) -> AsyncIterator[restores.Step]:
        kind = self.directive.recovery
        for name, applies, action in (
            ("directive", True, self._directive),
            ("verify", kind is not Continuity.FRESH, self._verify),
            ("registration", kind is not Continuity.FRESH, self._registration),
            ("native", kind is Continuity.NATIVE, self._native),
            ("source", True, self._source),
            ("continuation", kind is Continuity.RECONSTRUCTED, self._continuation),
        ):
            if not applies:
                yield restores.Step(name, "skipped")
                continue
            yield restores.Step(name, "started")
            done = await action()
            yield restores.Step(name, "done" if done else "skipped")
        if not all(harness_base.fits_argument(word) for word in self.command):
            # execve refuses an argument this long (E2BIG): stop here, before the outcome is
            # reported as delivered, rather than fail once the harness is started.
            raise restores.Stop(restores.TOO_LONG)
        self._bootstrap()

    def ready(self) -> restores.Ready:
        d = self.directive
        return restores.Ready(
            recovery=d.recovery,
            command=self.command,
            checkpoint_id=d.checkpoint_id,
            session_id=d.session_id if d.recovery is Continuity.NATIVE else None,
            watermark=d.watermark,
            cwd=str(self.attempt.worktree),
            stdin_path=self.stdin_path,
        )

    def _bootstrap(self) -> None:
        """Prepare the harness home for an unattended turn in the worktree: first-run
        onboarding completed, the worktree trusted, no folder picker on resume."""
        try:
            self._harness().prepare_home(self.attempt.harness_home, self.attempt.worktree)
        except (harness_base.HarnessError, OSError) as error:
            raise restores.Stop(
                str(error)
                if isinstance(error, harness_base.HarnessError)
                else "harness: the harness home could not be prepared"
            ) from None

    def _harness(self) -> harness_base.Harness:
        return restores.harness_of(self.launch, self.attempt)

    async def _directive(self) -> bool:
        why = directives.problem(self.directive)
        if why is not None:
            raise restores.Stop(f"{directives.MALFORMED}: {why}")
        return True

    async def _verify(self) -> bool:
        checkpoint_id = self.directive.checkpoint_id
        assert checkpoint_id is not None  # an agreeing non-fresh directive names one
        if self.store is None:
            raise restores.Stop(restores.Refusal.NO_STORE)
        expectation = validation.Expectation(checkpoint_id, self.launch.restores_from_generation)
        assert self._objects is not None
        verifying = self._objects.verifying_store()
        try:
            manifest = await self.store.get_manifest(checkpoint_id)
            self._start_early(manifest)
            await self._read_indexed_early(verifying, manifest)
            validator = validation.Validator(verifying, concurrency=VERIFY_CONCURRENCY)
            verdict = await validator.verify(expectation)
        except Exception as error:  # any storage failure ends in one refusal
            logs.event(log, "store_failed", logging.WARNING, exception=type(error).__name__)
            raise restores.Stop(restores.Refusal.STORE_UNAVAILABLE) from None
        if verdict.reason is not None:
            raise restores.Stop(verdict.reason.value)
        # The record used below is the very one verified: the bytes the Validator read and
        # found intact and valid (decoded again here, its hash compared again; the schema
        # check, the slowest part of a verdict, is not repeated on the same bytes).
        manifest = verifying.manifest_read(checkpoint_id)
        try:
            record, claimed = records.decode_manifest(manifest or b"")
            intact = records.record_sha256(record) == claimed
        except ValueError:
            intact = False
        if not intact or record.get("checkpoint_id") != checkpoint_id:
            raise restores.Stop(reasons.Reason.CORRUPT_MANIFEST)
        transcript = record["transcript"]
        if transcript.get("watermark") != self.directive.watermark:
            # The directive names a cursor this checkpoint does not hold: it is not the record
            # the directive names (closest row: identity_mismatch).
            raise restores.Stop(reasons.Reason.IDENTITY_MISMATCH)
        # Version 3 chains kept in index objects, listed in full from the index objects the
        # Validator read (early reads: no second read), each hashed again if read anew.
        try:
            expanded = await index_reading.expand(verifying, record)
        except Exception as error:  # see above
            logs.event(log, "store_failed", logging.WARNING, exception=type(error).__name__)
            raise restores.Stop(restores.Refusal.STORE_UNAVAILABLE) from None
        if isinstance(expanded, reasons.Reason):
            raise restores.Stop(expanded.value)
        self.record = expanded
        return True

    async def _registration(self) -> bool:
        if self.launch.project(self.record["project"]) is None:
            # No row names a project outside the registration. The record belongs to work
            # this worker is not registered for, which is what scope_mismatch says of another
            # task: the closest row.
            raise restores.Stop(reasons.Reason.SCOPE_MISMATCH)
        return True

    async def _native(self) -> bool:
        self.command = await self._native_step.restore(
            self.record, self.directive.session_id, self._item
        )
        return True

    def _start_early(self, manifest: bytes | None) -> None:
        """Start what needs no verdict while the Validator runs: reads, the version, the clone.

        None of them writes anything the verdict guards: objects are only read (and hashed),
        the harness version is read from the launch record's executable (a native restore
        reads it anyway, and judges it only after the verdict), and the clone goes into a
        scratch folder of the attempt folder, adopted by the worktree only once the source
        step begins.
        """
        if self.directive.recovery is Continuity.NATIVE:
            self._native_step.start_early()
        try:
            record, _ = records.decode_manifest(manifest or b"")
            entries = list(records.stored_objects(record))
            project = self.launch.project(record.get("project", ""))
            captured = record.get("source")
        except (ValueError, KeyError, TypeError, AttributeError):
            return
        wanted = {"source_bundle", "source_patch", "untracked"}
        if self.directive.recovery is Continuity.NATIVE:
            wanted.add("native_session")
        if self.directive.recovery is Continuity.RECONSTRUCTED:
            wanted.add("transcript")
        assert self._objects is not None
        self._objects.read_early((sha, size) for role, sha, size in entries if role in wanted)
        self._source_step.start_early(project, captured)

    async def _read_indexed_early(
        self, verifying: fetching.VerifyingStore, manifest: bytes | None
    ) -> None:
        """For chains kept in index objects (version 3): read the index objects (started
        early by `_start_early`), then start reading the segments they list, so the
        Validator's end-to-end check of each chain and the restore share one read of each
        segment. Reads only: an index object that cannot be used is left to the Validator,
        which refuses it with its reason."""
        wanted = {"native_session"} if self.directive.recovery is Continuity.NATIVE else set()
        if self.directive.recovery is Continuity.RECONSTRUCTED:
            wanted.add("transcript")
        try:
            record, _ = records.decode_manifest(manifest or b"")
            if not index_reading.indexed(record):
                return
            expanded = await index_reading.expand(verifying, record)
            if isinstance(expanded, reasons.Reason):
                return
            segments = [
                (segment["sha256"], segment["size"])
                for role, item in chains.chained_items(expanded)
                if role in wanted
                for segment in item["segments"]
            ]
        except Exception:  # an unverified record of any shape, or a store failing: the
            return  # Validator, next, judges both
        assert self._objects is not None
        self._objects.read_early(segments)

    async def close(self) -> None:
        """Stop early work nobody used: reads, and a clone the worktree did not adopt."""
        if self._objects is not None:
            await self._objects.aclose()
        await self._native_step.close()
        await self._source_step.close()

    async def _item(self, item: Mapping[str, Any]) -> bytes:
        """A file's or the transcript's bytes: one object (versions 1 and 2) or its chain's
        segments joined in order (version 3). Each segment is hashed as it is read; the chain
        as a whole was verified in the verify step, from these same reads."""
        segments = item.get("segments")
        if segments is None:
            return await self._fetch(item)
        return b"".join([await self._fetch(segment) for segment in segments])

    async def _fetch(self, entry: Mapping[str, Any]) -> bytes:
        assert self._objects is not None
        try:
            return await self._objects.get(entry["sha256"], entry["size"])
        except fetching.Unusable as unusable:
            raise restores.Stop(unusable.reason) from None
        except Exception as error:  # see _verify
            logs.event(log, "store_failed", logging.WARNING, exception=type(error).__name__)
            raise restores.Stop(restores.Refusal.STORE_UNAVAILABLE) from None

    async def _source(self) -> bool:
        return await self._source_step.restore(self.directive.recovery, self.record, self._fetch)

    async def _continuation(self) -> bool:
        adapter = self._harness()
        try:
            adapter.opening_prompt_command(self.launch.command, "")
        except harness_base.HarnessError as error:
            raise restores.Stop(str(error)) from None
        # Version 3: a transcript that is "the same as" a session file is that file's chain.
        transcript = chains.transcript_chain(self.record)
        assert transcript is not None  # the verdict found it with its material
        data = await self._item(transcript)
        try:
            text = transcripts.continuation_text(data)
        except transcripts.TranscriptError:
            # The bytes are the captured ones (their hash matched) but no prompt can carry
            # them: the record's transcript is not a usable archive.
            raise restores.Stop(reasons.Reason.INVALID_RECORD) from None
        try:
            owner = os.stat(self.attempt.attempt_dir)
            written = transcripts.write_continuation(
                self.attempt.attempt_dir, text, uid=owner.st_uid, gid=owner.st_gid
            )
        except OSError:
            raise restores.Stop("continuation: continuation.txt could not be written") from None
        try:
            opening = harness_base.opening(adapter, self.launch.command, text)
        except harness_base.HarnessError:
            # Too long for an argument, and this form of the command reads no prompt from
            # stdin (an interactive session): the prompt cannot be delivered.
            raise restores.Stop(restores.TOO_LONG) from None
        self.command = opening.command
        if opening.on_stdin:
            # The prompt is continuation.txt itself, byte for byte: the supervisor opens it
            # as the harness's standard input.
            self.stdin_path = str(written.absolute())
        return True
