"""Hostile checkpoints are refused and write nothing outside the worktree or harness home.

A checkpoint is untrusted input: `..` and absolute paths in untracked or session files, paths
into `.git/`, symlinks that lead out (committed in the bundle, or planted in the harness home),
and a patch touching `.git/`. Each restore goes through a real sidecar and a real local store;
an `outside` folder next to the attempt is watched, and so is everything else the test owns.
"""

from __future__ import annotations

import pathlib
from collections.abc import Callable
from typing import Any

import pytest

from services.common import directives, settings
from services.common.checkpoints import records
from services.restorer import captures, restores
from tests.integration.restorer import sidecar_support as kit
from tests.support import git_repos

C = directives.Continuity
pytestmark = pytest.mark.usefixtures("usual_umask")


class Hostile:
    def __init__(self, tmp: pathlib.Path, scene: kit.Scene, captured: captures.Captured) -> None:
        self.tmp = tmp
        self.scene = scene
        self.captured = captured
        self.root = tmp / "checkpoints"
        self.store = kit.local_store(self.root)
        self.outside = tmp / "outside"

    async def add(self, data: bytes) -> dict[str, Any]:
        async def one() -> Any:
            yield data

        blob = records.Blob.of(data)
        await self.store.put_object(one(), sha256=blob.sha256, size=blob.size, max_size=1 << 20)
        return {"sha256": blob.sha256, "size": blob.size}

    async def change(self, change: Callable[[dict[str, Any]], None]) -> None:
        await kit.rewrite_record(self.store, self.captured.checkpoint_id, change)

    def everything_else(self) -> dict[str, Any]:
        """Every file the test owns outside the replacement's worktree and harness home."""
        found = kit.full_snapshot(self.tmp)
        return {
            k: v
            for k, v in found.items()
            if not k.startswith(("replacement/worktree", "replacement/home"))
        }

    async def refused(self, reason: str, kind: directives.Continuity = C.NATIVE) -> kit.Run:
        before = self.everything_else()
        launch = self.scene.launch(kit.directive_for(self.captured, kind))
        conf = self.scene.conf(
            LAUNCH_RECORD=self.scene.write_launch(launch, "hostile-launch.json"),
            CHECKPOINT_ROOT=str(self.root),
        )
        run = await kit.restore_once(conf, self.scene.worktree)
        assert run.reason == reason
        after = self.everything_else()
        after.pop("hostile-launch.json")
        before.pop("hostile-launch.json", None)
        assert after == before
        return run


async def _hostile(
    tmp_path: pathlib.Path, before_capture: Callable[[kit.Scene], None] | None = None
) -> Hostile:
    scene = kit.make_scene(tmp_path)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep.txt").write_text("outside content\n")
    if before_capture is not None:
        before_capture(scene)
    storage = settings.load_storage({"AGENTIHOOKS_CHECKPOINT_ROOT": str(tmp_path / "checkpoints")})
    captured = await kit.capture(scene, storage)
    return Hostile(tmp_path, scene, captured)


@pytest.mark.parametrize(
    "path",
    [
        "../outside/planted.txt",
        "/tmp/planted.txt",
        "notes/../../outside/x",
        ".git/hooks/post-checkout",
        "sub/.git/config",
        "a//b",
        "back\\slash",
    ],
)
async def test_unsafe_untracked_paths_are_refused(tmp_path: pathlib.Path, path: str) -> None:
    """`..`, absolute, `.git/` and malformed paths of untracked files: the schema refuses the
    record (`invalid_record`) before anything is fetched or written."""
    hostile = await _hostile(tmp_path)
    entry = await hostile.add(b"#!/bin/sh\necho owned\n")

    def plant(record: dict[str, Any]) -> None:
        record["source"]["untracked"].append({"path": path, **entry, "mode": 0o755})
        record["inventory"].append({"role": "untracked", **entry})

    await hostile.change(plant)
    before = hostile.scene.untouched()
    await hostile.refused("invalid_record")
    assert hostile.scene.untouched() == before


@pytest.mark.parametrize(
    "path", ["../../outside/planted.jsonl", "/etc/planted.jsonl", ".claude/projects/../../x.jsonl"]
)
async def test_unsafe_session_file_paths_are_refused(tmp_path: pathlib.Path, path: str) -> None:
    """`..` and absolute paths of native session files: `invalid_record`, nothing written."""
    hostile = await _hostile(tmp_path)

    def plant(record: dict[str, Any]) -> None:
        record["native"]["files"][0]["path"] = path

    await hostile.change(plant)
    before = hostile.scene.untouched()
    await hostile.refused("invalid_record")
    assert hostile.scene.untouched() == before


async def test_a_symlink_in_the_harness_home_leading_out_is_refused(tmp_path: pathlib.Path) -> None:
    """Session files are written without following a symlink out of the harness home: a
    planted `.claude/projects` link to another folder refuses the native restore before any
    file is written, and the worktree stays untouched. The reason names the real cause, the
    harness home (the record is valid: not `invalid_record`)."""
    hostile = await _hostile(tmp_path)
    (hostile.scene.home / ".claude").mkdir()
    (hostile.scene.home / ".claude" / "projects").symlink_to(hostile.outside)
    before = hostile.scene.untouched()
    await hostile.refused(restores.HOME_UNSAFE)
    assert hostile.scene.untouched() == before
    assert sorted(p.name for p in hostile.outside.iterdir()) == ["keep.txt"]


async def test_an_untracked_file_under_a_committed_symlink_leading_out_is_refused(
    tmp_path: pathlib.Path,
) -> None:
    """A bundle that commits a symlink pointing out of the worktree, and an untracked file
    "inside" it: the file is never written through the link (`source: …`), the folder the link
    names is untouched, and the half-built clone is removed."""

    def commit_escape(scene: kit.Scene) -> None:
        (scene.project.worktree / "escape").symlink_to(tmp_path / "outside")
        git_repos.git(scene.project.worktree, "add", "escape")
        git_repos.git(scene.project.worktree, "commit", "-q", "-m", "a link out")

    hostile = await _hostile(tmp_path, commit_escape)
    entry = await hostile.add(b"planted through a link\n")

    def plant(record: dict[str, Any]) -> None:
        record["source"]["untracked"].append({"path": "escape/planted.txt", **entry, "mode": 0o644})
        record["inventory"].append({"role": "untracked", **entry})

    await hostile.change(plant)
    run = await hostile.refused("source: unsafe path in untracked files")
    assert ("native", "done") in run.steps
    assert sorted(p.name for p in hostile.outside.iterdir()) == ["keep.txt"]
    assert list(hostile.scene.worktree.iterdir()) == []


async def test_a_patch_touching_git_internals_is_refused(tmp_path: pathlib.Path) -> None:
    """A patch touching `.git/` (a hook that would run on the next git command) is refused
    before the worktree is written (`source: unsafe path in patch`)."""
    hostile = await _hostile(tmp_path)
    patch = (
        b"diff --git a/.git/hooks/pre-commit b/.git/hooks/pre-commit\nnew file mode 100755\n"
        b"--- /dev/null\n+++ b/.git/hooks/pre-commit\n@@ -0,0 +1 @@\n+echo owned\n"
    )
    entry = await hostile.add(patch)

    def swap(record: dict[str, Any]) -> None:
        old = record["source"]["patch"]["sha256"]
        record["source"]["patch"] = entry
        for item in record["inventory"]:
            if item["sha256"] == old:
                item.update(entry)

    await hostile.change(swap)
    await hostile.refused("source: unsafe path in patch", C.RECONSTRUCTED)
    assert list(hostile.scene.worktree.iterdir()) == []
    assert not (hostile.scene.attempt_dir / "continuation.txt").exists()
