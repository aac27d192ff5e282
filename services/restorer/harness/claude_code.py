"""Claude Code: session layout in the harness home, version, resume and opening prompt.

Checked against the real published CLI (2.1.112 and 2.1.332, run by the tests against a
loopback mock of the model API; `make qualify` re-checks other versions):

- A session is `~/.claude/projects/{key}/{session_id}.jsonl`, one JSON record per line; newer
  builds may keep a sibling folder `{key}/{session_id}/` (subagent transcripts, tool results),
  which is captured and restored with it. `agent-*.jsonl` files beside sessions are subagent
  sidechains of older builds, not sessions.
- With `CLAUDE_CONFIG_DIR` set, the CLI keeps `projects/` and `.claude.json` in that folder
  instead of `~/.claude/` and `~/.claude.json`. Records always name session files as under
  `.claude/projects/`, so a checkpoint restores into whichever folder the replacement uses.
- `{key}` is the working directory's physical absolute path (as `process.cwd()` reports it, so
  symlinks resolved) with every character outside `[A-Za-z0-9]` replaced by `-`, per UTF-16
  code unit (a character outside the BMP gives two). A key over 200 characters is cut to 200
  and suffixed with `-` and a base-36 hash of the path (the Node build's 32-bit string hash).
- `claude --resume <id>` looks for `<id>.jsonl` under the key of the directory it runs in, so
  a restore into a worktree at another path re-keys the folder. Record contents (which name the
  old cwd) are restored verbatim: their hashes are what the checkpoint verified.
- A headless resume needs a prompt: `claude --resume ID -p` alone exits 1 ("Provide a prompt
  to continue the conversation"). The resume command therefore ends with `-- PROMPT`, the
  swarm's continuation prompt; an interactive resume given one continues on its own.
- `.claude.json` holds `hasCompletedOnboarding` (true skips the first-run screens) and
  `projects["<dir>"].hasTrustDialogAccepted` (true skips the workspace trust dialog an
  interactive session shows for that folder; 2.1.332's default answer there is to exit).
  An interactive session also asks once whether to use an `ANTHROPIC_API_KEY` it finds in its
  environment; that approval is the operator's to provision (see the operator guide).
- `claude --version` prints `2.1.112 (Claude Code)`.
- Prompt: one positional argument. Options that consume values are listed below (from the real
  `--help`) so a value is never taken for the prompt; `--` ends options (commander), so the
  prompt is passed after it.
- A prompt too long for one argument goes on standard input: in print mode (`-p`/`--print`)
  with no prompt argument and the default `--input-format text`, `claude` reads its prompt
  from stdin when stdin is not a terminal. An interactive session keeps its terminal on stdin,
  so it has no such way.
"""

from __future__ import annotations

import json
import os
import pathlib
import stat
from collections.abc import Mapping, Sequence

from services.restorer import paths, transcripts
from services.restorer.harness import base, claude_code_flags, commands, homes, versions

NAME = "claude_code"
CONFIG_DIR_VARIABLE = "CLAUDE_CONFIG_DIR"
QUALIFIED = "2.1"
EXECUTABLE = "claude"
CONFIG_FILE = ".claude.json"
_PROJECTS = (".claude", "projects")
_MAX_KEY = 200


def project_key(cwd: str | os.PathLike[str]) -> str:
    """Claude Code's project folder name for a working directory (see module notes)."""
    path = os.path.realpath(cwd)
    key_chars: list[str] = []
    for char in path:
        if char.isascii() and char.isalnum():
            key_chars.append(char)
        else:
            key_chars.append("--" if ord(char) > 0xFFFF else "-")
    key = "".join(key_chars)
    if len(key) <= _MAX_KEY:
        return key
    return f"{key[:_MAX_KEY]}-{_base36(abs(_string_hash(path)))}"


def _string_hash(text: str) -> int:
    units = text.encode("utf-16-le")
    value = 0
    for offset in range(0, len(units), 2):
        value = (value << 5) - value + int.from_bytes(units[offset : offset + 2], "little")
        value = (value + 2**31) % 2**32 - 2**31  # JavaScript's `hash |= 0`
    return value


def _base36(number: int) -> str:
    digits = "0123456789abcdefghijklmnopqrstuvwxyz"
    out = ""
    while True:
        number, rest = divmod(number, 36)
        out = digits[rest] + out
        if number == 0:
            return out


def _layout(files: Sequence[base.SessionFile]) -> tuple[str, list[tuple[base.SessionFile, str]]]:
    """The session id and each file's path below the project folder, or HarnessError."""
    placed: list[tuple[base.SessionFile, str]] = []
    session_id: str | None = None
    keys = set()
    for item in files:
        segments = paths.check_relative(item.path)
        if len(segments) < 4 or segments[:2] != _PROJECTS:
            raise base.HarnessError("harness: session files do not match the Claude Code layout")
        keys.add(segments[2])
        if len(keys) > 1:
            raise base.HarnessError("harness: session files come from more than one project")
        below = segments[3:]
        if len(below) == 1 and below[0].endswith(".jsonl"):
            if session_id is not None:
                raise base.HarnessError("harness: session files hold more than one session")
            session_id = homes.check_session_id(below[0].removesuffix(".jsonl"))
        placed.append((item, "/".join(below)))
    if session_id is None:
        raise base.HarnessError("harness: session files hold no session")
    for _, below_path in placed:
        head = below_path.split("/", 1)[0]
        if head not in (f"{session_id}.jsonl", session_id):
            raise base.HarnessError("harness: session files do not match the Claude Code layout")
    return session_id, placed


def _input_format(parsed: commands.ParsedCommand) -> str | None:
    """The value of the command's last `--input-format`, or None when it has none."""
    found: str | None = None
    for token in parsed.tokens:
        name, _, attached = token.words[0].partition("=")
        if token.option and name == "--input-format":
            found = attached or (token.words[1] if len(token.words) > 1 else "")
    return found


class ClaudeCode:
    """The Claude Code harness.

    Args:
        environ: the worker's environment, for `CLAUDE_CONFIG_DIR` (the process's own when
            None). With it set, Claude Code keeps `projects/` and `.claude.json` in that
            folder instead of `~/.claude/` and `~/.claude.json`. Its
            `AGENTIHOOKS_QUALIFIED_VERSIONS` adds qualified versions.
    """

    name = NAME
    qualified = QUALIFIED
    executable = EXECUTABLE

    def __init__(self, environ: Mapping[str, str] | None = None) -> None:
        self._environ: Mapping[str, str] = os.environ if environ is None else dict(environ)
        self.qualified_versions = versions.qualified_versions(NAME, QUALIFIED, self._environ)

    def _config(self, home: pathlib.Path) -> homes.ConfigHome:
        return homes.config_home(pathlib.Path(home), self._environ, CONFIG_DIR_VARIABLE, ".claude")

    def qualifies(self, version: str) -> bool:
        return versions.qualifies_any(version, self.qualified_versions)

    async def read_version(self, executable: str) -> str:
        return await versions.run_version(executable)

    def capture_session(
        self, home: pathlib.Path, cwd: pathlib.Path, session_id: str
    ) -> list[base.SessionFile]:
        """The session's `.jsonl` and, when present, its sibling folder's files.

        Paths are named as under the default location (`.claude/projects/…`) wherever
        `CLAUDE_CONFIG_DIR` keeps them.

        Raises:
            HarnessError: the session id is not plain, the session file is missing, or a
                symlink on the way leads outside the harness home.
        """
        homes.check_session_id(session_id)
        config = self._config(home)
        prefix = "/".join((*_PROJECTS, project_key(cwd)))
        try:
            main = paths.read_file_no_follow(config.path(f"{prefix}/{session_id}.jsonl"))
        except (FileNotFoundError, NotADirectoryError, paths.UnsafePath):
            raise base.HarnessError("harness: session not found") from None
        files = [base.SessionFile(f"{prefix}/{session_id}.jsonl", main)]
        for relative, data in homes.read_tree(config.path(f"{prefix}/{session_id}")):
            files.append(base.SessionFile(f"{prefix}/{session_id}/{relative}", data))
        return files

    def restore_session(
        self, home: pathlib.Path, cwd: pathlib.Path, files: Sequence[base.SessionFile]
    ) -> None:
        """Write the session under the project key of `cwd` (re-keyed when the path moved),
        in the folder Claude Code reads here (`CLAUDE_CONFIG_DIR` or `~/.claude`).

        Every path is checked before anything is written.

        Raises:
            HarnessError: the files do not form one Claude Code session.
            paths.UnsafePath: a path is unsafe or a symlink on the way leads out of the home.
        """
        _, placed = _layout(files)
        config = self._config(home)
        prefix = "/".join((*_PROJECTS, project_key(cwd)))
        targets = [(config.physical(f"{prefix}/{below}"), item.data) for item, below in placed]
        for relative, _ in targets:
            paths.safe_join(config.root, relative)
        config.ensure_root(pathlib.Path(home))
        for relative, data in targets:
            homes.write_home_file(config.root, relative, data)

    def native_session_id(self, home: pathlib.Path, cwd: pathlib.Path) -> str | None:
        """The session of `cwd` whose file was written last, or None."""
        try:
            folder = self._config(home).path("/".join((*_PROJECTS, project_key(cwd))))
            entries = list(os.scandir(folder))
        except (base.HarnessError, FileNotFoundError, NotADirectoryError):
            return None
        newest: tuple[int, str] | None = None
        for entry in entries:
            stem = entry.name.removesuffix(".jsonl")
            if (
                stem == entry.name
                or stem.startswith("agent-")
                or not entry.is_file(follow_symlinks=False)
            ):
                continue
            try:
                homes.check_session_id(stem)
            except base.HarnessError:
                continue
            candidate = (entry.stat(follow_symlinks=False).st_mtime_ns, stem)
            if newest is None or candidate > newest:
                newest = candidate
        return None if newest is None else newest[1]

    def transcript_records(self, files: Sequence[base.SessionFile]) -> list[str]:
        """The records of the session's own `.jsonl` (subagent files are not the conversation)."""
        session_id, placed = _layout(files)
        for item, below in placed:
            if below == f"{session_id}.jsonl":
                return transcripts.split_records(item.data)
        raise base.HarnessError("harness: session files hold no session")

    def resume_command(
        self, original_command: Sequence[str], session_id: str, prompt: str
    ) -> list[str]:
        """`claude --resume ID [options] -- PROMPT`: the original's options, its own prompt
        replaced by the continuation prompt.

        Without a prompt `claude --resume ID -p` exits 1 ("Provide a prompt to continue the
        conversation"), and an interactive session would wait for a person.
        """
        parsed = commands.parse_command(original_command, claude_code_flags.FLAGS)
        return [
            parsed.executable,
            "--resume",
            homes.check_session_id(session_id),
            *parsed.options(),
            "--",
            base.check_prompt(prompt),
        ]

    def opening_prompt_command(self, original_command: Sequence[str], prompt: str) -> list[str]:
        """The original command with its own prompt replaced by `prompt`, the last argument.

        The continuation carries the recorded conversation, which began with the original
        prompt; passing both would give the harness two prompts.
        """
        parsed = commands.parse_command(original_command, claude_code_flags.FLAGS)
        return [parsed.executable, *parsed.options(), "--", prompt]

    def stdin_prompt_command(self, original_command: Sequence[str]) -> list[str]:
        """The original print-mode command without its prompt: `claude -p` reads it from stdin.

        Raises:
            HarnessError: the command is interactive (no `-p`/`--print`), or its input format
                is not text (stdin would have to hold stream-json messages).
        """
        parsed = commands.parse_command(original_command, claude_code_flags.FLAGS)
        options = parsed.options()
        if not {"-p", "--print"} & set(options):
            raise base.HarnessError("harness: an interactive claude reads no prompt from stdin")
        if _input_format(parsed) not in (None, "text"):
            raise base.HarnessError("harness: this claude reads stream-json from stdin")
        return [parsed.executable, *options]

    def prepare_home(self, home: pathlib.Path, cwd: pathlib.Path) -> None:
        """Mark first-run onboarding completed and the workspace `cwd` trusted, in
        `.claude.json` (`~/.claude.json`, or in `CLAUDE_CONFIG_DIR`), keeping every other key.

        Without the trust mark an interactive Claude Code stops at its workspace trust dialog,
        whose default on newer builds is to exit. Only `cwd` itself is trusted.

        Raises:
            HarnessError: the file is a symlink, not a regular file, or not a JSON object, or
                its `projects` is not an object (a user's configuration is never overwritten
                blind).
        """
        home = pathlib.Path(home)
        config = self._config(home)
        folder = config.root if not config.prefix else home
        target = folder / CONFIG_FILE
        loaded: dict[str, object] = {}
        mode = homes.SESSION_FILE_MODE
        owner = homes.home_owner(home)
        try:
            data = paths.read_file_no_follow(target)
        except FileNotFoundError:
            data = None
        except paths.UnsafePath:
            raise base.HarnessError("harness: .claude.json is not a regular file") from None
        if data is not None:
            parsed = homes.load_json_object(data)
            if parsed is None:
                raise base.HarnessError("harness: .claude.json is not a JSON object")
            loaded = parsed
            info = target.lstat()
            mode = stat.S_IMODE(info.st_mode)
            owner = (info.st_uid, info.st_gid) if os.geteuid() == 0 else None
        projects = loaded.get("projects", {})
        if not isinstance(projects, dict):
            raise base.HarnessError("harness: .claude.json has projects that are not an object")
        workspace = os.path.realpath(cwd)
        entry = projects.get(workspace, {})
        entry = dict(entry) if isinstance(entry, dict) else {}
        if loaded.get("hasCompletedOnboarding") is True and entry.get("hasTrustDialogAccepted"):
            return
        entry["hasTrustDialogAccepted"] = True
        config_data = {
            **loaded,
            "hasCompletedOnboarding": True,
            "projects": {**projects, workspace: entry},
        }
        text = json.dumps(config_data, indent=2, ensure_ascii=False) + "\n"
        config.ensure_root(home)
        paths.write_file_no_follow(folder, CONFIG_FILE, text.encode("utf-8"), mode, owner=owner)
