"""Path safety for every file the restorer writes: pure checks, and the one no-follow writer.

A checkpoint is untrusted input: the paths it names (session files relative to the harness
home, untracked files relative to the worktree) must land inside their root. A relative path is
accepted only when it is a plain relative POSIX path: no leading `/`, no `..` or `.` segment, no
empty segment, no backslash, no control character, and no `.git` segment (a restore never
writes repository internals). On disk, no existing symlink on the way may lead out of the
root; the final component is never followed (a symlink there is replaced, not written through).
`TreeWriter` makes these checks for each file it writes (`write_file_no_follow` is one file),
whether it writes the bytes or moves them in from a staging folder (`staged_files`).

Messages of `UnsafePath` never name the path: a hostile record's values stay out of logs.
"""

from __future__ import annotations

import collections
import contextlib
import os
import pathlib
import secrets
import stat
from collections.abc import Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from services.restorer import staged_files

DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
"""How a folder is opened: as a directory, never through a symlink."""
_NEW_FILE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
Owner = tuple[int, int] | None
_KEPT_DIRS = 32
"""Parent folders a `TreeWriter` keeps open (its descriptors stay well below any limit)."""


class UnsafePath(ValueError):
    """A relative path that could write outside its root or into repository internals."""


def check_relative(relative: str) -> tuple[str, ...]:
    """Check a relative path's syntax alone, touching no filesystem.

    Args:
        relative: a path relative to some root, as a record names it.

    Returns:
        The path's segments.

    Raises:
        UnsafePath: the path is absolute, empty, has a `..`, `.` or empty segment, a backslash,
            a control character or a `.git` segment (compared without case, as git does).
    """
    if not isinstance(relative, str) or not relative:
        raise UnsafePath("path is empty")
    if any(ord(char) < 0x20 or ord(char) == 0x7F for char in relative):
        # NUL and every other control character, as the checkpoint schema refuses them.
        raise UnsafePath("path holds a control character")
    if "\\" in relative:
        raise UnsafePath("path holds a backslash")
    if relative.startswith("/"):
        raise UnsafePath("path is absolute")
    segments = tuple(relative.split("/"))
    for segment in segments:
        if segment == "":
            raise UnsafePath("path has an empty segment")
        if segment in (".", ".."):
            raise UnsafePath("path has a dot segment")
        if segment.lower() == ".git":
            raise UnsafePath("path is inside .git")
    return segments


def _contained(path: pathlib.Path, root: pathlib.Path) -> bool:
    return path == root or root in path.parents


def safe_join(root: str | os.PathLike[str], relative: str) -> pathlib.Path:
    """Join a checked relative path to a root, refusing symlinks that lead out of the root.

    Symlinks inside the root that point elsewhere inside it are allowed; any existing
    component (including the last) whose resolution leaves the root is refused.

    Args:
        root: the directory the path must stay in (it may itself be reached through a symlink).
        relative: the record's relative POSIX path.

    Returns:
        The joined path under the resolved root.

    Raises:
        UnsafePath: see `check_relative`, or a symlink on the way leads outside the root.
    """
    return safe_join_all(root, [relative])[0]


def _open_dirs(
    root_fd: int,
    segments: tuple[str, ...],
    dir_mode: int,
    owner: tuple[int, int] | None,
) -> int:
    """Walk (creating as needed) directory segments below root_fd with no symlink followed."""
    fd = os.dup(root_fd)
    try:
        for segment in segments:
            created = False
            try:
                os.mkdir(segment, dir_mode, dir_fd=fd)
                created = True
            except FileExistsError:
                pass
            try:
                child = os.open(segment, DIR_FLAGS, dir_fd=fd)
            except OSError as exc:
                raise UnsafePath("a parent on the path is not a plain directory") from exc
            if created:
                os.fchmod(child, dir_mode)
                if owner is not None:
                    os.fchown(child, owner[0], owner[1])
            os.close(fd)
            fd = child
        return fd
    except BaseException:
        os.close(fd)
        raise


def write_file_no_follow(
    root: str | os.PathLike[str],
    relative: str,
    data: bytes,
    mode: int,
    *,
    dir_mode: int = 0o755,
    owner: tuple[int, int] | None = None,
) -> pathlib.Path:
    """Write one file under a root without ever following a symlink at the last component.

    Parents are created one at a time through directory descriptors opened with O_NOFOLLOW,
    after `safe_join`'s check that any symlinks on the way stay inside the root. The content
    goes to a fresh temporary file (O_CREAT|O_EXCL|O_NOFOLLOW) in the target directory and is
    renamed over the target, so a reader never sees half a file, a symlink at the target is
    replaced rather than written through, and a hard link at the target is never written into.
    `TreeWriter` does the same for many files.

    Args:
        root: the directory the file must stay in.
        relative: the record's relative POSIX path.
        data: the file's bytes.
        mode: permission bits (masked to 0o777; set exactly, whatever the umask).
        dir_mode: permission bits for directories this call creates.
        owner: (uid, gid) for the file and created directories, or None to keep the caller's.

    Returns:
        The path written.

    Raises:
        UnsafePath: the path is unsafe, or a parent is not a plain directory.
        OSError: the write itself failed.
    """
    check_relative(relative)  # a hostile path is refused before the root is even opened
    with TreeWriter(root, dir_mode=dir_mode, owner=owner) as writer:
        return writer.write(relative, data, mode)


def safe_join_all(root: str | os.PathLike[str], relatives: Iterable[str]) -> list[pathlib.Path]:
    """`safe_join` for many paths under one root, resolving each parent folder once.

    Raises:
        UnsafePath: for the first path `safe_join` would refuse.
    """
    real_root = pathlib.Path(root).resolve()
    parents: dict[tuple[str, ...], pathlib.Path] = {}
    joined: list[pathlib.Path] = []
    for relative in relatives:
        segments = check_relative(relative)
        parent = parents.get(segments[:-1])
        if parent is None:
            parent = _real_parent(real_root, segments[:-1])
            parents[segments[:-1]] = parent
        _check_last(real_root, parent, segments[-1])
        joined.append(real_root.joinpath(*segments))
    return joined


def _real_parent(real_root: pathlib.Path, segments: tuple[str, ...]) -> pathlib.Path:
    """Where a folder below the root really is, refused when a symlink leads it out."""
    # resolve(strict=False) follows every existing symlink on the way, however deep.
    parent = real_root.joinpath(*segments).resolve()
    if not _contained(parent, real_root):
        raise UnsafePath("path leads outside its root through a symlink")
    return parent


def _check_last(real_root: pathlib.Path, real_parent: pathlib.Path, name: str) -> bool:
    """Refuse a final component that is a symlink leading out; True when it is a symlink.

    With the parent already resolved inside the root, only a symlink at the last component
    can still lead the whole path out of it.
    """
    try:
        is_link = stat.S_ISLNK(os.lstat(real_parent / name).st_mode)
    except OSError:
        return False  # absent (or under something absent): nothing to follow
    if is_link and not _contained((real_parent / name).resolve(), real_root):
        raise UnsafePath("path leads outside its root through a symlink")
    return is_link


def new_file(dir_fd: int, name: str, data: bytes, mode: int, owner: Owner) -> None:
    """Create `name` afresh in `dir_fd` (O_EXCL, no symlink followed) holding `data`, with
    permission bits `mode` (masked to 0o777) and `owner` (uid, gid) when given; a file left
    half written is removed."""
    fd = os.open(name, _NEW_FILE_FLAGS, 0o600, dir_fd=dir_fd)
    try:
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fchmod(fd, mode & 0o777)
            if owner is not None:
                os.fchown(fd, owner[0], owner[1])
            # No fsync: a restore interrupted by a crash is run again from the checkpoint,
            # and one fsync per file would dominate restoring a worktree of many files.
        finally:
            os.close(fd)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(name, dir_fd=dir_fd)
        raise


class TreeWriter:
    """Writes files under one root with `write_file_no_follow`'s checks, opening each folder once.

    Every path gets the same checks as `write_file_no_follow`: its syntax, the real place of its
    parent (no symlink on the way leads out of the root), the last component (a symlink there
    that leads out is refused; one inside is replaced, never written through), parents walked
    and created with O_NOFOLLOW, content in a fresh O_EXCL file renamed into place. Only the
    work is shared: the root is resolved and opened once, and the descriptors of the most
    recently used parent folders are kept open, so writing a worktree of many files costs a
    handful of system calls per file. Replacing a symlink forgets every kept folder, as a kept
    one may have been reached through it.

    Args:
        root: the directory every file must stay in.
        dir_mode: permission bits for directories this writer creates.
        owner: (uid, gid) for written files and created directories, or None.
    """

    def __init__(
        self,
        root: str | os.PathLike[str],
        *,
        dir_mode: int = 0o755,
        owner: Owner = None,
    ) -> None:
        self._real_root = pathlib.Path(root).resolve()
        self._dir_mode = dir_mode
        self._owner = owner
        self._dirs: collections.OrderedDict[tuple[str, ...], tuple[int, pathlib.Path]] = (
            collections.OrderedDict()
        )
        # Temporary names need not be secret, only new: O_EXCL refuses any that exists.
        self._temp = f".agentihooks-{secrets.token_hex(6)}-"
        self._count = 0
        self._root_fd = os.open(self._real_root, DIR_FLAGS)

    def __enter__(self) -> TreeWriter:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def close(self) -> None:
        """Close every descriptor the writer holds."""
        self._forget()
        if self._root_fd >= 0:
            os.close(self._root_fd)
            self._root_fd = -1

    def _forget(self) -> None:
        while self._dirs:
            fd, _ = self._dirs.popitem()[1]
            os.close(fd)

    def _parent(self, segments: tuple[str, ...]) -> tuple[int, pathlib.Path]:
        """The descriptor and real place of a parent folder, created as needed."""
        kept = self._dirs.get(segments)
        if kept is not None:
            self._dirs.move_to_end(segments)
            return kept
        real = _real_parent(self._real_root, segments)
        # Walk the parent's real place (symlinks inside the root resolved just above), so
        # every directory below is opened with O_NOFOLLOW; the final name is never resolved.
        fd = _open_dirs(
            self._root_fd, real.relative_to(self._real_root).parts, self._dir_mode, self._owner
        )
        self._dirs[segments] = (fd, real)
        if len(self._dirs) > _KEPT_DIRS:
            os.close(self._dirs.popitem(last=False)[1][0])
        return fd, real

    def _target(self, relative: str) -> tuple[int, str]:
        """The checked parent descriptor and final name of `relative`."""
        segments = check_relative(relative)
        parent_fd, real_parent = self._parent(segments[:-1])
        if _check_last(self._real_root, real_parent, segments[-1]):
            self._forget()  # the symlink is replaced next; folders reached through it are not
            parent_fd, real_parent = self._parent(segments[:-1])
        return parent_fd, segments[-1]

    def write(self, relative: str, data: bytes, mode: int) -> pathlib.Path:
        """Write one file (see the class notes); returns its path under the resolved root.

        Raises:
            UnsafePath: the path is unsafe, or a parent is not a plain directory.
            OSError: the write itself failed.
        """
        parent_fd, name = self._target(relative)
        self._count += 1
        temp = f"{self._temp}{self._count}.tmp"
        new_file(parent_fd, temp, data, mode, self._owner)
        try:
            os.rename(temp, name, src_dir_fd=parent_fd, dst_dir_fd=parent_fd)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(temp, dir_fd=parent_fd)
            raise
        return self._real_root.joinpath(*relative.split("/"))

    def place(self, relative: str, staging: staged_files.Staging, staged: str) -> pathlib.Path:
        """Move a staged file to `relative`, with every check `write` makes.

        Raises:
            UnsafePath: the path is unsafe, or a parent is not a plain directory.
            OSError: the move failed (EXDEV: the staging folder is on another file system;
                the staged file is then still there, and `write` can be used instead).
        """
        parent_fd, name = self._target(relative)
        os.rename(staged, name, src_dir_fd=staging.fd, dst_dir_fd=parent_fd)
        return self._real_root.joinpath(*relative.split("/"))


def read_file_no_follow(path: str | os.PathLike[str]) -> bytes:
    """Read a regular file, refusing a symlink or any other kind of file at the last component.

    Raises:
        UnsafePath: the file is a symlink or not a regular file.
        FileNotFoundError: it does not exist.
    """
    try:
        # O_NONBLOCK so a FIFO planted at the path cannot hang the reader.
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        raise
    except OSError as exc:
        raise UnsafePath("file is a symlink or cannot be opened") from exc
    with os.fdopen(fd, "rb") as handle:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise UnsafePath("file is not a regular file")
        return handle.read()
