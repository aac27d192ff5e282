"""The local folder backend: checkpoints under `AGENTIHOOKS_CHECKPOINT_ROOT`.

Layout: `{root}/{swarm}/{task_id}/{task_generation}/objects/{sha[:2]}/{sha}` and
`.../records/{checkpoint_id}.json`. Every folder below the root is opened relative to its parent
with O_NOFOLLOW, so a link planted inside the store is refused instead of followed out of it.
Files are written to a temporary name in their own folder, synced, then moved into place, so a
reader never sees half an object or half a manifest. Blocking I/O runs in worker threads.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import hashlib
import io
import os
import pathlib
import secrets
import stat
from collections.abc import AsyncIterable, AsyncIterator, Callable, Sequence
from typing import Any, TypeVar

from services.common.checkpoints import storing

T = TypeVar("T")

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC
_CREATE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
_DIR_MODE = 0o700
_FILE_MODE = 0o600
_WRITE_BATCH = 1024 * 1024
_LINKS = (errno.ELOOP, errno.ENOTDIR, errno.EMLINK)
_CREATE_TRIES = 3


def _unsafe() -> storing.UnsafePath:
    return storing.UnsafePath("the checkpoint store holds a link or an unexpected entry")


def _open_dir(
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


def _open_file(dir_fd: int, name: str) -> int | None:
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


class LocalFolderBackend:
    """Checkpoint stores in a local folder.

    Args:
        root: absolute path of the checkpoint folder (`AGENTIHOOKS_CHECKPOINT_ROOT`); it is
            created on the first write.

    Raises:
        ValueError: `root` is relative.
    """

    def __init__(self, root: pathlib.Path) -> None:
        root = pathlib.Path(root)
        if not root.is_absolute():
            raise ValueError("AGENTIHOOKS_CHECKPOINT_ROOT must be an absolute path")
        self.root = root

    def scoped(self, scope: storing.StoreScope) -> LocalStore:
        """The store of one task scope."""
        return LocalStore(self.root, scope)

    async def aclose(self) -> None:
        """Nothing to release: every operation opens and closes its own files."""


class LocalStore:
    """An `ArtifactStore` over `{root}/{scope.prefix}`."""

    def __init__(self, root: pathlib.Path, scope: storing.StoreScope) -> None:
        self._root = root
        self._scope = scope
        self._parts = scope.prefix.split("/")

    @property
    def scope(self) -> storing.StoreScope:
        """The scope every path of this store lives under."""
        return self._scope

    def _object_dir(self, sha256: str) -> list[str]:
        return [*self._parts, "objects", sha256[:2]]

    async def put_object(
        self, chunks: AsyncIterable[bytes], *, sha256: str, size: int, max_size: int
    ) -> storing.ObjectRef:
        """Store one object, checking hash and size while it streams in; see `ArtifactStore`."""
        check = storing.UploadCheck(sha256, size, max_size)
        if await self.object_exists(sha256):
            await _drain(chunks, check, None)
            return storing.ObjectRef(sha256, size, existed=True)
        folders = self._object_dir(sha256)
        made: list[int] = []
        temp = f".tmp-{secrets.token_hex(8)}"
        dir_fd, fd = await asyncio.to_thread(self._create_temp, folders, temp, made)
        try:
            try:
                await _drain(chunks, check, fd)
                created = await asyncio.to_thread(_publish_object, dir_fd, fd, temp, sha256)
            finally:
                os.close(fd)
        except BaseException:
            # Nothing of a refused or interrupted upload stays behind: not the temp file, nor
            # a folder this upload created (another upload's folder is left alone).
            _unlink_quietly(dir_fd, temp)
            self._remove_empty(folders, made)
            raise
        finally:
            os.close(dir_fd)
        return storing.ObjectRef(sha256, size, existed=not created)

    def _create_temp(self, folders: list[str], temp: str, made: list[int]) -> tuple[int, int]:
        """(folder descriptor, temp file descriptor) for a new object's bytes.

        A folder removed at that moment by a refused upload that had just created it is made
        again (a few tries: each removal needs an upload that failed and found it empty).
        """
        for attempt in range(_CREATE_TRIES):
            dir_fd = _open_dir(self._root, folders, create=True, created=made)
            assert dir_fd is not None
            try:
                return dir_fd, os.open(temp, _CREATE_FLAGS, _FILE_MODE, dir_fd=dir_fd)
            except FileNotFoundError:
                os.close(dir_fd)
                if attempt == _CREATE_TRIES - 1:
                    raise
            except BaseException:
                os.close(dir_fd)
                raise
        raise AssertionError("unreachable")

    def _remove_empty(self, folders: list[str], made: list[int]) -> None:
        """Remove the folders this upload created (by depth), deepest first, only while empty."""
        for depth in range(len(folders), 0, -1):
            if depth not in made:
                break
            with contextlib.suppress(OSError):
                os.rmdir(self._root.joinpath(*folders[:depth]))

    async def object_exists(self, sha256: str) -> bool:
        """True when something is stored under this object name."""
        storing.check_object_name(sha256)
        return await asyncio.to_thread(self._exists, sha256)

    def _exists(self, sha256: str) -> bool:
        dir_fd = _open_dir(self._root, self._object_dir(sha256), create=False)
        if dir_fd is None:
            return False
        try:
            return _entry_exists(dir_fd, sha256)
        finally:
            os.close(dir_fd)

    def read_object(
        self, sha256: str, chunk_size: int = storing.CHUNK_SIZE
    ) -> AsyncIterator[bytes]:
        """The object's bytes; iterating raises `ObjectMissing` when it is absent."""
        storing.check_object_name(sha256)
        if chunk_size < 1:
            raise ValueError("chunk_size must be positive")
        return self._read(sha256, chunk_size)

    async def _read(self, sha256: str, chunk_size: int) -> AsyncIterator[bytes]:
        fd = await asyncio.to_thread(self._open_object, sha256)
        if fd is None:
            raise storing.ObjectMissing("the object is not in the store")
        with io.FileIO(fd, "r", closefd=True) as file:
            while chunk := await asyncio.to_thread(file.read, chunk_size):
                yield chunk

    def _open_object(self, sha256: str) -> int | None:
        dir_fd = _open_dir(self._root, self._object_dir(sha256), create=False)
        if dir_fd is None:
            return None
        try:
            return _open_file(dir_fd, sha256)
        finally:
            os.close(dir_fd)

    async def digest_object(self, sha256: str) -> tuple[str, int] | None:
        """SHA-256 and size of the stored bytes, hashed in one worker thread with large reads."""
        storing.check_object_name(sha256)
        return await asyncio.to_thread(self._digest, sha256)

    async def digest_objects(
        self, names: Sequence[str]
    ) -> list[tuple[str, int] | storing.StoreError | None]:
        """`digest_object` of each name in one worker thread (small objects: one hop for all)."""
        for name in names:
            storing.check_object_name(name)
        return await asyncio.to_thread(lambda: [_or_error(self._digest, n) for n in names])

    async def objects_exist(self, names: Sequence[str]) -> list[bool | storing.StoreError]:
        """`object_exists` of each name in one worker thread (a long chain: one hop for all)."""
        for name in names:
            storing.check_object_name(name)

        def check_all() -> list[bool | storing.StoreError]:
            with _ObjectFolders(self._root, self._parts) as folders:
                return [_or_error(folders.exists, name) for name in names]

        return await asyncio.to_thread(check_all)

    async def read_objects(
        self, wanted: Sequence[tuple[str, int]]
    ) -> list[bytes | storing.StoreError | None]:
        """Small objects read in one worker thread (a long chain's segments: one hop for many),
        each at most its size plus one byte."""
        for name, _size in wanted:
            storing.check_object_name(name)

        def read(folders: _ObjectFolders, name: str, size: int) -> bytes | None:
            fd = folders.open(name)
            if fd is None:
                return None
            with io.FileIO(fd, "r", closefd=True) as file:
                return file.read(size + 1)

        def read_all() -> list[bytes | storing.StoreError | None]:
            with _ObjectFolders(self._root, self._parts) as folders:
                return [_or_error(read, folders, name, size) for name, size in wanted]

        return await asyncio.to_thread(read_all)

    async def digest_chains(
        self, chains: Sequence[Sequence[str]]
    ) -> list[storing.ChainDigest | storing.StoreError | None]:
        """Each chain's objects hashed in order as one stream, all in one worker thread."""
        for chain in chains:
            for name in chain:
                storing.check_object_name(name)

        def digest_all() -> list[storing.ChainDigest | storing.StoreError | None]:
            with _ObjectFolders(self._root, self._parts) as folders:
                return [_or_error(_digest_chain, folders, chain) for chain in chains]

        return await asyncio.to_thread(digest_all)

    def _digest(self, sha256: str) -> tuple[str, int] | None:
        fd = self._open_object(sha256)
        if fd is None:
            return None
        digest, size = hashlib.sha256(), 0
        # A buffer no larger than the file (plus one byte to see its end): zeroing a full
        # chunk for a small object would cost more than hashing it.
        buffer = bytearray(min(storing.CHUNK_SIZE, os.fstat(fd).st_size + 1))
        view = memoryview(buffer)
        with io.FileIO(fd, "r", closefd=True) as file:
            # readinto a reused buffer: no allocation per chunk; hashlib drops the GIL on it.
            while count := file.readinto(buffer):
                digest.update(view[:count])
                size += count
        return digest.hexdigest(), size

    async def put_manifest(self, checkpoint_id: str, data: bytes) -> None:
        """Write the manifest atomically (temp file, fsync, rename, fsync of the folder)."""
        storing.check_checkpoint_id(checkpoint_id)
        if len(data) > storing.MAX_MANIFEST_BYTES:
            raise storing.ObjectTooLarge("the manifest is over the size limit")
        await asyncio.to_thread(self._put_manifest, checkpoint_id, data)

    def _put_manifest(self, checkpoint_id: str, data: bytes) -> None:
        dir_fd = _open_dir(self._root, [*self._parts, "records"], create=True)
        assert dir_fd is not None
        temp = f".tmp-{secrets.token_hex(8)}.json"
        try:
            fd = os.open(temp, _CREATE_FLAGS, _FILE_MODE, dir_fd=dir_fd)
            try:
                _write_all(fd, data)
                os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(temp, f"{checkpoint_id}.json", src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
            os.fsync(dir_fd)
        except BaseException:
            _unlink_quietly(dir_fd, temp)
            raise
        finally:
            os.close(dir_fd)

    async def get_manifest(self, checkpoint_id: str) -> bytes | None:
        """The manifest's bytes, or None when absent."""
        storing.check_checkpoint_id(checkpoint_id)
        return await asyncio.to_thread(self._get_manifest, checkpoint_id)

    def _get_manifest(self, checkpoint_id: str) -> bytes | None:
        dir_fd = self._records_dir()
        if dir_fd is None:
            return None
        try:
            return _read_manifest(dir_fd, checkpoint_id)
        finally:
            os.close(dir_fd)

    def _records_dir(self) -> int | None:
        """The scope's records folder, opened (None when it does not exist)."""
        return _open_dir(self._root, [*self._parts, "records"], create=False)

    async def list_checkpoint_ids(self) -> list[str]:
        """Ids of the manifests in this scope, sorted."""
        return await asyncio.to_thread(self._list)

    async def get_manifests(self) -> list[tuple[str, bytes | storing.StoreError | None]]:
        """Every manifest of the scope, listed and read in one worker thread, through one
        opening of the records folder (each opening walks the path a folder at a time)."""

        def read_all() -> list[tuple[str, bytes | storing.StoreError | None]]:
            dir_fd = self._records_dir()
            if dir_fd is None:
                return []
            try:
                return [(i, _or_error(_read_manifest, dir_fd, i)) for i in _list_at(dir_fd)]
            finally:
                os.close(dir_fd)

        return await asyncio.to_thread(read_all)

    def _list(self) -> list[str]:
        dir_fd = self._records_dir()
        if dir_fd is None:
            return []
        try:
            return _list_at(dir_fd)
        finally:
            os.close(dir_fd)


class _ObjectFolders:
    """The scope's object folders, each opened once (safely, as `_open_dir` does) for many
    objects read in one worker thread: a 5,000-segment chain would otherwise walk the whole
    path, a folder at a time, for every segment."""

    def __init__(self, root: pathlib.Path, parts: list[str]) -> None:
        self._root = root
        self._parts = parts
        self._objects: int | None = None
        self._opened = False
        self._folders: dict[str, int | None] = {}

    def __enter__(self) -> _ObjectFolders:
        return self

    def __exit__(self, *exc: object) -> None:
        for fd in [*self._folders.values(), self._objects]:
            if fd is not None:
                os.close(fd)

    def _folder(self, prefix: str) -> int | None:
        if prefix not in self._folders:
            if not self._opened:
                self._opened = True
                self._objects = _open_dir(self._root, [*self._parts, "objects"], create=False)
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
        folder = self._folder(sha256[:2])
        return folder is not None and _entry_exists(folder, sha256)

    def open(self, sha256: str) -> int | None:
        folder = self._folder(sha256[:2])
        return None if folder is None else _open_file(folder, sha256)


def _digest_chain(folders: _ObjectFolders, names: Sequence[str]) -> storing.ChainDigest | None:
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


def _list_at(dir_fd: int) -> list[str]:
    """The manifest ids in an opened records folder, sorted."""
    ids = (name.removesuffix(".json") for name in os.listdir(dir_fd) if name.endswith(".json"))
    return sorted(i for i in ids if storing.is_safe_name(i))


def _read_manifest(dir_fd: int, checkpoint_id: str) -> bytes | None:
    """One manifest's bytes from an opened records folder, or None when absent."""
    fd = _open_file(dir_fd, f"{checkpoint_id}.json")
    if fd is None:
        return None
    with io.FileIO(fd, "r", closefd=True) as file:
        data = file.read(storing.MAX_MANIFEST_BYTES + 1)
    if len(data) > storing.MAX_MANIFEST_BYTES:
        raise storing.ObjectTooLarge("the manifest is over the size limit")
    return data


def _or_error(read: Callable[..., T], *args: Any) -> T | storing.StoreError:
    """`read(*args)`, or the `StoreError` it raised (a batch reports each name's own)."""
    try:
        return read(*args)
    except storing.StoreError as error:
        return error


async def _drain(chunks: AsyncIterable[bytes], check: storing.UploadCheck, fd: int | None) -> None:
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
        _write_all(fd, batch)


def _write_all(fd: int, data: bytes | bytearray) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _publish_object(dir_fd: int, fd: int, temp: str, sha256: str) -> bool:
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
        created = not _entry_exists(dir_fd, sha256)
        os.replace(temp, sha256, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    _unlink_quietly(dir_fd, temp)
    os.fsync(dir_fd)
    return created


def _entry_exists(dir_fd: int, name: str) -> bool:
    try:
        os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return False
    return True


def _unlink_quietly(dir_fd: int, name: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(name, dir_fd=dir_fd)
