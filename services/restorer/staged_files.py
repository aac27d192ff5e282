"""Files written ahead into a private staging folder, to be moved into their tree later.

Restoring a worktree writes its untracked files' bytes while the checkout they belong in is
still being made: the bytes go to a fresh folder of the restorer's own (`Staging`), under names
of its own making, and `paths.TreeWriter.place` later moves each into place with every check a
record's path gets (`paths`). What was not placed is removed with the folder.
"""

from __future__ import annotations

import contextlib
import os
import secrets

from services.restorer import paths


class Staging:
    """Files written ahead into a fresh private folder, each placed later by
    `paths.TreeWriter.place`.

    Writing the bytes, the slow part, can so run before the tree the files belong in is ready
    (while a checkout is still being made). The folder (mode 0700, a new random name in
    `parent`) holds only names of its own making: no path a record names is used until
    placement, which makes every check `paths.TreeWriter.write` makes and renames the staged file
    into place. `close` removes whatever was not placed.

    Args:
        parent: where the staging folder is made; on the same file system as the tree the
            files go to, or `paths.TreeWriter.place` fails with EXDEV (write the bytes instead).
        owner: (uid, gid) for staged files, or None.

    Raises:
        OSError: the folder could not be made.
    """

    def __init__(self, parent: str | os.PathLike[str], *, owner: paths.Owner = None) -> None:
        self._owner = owner
        self._name = f".agentihooks-staging-{secrets.token_hex(6)}"
        self._parent_fd = os.open(parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            os.mkdir(self._name, 0o700, dir_fd=self._parent_fd)
            self.fd = os.open(self._name, paths.DIR_FLAGS, dir_fd=self._parent_fd)
        except BaseException:
            os.close(self._parent_fd)
            raise
        self._count = 0

    def add(self, data: bytes, mode: int) -> str:
        """Stage one file with these bytes and permission bits; returns its staged name."""
        self._count += 1
        name = str(self._count)
        paths.new_file(self.fd, name, data, mode, self._owner)
        return name

    def close(self) -> None:
        """Remove the staging folder and every file still in it."""
        if self.fd < 0:
            return
        for name in os.listdir(self.fd):
            with contextlib.suppress(OSError):
                os.unlink(name, dir_fd=self.fd)
        os.close(self.fd)
        self.fd = -1
        with contextlib.suppress(OSError):
            os.rmdir(self._name, dir_fd=self._parent_fd)
        os.close(self._parent_fd)
