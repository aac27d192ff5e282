"""Continuous capture: the sidecar follows the session files and the worktree (issue 21, point 2).

"The sidecar follows the session files (inotify, through a maintained library, with a polling
fallback) and archives complete new records within about a second (configurable), batched; the
worktree is captured when it changes (debounced, with the cost of scanning a large repository
bounded). Reports to the controller are coalesced (at most about one a second per attempt)."

Real parts: a stand-in writer in a process of its own appends to the real session file, the
real Capturer writes into a real local checkpoint folder, reports go to the real controller
over gRPC (real Redis, the Kubernetes API emulator). Nothing here measures time: every wait is
on an observed state, with a generous deadline; the safety-net interval is an hour, so any
capture seen came from following.
"""

from __future__ import annotations

import asyncio
import contextlib
import pathlib
import re
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest

from services.common import directives, settings
from services.common.checkpoints import backends, records, storing
from services.controller.state import keys
from services.restorer import capturing, following, launching
from services.restorer.harness import claude_code
from tests.integration.restorer import sessions
from tests.integration.restorer import sidecar_support as kit
from tests.support import controller_server as cs
from tests.support import session_writer

pytestmark = pytest.mark.usefixtures("usual_umask")

DEADLINE_S = 60.0
HOUR = 3600.0
FIRST = len(kit.CONVERSATION)
"""The records the scene's session starts with (the first capture's watermark)."""


async def eventually(check: Callable[[], Awaitable[bool]], what: str) -> None:
    """Wait until `check` holds; fail naming `what` after `DEADLINE_S`."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + DEADLINE_S
    while not await check():
        if loop.time() > deadline:
            pytest.fail(f"not seen within {DEADLINE_S:g} s: {what}")
        await asyncio.sleep(0.05)


class Checkpoints:
    """The attempt's checkpoints in the local folder, read as a restore would."""

    def __init__(self, root: pathlib.Path, execution_id: str = "e-42", task: str = "t-eng-2"):
        backend = backends.open_backend(str(root), None, None)
        assert backend is not None
        self._store = backend.scoped(storing.StoreScope("example", task, 1))
        self._mine = re.compile(rf"ckpt-{re.escape(execution_id)}-(\d+)")

    async def sequences(self) -> list[int]:
        ids = await self._store.list_checkpoint_ids()
        return sorted(int(m.group(1)) for i in ids if (m := self._mine.fullmatch(i)))

    async def newest_watermark(self) -> int | None:
        found = await self.sequences()
        if not found:
            return None
        (checkpoint_id,) = [
            i for i in await self._store.list_checkpoint_ids() if i.endswith(f"-{found[-1]}")
        ]
        data = await self._store.get_manifest(checkpoint_id)
        assert data is not None
        watermark = records.decode_manifest(data)[0]["transcript"]["watermark"]
        assert isinstance(watermark, int)
        return watermark

    async def archived(self, watermark: int) -> bool:
        return await self.newest_watermark() == watermark


def _cadence(**changes: float | int | bool) -> following.Cadence:
    return following.Cadence(**{"interval_s": HOUR, "lag_s": 0.2, **changes})  # type: ignore[arg-type]


@contextlib.asynccontextmanager
async def followed(
    capturer: capturing.Capturer,
    scene: kit.Scene,
    cadence: following.Cadence,
    worktree: pathlib.Path | None = None,
) -> AsyncIterator[following.Follower]:
    """The follower of the fenced attempt's session folder and worktree, running."""
    follower = following.Follower(
        capturer,
        following.session_folder(claude_code.NAME, scene.fenced_home, {}),
        worktree or scene.project.worktree,
        cadence,
    )
    task = asyncio.create_task(follower.run(), name="follower")
    try:
        yield follower
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await capturer.aclose()


@contextlib.asynccontextmanager
async def writer(scene: kit.Scene) -> AsyncIterator[session_writer.Writer]:
    """A stand-in agent process appending to the fenced attempt's session file."""
    process = await session_writer.Writer.start(sessions.session_path(scene))
    try:
        yield process
    finally:
        await process.stop()


def _capturer(scene: kit.Scene, tmp: pathlib.Path, **options: object) -> capturing.Capturer:
    storage = settings.load_storage({"AGENTIHOOKS_CHECKPOINT_ROOT": str(tmp / "checkpoints")})
    launch = options.pop("launch", None) or scene.launch(directives.FRESH, scope=kit.SCOPE)
    assert isinstance(launch, launching.LaunchRecord)
    return capturing.Capturer(launch, kit.fenced_attempt(scene), storage, **options)  # type: ignore[arg-type]


async def test_appended_records_are_archived_without_waiting_for_the_interval(
    tmp_path: pathlib.Path,
) -> None:
    """Records a process appends to the session file are archived by following it, with the
    safety-net interval an hour away."""
    scene = kit.make_scene(tmp_path)
    stored = Checkpoints(tmp_path / "checkpoints")
    capturer = _capturer(scene, tmp_path)
    async with followed(capturer, scene, _cadence()) as follower, writer(scene) as agent:
        await eventually(lambda: stored.archived(FIRST), "the session as it was at start")
        await agent.say("append 5")
        await eventually(lambda: stored.archived(FIRST + 5), "the five appended records")
        await agent.say("append 1")
        await eventually(lambda: stored.archived(FIRST + 6), "one more record")
    assert follower.counts.session_watch == "watching"


async def test_a_partial_line_waits_until_it_is_complete(tmp_path: pathlib.Path) -> None:
    """ "A record still being written waits": a capture taken while the last line has no
    newline yet archives the records before it only; once the line ends it is archived."""
    scene = kit.make_scene(tmp_path)
    stored = Checkpoints(tmp_path / "checkpoints")
    capturer = _capturer(scene, tmp_path)
    async with followed(capturer, scene, _cadence()) as follower, writer(scene) as agent:
        await agent.say("append 2")
        await eventually(lambda: stored.archived(FIRST + 2), "the complete records")
        seen = follower.counts.captures
        await agent.say("partial")

        async def captured_since() -> bool:
            return follower.counts.captures > seen

        await eventually(captured_since, "a capture after the partial line")
        assert await stored.newest_watermark() == FIRST + 2
        await agent.say("finish")
        await eventually(lambda: stored.archived(FIRST + 3), "the record once complete")


async def test_many_appends_are_batched_into_few_captures(tmp_path: pathlib.Path) -> None:
    """Five hundred writes, one record each, within a few batching windows make a handful of
    checkpoints, not five hundred."""
    scene = kit.make_scene(tmp_path)
    stored = Checkpoints(tmp_path / "checkpoints")
    capturer = _capturer(scene, tmp_path)
    async with followed(capturer, scene, _cadence(lag_s=0.5)), writer(scene) as agent:
        await eventually(lambda: stored.archived(FIRST), "the first capture")
        await agent.say("append 500 1")
        await eventually(lambda: stored.archived(FIRST + 500), "every appended record")
    written = await stored.sequences()
    assert 2 <= len(written) <= 50, written


async def test_polling_follows_the_session_when_inotify_is_not_used(
    tmp_path: pathlib.Path,
) -> None:
    """The polling fallback (forced here, as when inotify is unavailable or the watch limit is
    reached) archives appended records the same way."""
    scene = kit.make_scene(tmp_path)
    stored = Checkpoints(tmp_path / "checkpoints")
    capturer = _capturer(scene, tmp_path)
    cadence = _cadence(force_polling=True, source_period_s=HOUR)
    async with followed(capturer, scene, cadence) as follower, writer(scene) as agent:
        await eventually(lambda: stored.archived(FIRST), "the first capture")
        await agent.say("append 3")
        await eventually(lambda: stored.archived(FIRST + 3), "the appended records, polled")
    assert follower.counts.session_watch == "polling"


async def test_a_session_folder_that_appears_later_is_followed(tmp_path: pathlib.Path) -> None:
    """A harness writes its first session after the sidecar started: the folder is followed
    once it exists."""
    scene = kit.make_scene(tmp_path)
    projects = scene.fenced_home / ".claude" / "projects"
    hidden = scene.fenced_home / "hidden-projects"
    projects.rename(hidden)
    stored = Checkpoints(tmp_path / "checkpoints")
    capturer = _capturer(scene, tmp_path)
    async with followed(capturer, scene, _cadence()) as follower:

        async def waiting() -> bool:
            return follower.counts.session_watch == "pending"

        await eventually(waiting, "the follower waiting for the session folder")
        hidden.rename(projects)
        async with writer(scene) as agent:
            await agent.say("append 2")
            await eventually(lambda: stored.archived(FIRST + 2), "records in the new folder")


async def test_a_worktree_change_is_captured(tmp_path: pathlib.Path) -> None:
    """An edit in the worktree, with the session unchanged, is captured as source: the new
    checkpoint's patch holds the edit."""
    scene = kit.make_scene(tmp_path)
    stored = Checkpoints(tmp_path / "checkpoints")
    capturer = _capturer(scene, tmp_path)
    cadence = _cadence(source_period_s=0.2)
    async with followed(capturer, scene, cadence) as follower:
        await eventually(lambda: stored.archived(FIRST), "the first capture")
        before = await stored.sequences()
        (scene.project.worktree / "edited.txt").write_text("an untracked file the agent wrote\n")

        async def recaptured() -> bool:
            return len(await stored.sequences()) > len(before)

        await eventually(recaptured, "a checkpoint after the worktree changed")
    assert follower.counts.worktree_watch == "watching"
    store = kit.local_store(tmp_path / "checkpoints")
    data = await store.get_manifest(f"ckpt-e-42-{(await stored.sequences())[-1]}")
    assert data is not None
    record = records.decode_manifest(data)[0]
    untracked = [u["path"] for u in record["source"]["untracked"]]  # type: ignore[index]
    assert "edited.txt" in untracked


async def test_a_large_worktree_is_not_watched_and_its_scans_are_bounded(
    tmp_path: pathlib.Path,
) -> None:
    """A worktree of more folders than the cap gets no watch (inotify takes one per folder)
    and its source is scanned at most once per source period, however much the session
    changes meanwhile: records keep being archived from the last scan's source."""
    scene = kit.make_scene(tmp_path)
    for n in range(12):
        (scene.project.worktree / f"pkg{n}").mkdir()
    stored = Checkpoints(tmp_path / "checkpoints")
    capturer = _capturer(scene, tmp_path)
    cadence = _cadence(max_watched_dirs=8, source_period_s=HOUR)
    async with followed(capturer, scene, cadence) as follower, writer(scene) as agent:
        await eventually(lambda: stored.archived(FIRST), "the first capture")
        for round_ in range(1, 6):
            await agent.say("append 2")
            await eventually(lambda r=round_: stored.archived(FIRST + 2 * r), "records")  # type: ignore[misc]
            (scene.project.worktree / f"note{round_}.txt").write_text("changed\n")
    assert follower.counts.worktree_watch == "unwatched"
    assert follower.counts.source_scans == 1  # the first capture's; the next is an hour away
    assert follower.counts.captures >= 6


def test_scans_take_a_bounded_share_of_the_time() -> None:
    """After a scan the next waits the source period, or ten times the scan's own duration
    when that is longer (a large repository)."""
    cadence = following.Cadence(source_period_s=5.0)
    assert following.next_scan_after(100.0, 0.2, cadence) == 105.0
    assert following.next_scan_after(100.0, 2.0, cadence) == 120.0
    assert following.count_dirs(pathlib.Path("/nonexistent-folder"), 10) == 1


# --- reports, to the real controller ---------------------------------------------------------


class Reporting:
    """The fenced scene's capturer as the running attempt `eng-1` of the real controller's
    swarm: its own scope and worker credential, reports sent to the controller."""

    def __init__(self, tmp: pathlib.Path, ctl: cs.Controller) -> None:
        self._tmp, self._ctl = tmp, ctl
        self.scene = kit.make_scene(tmp)
        self.execution_id = keys.execution_id("example", "eng-1", 1)
        self.stored = Checkpoints(tmp / "checkpoints", self.execution_id, "t-eng-1")

    async def capturer(self, report_period_s: float) -> capturing.Capturer:
        await self._ctl.apply()
        await cs.wait_for_pod(self._ctl, self.execution_id)
        scope = launching.Scope("example", "eng-1", "t-eng-1", 1, self.execution_id, 1)
        return _capturer(
            self.scene,
            self._tmp,
            launch=self.scene.launch(directives.FRESH, scope=scope),
            control_addr=self._ctl.addr,
            worker_credential=cs.worker_credential(self._ctl, self.execution_id),
            report_period_s=report_period_s,
        )

    async def held(self) -> dict[str, str]:
        """The attempt's record in the controller's Redis: what a fence would copy."""
        key = keys.execution("example", self.execution_id)
        raw = await self._ctl.redis.hgetall(key)  # type: ignore[misc]
        return {k.decode(): v.decode() for k, v in raw.items()}


async def test_reports_are_coalesced_and_the_final_report_is_always_sent(
    tmp_path: pathlib.Path, controller: cs.Controller
) -> None:
    """Many captures within one report period make one report; the final capture's report is
    sent at once all the same, and the controller holds its watermark as final."""
    attempt = Reporting(tmp_path, controller)
    scene, stored = attempt.scene, attempt.stored
    capturer = await attempt.capturer(report_period_s=HOUR)
    async with followed(capturer, scene, _cadence()), writer(scene) as agent:
        await eventually(lambda: stored.archived(FIRST), "the first capture")
        for n in range(1, 6):
            await agent.say("append 1")
            await eventually(lambda n=n: stored.archived(FIRST + n), "a record")  # type: ignore[misc]
        assert len(await stored.sequences()) == 6
        assert capturer.reports_sent == 1

        async def first_reported() -> bool:
            return (await attempt.held()).get("archive_watermark") == str(FIRST)

        await eventually(first_reported, "the first capture's report")
        final = await capturer.capture(final=True)
    assert capturer.reports_sent == 2
    held = await attempt.held()
    assert (held["archive_watermark"], held.get("capture_final")) == (str(FIRST + 5), "1")
    assert held["captured_checkpoint_id"] == final.checkpoint_id


async def test_a_coalesced_report_carries_the_newest_watermark(
    tmp_path: pathlib.Path, controller: cs.Controller
) -> None:
    """A capture made within the report period is reported with the next report, which
    carries the newest watermark: the controller catches up without a final report."""
    attempt = Reporting(tmp_path, controller)
    scene, stored = attempt.scene, attempt.stored
    capturer = await attempt.capturer(report_period_s=1.0)
    async with followed(capturer, scene, _cadence(lag_s=0.05)), writer(scene) as agent:
        await eventually(lambda: stored.archived(FIRST), "the first capture")
        for n in range(1, 9):
            await agent.say("append 1")
            await eventually(lambda n=n: stored.archived(FIRST + n), "a record")  # type: ignore[misc]

        async def caught_up() -> bool:
            held = await attempt.held()
            return held.get("archive_watermark") == str(FIRST + 8)

        await eventually(caught_up, "the controller holding the newest watermark")
        assert "capture_final" not in await attempt.held()
