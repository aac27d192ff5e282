"""The harness port: what the restorer needs from an agent CLI (Claude Code, Codex).

A harness knows where its native session files live in the harness home, how to read its
version, whether that version is qualified for native resume (spec: "Native resume is qualified
for Claude Code 2.1 and Codex 0.162", plus the versions an operator qualified and named in
`AGENTIHOOKS_QUALIFIED_VERSIONS`), its native resume command and how to pass an opening
prompt. `home` is the worker user's home directory (the harness's `~`); session file paths are
relative POSIX paths under it, such as `.claude/projects/-work-app/<id>.jsonl`.

The port's helpers live beside it: `versions` (reading and qualifying a version), `homes`
(session ids and files under the harness home) and `commands` (parsing a command line to
rewrite it). Errors never carry session content or paths.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import pathlib
from collections.abc import Sequence
from typing import Protocol

from services.common import logs
from services.common import qualified_versions as qualified_versions_setting


class HarnessError(Exception):
    """A harness operation that failed. The message names the cause, never content or paths."""


@dataclasses.dataclass(frozen=True)
class SessionFile:
    """One native session file: its path relative to the harness home and its bytes."""

    path: str
    data: bytes = dataclasses.field(repr=False)

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.data).hexdigest()

    @property
    def size(self) -> int:
        return len(self.data)


class Harness(Protocol):
    """An agent CLI whose conversations the restorer captures and reopens."""

    @property
    def name(self) -> str:
        """`claude_code` or `codex`, as checkpoint records name the harness."""
        ...

    @property
    def qualified(self) -> str:
        """The version prefix the spec qualifies for native resume, e.g. `2.1`."""
        ...

    @property
    def qualified_versions(self) -> tuple[str, ...]:
        """Every qualified version prefix: the spec's, then those the operator's
        `AGENTIHOOKS_QUALIFIED_VERSIONS` adds for this harness."""
        ...

    @property
    def executable(self) -> str:
        """The executable's usual name on PATH (`claude`, `codex`)."""
        ...

    def qualifies(self, version: str) -> bool:
        """Whether `version` lies under one of `qualified_versions` (numeric components
        compared)."""
        ...

    async def read_version(self, executable: str) -> str:
        """Run `EXECUTABLE --version` and return the version it reports, e.g. `2.1.3`."""
        ...

    def capture_session(
        self, home: pathlib.Path, cwd: pathlib.Path, session_id: str
    ) -> list[SessionFile]:
        """The native session files of one session started from `cwd`."""
        ...

    def restore_session(
        self, home: pathlib.Path, cwd: pathlib.Path, files: Sequence[SessionFile]
    ) -> None:
        """Write captured files where the harness looks for them when run from `cwd`."""
        ...

    def native_session_id(self, home: pathlib.Path, cwd: pathlib.Path) -> str | None:
        """The newest session started from `cwd`, or None."""
        ...

    def transcript_records(self, files: Sequence[SessionFile]) -> list[str]:
        """The conversation records of a captured session, split on `\\n` only."""
        ...

    def resume_command(
        self, original_command: Sequence[str], session_id: str, prompt: str
    ) -> list[str]:
        """The native resume command derived from the original harness command.

        `prompt` is the continuation prompt the resumed conversation continues with: the real
        CLIs refuse to resume without a terminal unless they are given one, and an interactive
        session given one continues on its own instead of waiting for a person.
        """
        ...

    def opening_prompt_command(self, original_command: Sequence[str], prompt: str) -> list[str]:
        """The original harness command with `prompt` as its opening prompt."""
        ...

    def stdin_prompt_command(self, original_command: Sequence[str]) -> list[str]:
        """The original harness command reading its opening prompt from standard input.

        Raises:
            HarnessError: this form of the command reads no prompt from standard input (an
                interactive session needs its terminal there).
        """
        ...

    def prepare_home(self, home: pathlib.Path, cwd: pathlib.Path) -> None:
        """Make the harness home ready for an unattended turn in `cwd`: no first-run screen,
        no workspace trust question, no working-directory picker."""
        ...


# --- continuation and opening prompts ---

DEFAULT_CONTINUATION_PROMPT = (
    "This conversation was restored after the worker running it failed. Continue the task "
    "from where the conversation ends."
)
"""What a natively resumed conversation continues with when the swarm sets no prompt."""


def check_prompt(prompt: str) -> str:
    """A continuation prompt that one process argument can carry.

    Raises:
        HarnessError: the prompt is empty or too long for one argument.
    """
    if not prompt or not fits_argument(prompt):
        raise HarnessError("harness: the continuation prompt is empty or too long")
    return prompt


# --- opening prompts -----------------------------------------------------------------------

MAX_ARGUMENT_BYTES = 128 * 1024
"""Linux's limit on one process argument (MAX_ARG_STRLEN), its terminating NUL included."""


def fits_argument(word: str) -> bool:
    """Whether `execve` accepts `word` as one argument (its UTF-8 bytes and a NUL)."""
    return len(word.encode("utf-8")) < MAX_ARGUMENT_BYTES


@dataclasses.dataclass(frozen=True)
class Opening:
    """How the harness gets its opening prompt: `command`, and whether the prompt comes on
    standard input (the supervisor then opens the prompt's file as the command's stdin)."""

    command: tuple[str, ...] = dataclasses.field(repr=False)
    on_stdin: bool


def opening(harness: Harness, original_command: Sequence[str], prompt: str) -> Opening:
    """The command that opens with `prompt`: as its last argument when one argument can carry
    it, else on standard input.

    Raises:
        HarnessError: the original command is not one the harness runs, or the prompt is too
            long for an argument and this form of the command reads none from stdin.
    """
    if fits_argument(prompt):
        return Opening(tuple(harness.opening_prompt_command(original_command, prompt)), False)
    return Opening(tuple(harness.stdin_prompt_command(original_command)), True)


class UnqualifiedWarning:
    """Says once that captures are context only because the harness version is unqualified.

    Without it an upgraded CLI would silently turn native resume off. One warning per
    (harness, version) for the life of this object (one capturer: one attempt), so a capture
    every few seconds does not repeat it; it names the harness, the version and the setting
    that qualifies it, and nothing of the conversation.
    """

    EVENT = "harness_version_unqualified"

    def __init__(self) -> None:
        self._said: set[tuple[str, str]] = set()

    def warn(self, logger: logging.Logger, harness: Harness, version: str) -> None:
        """Log the warning for `harness` at `version` ("" when it could not be read), once."""
        key = (harness.name, version)
        if key in self._said:
            return
        self._said.add(key)
        logs.event(
            logger,
            self.EVENT,
            logging.WARNING,
            harness=harness.name,
            version=version or "unknown",
            qualified=list(harness.qualified_versions),
            continuity="context_only",
            remedy=(
                "qualify this version with `agentihooks-restorer qualify` and name it in"
                f" {qualified_versions_setting.VARIABLE}"
            ),
        )
