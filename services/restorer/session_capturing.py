"""Reading the attempt's native session for a capture: the session files through the harness
adapter, cut after their last complete record, and the transcript records they hold.

A checkpoint is native only when it "carries a qualified native session": with a harness
version not qualified for native resume the session is captured as context only. The harness
version is read once per reader (the attempt's harness does not change).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from services.common.checkpoints import records
from services.restorer import launching, restores, transcripts, whole_records
from services.restorer.harness import base as harness_base

log = logging.getLogger("services.restorer")

Native = whole_records.Native | None


class SessionReader:
    """Reads one attempt's native session, capture after capture.

    Args:
        launch: the attempt's launch record (its command names the harness executable).
        attempt: the worktree and the harness home.
    """

    def __init__(self, launch: launching.LaunchRecord, attempt: restores.Attempt) -> None:
        self._launch = launch
        self._attempt = attempt
        self._harness_version: str | None = None
        self._unqualified = harness_base.UnqualifiedWarning()

    async def read(self, adapter: harness_base.Harness) -> tuple[str | None, Native, list[str]]:
        """The session held, the qualified native session (or None), the complete records."""
        home, worktree = self._attempt.harness_home, self._attempt.worktree
        session_id = adapter.native_session_id(home, worktree)
        if session_id is None:
            return None, None, []
        try:
            files = _complete(adapter.capture_session(home, worktree, session_id))
            conversation = adapter.transcript_records(files)
        except (harness_base.HarnessError, transcripts.TranscriptError):
            return None, None, []
        version = self._harness_version
        if version is None:
            try:
                version = await adapter.read_version(self._launch.command[0])
            except harness_base.HarnessError:
                version = ""
            else:
                self._harness_version = version  # the attempt's harness does not change
        if not version or not adapter.qualifies(version):
            self._unqualified.warn(log, adapter, version)
            return session_id, None, conversation
        placed = [(records.NativeFile(f.path, records.Blob.of(f.data)), f.data) for f in files]
        native = records.Native(
            harness=adapter.name,
            harness_version=version,
            native_session_id=session_id,
            files=tuple(nf for nf, _ in placed),
        )
        return session_id, (native, placed), conversation


def _complete(files: Sequence[harness_base.SessionFile]) -> list[harness_base.SessionFile]:
    """Session files cut after their last newline: a record still being written waits."""
    out = []
    for item in files:
        data = item.data
        if item.path.endswith(".jsonl") and not data.endswith(b"\n"):
            data = data[: data.rfind(b"\n") + 1]
        out.append(harness_base.SessionFile(item.path, data))
    return out
