"""Files and folders of a local checkpoint store, opened without following a link.

Blocking helpers for `local.LocalStore`, each meant to run in a worker thread: every folder below
the root is opened relative to its parent with O_NOFOLLOW, so a link planted inside the store is
refused instead of followed out of it; objects are published under their name by a hard link
after a sync, manifests read with a size limit; `ObjectFolders` opens a scope's object folders
once for a batch of objects.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import hashlib
import io
import os
import pathlib
import stat
from collections.abc import AsyncIterable, Callable, Sequence
from typing import Any, TypeVar

from services.common.checkpoints import storing

T = TypeVar("T")

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC
CREATE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
_DIR_MODE = 0o700
FILE_MODE = 0o600
_WRITE_BATCH = 1024 * 1024
_LINKS = (errno.ELOOP, errno.ENOTDIR, errno.EMLINK)


def _unsafe() -> storing.UnsafePath:
    return storing.UnsafePath("the checkpoint store holds a link or an unexpected entry")


def open_dir(
    root: pathlib.Path, parts: list[str], *, create: bool, created: list[int] | None = None
) -> int | None:
    """A descriptor of `root/parts…`, never following a link below the root.

    Returns None when a folder is absent and `create` is false. `created` collects the depth
    (1 for `parts[0]`) of each folder this call created.
    """
    try:
        fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except FileNotFoundError:
        if not create:
            return None
        os.makedirs(root, mode=_DIR_MODE, exist_ok=True)
        fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for depth, part in enumerate(parts, start=1):
            try:
                child = os.open(part, _DIR_FLAGS, dir_fd=fd)
            except FileNotFoundError:
                if not create:
                    os.close(fd)
                    return None
                try:
                    os.mkdir(part, _DIR_MODE, dir_fd=fd)
                except FileExistsError:
                    pass
                else:
                    if created is not None:
                        created.append(depth)
                child = os.open(part, _DIR_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = child
    except OSError as error:
        os.close(fd)
        if error.errno in _LINKS:
            raise _unsafe() from None
        raise
    return fd


def open_file(dir_fd: int, name: str) -> int | None:
    """A read descriptor of a regular file in `dir_fd`; None when absent; a link is refused."""
    try:
        fd = os.open(name, _READ_FLAGS, dir_fd=dir_fd)
    except FileNotFoundError:
        return None
    except OSError as error:
        if error.errno in _LINKS:
            raise _unsafe() from None
        raise
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise _unsafe()
    return fd


class ObjectFolders:
    """The scope's object folders, each opened once (safely, as `open_dir` does) for many
    objects read in one worker thread: a 5,000-segment chain would otherwise walk the whole
    path, a folder at a time, for every segment."""

    def __init__(self, root: pathlib.Path, parts: list[str]) -> None:
        self._root = root
        self._parts = parts
        self._objects: int | None = None
        self._opened = False
        self._folders: dict[str, int | None] = {}

    def __enter__(self) -> ObjectFolders:
        return self

    def __exit__(self, *exc: object) -> None:
        for fd in [*self._folders.values(), self._objects]:
            if fd is not None:
                os.close(fd)

    def _folder(self, prefix: str) -> int | None:
        if prefix not in self._folders:
            if not self._opened:
                self._opened = True
                self._objects = open_dir(self._root, [*self._parts, "objects"], create=False)
            found = None
            if self._objects is not None:
                try:
                    found = os.open(prefix, _DIR_FLAGS, dir_fd=self._objects)
                except FileNotFoundError:
                    found = None
                except OSError as error:
                    if error.errno in _LINKS:
                        raise _unsafe() from None
                    raise
            self._folders[prefix] = found
        return self._folders[prefix]

    def exists(self, sha256: str) -> bool:
        """Whether the object is stored (its folder opened once for the batch)."""
        folder = self._folder(sha256[:2])
        return folder is not None and entry_exists(folder, sha256)

    def open(self, sha256: str) -> int | None:
        """A read descriptor of the object; None when absent; a link is refused."""
        folder = self._folder(sha256[:2])
        return None if folder is None else open_file(folder, sha256)


def digest_chain(folders: ObjectFolders, names: Sequence[str]) -> storing.ChainDigest | None:
    """A chain's objects hashed in order as one stream; None when one is absent."""
    digest, sizes = hashlib.sha256(), []
    # One buffer for the whole chain, grown to the largest object (at most one chunk).
    buffer = bytearray()
    for name in names:
        fd = folders.open(name)
        if fd is None:
            return None
        need = min(storing.CHUNK_SIZE, os.fstat(fd).st_size + 1)
        if len(buffer) < need:
            buffer = bytearray(need)
        view, size = memoryview(buffer), 0
        with io.FileIO(fd, "r", closefd=True) as file:
            while count := file.readinto(buffer):
                digest.update(view[:count])
                size += count
        sizes.append(size)
    return storing.ChainDigest(digest.hexdigest(), tuple(sizes))


def digest_object(folders: ObjectFolders, sha256: str) -> tuple[str, int] | None:
    """An object's SHA-256 and size as stored (`digest_chain` of it alone); None when absent."""
    found = digest_chain(folders, [sha256])
    return None if found is None else (found.sha256, found.sizes[0])


def list_at(dir_fd: int) -> list[str]:
    """The manifest ids in an opened records folder, sorted."""
    ids = (name.removesuffix(".json") for name in os.listdir(dir_fd) if name.endswith(".json"))
    return sorted(i for i in ids if storing.is_safe_name(i))


def read_manifest(dir_fd: int, checkpoint_id: str) -> bytes | None:
    """One manifest's bytes from an opened records folder, or None when absent."""
    fd = open_file(dir_fd, f"{checkpoint_id}.json")
    if fd is None:
        return None
    with io.FileIO(fd, "r", closefd=True) as file:
        data = read_at_most(file, os.fstat(fd).st_size, storing.MAX_MANIFEST_BYTES)
    if len(data) > storing.MAX_MANIFEST_BYTES:
        raise storing.ObjectTooLarge("the manifest is over the size limit")
    return data


def read_at_most(file: io.FileIO, size: int, limit: int) -> bytes:
    """A file's bytes, at most `limit` plus one (so a caller sees it is over), read in one call
    sized to the file (`size`, its length as stat gave it).

    A read of `limit + 1` bytes would allocate (and map and unmap) that whole buffer for a
    manifest of a few hundred bytes: four times the cost of the read itself, paid for every
    manifest a decision lists. A file longer than `size` says is read on, up to the limit.
    """
    want = min(size, limit) + 1
    data = file.read(want)
    if len(data) < want or len(data) > limit:
        return data
    parts = [data]
    total = len(data)
    while total <= limit and (more := file.read(limit + 1 - total)):
        parts.append(more)
        total += len(more)
    return b"".join(parts)


def or_error(read: Callable[..., T], *args: Any) -> T | storing.StoreError:
    """`read(*args)`, or the `StoreError` it raised (a batch reports each name's own)."""
    try:
        return read(*args)
    except storing.StoreError as error:
        return error


async def drain(chunks: AsyncIterable[bytes], check: storing.UploadCheck, fd: int | None) -> None:
    """Feed the upload through `check` (and into `fd`), batching work for the worker thread."""
    batch = bytearray()
    async for chunk in chunks:
        if check.received + len(batch) + len(chunk) > check.size:
            raise storing.ObjectCorrupt("the object is larger than its declared size")
        batch += chunk
        if len(batch) >= _WRITE_BATCH:
            await asyncio.to_thread(_take, check, fd, batch)
            batch = bytearray()
    await asyncio.to_thread(_take, check, fd, batch)
    check.finish()


def _take(check: storing.UploadCheck, fd: int | None, batch: bytearray) -> None:
    check.feed(batch)
    if fd is not None:
        write_all(fd, batch)


def write_all(fd: int, data: bytes | bytearray) -> None:
    """Write all of `data` to `fd` (a write may take only part of it)."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def publish_object(dir_fd: int, fd: int, temp: str, sha256: str) -> bool:
    """Sync a checked temp file and give it its object name; False when the object was there.

    A hard link never replaces an existing name, so an object stored meanwhile by another
    writer is left as it is.
    """
    os.fsync(fd)
    try:
        os.link(temp, sha256, src_dir_fd=dir_fd, dst_dir_fd=dir_fd, follow_symlinks=False)
        created = True
    except FileExistsError:
        created = False
    except OSError as error:
        if error.errno not in (errno.EPERM, errno.EOPNOTSUPP, errno.ENOTSUP):
            raise
        # A file system without hard links: same content under the same name, so a rename
        # over a concurrent writer's copy changes nothing a reader can see.
        created = not entry_exists(dir_fd, sha256)
        os.replace(temp, sha256, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    unlink_quietly(dir_fd, temp)
    os.fsync(dir_fd)
    return created


def entry_exists(dir_fd: int, name: str) -> bool:
    """Whether `dir_fd` holds an entry `name` of any kind (a link is not followed)."""
    try:
        os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return False
    return True


def unlink_quietly(dir_fd: int, name: str) -> None:
    """Remove `name` from `dir_fd` if it is there."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(name, dir_fd=dir_fd)
