"""The restore's native step: the checkpoint's session files land in the harness home.

The checkpoint must be native (`context_only`), its session the directive's
(`conversation_mismatch`), the harness version qualified (`unqualified_version`) and equal to
the captured one (`version_changed`); only then do the session files land in the harness home.
Every native check runs before anything is written, and `restoring` runs this step before the
source step, so each of these refusals leaves the work tree and the harness home untouched.

The harness version is read early, while the Validator runs (`NativeStep.start_early`): it is
read from the launch record's executable, which a native restore reads anyway, and judged only
after the verdict.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Mapping
from typing import Any

from services.common.checkpoints import reasons
from services.restorer import launching, paths, restores
from services.restorer.harness import base as harness_base


class NativeStep:
    """The native step of one restore, and the harness version it reads early."""

    def __init__(self, launch: launching.LaunchRecord, attempt: restores.Attempt) -> None:
        self._launch = launch
        self._attempt = attempt
        self._version: asyncio.Future[str] | None = None

    def start_early(self) -> None:
        """Start reading the harness version (an unknown harness is refused in `restore`)."""
        if not self._launch.command:
            return
        try:
            adapter = self._attempt.harness(self._launch.harness)
        except ValueError:
            pass  # refused as an unknown harness in the native step
        else:
            self._version = asyncio.ensure_future(adapter.read_version(self._launch.command[0]))

    async def restore(
        self, record: Mapping[str, Any], session_id: str | None, item: restores.Fetch
    ) -> tuple[str, ...]:
        """Check the verified `record`'s native session against the directive's `session_id`
        and this worker's harness, write its files into the harness home, and return the
        command that resumes it; `item` reads a file's bytes.

        Raises:
            restores.Stop: a check refuses, or the files could not be written.
        """
        native = record.get("native")
        if record["continuity"] != "native" or native is None:
            raise restores.Stop(restores.Refusal.CONTEXT_ONLY)
        if native["native_session_id"] != session_id:
            raise restores.Stop(restores.Refusal.CONVERSATION_MISMATCH)
        adapter = restores.harness_of(self._launch, self._attempt)
        if native["harness"] != adapter.name:
            # Another harness's session cannot be reopened by this one: the replacement's
            # harness differs from the captured one (closest row: version_changed).
            raise restores.Stop(restores.Refusal.VERSION_CHANGED)
        try:
            version = await self._read_version(adapter)
        except harness_base.HarnessError:
            # A harness that cannot name its version is not a qualified one.
            raise restores.Stop(restores.Refusal.UNQUALIFIED_VERSION) from None
        if not adapter.qualifies(version):
            raise restores.Stop(restores.Refusal.UNQUALIFIED_VERSION)
        if version != native["harness_version"]:
            raise restores.Stop(restores.Refusal.VERSION_CHANGED)
        session_id = native["native_session_id"]
        try:
            command = adapter.resume_command(
                self._launch.command,
                session_id,
                self._launch.continuation_prompt or harness_base.DEFAULT_CONTINUATION_PROMPT,
            )
        except harness_base.HarnessError as error:
            raise restores.Stop(str(error)) from None
        files = [
            harness_base.SessionFile(entry["path"], await item(entry)) for entry in native["files"]
        ]
        try:
            for file in files:
                paths.check_relative(file.path)
        except paths.UnsafePath:
            # A path no harness home can hold (absolute, `..`): the record is at fault.
            raise restores.Stop(reasons.Reason.INVALID_RECORD) from None
        try:
            adapter.restore_session(self._attempt.harness_home, self._attempt.worktree, files)
        except harness_base.HarnessError:
            # The session files do not form one session of this harness: the record does not
            # hold a usable session (the adapter checks every path before writing any).
            raise restores.Stop(reasons.Reason.INVALID_RECORD) from None
        except paths.UnsafePath:
            # The record's paths are plain; this worker's harness home is what leads out (a
            # link in it): the checkpoint is fine, the home must be fixed.
            raise restores.Stop(restores.HOME_UNSAFE) from None
        except OSError:
            raise restores.Stop(restores.HOME_UNWRITABLE) from None
        return tuple(command)

    async def _read_version(self, adapter: harness_base.Harness) -> str:
        early, self._version = self._version, None
        if early is not None:
            return await early
        return await adapter.read_version(self._launch.command[0])

    async def close(self) -> None:
        """Stop a version read nobody used."""
        if self._version is not None:
            self._version.cancel()
            with contextlib.suppress(BaseException):
                await self._version
            self._version = None
