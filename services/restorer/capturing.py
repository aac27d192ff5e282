"""Capture: what a later restore needs, continuously, on an interval and on demand, objects
first, record last.

One capture takes the native session files through the harness adapter, archives the
transcript up to a watermark (complete records only: a line the harness is still writing is
left for the next capture), captures the source (commits as bundles, uncommitted changes as a
binary patch, untracked files), uploads the objects through the attempt's scoped store
(local folder, S3 or the checkpoint-store service), writes the record last, runs
`Validator.verify` on the result (between full verifications, at most `FULL_VERIFY_S` apart, a
capturer that extends its own verified checkpoint reads back only the objects it just wrote:
`Validator.verify_written`; all three in `checkpoint_writing`), and reports the native session
id and the archive watermark with `Recovery.ReportCapture` (coalesced: at most one report a
second per attempt, the final report always sent, `reporting.Coalesced`). A capture whose
material is unchanged since the last one writes nothing new. The session files are read by
`session_capturing`; what a capture answers is in `captures`.

The sidecar captures continuously (`following`): a capture may reuse the source its last scan
captured (`scan_source=False`), so following the session files at a second's lag does not
scan the worktree every second. The harness version is read once per capturer.

Records are schema version 3 (`chaining`): session files and the transcript extend the chains
of the attempt's previous checkpoint, so a capture uploads only what was appended since.
`schema_version=2` writes every file, the transcript and one bundle whole again, as earlier
writers did (kept to measure against and to write version 2 checkpoints).

A checkpoint is native only when it "carries a qualified native session": with a harness
version not qualified for native resume the capture is context only.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
from typing import Any

from services.common import logs, settings
from services.common.checkpoints import (
    chained_records,
    chains,
    reasons,
    records,
    storing,
)
from services.restorer import (
    captures,
    chaining,
    checkpoint_writing,
    fetching,
    launching,
    reporting,
    restores,
    retrying,
    session_capturing,
    source,
    source_records,
    transcripts,
    whole_records,
)

log = logging.getLogger("services.restorer")
DEFAULT_INTERVAL_S = 60.0
FULL_VERIFY_S = 60.0
"""How long a capturer reads back only what it wrote before it verifies every object of its
checkpoint again: an object the store damaged after it was verified stops the chains that hold
it within about this long, while a capture a second reads the session back once a minute, not
every second."""
_VERDICTS = frozenset(reason.value for reason in reasons.Reason)


class Capturer:
    """Captures one attempt's checkpoints.

    Args:
        launch: the attempt's launch record (scope, registration, capture grant, command).
        attempt: the worktree, attempt folder and harness home.
        storage: the worker's storage settings (used unless `checkpoint_remote`).
        control_addr: the controller, for `ReportCapture` (no report when None).
        worker_credential: the attempt's own credential for the controller.
        retry: the retry policy of the capture report.
        schema_version: 3 (chains, the default) or 2 (whole objects).
        segment_bytes: where appended bytes are split (default: `chains.SEGMENT_BYTES`, or
            the store's object limit when smaller).
        report_period_s: the shortest time between two capture reports.
    """

    def __init__(
        self,
        launch: launching.LaunchRecord,
        attempt: restores.Attempt,
        storage: settings.StorageSettings,
        *,
        control_addr: str | None = None,
        worker_credential: str | None = None,
        retry: retrying.Retry = retrying.DEFAULT,
        schema_version: int = records.CURRENT_SCHEMA_VERSION,
        segment_bytes: int | None = None,
        report_period_s: float = reporting.REPORT_PERIOD_S,
        full_verify_s: float = FULL_VERIFY_S,
    ) -> None:
        if schema_version not in (records.WHOLE_OBJECTS_VERSION, chained_records.VERSION):
            raise ValueError("a capture writes schema version 2 or 3")
        limit = min(segment_bytes or chains.SEGMENT_BYTES, storage.max_object_bytes)
        if not 0 < limit <= chains.MAX_SEGMENT_BYTES:
            raise ValueError("segment_bytes must be between 1 and chains.MAX_SEGMENT_BYTES")
        self._version = schema_version
        self._limit = limit
        self._previous: chaining.Previous | None = None
        self._writer = checkpoint_writing.CheckpointWriter(
            launch.scope, storage.max_object_bytes, full_verify_s
        )
        self._launch = launch
        self._attempt = attempt
        self._storage = storage
        self._control_addr = control_addr
        self._credential = worker_credential
        self._retry = retry
        self._last: tuple[Any, captures.Captured] | None = None
        self._lock = asyncio.Lock()
        self._session = session_capturing.SessionReader(launch, attempt)
        self._scanned: tuple[source_records.SourceCapture | None, str] | None = None
        self._reports: reporting.Coalesced[captures.Captured] = reporting.Coalesced(
            self._send_report, report_period_s
        )
        self.wake = asyncio.Event()

    async def run(self, interval_s: float = DEFAULT_INTERVAL_S) -> None:
        """Capture every `interval_s` seconds, or at once when `wake` is set, until cancelled."""
        try:
            while True:
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(interval_s):
                        await self.wake.wait()
                self.wake.clear()
                try:
                    await self.capture()
                except captures.CaptureError as error:
                    logs.event(log, "capture_failed", logging.WARNING, reason=str(error))
                except Exception as error:
                    # The loop outlives one bad capture; the type only, its message may hold
                    # paths.
                    logs.event(log, "capture_failed", logging.ERROR, exception=type(error).__name__)
        finally:
            await self.aclose()

    async def aclose(self) -> None:
        """Drop a capture report still waiting for its turn (the final report follows)."""
        await self._reports.aclose()

    @property
    def reports_sent(self) -> int:
        """How many capture reports this capturer sent (or tried to)."""
        return self._reports.sent

    async def capture(
        self, *, final: bool = False, scan_source: bool = True, wait_report: bool = True
    ) -> captures.Captured:
        """Capture one checkpoint now.

        Args:
            final: the sidecar's last capture, taken once the worker stopped: reported as
                final even when nothing changed since the last capture, so the fence names no
                lost tail.
            scan_source: scan the worktree's source; False reuses the last scan (the first
                capture always scans).
            wait_report: return once the capture's report was sent when one is due now;
                False leaves it to a task of its own (continuous capture: a slow controller
                never delays archiving). A final report is always waited for.

        Raises:
            CaptureError: no store is configured, the source could not be captured, the store
                refused the upload, or the written checkpoint does not verify.
        """
        grant = self._launch.capture_grant
        async with self._lock, fetching.granted_store(self._launch, self._storage, grant) as store:
            if store is None:
                raise captures.CaptureError(restores.Refusal.NO_STORE.value)
            captured = await self._capture(store, scan_source or final)
        if captured.written:
            logs.event(
                log,
                "checkpoint_captured",
                execution_id=self._launch.scope.execution_id,
                checkpoint_id=captured.checkpoint_id,
                continuity=captured.continuity,
                watermark=captured.watermark,
            )
        if captured.written or final:
            await self._report(captured, final=final, wait=wait_report)
        return captured

    async def _capture(self, store: storing.ArtifactStore, scan_source: bool) -> captures.Captured:
        launch = self._launch
        adapter = self._attempt.harness(launch.harness)
        held, native, transcript_records = await self._session.read(adapter)
        archive = transcripts.archive(transcript_records)
        watermark = len(transcript_records)
        if scan_source or self._scanned is None:
            self._scanned = await self._source()
        captured, repository = self._scanned
        whole_source, source_objects = whole_records.source_of(captured, repository)
        material = (
            records.Blob.of(archive),
            watermark,
            None if native is None else native[0],
            whole_source,
        )
        if self._last is not None and self._last[0] == material:
            return dataclasses.replace(self._last[1], written=False)
        sequence, checkpoint_id = await self._writer.free_id(store)
        scope = launch.scope
        authority = records.Authority(
            swarm=scope.swarm,
            seat=scope.seat,
            task_id=scope.task_id,
            task_generation=scope.task_generation,
            execution_id=scope.execution_id,
            execution_generation=scope.execution_generation,
        )
        fields: dict[str, Any] = {
            "checkpoint_id": checkpoint_id,
            "sequence": sequence,
            "authority": authority,
            "project": self._project(repository if captured else ""),
            "compatibility_key": launch.worker_image,
            "watermark": watermark,
        }
        try:
            if self._version == records.WHOLE_OBJECTS_VERSION:
                objects = whole_records.objects_of(archive, native, source_objects)
                record = records.new_record(
                    transcript=records.Blob.of(archive),
                    native=None if native is None else native[0],
                    source=whole_source,
                    **fields,
                )
            else:
                layout = await chaining.lay_out(
                    await self._previous_checkpoint(store),
                    archive=archive,
                    files=[] if native is None else chaining.session_files(native[1]),
                    captured=captured,
                    repository=whole_source.repository if whole_source else "",
                    worktree=self._attempt.worktree,
                    limit=self._limit,
                )
                objects = layout.uploads
                record = chained_records.new_record(
                    transcript=layout.transcript,
                    native=None if native is None else layout.native(native[0]),
                    source=layout.source,
                    **fields,
                )
        except ValueError:
            raise captures.CaptureError("invalid_record") from None
        except source_records.SourceError as error:
            raise captures.CaptureError(error.reason) from None
        try:
            await self._writer.write(store, objects, checkpoint_id, record)
        except captures.CaptureError as error:
            if self._version == chained_records.VERSION and str(error) in _VERDICTS:
                # The written checkpoint did not verify, and the chains it extended may be why
                # (a previous record whose segments were damaged): start every chain anew.
                self._previous = chaining.Previous.nothing()
            raise
        captured_checkpoint = captures.Captured(
            checkpoint_id=checkpoint_id,
            continuity=record["continuity"],
            native_session_id=held,
            watermark=watermark,
            written=True,
        )
        self._last = (material, captured_checkpoint)
        if self._version == chained_records.VERSION:
            self._previous = chaining.Previous.of(record)
        return captured_checkpoint

    async def _previous_checkpoint(self, store: storing.ArtifactStore) -> chaining.Previous | None:
        """What the next chains extend: the record this capturer wrote last, else the
        attempt's newest checkpoint in the store (a restarted sidecar, a one-shot capture)."""
        if self._previous is not None:
            return self._previous
        try:
            return await chaining.find_previous(store, self._launch.scope)
        except storing.StoreError:
            return None  # an unreadable listing or record: every chain starts anew
        except Exception as error:  # the store is down or refused the grant
            logs.event(log, "store_failed", logging.WARNING, exception=type(error).__name__)
            raise captures.CaptureError("checkpoint store unavailable") from None

    async def _source(self) -> tuple[source_records.SourceCapture | None, str]:
        """The worktree's source (with its one bundle for version 2) and the repository the
        record names; (None, "") when the worktree has no repository."""
        worktree = self._attempt.worktree
        if not await asyncio.to_thread(os.path.lexists, worktree / ".git"):
            return None, ""
        try:
            captured = await source.capture(
                worktree, with_bundle=self._version == records.WHOLE_OBJECTS_VERSION
            )
        except source_records.SourceError as error:
            raise captures.CaptureError(error.reason) from None
        project = self._project_named(captured.repository)
        repository = captured.repository or (project.repository if project else "")
        return captured, repository or restores.NO_ORIGIN

    def _project_named(self, repository: str) -> launching.Project | None:
        projects = self._launch.projects
        for project in projects:
            if repository and project.repository == repository:
                return project
        return projects[0] if projects else None

    def _project(self, repository: str) -> str:
        project = self._project_named(repository)
        if project is None:
            raise captures.CaptureError("the worker's registration names no project")
        return project.name

    async def _report(self, captured: captures.Captured, *, final: bool, wait: bool) -> None:
        if not self._control_addr or not self._credential:
            return
        if final:
            await self._reports.final(captured)
        else:
            await self._reports.report(captured, wait=wait)

    async def _send_report(self, captured: captures.Captured, final: bool) -> None:
        assert self._control_addr is not None and self._credential is not None
        await reporting.send_capture_report(
            self._control_addr,
            self._credential,
            self._retry,
            self._launch.scope.execution_id,
            captured,
            final=final,
        )
