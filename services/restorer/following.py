"""Continuous capture: the sidecar follows the session files and the worktree, and captures
what changed within about a second (issue 21, "Continuous capture").

Change notices come from `watchfiles` (the Rust `notify` crate: inotify on Linux, an asyncio
`awatch`, its own debouncing, and a polling mode behind the same interface). When inotify is
not available, or the per-user watch limit is reached, the session folder is polled instead:
every quarter of the lag, the size, modification time and inode of each file under it (session
folders are small, so this costs little). The poller is ours: `notify`'s own compares
modification times in whole seconds, so it misses an append made within the same second as
the change before it until something else is written.

- **Session files.** A change under the harness's session folder (`projects/` of Claude
  Code's folder, `sessions/` of Codex's) asks for a capture. Captures start at most one per
  `lag_s` (many appends in that window make one capture) and take complete records only: a
  line the harness is still writing waits for the capture after its newline.
- **Worktree.** A change in the worktree (its `.git` included, objects excepted) marks the
  source changed; the source is scanned (git status, diff, untracked files) at most once per
  `source_period_s`, and never more often than `SCAN_SHARE` of the time allows given how long
  the last scan took, so a large repository costs a bounded share of a core. A worktree of more
  than `max_watched_dirs` folders is not watched at all (inotify takes one watch per folder and
  the limit is shared with the harness; polling would walk the whole tree): its source is then
  scanned once per `source_period_s`, and a scan of an unchanged tree writes nothing.
- **Safety net.** A full capture (source scanned) runs at least once every `interval_s`,
  whatever was noticed: a change a watch missed is captured within the interval.

A capture between source scans reuses the last scanned source, so a record never names source
newer than the last scan; the final capture always scans.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import pathlib
from collections.abc import AsyncGenerator, Callable, Mapping

import watchfiles

from services.common import logs, waiting
from services.restorer import captures, capturing
from services.restorer.harness import claude_code, codex

log = logging.getLogger("services.restorer")

DEFAULT_LAG_S = 1.0
DEFAULT_SOURCE_PERIOD_S = 5.0
DEFAULT_MAX_WATCHED_DIRS = 10_000
SCAN_SHARE = 0.1
"""The largest share of the time source scans may take: after a scan of D seconds the next one
waits at least D / SCAN_SHARE."""

_EXISTS_POLL_S = 0.5
_WATCH_ERRORS = (OSError, RuntimeError)
"""What a watch that cannot start raises: `OSError` (no inotify, the watch limit reached) or
watchfiles' `WatchfilesRustInternalError` (a `RuntimeError`) for an error it does not know."""
_IGNORED_DIRS = frozenset(watchfiles.DefaultFilter.ignore_dirs) - {".git"}

# Where each harness keeps its session files: the variable naming its folder, the folder's
# default under the home, and the sessions folder inside it.
_SESSION_FOLDERS = {
    claude_code.NAME: (claude_code.CONFIG_DIR_VARIABLE, ".claude", "projects"),
    codex.NAME: (codex.HOME_VARIABLE, ".codex", "sessions"),
}


@dataclasses.dataclass(frozen=True)
class Cadence:
    """How continuous capture paces itself (`AGENTIHOOKS_CAPTURE_…` settings).

    Attributes:
        interval_s: the safety net: a full capture at least this often.
        lag_s: the batching window: at most one capture per `lag_s`, started within about
            `lag_s` of a change.
        source_period_s: the shortest time between two source scans.
        max_watched_dirs: a worktree with more folders is not watched (see the module notes).
        force_polling: poll the session folder instead of inotify.
    """

    interval_s: float = 60.0
    lag_s: float = DEFAULT_LAG_S
    source_period_s: float = DEFAULT_SOURCE_PERIOD_S
    max_watched_dirs: int = DEFAULT_MAX_WATCHED_DIRS
    force_polling: bool = False


def next_scan_after(started: float, took: float, cadence: Cadence) -> float:
    """When the next source scan may start, after one that started at `started` and took
    `took` seconds: at least `source_period_s` later, and late enough that scans take at most
    `SCAN_SHARE` of the time."""
    return started + max(cadence.source_period_s, took / SCAN_SHARE)


def session_folder(harness: str, home: pathlib.Path, environ: Mapping[str, str]) -> pathlib.Path:
    """The folder holding `harness`'s session files (the home itself for an unknown one)."""
    known = _SESSION_FOLDERS.get(harness)
    if known is None:
        return home
    variable, default, sessions = known
    configured = environ.get(variable, "")
    root = pathlib.Path(configured) if os.path.isabs(configured) else home / default
    return root / sessions


def count_dirs(top: pathlib.Path, cap: int) -> int:
    """The folders under `top` (itself included), counting no further than `cap + 1`."""
    found, pending = 0, [top]
    while pending and found <= cap:
        folder = pending.pop()
        found += 1
        with contextlib.suppress(OSError), os.scandir(folder) as entries:
            for item in entries:
                with contextlib.suppress(OSError):
                    if item.is_dir(follow_symlinks=False):
                        pending.append(pathlib.Path(item.path))
    return found


def _worktree_filter(worktree: pathlib.Path) -> Callable[[watchfiles.Change, str], bool]:
    """Changes that may change the captured source: not git's objects (a commit also moves a
    ref and the index), not caches that are never committed."""
    objects = str(worktree / ".git" / "objects") + os.sep

    def keep(_: watchfiles.Change, path: str) -> bool:
        if path.startswith(objects):
            return False
        try:
            parts = pathlib.PurePath(path).relative_to(worktree).parts
        except ValueError:
            return True  # named through another path to the worktree: keep it
        return not any(part in _IGNORED_DIRS for part in parts)

    return keep


@dataclasses.dataclass
class Counts:
    """What the follower did, for tests, benchmarks and logs."""

    captures: int = 0
    source_scans: int = 0
    failed: int = 0
    session_watch: str = "pending"
    worktree_watch: str = "pending"


class Follower:
    """Follows one attempt's session folder and worktree and captures when they change.

    Args:
        capturer: the attempt's capturer; its `wake` event also asks for a capture (SIGUSR1).
        sessions: the harness's session folder (it may not exist yet).
        worktree: the task worktree.
        cadence: the pacing.
    """

    def __init__(
        self,
        capturer: capturing.Capturer,
        sessions: pathlib.Path,
        worktree: pathlib.Path,
        cadence: Cadence,
    ) -> None:
        self._capturer = capturer
        self._sessions = sessions
        self._worktree = worktree
        self._cadence = cadence
        self._source_changed = True
        self._full = False
        # Set to end the watches: a watch thread checks it every step, where a cancelled
        # `awatch` would wait for its thread's timeout.
        self._stop = asyncio.Event()
        self.counts = Counts()

    def capture_now(self) -> None:
        """Ask for a capture with its source scanned, as soon as the pacing allows."""
        self._full = True
        self._capturer.wake.set()

    async def run(self) -> None:
        """Follow and capture until cancelled; a capture that fails is logged, the next one
        is tried on the next change."""
        watchers = [
            asyncio.create_task(self._follow_sessions(), name="follow-sessions"),
            asyncio.create_task(self._follow_worktree(), name="follow-worktree"),
        ]
        try:
            await self._capture_loop()
        finally:
            self._stop.set()
            await waiting.cancel(watchers)

    async def _capture_loop(self) -> None:
        loop = asyncio.get_running_loop()
        cadence, wake = self._cadence, self._capturer.wake
        last_start = -cadence.lag_s
        # The safety net: a full capture (its source scanned) at least once an interval, even
        # while the session keeps changing (a change the worktree's watch missed is found).
        last_scan = scan_due = loop.time()
        while True:
            now = loop.time()
            deadline = last_scan + cadence.interval_s
            if self._source_changed:
                deadline = min(deadline, scan_due)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(max(0.0, deadline - now)):
                    await wake.wait()
            # The batching window: what arrives within it is taken by one capture.
            await asyncio.sleep(max(0.0, last_start + cadence.lag_s - loop.time()))
            wake.clear()
            now = loop.time()
            safety = now >= last_scan + cadence.interval_s
            scan = self._full or safety or (self._source_changed and now >= scan_due)
            if scan:
                self._source_changed = self._full = False
                last_scan = now
            last_start = now
            if not await self._capture(scan) and scan:
                self._source_changed = True  # the scan is tried again when next due
            if scan:
                scan_due = next_scan_after(now, loop.time() - now, cadence)
                if self.counts.worktree_watch != "watching":
                    self._source_changed = True  # an unwatched worktree: scan once a period

    async def _capture(self, scan: bool) -> bool:
        try:
            await self._capturer.capture(scan_source=scan, wait_report=False)
        except captures.CaptureError as error:
            self.counts.failed += 1
            logs.event(log, "capture_failed", logging.WARNING, reason=str(error))
            return False
        except Exception as error:
            # The loop outlives one bad capture; the type only, its message may hold paths.
            self.counts.failed += 1
            logs.event(log, "capture_failed", logging.ERROR, exception=type(error).__name__)
            return False
        self.counts.captures += 1
        self.counts.source_scans += scan
        return True

    async def _follow_sessions(self) -> None:
        """Ask for a capture whenever something under the session folder changes."""
        await _exists(self._sessions)
        polling = self._cadence.force_polling
        while True:
            try:
                self.counts.session_watch = "polling" if polling else "watching"
                self._capturer.wake.set()  # what was written before the watch started
                changes = (
                    _polled(self._sessions, self._cadence.lag_s / 4)
                    if polling
                    else self._watch(self._sessions)
                )
                async for _ in changes:
                    self._capturer.wake.set()
                return
            except FileNotFoundError:
                await _exists(self._sessions)
            except _WATCH_ERRORS as error:
                if polling:
                    # Nothing to follow with: the interval's captures remain.
                    self.counts.session_watch = "failed"
                    logs.event(
                        log, "follow_failed", logging.WARNING, exception=type(error).__name__
                    )
                    return
                # No inotify here, or the watch limit is reached: poll the session folder.
                logs.event(log, "follow_polling", logging.WARNING, exception=type(error).__name__)
                polling = True

    async def _follow_worktree(self) -> None:
        """Mark the source changed whenever something in the worktree changes."""
        await _exists(self._worktree)
        cap = self._cadence.max_watched_dirs
        if await asyncio.to_thread(count_dirs, self._worktree, cap) > cap:
            self._unwatched("too_many_folders")
            return
        if self._cadence.force_polling:
            self._unwatched("polling")  # polling a worktree would walk it: scan once a period
            return
        try:
            self.counts.worktree_watch = "watching"
            async for _ in self._watch(self._worktree, _worktree_filter(self._worktree)):
                self._source_changed = True
                self._capturer.wake.set()
        except _WATCH_ERRORS as error:
            self._unwatched(type(error).__name__)

    def _unwatched(self, why: str) -> None:
        self.counts.worktree_watch = "unwatched"
        self._source_changed = True
        self._capturer.wake.set()
        logs.event(log, "worktree_unwatched", reason=why)

    def _watch(
        self,
        path: pathlib.Path,
        watch_filter: Callable[[watchfiles.Change, str], bool] | None = None,
    ) -> AsyncGenerator[set[tuple[watchfiles.Change, str]], None]:
        """inotify changes under `path` (raises `_WATCH_ERRORS` when it cannot watch)."""
        lag_ms = max(1, int(self._cadence.lag_s * 1000))
        return watchfiles.awatch(
            path,
            watch_filter=watch_filter,
            debounce=lag_ms,
            step=min(50, lag_ms),
            force_polling=False,
            recursive=True,
            ignore_permission_denied=True,
            stop_event=self._stop,
            rust_timeout=1000,
        )


def _snapshot(top: pathlib.Path) -> dict[str, tuple[int, int, int]]:
    """Size, modification time (ns) and inode of every file under `top`."""
    found: dict[str, tuple[int, int, int]] = {}
    for folder, _, names in os.walk(top):
        for name in names:
            with contextlib.suppress(OSError):
                seen = os.stat(os.path.join(folder, name), follow_symlinks=False)
                found[os.path.join(folder, name)] = (seen.st_size, seen.st_mtime_ns, seen.st_ino)
    return found


async def _polled(top: pathlib.Path, every_s: float) -> AsyncGenerator[None, None]:
    """Yield whenever a file under `top` appears, goes, grows or is rewritten; polled every
    `every_s` seconds."""
    last = await asyncio.to_thread(_snapshot, top)
    while True:
        await asyncio.sleep(max(0.01, every_s))
        now = await asyncio.to_thread(_snapshot, top)
        if now != last:
            last = now
            yield


async def _exists(path: pathlib.Path) -> None:
    """Return once `path` is a folder (a session folder appears with the first session)."""
    while True:
        if await asyncio.to_thread(path.is_dir):
            return
        await asyncio.sleep(_EXISTS_POLL_S)
