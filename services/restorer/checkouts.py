"""Preparing the checkout: cloning the project into a worktree that has no repository.

A restore clones the project first when the worktree has no repository. The clone is the
slowest part of a restore and needs nothing the verification decides, so it starts while the
checkpoint is verified, into a scratch folder in the attempt folder (never the worktree: a
checkpoint that does not verify leaves the work tree untouched). Once the source step begins,
the scratch clone's `.git` is moved into the worktree and the source is applied on top of it,
exactly as if `source.apply` had cloned it itself; a refused or abandoned restore removes the
scratch clone.

Git runs in `git_commands.git_environment()` (no user or system configuration, no prompts) with
hooks off and `ext::` transports refused.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import pathlib
import secrets
import shutil
import signal

from services.common import waiting
from services.restorer import git_commands

_REMOVE_TRIES = 20
_REMOVE_PAUSE_S = 0.05

_GIT_CONFIG = (
    "core.hooksPath=/dev/null",
    "protocol.ext.allow=never",
    "protocol.file.allow=always",
    "init.defaultBranch=main",
)


def is_empty(worktree: pathlib.Path) -> bool:
    """True when the worktree is missing or an empty plain folder."""
    if not os.path.lexists(worktree):
        return True
    return worktree.is_dir() and not worktree.is_symlink() and not any(worktree.iterdir())


async def clone(target: pathlib.Path, repository: str, *, checkout: bool = True) -> bool:
    """Clone `repository` into `target` (created); True on success.

    Nothing git prints is kept: its messages can hold URLs with credentials.
    """
    target.parent.mkdir(parents=True, exist_ok=True)
    args = ["git"]
    for setting in _GIT_CONFIG:
        args += ["-c", setting]
    args += ["clone", "--quiet", "--origin", "origin"]
    if not checkout:
        args.append("--no-checkout")
    args += ["--", repository, str(target)]
    # Its own process group: git clone runs helpers (index-pack, upload-pack) that a stopped
    # clone must not leave writing into the target.
    spawn = asyncio.ensure_future(
        asyncio.create_subprocess_exec(
            *args,
            cwd=target.parent,
            env=git_commands.git_environment(),
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.DEVNULL,
            start_new_session=True,
        )
    )
    try:
        # Shielded: a cancel that lands while the process is being started must still find
        # (and stop) the process the start produced.
        process = await asyncio.shield(spawn)
    except asyncio.CancelledError:
        with contextlib.suppress(Exception):
            await _stop(await spawn)
        raise
    except OSError:
        return False
    try:
        return await process.wait() == 0
    except asyncio.CancelledError:
        await _stop(process)
        raise


async def _stop(process: asyncio.subprocess.Process) -> None:
    """Kill a clone and every helper it started, and reap it."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)
    await process.wait()


class EarlyClone:
    """A `--no-checkout` clone started before the checkpoint is verified.

    Args:
        attempt_dir: where the scratch clone lives until it is adopted.
        repository: what to clone.
    """

    def __init__(self, attempt_dir: pathlib.Path, repository: str) -> None:
        self.repository = repository
        self._scratch = attempt_dir / f".agentihooks-clone-{secrets.token_hex(6)}"
        self._task: asyncio.Task[bool] = asyncio.ensure_future(
            clone(self._scratch, repository, checkout=False)
        )

    async def adopt(self, worktree: pathlib.Path) -> bool:
        """Move the finished clone's repository into the missing or empty `worktree`.

        Returns False (and discards the clone) when it failed or cannot be moved there; the
        caller then clones as usual.
        """
        try:
            cloned = await self._task
        except Exception:
            cloned = False
        moved = cloned and await asyncio.to_thread(_move_in, self._scratch / ".git", worktree)
        await self.discard()
        return moved

    async def discard(self) -> None:
        """Stop the clone if it still runs and remove the scratch folder."""
        await waiting.cancel([self._task])
        # A helper killed with the clone may finish the write it was in: remove again until
        # nothing is left (a bounded number of times).
        for _ in range(_REMOVE_TRIES):
            await asyncio.to_thread(shutil.rmtree, self._scratch, True)
            if not await asyncio.to_thread(os.path.lexists, self._scratch):
                return
            await asyncio.sleep(_REMOVE_PAUSE_S)


def _move_in(repository: pathlib.Path, worktree: pathlib.Path) -> bool:
    """Move a `.git` folder into a missing or empty worktree; False when it cannot be."""
    if not is_empty(worktree):
        return False
    created = not os.path.lexists(worktree)
    try:
        worktree.mkdir(parents=True, exist_ok=True)
        os.rename(repository, worktree / ".git")
    except OSError:
        if created:
            with contextlib.suppress(OSError):
                worktree.rmdir()
        return False
    return True


def undo(worktree: pathlib.Path, was_missing: bool) -> None:
    """Remove what a failed restore put into a worktree that was missing or empty."""
    if was_missing:
        shutil.rmtree(worktree, ignore_errors=True)
        return
    for child in list(worktree.iterdir()):
        if child.is_dir() and not child.is_symlink():
            shutil.rmtree(child, ignore_errors=True)
        else:
            child.unlink(missing_ok=True)
