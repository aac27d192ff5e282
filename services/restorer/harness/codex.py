"""Codex: rollout files, the session index, version, resume and opening prompt.

Checked against the real published CLI (0.162.0 and 0.162.1, and 0.171.0, qualified where
`AGENTIHOOKS_QUALIFIED_VERSIONS` names it; run by the tests against a loopback mock of the
Responses API; `make qualify` re-checks other versions):

- A session is one rollout file `~/.codex/sessions/YYYY/MM/DD/rollout-<timestamp>-<id>.jsonl`
  (timestamp `YYYY-MM-DDThh-mm-ss`), one JSON record per line; the first record is
  `{"type": "session_meta", "payload": {"id": …, "cwd": …, …}}`. The dated folder is the
  session's start date, not anything about the cwd, so a rollout is restored at the same
  relative path. `codex resume <id>` finds the rollout by the id in its file name.
- Codex 0.162 compresses idle rollouts in the background to `rollout-…-<id>.jsonl.zst` and
  reads them back on resume; such a file is captured and restored as it is, and its records
  are read decompressed (bounded, so a decompression bomb is refused).
- With `CODEX_HOME` set, everything lives there instead of `~/.codex`; records always name
  files as under `.codex/`, so a checkpoint restores into whichever folder the replacement
  uses.
- `~/.codex/session_index.jsonl` is an append-only index some versions keep, one JSON object
  per line (`id`, `thread_name`, `updated_at`; the newest line for an id wins). A capture
  carries the session's own index lines so its thread name survives. A restore rewrites the
  index: every other session's line is kept as it was, and the restored session gets exactly
  one line, last, with its earlier keys plus `path` (the restored rollout, relative to
  `.codex`), `cwd` (the replacement's) and a new `updated_at`. Rollout bytes are restored
  verbatim (their hashes are what the checkpoint verified). The SQLite state and thread
  history databases are rebuilt by Codex from rollout files; they are not captured.
- A resume needs a prompt: `codex exec resume ID` alone reads one from stdin and exits 1 ("No
  prompt provided via stdin."). The resume command therefore ends with `-- PROMPT`, the
  swarm's continuation prompt; an interactive `codex resume ID -- PROMPT` continues on its
  own.
- An interactive resume asks which working directory to use when the session's recorded one
  differs, unless `[tui] resume_cwd = "current"` is in config.toml, and asks to trust a git
  repository unless `[projects."<path>"] trust_level = "trusted"`; `prepare_home` sets both.
- `codex --version` prints `codex-cli 0.162.0`.
- The original command is the interactive `codex [OPTIONS] [PROMPT]` or
  `codex [OPTIONS] exec [OPTIONS] [PROMPT]`; resume is `codex resume <id> [OPTIONS]` and
  `codex exec [OPTIONS] resume <id>` respectively. Other subcommands are refused.
- A prompt too long for one argument goes on standard input: `codex exec [OPTIONS] -` reads
  its prompt from stdin. The interactive `codex [PROMPT]` takes its prompt only as an
  argument, so it has no such way.
"""

from __future__ import annotations

import json
import os
import pathlib
import stat
import tomllib
from collections.abc import Mapping, Sequence
from typing import Any

import tomli_w

from services.restorer import paths, transcripts
from services.restorer.harness import base, codex_flags, codex_rollouts, commands, homes, versions

NAME = "codex"
HOME_VARIABLE = "CODEX_HOME"
CONFIG_TOML = ".codex/config.toml"
QUALIFIED = "0.162"
EXECUTABLE = "codex"
INDEX_FILE = ".codex/session_index.jsonl"


class Codex:
    """The Codex harness.

    Args:
        environ: the worker's environment, for `CODEX_HOME` (the process's own when None).
            With it set, Codex keeps its sessions, index and config.toml there instead of in
            `~/.codex`. Its `AGENTIHOOKS_QUALIFIED_VERSIONS` adds qualified versions.
    """

    name = NAME
    qualified = QUALIFIED
    executable = EXECUTABLE

    def __init__(self, environ: Mapping[str, str] | None = None) -> None:
        self._environ: Mapping[str, str] = os.environ if environ is None else dict(environ)
        self.qualified_versions = versions.qualified_versions(NAME, QUALIFIED, self._environ)

    def _config(self, home: pathlib.Path) -> homes.ConfigHome:
        return homes.config_home(
            pathlib.Path(home), self._environ, HOME_VARIABLE, codex_rollouts.CODEX
        )

    def qualifies(self, version: str) -> bool:
        return versions.qualifies_any(version, self.qualified_versions)

    async def read_version(self, executable: str) -> str:
        return await versions.run_version(executable)

    def _rollouts(self, home: pathlib.Path) -> list[tuple[pathlib.Path, str, str, str]]:
        """Every rollout file as (path, start timestamp, session id, path as records name it)."""
        found: list[tuple[pathlib.Path, str, str, str]] = []
        try:
            config = self._config(home)
            root = config.path(f"{codex_rollouts.CODEX}/{codex_rollouts.SESSIONS}")
        except base.HarnessError:
            return found
        for path in root.glob("*/*/*/rollout-*.jsonl*"):
            relative = (
                codex_rollouts.CODEX,
                codex_rollouts.SESSIONS,
                *path.relative_to(root).parts,
            )
            session_id = codex_rollouts.rollout_segments(relative)
            match = codex_rollouts.ROLLOUT.fullmatch(path.name)
            if session_id is None or match is None or path.is_symlink() or not path.is_file():
                continue
            try:
                # A dated folder that is a symlink leading out of the home is not ours.
                config.path("/".join(relative))
            except base.HarnessError:
                continue
            found.append((path, match.group(1), session_id, "/".join(relative)))
        return found

    def _read_index(self, home: pathlib.Path) -> bytes:
        try:
            return paths.read_file_no_follow(self._config(home).path(INDEX_FILE))
        except (base.HarnessError, FileNotFoundError, NotADirectoryError, paths.UnsafePath):
            return b""

    def capture_session(
        self, home: pathlib.Path, cwd: pathlib.Path, session_id: str
    ) -> list[base.SessionFile]:
        """The session's newest rollout file (as Codex left it: plain, or compressed to
        `.jsonl.zst`) and its own lines of the session index.

        Raises:
            HarnessError: the session id is not plain or no rollout names it.
        """
        homes.check_session_id(session_id)
        matches = sorted(
            (stamp, not relative.endswith(codex_rollouts.COMPRESSED), relative, path)
            for path, stamp, sid, relative in self._rollouts(home)
            if sid == session_id
        )
        if not matches:
            raise base.HarnessError("harness: session not found")
        # The newest rollout; of one rollout in both forms, the plain one Codex writes to.
        _, _, relative, rollout = matches[-1]
        try:
            data = paths.read_file_no_follow(rollout)
        except (FileNotFoundError, paths.UnsafePath):
            raise base.HarnessError("harness: session not found") from None
        files = [base.SessionFile(relative, data)]
        own = [
            line
            for line, entry in codex_rollouts.index_lines(self._read_index(home))
            if entry and entry.get("id") == session_id
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
            session_id = codex_rollouts.rollout_segments(segments)
            if session_id is not None:
                if rollout is not None:
                    raise base.HarnessError("harness: session files hold more than one session")
                rollout = (homes.check_session_id(session_id), item)
            elif item.path == INDEX_FILE:
                for _, parsed in codex_rollouts.index_lines(item.data):
                    if parsed is not None:
                        entry = parsed
            else:
                raise base.HarnessError("harness: session files do not match the Codex layout")
        if rollout is None:
            raise base.HarnessError("harness: session files hold no session")
        session_id, item = rollout
        first = codex_rollouts.expand(item).split(b"\n", 1)[0]
        recorded = codex_rollouts.meta(homes.load_json_object(first)).get("id")
        if recorded is not None and recorded != session_id:
            raise base.HarnessError("harness: rollout file names another session")
        if entry and entry.get("id") != session_id:
            raise base.HarnessError("harness: session index names another session")
        return session_id, item, entry

    def restore_session(
        self, home: pathlib.Path, cwd: pathlib.Path, files: Sequence[base.SessionFile]
    ) -> None:
        """Write the rollout at its captured path (under `CODEX_HOME` when set) and make the
        index agree with it.

        Every path is checked before anything is written.

        Raises:
            HarnessError: the files do not form one Codex session, or the index is not a
                regular file.
            paths.UnsafePath: a path is unsafe or a symlink on the way leads out of the home.
        """
        home = pathlib.Path(home)
        config = self._config(home)
        session_id, rollout, captured_entry = self._layout(files)
        rollout_path = config.physical(rollout.path)
        index_path = config.physical(INDEX_FILE)
        paths.safe_join(config.root, rollout_path)
        paths.safe_join(config.root, index_path)
        try:
            existing = paths.read_file_no_follow(config.root / index_path)
        except (FileNotFoundError, NotADirectoryError):
            existing = b""
        except paths.UnsafePath:
            raise base.HarnessError("harness: session index is not a regular file") from None
        kept = [
            line
            for line, parsed in codex_rollouts.index_lines(existing)
            if not (parsed and parsed.get("id") == session_id)
        ]
        entry = {
            **captured_entry,
            "id": session_id,
            "path": rollout.path.removeprefix(f"{codex_rollouts.CODEX}/"),
            "cwd": os.path.realpath(cwd),
            "updated_at": codex_rollouts.now(),
        }
        line = json.dumps(entry, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
        config.ensure_root(home)
        homes.write_home_file(config.root, rollout_path, rollout.data)
        homes.write_home_file(
            config.root, index_path, b"".join(item + b"\n" for item in [*kept, line])
        )

    def native_session_id(self, home: pathlib.Path, cwd: pathlib.Path) -> str | None:
        """The newest session whose rollout records `cwd` (or whose index line names it)."""
        want = os.path.realpath(cwd)
        newest: tuple[str, int, str] | None = None
        for path, stamp, session_id, _ in self._rollouts(pathlib.Path(home)):
            recorded = codex_rollouts.meta(codex_rollouts.first_record(path)).get("cwd")
            if not isinstance(recorded, str) or os.path.realpath(recorded) != want:
                continue
            candidate = (stamp, path.stat().st_mtime_ns, session_id)
            if newest is None or candidate > newest:
                newest = candidate
        if newest is not None:
            return newest[2]
        named = [
            entry["id"]
            for _, entry in codex_rollouts.index_lines(self._read_index(pathlib.Path(home)))
            if entry
            and isinstance(entry.get("id"), str)
            and isinstance(entry.get("cwd"), str)
            and os.path.realpath(str(entry["cwd"])) == want
        ]
        return str(named[-1]) if named else None

    def transcript_records(self, files: Sequence[base.SessionFile]) -> list[str]:
        """The records of the session's rollout file (decompressed when it is `.jsonl.zst`)."""
        _, rollout, _ = self._layout(files)
        return transcripts.split_records(codex_rollouts.expand(rollout))

    def _split(self, original_command: Sequence[str]) -> tuple[str, list[str], bool, list[str]]:
        """(executable, options before any subcommand, whether it is exec, exec's options)."""
        parsed = commands.parse_command(original_command, codex_flags.FLAGS)
        before, first, rest = parsed.split_at_first_positional()
        if first in codex_flags.EXEC:
            return parsed.executable, before, True, rest.options()
        if first is not None and first in codex_flags.SUBCOMMANDS:
            raise base.HarnessError("harness: the original command runs another Codex subcommand")
        return parsed.executable, parsed.options(), False, []

    def resume_command(
        self, original_command: Sequence[str], session_id: str, prompt: str
    ) -> list[str]:
        """`codex resume ID [options] -- PROMPT`, or `codex … exec … resume ID -- PROMPT`.

        Without a prompt `codex exec resume ID` reads one from stdin and exits 1 ("No prompt
        provided via stdin."); the interactive form would wait for a person.
        """
        executable, options, is_exec, exec_options = self._split(original_command)
        session_id = homes.check_session_id(session_id)
        prompt = base.check_prompt(prompt)
        if is_exec:
            return [
                executable,
                *options,
                "exec",
                *exec_options,
                "resume",
                session_id,
                "--",
                prompt,
            ]
        return [executable, "resume", session_id, *options, "--", prompt]

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

    def prepare_home(self, home: pathlib.Path, cwd: pathlib.Path) -> None:
        """Trust the workspace `cwd` and resume in the current folder, in `config.toml`.

        An interactive Codex asks whether to resume in the session's recorded folder (missing
        in a new Pod) whenever the folder changed, unless `[tui] resume_cwd = "current"`; and
        asks to trust a git repository unless `[projects."<path>"] trust_level = "trusted"`.
        Every other setting is kept (the file is rewritten only when something is missing, and
        then without its comments).

        Raises:
            HarnessError: config.toml is a symlink, not a regular file, or not valid TOML, or
                one of those tables is not a table.
        """
        home = pathlib.Path(home)
        config = self._config(home)
        relative = config.physical(CONFIG_TOML)
        target = config.root / relative
        loaded: dict[str, Any] = {}
        mode = homes.SESSION_FILE_MODE
        owner = homes.home_owner(home)
        try:
            data = paths.read_file_no_follow(target)
        except (FileNotFoundError, NotADirectoryError):
            data = None
        except paths.UnsafePath:
            raise base.HarnessError("harness: config.toml is not a regular file") from None
        if data is not None:
            try:
                loaded = tomllib.loads(data.decode("utf-8"))
            except (UnicodeDecodeError, tomllib.TOMLDecodeError):
                raise base.HarnessError("harness: config.toml is not valid TOML") from None
            info = target.lstat()
            mode = stat.S_IMODE(info.st_mode)
            owner = (info.st_uid, info.st_gid) if os.geteuid() == 0 else None
        tui = loaded.setdefault("tui", {})
        projects = loaded.setdefault("projects", {})
        if not isinstance(tui, dict) or not isinstance(projects, dict):
            raise base.HarnessError("harness: config.toml has tui or projects that are not tables")
        workspace = os.path.realpath(cwd)
        project = projects.setdefault(workspace, {})
        if not isinstance(project, dict):
            raise base.HarnessError("harness: config.toml has a project that is not a table")
        if tui.get("resume_cwd") == "current" and project.get("trust_level") == "trusted":
            return
        tui["resume_cwd"] = "current"
        project["trust_level"] = "trusted"
        config.ensure_root(home)
        text = tomli_w.dumps(loaded)
        paths.write_file_no_follow(
            config.root,
            relative,
            text.encode("utf-8"),
            mode,
            dir_mode=homes.SESSION_DIR_MODE,
            owner=owner,
        )
