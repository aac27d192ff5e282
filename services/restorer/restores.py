"""What a restore is given and what it answers: the attempt it writes into, the steps it
reports, its outcome (Ready or Refused) and the restorer's own refusal reasons.

The restore itself is `restoring.restore`; its native and source steps are `native_restoring`
and `source_restoring`. Each step ends the restore by raising `Stop` with a reason of the
spec's table (or one said to be its closest row).
"""

from __future__ import annotations

import dataclasses
import enum
import pathlib
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from services.common import directives
from services.restorer import harness, launching
from services.restorer.harness import base as harness_base

Continuity = directives.Continuity


class Refusal(enum.StrEnum):
    """The restorer's own refusal reasons (the Validator's verdicts are `reasons.Reason`)."""

    CONTEXT_ONLY = "context_only"
    CONVERSATION_MISMATCH = "conversation_mismatch"
    UNQUALIFIED_VERSION = "unqualified_version"
    VERSION_CHANGED = "version_changed"
    NO_STORE = "no checkpoint store is configured for this worker"
    # Not in the spec's table: the store could not be read at all (down, grant revoked). It
    # says nothing about the checkpoint, so no table reason would be true.
    STORE_UNAVAILABLE = "checkpoint store unavailable"


NO_ORIGIN = "none:"
"""The repository a capture records when the worktree has no origin and the project names
none; its bundle then holds the full history, so a restore initialises instead of cloning."""

TOO_LONG = "continuation: the opening prompt is longer than one process argument can carry"
HOME_UNSAFE = "harness: a link in the harness home leads out of it"
"""Not in the spec's table: the checkpoint is valid, this worker's harness home is not."""
HOME_UNWRITABLE = "harness: the session files could not be written into the harness home"

STEPS = ("directive", "verify", "registration", "native", "source", "continuation")


@dataclasses.dataclass(frozen=True)
class Step:
    """One step's progress: `started`, `done` or `skipped`."""

    step: str
    status: str


@dataclasses.dataclass(frozen=True)
class Ready:
    """The restore delivered its directive; `command` is what the supervisor runs in `cwd`.

    `stdin_path`, when set, is the file the supervisor opens as the command's standard input:
    `continuation.txt`, for an opening prompt longer than one argument can carry.
    """

    recovery: Continuity
    command: tuple[str, ...] = dataclasses.field(repr=False)
    checkpoint_id: str | None
    session_id: str | None
    watermark: int | None
    cwd: str
    stdin_path: str | None = None


@dataclasses.dataclass(frozen=True)
class Refused:
    """The restore stopped the launch; `reason` is a reason of the spec's table."""

    reason: str


Event = Step | Ready | Refused


@dataclasses.dataclass(frozen=True)
class Attempt:
    """Where this attempt's restore writes.

    `harness_env` holds the worker's variables that move the harness's files
    (`CLAUDE_CONFIG_DIR`, `CODEX_HOME`; see `harness.ENVIRONMENT`), empty when it sets none.
    """

    worktree: pathlib.Path
    attempt_dir: pathlib.Path
    harness_home: pathlib.Path
    harness_env: Mapping[str, str] = dataclasses.field(default_factory=dict)

    def harness(self, name: str) -> harness_base.Harness:
        """The adapter of harness `name` for this attempt's environment.

        Raises:
            ValueError: no harness has that name.
        """
        return harness.for_name(name, self.harness_env)


class Stop(Exception):
    """Ends the restore: `restoring.restore` answers `Refused(reason)`."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


Fetch = Callable[[Mapping[str, Any]], Awaitable[bytes]]
"""The bytes of an object (or a chained item) a record names by sha256 and size, hashed as
they are read; raises `Stop` when they cannot be had."""


def harness_of(launch: launching.LaunchRecord, attempt: Attempt) -> harness_base.Harness:
    """The adapter of the launch record's harness; an unknown harness stops the restore."""
    try:
        return attempt.harness(launch.harness)
    except ValueError:
        raise Stop(f"{launching.MALFORMED_RECORD}: unknown harness") from None
