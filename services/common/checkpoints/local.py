"""The local folder backend: checkpoints under `AGENTIHOOKS_CHECKPOINT_ROOT`.

Layout: `{root}/{swarm}/{task_id}/{task_generation}/objects/{sha[:2]}/{sha}` and
`.../records/{checkpoint_id}.json`. Every folder below the root is opened relative to its parent
with O_NOFOLLOW, so a link planted inside the store is refused instead of followed out of it
(`folder_files`). Files are written to a temporary name in their own folder, synced, then moved
into place, so a reader never sees half an object or half a manifest. Blocking I/O runs in worker
threads.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import os
import pathlib
import secrets
from collections.abc import AsyncIterable, AsyncIterator, Sequence

from services.common.checkpoints import folder_files, storing

_CREATE_TRIES = 3


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
            await folder_files.drain(chunks, check, None)
            return storing.ObjectRef(sha256, size, existed=True)
        folders = self._object_dir(sha256)
        made: list[int] = []
        temp = f".tmp-{secrets.token_hex(8)}"
        dir_fd, fd = await asyncio.to_thread(self._create_temp, folders, temp, made)
        try:
            try:
                await folder_files.drain(chunks, check, fd)
                created = await asyncio.to_thread(
                    folder_files.publish_object, dir_fd, fd, temp, sha256
                )
            finally:
                os.close(fd)
        except BaseException:
            # Nothing of a refused or interrupted upload stays behind: not the temp file, nor
            # a folder this upload created (another upload's folder is left alone).
            folder_files.unlink_quietly(dir_fd, temp)
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
            dir_fd = folder_files.open_dir(self._root, folders, create=True, created=made)
            assert dir_fd is not None
            try:
                return dir_fd, os.open(
                    temp, folder_files.CREATE_FLAGS, folder_files.FILE_MODE, dir_fd=dir_fd
                )
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
        dir_fd = folder_files.open_dir(self._root, self._object_dir(sha256), create=False)
        if dir_fd is None:
            return False
        try:
            return folder_files.entry_exists(dir_fd, sha256)
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
        dir_fd = folder_files.open_dir(self._root, self._object_dir(sha256), create=False)
        if dir_fd is None:
            return None
        try:
            return folder_files.open_file(dir_fd, sha256)
        finally:
            os.close(dir_fd)

    async def digest_object(self, sha256: str) -> tuple[str, int] | None:
        """SHA-256 and size of the stored bytes, hashed in one worker thread with large reads."""
        storing.check_object_name(sha256)
        found = (await self.digest_objects([sha256]))[0]
        if isinstance(found, storing.StoreError):
            raise found
        return found

    async def digest_objects(
        self, names: Sequence[str]
    ) -> list[tuple[str, int] | storing.StoreError | None]:
        """`digest_object` of each name in one worker thread (small objects: one hop for all)."""
        for name in names:
            storing.check_object_name(name)

        def digest_all() -> list[tuple[str, int] | storing.StoreError | None]:
            # The object folders opened once for the batch, not walked again for each name.
            with folder_files.ObjectFolders(self._root, self._parts) as folders:
                digest = folder_files.digest_object
                return [folder_files.or_error(digest, folders, n) for n in names]

        return await asyncio.to_thread(digest_all)

    async def objects_exist(self, names: Sequence[str]) -> list[bool | storing.StoreError]:
        """`object_exists` of each name in one worker thread (a long chain: one hop for all)."""
        for name in names:
            storing.check_object_name(name)

        def check_all() -> list[bool | storing.StoreError]:
            with folder_files.ObjectFolders(self._root, self._parts) as folders:
                return [folder_files.or_error(folders.exists, name) for name in names]

        return await asyncio.to_thread(check_all)

    async def read_objects(
        self, wanted: Sequence[tuple[str, int]]
    ) -> list[bytes | storing.StoreError | None]:
        """Small objects read in one worker thread (a long chain's segments: one hop for many),
        each at most its size plus one byte."""
        for name, _size in wanted:
            storing.check_object_name(name)

        def read(folders: folder_files.ObjectFolders, name: str, size: int) -> bytes | None:
            fd = folders.open(name)
            if fd is None:
                return None
            with io.FileIO(fd, "r", closefd=True) as file:
                return file.read(size + 1)

        def read_all() -> list[bytes | storing.StoreError | None]:
            with folder_files.ObjectFolders(self._root, self._parts) as folders:
                return [folder_files.or_error(read, folders, name, size) for name, size in wanted]

        return await asyncio.to_thread(read_all)

    async def digest_chains(
        self, chains: Sequence[Sequence[str]]
    ) -> list[storing.ChainDigest | storing.StoreError | None]:
        """Each chain's objects hashed in order as one stream, all in one worker thread."""
        for chain in chains:
            for name in chain:
                storing.check_object_name(name)

        def digest_all() -> list[storing.ChainDigest | storing.StoreError | None]:
            with folder_files.ObjectFolders(self._root, self._parts) as folders:
                return [
                    folder_files.or_error(folder_files.digest_chain, folders, chain)
                    for chain in chains
                ]

        return await asyncio.to_thread(digest_all)

    async def put_manifest(self, checkpoint_id: str, data: bytes) -> None:
        """Write the manifest atomically (temp file, fsync, rename, fsync of the folder)."""
        storing.check_checkpoint_id(checkpoint_id)
        if len(data) > storing.MAX_MANIFEST_BYTES:
            raise storing.ObjectTooLarge("the manifest is over the size limit")
        await asyncio.to_thread(self._put_manifest, checkpoint_id, data)

    def _put_manifest(self, checkpoint_id: str, data: bytes) -> None:
        dir_fd = folder_files.open_dir(self._root, [*self._parts, "records"], create=True)
        assert dir_fd is not None
        temp = f".tmp-{secrets.token_hex(8)}.json"
        try:
            fd = os.open(temp, folder_files.CREATE_FLAGS, folder_files.FILE_MODE, dir_fd=dir_fd)
            try:
                folder_files.write_all(fd, data)
                os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(temp, f"{checkpoint_id}.json", src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
            os.fsync(dir_fd)
        except BaseException:
            folder_files.unlink_quietly(dir_fd, temp)
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
            return folder_files.read_manifest(dir_fd, checkpoint_id)
        finally:
            os.close(dir_fd)

    def _records_dir(self) -> int | None:
        """The scope's records folder, opened (None when it does not exist)."""
        return folder_files.open_dir(self._root, [*self._parts, "records"], create=False)

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
                return [
                    (i, folder_files.or_error(folder_files.read_manifest, dir_fd, i))
                    for i in folder_files.list_at(dir_fd)
                ]
            finally:
                os.close(dir_fd)

        return await asyncio.to_thread(read_all)

    def _list(self) -> list[str]:
        dir_fd = self._records_dir()
        if dir_fd is None:
            return []
        try:
            return folder_files.list_at(dir_fd)
        finally:
            os.close(dir_fd)
