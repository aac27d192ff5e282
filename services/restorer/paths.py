"""Path safety for every file the restorer writes (pure checks plus one no-follow writer).

A checkpoint is untrusted input: the paths it names (session files relative to the harness
home, untracked files relative to the worktree) must land inside their root. A relative path is
accepted only when it is a plain relative POSIX path: no leading `/`, no `..` or `.` segment, no
empty segment, no backslash, no control character, and no `.git` segment (a restore never
writes repository internals). On disk, no existing symlink on the way may lead out of the
root; the final component is never followed (a symlink there is replaced, not written through).

Messages of `UnsafePath` never name the path: a hostile record's values stay out of logs.
"""

from __future__ import annotations

import contextlib
import os
import pathlib
import secrets
import stat

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_NEW_FILE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


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
    segments = check_relative(relative)
    real_root = pathlib.Path(root).resolve()
    joined = real_root.joinpath(*segments)
    # resolve(strict=False) follows every existing symlink on the way, however deep.
    if not _contained(joined.resolve(), real_root):
        raise UnsafePath("path leads outside its root through a symlink")
    return joined


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
                child = os.open(segment, _DIR_FLAGS, dir_fd=fd)
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
    after `safe_join` resolved any symlinks that stay inside the root. The content goes to a
    fresh temporary file (O_CREAT|O_EXCL|O_NOFOLLOW) in the target directory and is renamed over
    the target, so a reader never sees half a file, a symlink at the target is replaced rather
    than written through, and a hard link at the target is never written into.

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
    target = safe_join(root, relative)
    real_root = pathlib.Path(root).resolve()
    # Walk the parents' real places (symlinks inside the root resolved by safe_join's check),
    # so every directory below is opened with O_NOFOLLOW; the final name is never resolved.
    parts = (*target.parent.resolve().relative_to(real_root).parts, target.name)
    root_fd = os.open(real_root, _DIR_FLAGS)
    try:
        parent_fd = _open_dirs(root_fd, parts[:-1], dir_mode, owner)
    finally:
        os.close(root_fd)
    name = parts[-1]
    try:
        temp = f".{name}.{secrets.token_hex(6)}.tmp"
        fd = os.open(temp, _NEW_FILE_FLAGS, 0o600, dir_fd=parent_fd)
        try:
            try:
                view = memoryview(data)
                while view:
                    written = os.write(fd, view)
                    view = view[written:]
                os.fchmod(fd, mode & 0o777)
                if owner is not None:
                    os.fchown(fd, owner[0], owner[1])
                # No fsync: a restore interrupted by a crash is run again from the checkpoint,
                # and one fsync per file would dominate restoring a worktree of many files.
            finally:
                os.close(fd)
            os.rename(temp, name, src_dir_fd=parent_fd, dst_dir_fd=parent_fd)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(temp, dir_fd=parent_fd)
            raise
    finally:
        os.close(parent_fd)
    return target


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
