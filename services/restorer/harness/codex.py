"""Codex: rollout files, the session index, version, resume and opening prompt.

Assumptions (Codex CLI 0.162, default `CODEX_HOME` of `~/.codex`; checked against public
descriptions of its on-disk layout, not against its source):

- A session is one rollout file `~/.codex/sessions/YYYY/MM/DD/rollout-<timestamp>-<id>.jsonl`
  (timestamp `YYYY-MM-DDThh-mm-ss`), one JSON record per line; the first record is
  `{"type": "session_meta", "payload": {"id": …, "cwd": …, …}}`. The dated folder is the
  session's start date, not anything about the cwd, so a rollout is restored at the same
  relative path. `codex resume <id>` finds the rollout by the id in its file name.
- `~/.codex/session_index.jsonl` is an append-only index, one JSON object per line (`id`,
  `thread_name`, `updated_at`; the newest line for an id wins). A capture carries the
  session's own index lines (as the file `.codex/session_index.jsonl`) so its thread name
  survives. A restore rewrites the index: every other session's line is kept as it was, and
  the restored session gets exactly one line, last, with its earlier keys plus `path` (the
  restored rollout, relative to `.codex`), `cwd` (the replacement's) and a new `updated_at`,
  so the index and the rollout files agree. Rollout bytes are restored verbatim (their hashes
  are what the checkpoint verified); the cwd recorded inside stays the captured one.
- Codex versions that keep thread metadata in a SQLite state database rebuild it from rollout
  files; it is not captured.
- `codex --version` prints `codex-cli 0.162.0`.
- The original command is the interactive `codex [OPTIONS] [PROMPT]` or
  `codex [OPTIONS] exec [OPTIONS] [PROMPT]`; resume is `codex resume <id> [OPTIONS]` and
  `codex exec [OPTIONS] resume <id>` respectively. Other subcommands are refused.
- A prompt too long for one argument goes on standard input: `codex exec [OPTIONS] -` reads
  its prompt from stdin (`codex exec --help`: "If not provided as an argument (or if `-` is
  used), instructions are read from stdin"). The interactive `codex [PROMPT]` takes its
  prompt only as an argument, so it has no such way.
"""

from __future__ import annotations

import datetime
import json
import os
import pathlib
import re
from collections.abc import Sequence

from services.restorer import paths, transcripts
from services.restorer.harness import base

NAME = "codex"
QUALIFIED = "0.162"
EXECUTABLE = "codex"
INDEX_FILE = ".codex/session_index.jsonl"
_CODEX = ".codex"
_SESSIONS = "sessions"
_ROLLOUT = re.compile(r"rollout-(\d{4}-\d{2}-\d{2}T\d{2}-\d{2}-\d{2})-([A-Za-z0-9_-]+)\.jsonl")
_DATE_DIRS = (re.compile(r"\d{4}"), re.compile(r"\d{2}"), re.compile(r"\d{2}"))
_EXEC = frozenset({"exec", "e"})
_FIRST_LINE_LIMIT = 1 << 20

FLAGS = base.FlagTable(
    takes_value=frozenset(
        {
            "-c",
            "--config",
            "--enable",
            "--disable",
            "-m",
            "--model",
            "--local-provider",
            "-p",
            "--profile",
            "-s",
            "--sandbox",
            "-a",
            "--ask-for-approval",
            "-C",
            "--cd",
            "--add-dir",
            "--color",
            "-o",
            "--output-last-message",
            "--output-schema",
        }
    ),
    variadic=frozenset({"-i", "--image"}),
    dropped=frozenset({"--last"}),
)


def _rollout_segments(segments: tuple[str, ...]) -> str | None:
    """The session id when `segments` is `.codex/sessions/YYYY/MM/DD/rollout-…-ID.jsonl`."""
    if len(segments) != 6 or segments[:2] != (_CODEX, _SESSIONS):
        return None
    if not all(
        pattern.fullmatch(part) for pattern, part in zip(_DATE_DIRS, segments[2:5], strict=True)
    ):
        return None
    match = _ROLLOUT.fullmatch(segments[5])
    return match.group(2) if match else None


def _first_record(path: pathlib.Path) -> dict[str, object] | None:
    """The first JSON record of a rollout, read without following a symlink."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as handle:
        line = handle.readline(_FIRST_LINE_LIMIT)
    return base.load_json_object(line)


def _meta(record: dict[str, object] | None) -> dict[str, object]:
    """The session metadata of a first record (`session_meta` payload, or older bare form)."""
    if record is None:
        return {}
    payload = record.get("payload")
    if record.get("type") == "session_meta" and isinstance(payload, dict):
        return payload
    return record


def _index_lines(data: bytes) -> list[tuple[bytes, dict[str, object] | None]]:
    """Each non-empty index line with its parsed object (None when it does not parse)."""
    return [(line, base.load_json_object(line)) for line in data.split(b"\n") if line.strip()]


def _now() -> str:
    moment = datetime.datetime.now(datetime.UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


class Codex:
    """The Codex harness."""

    name = NAME
    qualified = QUALIFIED
    executable = EXECUTABLE

    def qualifies(self, version: str) -> bool:
        return base.version_qualifies(version, QUALIFIED)

    async def read_version(self, executable: str) -> str:
        return await base.run_version(executable)

    def _rollouts(self, home: pathlib.Path) -> list[tuple[pathlib.Path, str, str, str]]:
        """Every rollout file as (path, start timestamp, session id, path under the home)."""
        found: list[tuple[pathlib.Path, str, str, str]] = []
        home = pathlib.Path(home)
        try:
            root = base.home_path(home, f"{_CODEX}/{_SESSIONS}")
        except base.HarnessError:
            return found
        for path in root.glob("*/*/*/rollout-*.jsonl"):
            relative = (_CODEX, _SESSIONS, *path.relative_to(root).parts)
            session_id = _rollout_segments(relative)
            match = _ROLLOUT.fullmatch(path.name)
            if session_id is None or match is None or path.is_symlink() or not path.is_file():
                continue
            try:
                # A dated folder that is a symlink leading out of the home is not ours.
                base.home_path(home, "/".join(relative))
            except base.HarnessError:
                continue
            found.append((path, match.group(1), session_id, "/".join(relative)))
        return found

    def capture_session(
        self, home: pathlib.Path, cwd: pathlib.Path, session_id: str
    ) -> list[base.SessionFile]:
        """The session's newest rollout file and its own lines of the session index.

        Raises:
            HarnessError: the session id is not plain or no rollout names it.
        """
        base.check_session_id(session_id)
        home = pathlib.Path(home)
        matches = sorted(
            (stamp, relative, path)
            for path, stamp, sid, relative in self._rollouts(home)
            if sid == session_id
        )
        if not matches:
            raise base.HarnessError("harness: session not found")
        _, relative, rollout = matches[-1]
        try:
            data = paths.read_file_no_follow(rollout)
        except (FileNotFoundError, paths.UnsafePath):
            raise base.HarnessError("harness: session not found") from None
        files = [base.SessionFile(relative, data)]
        try:
            index = paths.read_file_no_follow(base.home_path(home, INDEX_FILE))
        except (base.HarnessError, FileNotFoundError, paths.UnsafePath):
            index = b""
        own = [
            line for line, entry in _index_lines(index) if entry and entry.get("id") == session_id
        ]
        if own:
            files.append(base.SessionFile(INDEX_FILE, b"".join(line + b"\n" for line in own)))
        return files

    def _layout(
        self, files: Sequence[base.SessionFile]
    ) -> tuple[str, base.SessionFile, dict[str, object]]:
        """(session id, the rollout, the session's captured index entry) or HarnessError."""
        rollout: tuple[str, base.SessionFile] | None = None
        entry: dict[str, object] = {}
        for item in files:
            segments = paths.check_relative(item.path)
            session_id = _rollout_segments(segments)
            if session_id is not None:
                if rollout is not None:
                    raise base.HarnessError("harness: session files hold more than one session")
                rollout = (base.check_session_id(session_id), item)
            elif item.path == INDEX_FILE:
                for _, parsed in _index_lines(item.data):
                    if parsed is not None:
                        entry = parsed
            else:
                raise base.HarnessError("harness: session files do not match the Codex layout")
        if rollout is None:
            raise base.HarnessError("harness: session files hold no session")
        session_id, item = rollout
        first = item.data.split(b"\n", 1)[0]
        recorded = _meta(base.load_json_object(first)).get("id")
        if recorded is not None and recorded != session_id:
            raise base.HarnessError("harness: rollout file names another session")
        if entry and entry.get("id") != session_id:
            raise base.HarnessError("harness: session index names another session")
        return session_id, item, entry

    def restore_session(
        self, home: pathlib.Path, cwd: pathlib.Path, files: Sequence[base.SessionFile]
    ) -> None:
        """Write the rollout at its captured path and make the index agree with it.

        Every path is checked before anything is written.

        Raises:
            HarnessError: the files do not form one Codex session, or the index is not a
                regular file.
            paths.UnsafePath: a path is unsafe or a symlink on the way leads out of the home.
        """
        home = pathlib.Path(home)
        session_id, rollout, captured_entry = self._layout(files)
        paths.safe_join(home, rollout.path)
        paths.safe_join(home, INDEX_FILE)
        try:
            existing = paths.read_file_no_follow(home / INDEX_FILE)
        except FileNotFoundError:
            existing = b""
        except paths.UnsafePath:
            raise base.HarnessError("harness: session index is not a regular file") from None
        kept = [
            line
            for line, parsed in _index_lines(existing)
            if not (parsed and parsed.get("id") == session_id)
        ]
        entry = {
            **captured_entry,
            "id": session_id,
            "path": rollout.path.removeprefix(f"{_CODEX}/"),
            "cwd": os.path.realpath(cwd),
            "updated_at": _now(),
        }
        line = json.dumps(entry, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
        base.write_home_file(home, rollout.path, rollout.data)
        base.write_home_file(home, INDEX_FILE, b"".join(item + b"\n" for item in [*kept, line]))

    def native_session_id(self, home: pathlib.Path, cwd: pathlib.Path) -> str | None:
        """The newest session whose rollout records `cwd` (or whose index line names it)."""
        want = os.path.realpath(cwd)
        newest: tuple[str, int, str] | None = None
        for path, stamp, session_id, _ in self._rollouts(pathlib.Path(home)):
            recorded = _meta(_first_record(path)).get("cwd")
            if not isinstance(recorded, str) or os.path.realpath(recorded) != want:
                continue
            candidate = (stamp, path.stat().st_mtime_ns, session_id)
            if newest is None or candidate > newest:
                newest = candidate
        if newest is not None:
            return newest[2]
        try:
            index = paths.read_file_no_follow(base.home_path(pathlib.Path(home), INDEX_FILE))
        except (base.HarnessError, FileNotFoundError, paths.UnsafePath):
            return None
        named = [
            entry["id"]
            for _, entry in _index_lines(index)
            if entry
            and isinstance(entry.get("id"), str)
            and isinstance(entry.get("cwd"), str)
            and os.path.realpath(str(entry["cwd"])) == want
        ]
        return str(named[-1]) if named else None

    def transcript_records(self, files: Sequence[base.SessionFile]) -> list[str]:
        """The records of the session's rollout file."""
        _, rollout, _ = self._layout(files)
        return transcripts.split_records(rollout.data)

    def _split(self, original_command: Sequence[str]) -> tuple[str, list[str], bool, list[str]]:
        """(executable, options before any subcommand, whether it is exec, exec's options)."""
        parsed = base.parse_command(original_command, FLAGS)
        before, first, rest = parsed.split_at_first_positional()
        if first in _EXEC:
            return parsed.executable, before, True, rest.options()
        if first is not None and first in _SUBCOMMANDS:
            raise base.HarnessError("harness: the original command runs another Codex subcommand")
        return parsed.executable, parsed.options(), False, []

    def resume_command(self, original_command: Sequence[str], session_id: str) -> list[str]:
        """`codex resume ID` (or `codex exec … resume ID`) with the original's options."""
        executable, options, is_exec, exec_options = self._split(original_command)
        session_id = base.check_session_id(session_id)
        if is_exec:
            return [executable, *options, "exec", *exec_options, "resume", session_id]
        return [executable, "resume", session_id, *options]

    def opening_prompt_command(self, original_command: Sequence[str], prompt: str) -> list[str]:
        """The original command with its own prompt replaced by `prompt`, the last argument."""
        executable, options, is_exec, exec_options = self._split(original_command)
        if is_exec:
            return [executable, *options, "exec", *exec_options, "--", prompt]
        return [executable, *options, "--", prompt]

    def stdin_prompt_command(self, original_command: Sequence[str]) -> list[str]:
        """`codex … exec … -`: the original exec command reading its prompt from stdin.

        Raises:
            HarnessError: the command is the interactive `codex`, or another subcommand.
        """
        executable, options, is_exec, exec_options = self._split(original_command)
        if not is_exec:
            raise base.HarnessError("harness: an interactive codex reads no prompt from stdin")
        return [executable, *options, "exec", *exec_options, "-"]

    def prepare_home(self, home: pathlib.Path) -> None:
        """Nothing to prepare: Codex needs no first-run marker."""


# Subcommands other than exec: a command running one of them has no conversation to resume.
_SUBCOMMANDS = frozenset(
    {
        "resume",
        "fork",
        "login",
        "logout",
        "mcp",
        "mcp-server",
        "app-server",
        "proto",
        "completion",
        "debug",
        "apply",
        "a",
        "cloud",
        "sandbox",
        "features",
        "help",
    }
)
