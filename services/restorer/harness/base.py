"""The harness port: what the restorer needs from an agent CLI (Claude Code, Codex).

A harness knows where its native session files live in the harness home, how to read its
version, whether that version is qualified for native resume (spec: "Native resume is qualified
for Claude Code 2.1 and Codex 0.162", plus the versions an operator qualified and named in
`AGENTIHOOKS_QUALIFIED_VERSIONS`), its native resume command and how to pass an opening
prompt. `home` is the worker user's home directory (the harness's `~`); session file paths are
relative POSIX paths under it, such as `.claude/projects/-work-app/<id>.jsonl`.

Errors never carry session content or paths.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hashlib
import json
import logging
import os
import pathlib
import re
import stat
from collections.abc import Mapping, Sequence
from typing import Protocol

from services.common import logs
from services.common import qualified_versions as qualified_versions_setting
from services.restorer import paths

VERSION_TIMEOUT_S = 30.0
SESSION_FILE_MODE = 0o600
SESSION_DIR_MODE = 0o700

_SESSION_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
_VERSION_TOKEN = re.compile(r"v?(\d+(?:\.\d+)+(?:[-+][0-9A-Za-z.+-]*)?)")
_LEADING_NUMBERS = re.compile(r"\d+(?:\.\d+)*")


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


# --- versions ------------------------------------------------------------------------------


def parse_version(output: str) -> str:
    """The first dotted version token of a `--version` output.

    `2.1.3 (Claude Code)` gives `2.1.3`; `codex-cli 0.162.0` gives `0.162.0`; a pre-release
    suffix stays (`2.1.0-beta.1`).

    Raises:
        HarnessError: no version token in the output.
    """
    for token in output.split():
        match = _VERSION_TOKEN.fullmatch(token)
        if match:
            return match.group(1)
    raise HarnessError("harness: version not recognised")


def version_components(version: str) -> tuple[int, ...]:
    """The leading numeric components of a version: `2.10.3-rc1` gives (2, 10, 3)."""
    match = _LEADING_NUMBERS.match(version.strip().removeprefix("v"))
    if not match:
        return ()
    return tuple(int(part) for part in match.group(0).split("."))


def version_qualifies(version: str, prefix: str) -> bool:
    """Whether `version` lies under `prefix`, component by component.

    `2.1.3` lies under `2.1`; `2.10.0`, `2.2.0`, `2` and `21.1` do not.
    """
    want = version_components(prefix)
    have = version_components(version)
    return bool(want) and len(have) >= len(want) and have[: len(want)] == want


def qualified_versions(name: str, spec_prefix: str, environ: Mapping[str, str]) -> tuple[str, ...]:
    """The spec's prefix of harness `name`, then those `AGENTIHOOKS_QUALIFIED_VERSIONS` in
    `environ` adds for it.

    A malformed setting adds nothing: the settings loader refuses one at start, and a version
    is never taken as qualified on a value nobody could read.
    """
    try:
        added = qualified_versions_setting.added_for(environ, name)
    except qualified_versions_setting.MalformedVersions:
        added = ()
    return tuple(dict.fromkeys((spec_prefix, *added)))


def qualifies_any(version: str, prefixes: Sequence[str]) -> bool:
    """Whether `version` lies under any of `prefixes` (see `version_qualifies`)."""
    return any(version_qualifies(version, prefix) for prefix in prefixes)


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


async def run_version(executable: str) -> str:
    """Run `EXECUTABLE --version` and parse what it prints.

    Raises:
        HarnessError: the executable is missing, fails, hangs or prints no version.
    """
    try:
        process = await asyncio.create_subprocess_exec(
            executable,
            "--version",
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
    except OSError:
        raise HarnessError("harness: executable not found") from None
    try:
        async with asyncio.timeout(VERSION_TIMEOUT_S):
            stdout, _ = await process.communicate()
    except TimeoutError:
        process.kill()
        await process.wait()
        raise HarnessError("harness: version command timed out") from None
    except asyncio.CancelledError:
        # A restore refused while the version was still being read leaves no process behind.
        with contextlib.suppress(ProcessLookupError):
            process.kill()
        await process.wait()
        raise
    if process.returncode != 0:
        raise HarnessError("harness: version command failed")
    return parse_version(stdout.decode("utf-8", errors="replace"))


# --- session ids, files and ownership ------------------------------------------------------


def check_session_id(session_id: str) -> str:
    """A session id safe to use in a file name and as an argument.

    The checkpoint schema's identifier: a letter or digit, then letters, digits, `.`, `_`, `-`
    (so never `.`, `..` or an option), at most 128 characters.

    Raises:
        HarnessError: anything else (a slash, a leading `-` or `.`, empty, too long).
    """
    if not isinstance(session_id, str) or not _SESSION_ID.fullmatch(session_id):
        raise HarnessError("harness: session id is not a plain identifier")
    return session_id


def home_owner(home: pathlib.Path) -> tuple[int, int] | None:
    """The owner files written into `home` should get: the home's own, when running as root.

    A restorer running as root writes into the worker user's home; files it leaves owned by
    root with mode 0600 would be unreadable to the harness.
    """
    if os.geteuid() != 0:
        return None
    info = os.stat(home)
    return (info.st_uid, info.st_gid)


def write_home_file(home: pathlib.Path, relative: str, data: bytes) -> pathlib.Path:
    """Write one file under the harness home: mode 0600, dirs 0700, no symlink followed."""
    return paths.write_file_no_follow(
        home,
        relative,
        data,
        SESSION_FILE_MODE,
        dir_mode=SESSION_DIR_MODE,
        owner=home_owner(home),
    )


def home_path(home: pathlib.Path, relative: str) -> pathlib.Path:
    """A path under the harness home that no symlink leads out of (for reading as well).

    Raises:
        HarnessError: the path is unsafe or a symlink on the way leads outside the home.
    """
    try:
        return paths.safe_join(home, relative)
    except paths.UnsafePath:
        raise HarnessError("harness: session files lead outside the harness home") from None


def read_tree(root: pathlib.Path) -> list[tuple[str, bytes]]:
    """Every regular file below `root` as (relative POSIX path, bytes).

    Symlinks are not followed and are left out, as are names a record path cannot carry.
    """
    found: list[tuple[str, bytes]] = []
    if not root.is_dir() or root.is_symlink():
        return found
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        dirnames.sort()
        for filename in sorted(filenames):
            full = pathlib.Path(dirpath) / filename
            relative = full.relative_to(root).as_posix()
            try:
                paths.check_relative(relative)
            except paths.UnsafePath:
                continue
            if stat.S_ISREG(full.lstat().st_mode):
                found.append((relative, paths.read_file_no_follow(full)))
    return found


# --- command lines -------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class FlagTable:
    """How a CLI's options consume the tokens after them.

    `takes_value`: exactly one following token; `variadic`: every following token up to the
    next one starting with `-`; `optional_value`: the next token unless it starts with `-`.
    `dropped`: options removed when the command is rewritten (with the values they consume).
    """

    takes_value: frozenset[str]
    variadic: frozenset[str] = frozenset()
    optional_value: frozenset[str] = frozenset()
    dropped: frozenset[str] = frozenset()


@dataclasses.dataclass(frozen=True)
class Token:
    """One option with the values it consumed, or one positional argument."""

    words: tuple[str, ...]
    option: bool


@dataclasses.dataclass(frozen=True)
class ParsedCommand:
    """An original command split into its executable and its tokens, in order."""

    executable: str
    tokens: tuple[Token, ...]

    def options(self) -> list[str]:
        """Every kept option with its values, in order."""
        return [word for token in self.tokens if token.option for word in token.words]

    def positionals(self) -> list[str]:
        """Every positional argument, in order."""
        return [token.words[0] for token in self.tokens if not token.option]

    def split_at_first_positional(self) -> tuple[list[str], str | None, ParsedCommand]:
        """(options before the first positional, that positional, the rest as a command)."""
        for index, token in enumerate(self.tokens):
            if not token.option:
                before = [w for t in self.tokens[:index] for w in t.words]
                rest = ParsedCommand(self.executable, self.tokens[index + 1 :])
                return before, token.words[0], rest
        return self.options(), None, ParsedCommand(self.executable, ())


def parse_command(command: Sequence[str], table: FlagTable) -> ParsedCommand:
    """Split a command line into its executable and tokens (options with values, positionals).

    `--name=value` and attached short values (`-mgpt`) are one word. Every word after `--` is
    positional. Options in `table.dropped` are removed with their values.

    Raises:
        HarnessError: the command is empty.
    """
    if not command:
        raise HarnessError("harness: the original command is empty")
    executable, words = command[0], list(command[1:])
    tokens: list[Token] = []
    index = 0
    while index < len(words):
        word = words[index]
        index += 1
        if word == "--":
            tokens.extend(Token((rest,), option=False) for rest in words[index:])
            break
        if not word.startswith("-") or word == "-":
            tokens.append(Token((word,), option=False))
            continue
        name = word.split("=", 1)[0]
        group = [word]
        if "=" not in word:
            if name in table.takes_value and index < len(words):
                group.append(words[index])
                index += 1
            elif name in table.variadic:
                while index < len(words) and not words[index].startswith("-"):
                    group.append(words[index])
                    index += 1
            elif (
                name in table.optional_value
                and index < len(words)
                and not words[index].startswith("-")
            ):
                group.append(words[index])
                index += 1
        if name not in table.dropped:
            tokens.append(Token(tuple(group), option=True))
    return ParsedCommand(executable, tuple(tokens))


# --- where a harness keeps its files --------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class ConfigHome:
    """Where a harness keeps its files: `root` (the folder paths are checked against) and
    `prefix`, the path below it of what records call the harness's own folder.

    Records always name session files as they lie under the default location (`.claude/…`,
    `.codex/…`), so a checkpoint restores the same wherever either Pod keeps its config:
    `physical` maps such a path to where this environment keeps it.
    """

    root: pathlib.Path
    prefix: str
    logical: str

    def physical(self, logical_path: str) -> str:
        """The path under `root` of a path records name under the default location."""
        below = logical_path.removeprefix(self.logical).lstrip("/")
        return "/".join(part for part in (self.prefix, below) if part)

    def path(self, logical_path: str) -> pathlib.Path:
        """A path under `root` that no symlink leads out of (see `home_path`)."""
        return home_path(self.root, self.physical(logical_path))

    def ensure_root(self, home: pathlib.Path) -> None:
        """Create `root` (mode 0700, the home's owner) when the variable names a new folder."""
        if self.root.is_dir():
            return
        self.root.mkdir(mode=SESSION_DIR_MODE, parents=True, exist_ok=True)
        owner = home_owner(home) if home.is_dir() else None
        if owner is not None:
            os.chown(self.root, *owner)


def config_home(
    home: pathlib.Path, environ: Mapping[str, str], variable: str, default: str
) -> ConfigHome:
    """The harness's folder: `$VARIABLE` when set, else `home/default`.

    Raises:
        HarnessError: the variable holds a relative path (the harness would resolve it against
            whatever folder it runs in).
    """
    value = environ.get(variable, "")
    if not value:
        return ConfigHome(pathlib.Path(home), default, default)
    if not os.path.isabs(value):
        raise HarnessError(f"harness: {variable} is not an absolute path")
    return ConfigHome(pathlib.Path(value), "", default)


def load_json_object(data: bytes) -> dict[str, object] | None:
    """A JSON object from bytes, or None when the bytes are not one."""
    try:
        value = json.loads(data)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None
