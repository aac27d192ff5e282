"""Processes the kubelet starts: signalling their groups, reaping them, reading their report
pipes."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
from pathlib import Path
from typing import Any

log = logging.getLogger("tests.kubelet")


def open_append(path: Path) -> Any:
    return open(path, "ab")  # handed to a child process, closed by the caller


def kill_group(proc: asyncio.subprocess.Process) -> None:
    # By pid, never proc.kill(): Popen.send_signal polls (waitpid) first and may reap the child
    # before asyncio's child watcher does, which then reports exit code 255.
    if proc.returncode is None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(proc.pid, signal.SIGKILL)


async def reap(proc: asyncio.subprocess.Process, *, kill: bool = False) -> None:
    if kill:
        kill_group(proc)
    try:
        async with asyncio.timeout(60):
            await proc.wait()
    except TimeoutError:
        log.warning("process %d does not end", proc.pid)


async def read_all(fd: int) -> bytes:
    """Read a pipe to its end without blocking the loop."""
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    transport, _ = await loop.connect_read_pipe(
        lambda: asyncio.StreamReaderProtocol(reader), os.fdopen(fd, "rb", 0)
    )
    try:
        return await reader.read()
    finally:
        transport.close()


def log_failure(task: asyncio.Task[Any]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.error("kubelet task %s failed", task.get_name(), exc_info=task.exception())
