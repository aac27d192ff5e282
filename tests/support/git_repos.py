"""Real git repositories for tests: an origin, a worktree with every kind of change, snapshots.

`project(tmp)` builds a bare "origin" and a clone of it whose worktree then gets local commits
(not pushed), staged changes, unstaged changes (a deletion, an executable-bit change, a binary
file) and untracked files, plus one ignored file. `snapshot(root)` maps every path except
`.git` to (st_mode, bytes) — a symlink's bytes are its target — for byte-for-byte comparison.
"""

from __future__ import annotations

import dataclasses
import os
import pathlib
import stat
import subprocess

from tests.support import binaries

ENV = {
    "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
    "HOME": "/nonexistent",
    "LC_ALL": "C",
    "GIT_CONFIG_GLOBAL": "/dev/null",
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_TERMINAL_PROMPT": "0",
    "GIT_AUTHOR_NAME": "Test Author",
    "GIT_AUTHOR_EMAIL": "author@example.invalid",
    "GIT_COMMITTER_NAME": "Test Author",
    "GIT_COMMITTER_EMAIL": "author@example.invalid",
}

BINARY = bytes(range(256)) * 3 + b"\x00\xff\x00"
SECRET_LINE = "the captured file content that must never reach a message"


def git(cwd: pathlib.Path, *args: str) -> str:
    """Run git in `cwd` with a clean environment and return its stdout; fail on error."""
    done = subprocess.run(
        [binaries.require("git"), "-c", "init.defaultBranch=main", *args],
        cwd=cwd,
        env=ENV,
        check=True,
        capture_output=True,
    )
    return done.stdout.decode("utf-8", errors="replace").strip()


def write(root: pathlib.Path, relative: str, data: bytes | str, mode: int = 0o644) -> None:
    """Write a file (parents created) with exact permission bits."""
    path = root / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data.encode() if isinstance(data, str) else data)
    path.chmod(mode)


@dataclasses.dataclass(frozen=True)
class Project:
    """A bare origin, a worktree cloned from it, and the commit origin/main points at."""

    origin: pathlib.Path
    worktree: pathlib.Path
    base: str

    @property
    def url(self) -> str:
        return self.origin.as_uri()


def origin_and_clone(tmp: pathlib.Path) -> Project:
    """A bare origin with two pushed commits and a clone of it (clean, at origin/main)."""
    seed = tmp / "seed"
    seed.mkdir(parents=True)
    git(seed, "init", "-q")
    write(seed, "README.md", "# app\n")
    write(seed, "src/app.py", "print('hello')\n")
    write(seed, "src/remove_me.txt", "this file will be deleted\n")
    write(seed, "scripts/run.sh", "#!/bin/sh\necho run\n", 0o755)
    write(seed, "scripts/make_exec.sh", "#!/bin/sh\necho later executable\n")
    write(seed, "assets/logo.bin", BINARY)
    write(seed, ".gitignore", "build/\n*.log\n")
    git(seed, "add", "-A")
    git(seed, "commit", "-q", "-m", "first")
    write(seed, "src/app.py", "print('hello, world')\n")
    git(seed, "commit", "-q", "-am", "second")
    origin = tmp / "origin.git"
    git(tmp, "clone", "-q", "--bare", str(seed), str(origin))
    worktree = tmp / "worktree"
    git(tmp, "clone", "-q", origin.as_uri(), str(worktree))
    base = git(worktree, "rev-parse", "HEAD")
    return Project(origin=origin, worktree=worktree, base=base)


def add_local_commits(worktree: pathlib.Path) -> None:
    """Two commits on the branch that are not pushed."""
    write(worktree, "src/feature.py", "def feature():\n    return 1\n")
    git(worktree, "add", "src/feature.py")
    git(worktree, "commit", "-q", "-m", "local one")
    write(worktree, "README.md", "# app\n\nLocal notes.\n")
    git(worktree, "commit", "-q", "-am", "local two")


def add_uncommitted_changes(worktree: pathlib.Path) -> None:
    """Staged and unstaged changes: edits, a new file, a deletion, a mode change, binary."""
    write(worktree, "src/staged_new.py", "STAGED = True\n")
    write(worktree, "src/feature.py", "def feature():\n    return 2\n")
    git(worktree, "add", "src/staged_new.py", "src/feature.py")
    # The same file staged once and then changed again in the worktree.
    write(worktree, "src/feature.py", "def feature():\n    return 3\n")
    write(worktree, "src/app.py", f"print('hello, world')\n# {SECRET_LINE}\n")
    (worktree / "src/remove_me.txt").unlink()
    (worktree / "scripts/make_exec.sh").chmod(0o755)
    write(worktree, "assets/logo.bin", BINARY[::-1] + b"\x00changed")
    write(worktree, "assets/new.bin", b"\x00\x01\x02binary\xff")
    git(worktree, "add", "assets/new.bin")


def add_untracked(worktree: pathlib.Path) -> None:
    """Untracked files (nested, executable, binary, non-ASCII name) and one ignored file."""
    write(worktree, "notes/todo.txt", "write more tests\n")
    write(worktree, "notes/deep/nested/idea.md", "an idea\n")
    write(worktree, "tools/helper.sh", "#!/bin/sh\necho help\n", 0o755)
    write(worktree, "blob.dat", b"\x00\x00untracked\xfe")
    write(worktree, "notes/ünïcode name.txt", "unicode\u2028inside\n")
    write(worktree, "build/out.o", "ignored build output\n")


IGNORED = ("build/out.o",)


def project(tmp: pathlib.Path) -> Project:
    """An origin and a worktree with local commits, staged, unstaged and untracked changes."""
    made = origin_and_clone(tmp)
    add_local_commits(made.worktree)
    add_uncommitted_changes(made.worktree)
    add_untracked(made.worktree)
    return made


def snapshot(root: pathlib.Path, ignore: tuple[str, ...] = ()) -> dict[str, tuple[int, bytes]]:
    """Every path below `root` except `.git` and `ignore`: (st_mode, bytes or link target)."""
    found: dict[str, tuple[int, bytes]] = {}
    if not root.exists():
        return found
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        dirnames[:] = sorted(name for name in dirnames if name != ".git")
        here = pathlib.Path(dirpath)
        for name in [*filenames, *(d for d in dirnames if (here / d).is_symlink())]:
            path = here / name
            relative = path.relative_to(root).as_posix()
            if relative in ignore:
                continue
            info = path.lstat()
            if stat.S_ISLNK(info.st_mode):
                found[relative] = (info.st_mode, os.readlink(path).encode())
            else:
                found[relative] = (info.st_mode, path.read_bytes())
    return found
