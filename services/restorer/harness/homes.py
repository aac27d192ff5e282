"""The harness home: session ids, and the files a harness keeps under the worker's home.

`home` is the worker user's home directory (the harness's `~`); session file paths are relative
POSIX paths under it, such as `.claude/projects/-work-app/<id>.jsonl`. Files are written mode
0600 in folders 0700, owned by the home's owner, and never through a symlink.
"""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib
import re
import stat
from collections.abc import Mapping

from services.restorer import paths
from services.restorer.harness import base

SESSION_FILE_MODE = 0o600
SESSION_DIR_MODE = 0o700

_SESSION_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


def check_session_id(session_id: str) -> str:
    """A session id safe to use in a file name and as an argument.

    The checkpoint schema's identifier: a letter or digit, then letters, digits, `.`, `_`, `-`
    (so never `.`, `..` or an option), at most 128 characters.

    Raises:
        HarnessError: anything else (a slash, a leading `-` or `.`, empty, too long).
    """
    if not isinstance(session_id, str) or not _SESSION_ID.fullmatch(session_id):
        raise base.HarnessError("harness: session id is not a plain identifier")
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
        raise base.HarnessError("harness: session files lead outside the harness home") from None


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
        raise base.HarnessError(f"harness: {variable} is not an absolute path")
    return ConfigHome(pathlib.Path(value), "", default)


def load_json_object(data: bytes) -> dict[str, object] | None:
    """A JSON object from bytes, or None when the bytes are not one."""
    try:
        value = json.loads(data)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None
