"""cgroup v1 folders of the kubelet's node, Pods and containers: find, list, kill, remove them,
count their OOM kills."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import os
import signal
import time
from pathlib import Path

log = logging.getLogger("tests.kubelet")


ROOT = Path("/sys/fs/cgroup")


def own(controller: str) -> Path | None:
    """This process's cgroup folder of a v1 controller, or None."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if controller in controllers.split(","):
            folder = ROOT / controller / path.lstrip("/")
            return folder if folder.is_dir() else None
    return None


def tree(folder: Path) -> list[Path]:
    """A cgroup folder and every cgroup below it, deepest first."""
    found = [Path(top) for top, _, _ in os.walk(folder, topdown=False)]
    return [p for p in found if (p / "cgroup.procs").exists()]


def pids(folder: Path) -> list[int]:
    try:
        return [int(p) for p in (folder / "cgroup.procs").read_text().split()]
    except (OSError, ValueError):
        return []


def kill(folder: Path | None) -> None:
    if folder is None:
        return
    for pid in pids(folder):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)


async def remove(folder: Path | None, *, patience: float = 30.0) -> None:
    """Kill what is left in a cgroup, then remove it (retrying while it empties)."""
    if folder is None:
        return
    deadline = time.monotonic() + patience
    while True:
        if try_rmdir(folder, give_up=time.monotonic() > deadline):
            return
        await asyncio.sleep(0.05)


def try_rmdir(folder: Path, *, give_up: bool) -> bool:
    """Kill what is in a cgroup and remove it; False while it is still busy."""
    kill(folder)
    try:
        folder.rmdir()
    except FileNotFoundError:
        pass
    except OSError as exc:
        if exc.errno in (errno.EBUSY, errno.ENOTEMPTY) and not give_up:
            return False
        log.warning("cannot remove cgroup %s: %s", folder, exc)
    return True


def oom_kills(folder: Path | None) -> int:
    """How many processes the kernel OOM-killed in a memory cgroup."""
    if folder is None:
        return 0
    try:
        for line in (folder / "memory.oom_control").read_text().splitlines():
            key, _, value = line.partition(" ")
            if key == "oom_kill":
                return int(value)
    except (OSError, ValueError):
        pass
    return 0
