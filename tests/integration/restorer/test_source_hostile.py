"""Hostile source is refused with a `source: …` reason and writes nothing outside the worktree.

Refusals checked before writing leave the worktree exactly as it was; a refusal found after the
clone into a missing or empty folder leaves that folder as it was too.
"""

from __future__ import annotations

import dataclasses
import pathlib

import pytest

from services.common import errors
from services.restorer import source, source_records
from tests.support import git_repos

pytestmark = pytest.mark.usefixtures("usual_umask")

GIT_CONFIG_PATCH = b"""diff --git a/.git/config b/.git/config
index 0000000000000000000000000000000000000000..1111111111111111111111111111111111111111 100644
--- a/.git/config
+++ b/.git/config
@@ -1 +1,2 @@
 [core]
+\thooksPath = /tmp/evil
"""
GIT_HOOK_PATCH = b"""diff --git a/.git/hooks/post-checkout b/.git/hooks/post-checkout
new file mode 100755
--- /dev/null
+++ b/.git/hooks/post-checkout
@@ -0,0 +1,2 @@
+#!/bin/sh
+touch /tmp/pwned
"""
MODE_ONLY_GIT_PATCH = b"""diff --git a/.git/config b/.git/config
old mode 100644
new mode 100755
"""
DOTDOT_PATCH = b"""diff --git a/../escape.txt b/../escape.txt
new file mode 100644
--- /dev/null
+++ b/../escape.txt
@@ -0,0 +1 @@
+escaped
"""
ABSOLUTE_PATCH = b"""--- /dev/null
+++ b//etc/escape.txt
@@ -0,0 +1 @@
+escaped
"""
NESTED_GIT_PATCH = b"""diff --git a/sub/.git/config b/sub/.git/config
new file mode 100644
--- /dev/null
+++ b/sub/.git/config
@@ -0,0 +1 @@
+[core]
"""
NOT_APPLYING_PATCH = b"""diff --git a/README.md b/README.md
--- a/README.md
+++ b/README.md
@@ -1 +1 @@
-this line is not in the file
+replacement
"""
SYMLINK_OUT_PATCH = b"""diff --git a/escape b/escape
new file mode 120000
--- /dev/null
+++ b/escape
@@ -0,0 +1 @@
+OUTSIDE
\\ No newline at end of file
"""


@dataclasses.dataclass
class Scene:
    project: git_repos.Project
    captured: source_records.SourceCapture
    existing: pathlib.Path
    outside: pathlib.Path


@pytest.fixture
async def scene(tmp_path: pathlib.Path) -> Scene:
    """A real capture, an existing checkout at its base and an outside folder to watch."""
    project = git_repos.project(tmp_path / "p")
    captured = await source.capture(project.worktree)
    existing = tmp_path / "existing"
    git_repos.git(tmp_path, "clone", "-q", project.url, str(existing))
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep.txt").write_text("outside content\n")
    return Scene(project, captured, existing, outside)


def _state(scene: Scene) -> tuple[object, ...]:
    config = (scene.existing / ".git" / "config").read_bytes()
    hooks = sorted(p.name for p in (scene.existing / ".git" / "hooks").iterdir())
    return (
        git_repos.snapshot(scene.existing),
        git_repos.snapshot(scene.outside),
        git_repos.snapshot(scene.existing.parent / "p" / "origin.git"),
        config,
        hooks,
        git_repos.git(scene.existing, "rev-parse", "HEAD"),
    )


async def _refused(scene: Scene, captured: source_records.SourceCapture, reason: str) -> None:
    """Applied into the existing checkout and into a missing folder: refused, nothing written."""
    before = _state(scene)
    with pytest.raises(source_records.SourceError) as raised:
        await source.apply(scene.existing, captured, scene.project.url)
    assert str(raised.value) == reason
    assert isinstance(raised.value, errors.Refused)
    assert raised.value.reason == reason
    assert git_repos.SECRET_LINE not in str(raised.value)
    assert _state(scene) == before
    missing = scene.existing.parent / "never-created"
    with pytest.raises(source_records.SourceError) as again:
        await source.apply(missing, captured, scene.project.url)
    assert str(again.value) == reason
    assert not missing.exists()
    assert _state(scene) == before


@pytest.mark.parametrize(
    "patch",
    [GIT_CONFIG_PATCH, GIT_HOOK_PATCH, MODE_ONLY_GIT_PATCH, NESTED_GIT_PATCH, DOTDOT_PATCH],
    ids=["git-config", "git-hook", "git-mode-only", "nested-git", "dotdot"],
)
async def test_a_patch_touching_git_internals_or_escaping_is_refused(
    scene: Scene, patch: bytes
) -> None:
    """Hostile checkpoints: a patch touching `.git/`, or a path with `..`, is refused before
    anything is written."""
    hostile = dataclasses.replace(scene.captured, patch=patch)
    await _refused(scene, hostile, "source: unsafe path in patch")


async def test_a_patch_with_an_absolute_path_is_refused(scene: Scene) -> None:
    """An absolute target path in the patch is refused before anything is written."""
    hostile = dataclasses.replace(scene.captured, patch=ABSOLUTE_PATCH)
    await _refused(scene, hostile, "source: unsafe path in patch")


@pytest.mark.parametrize(
    "path",
    ["../x", "/etc/x", "a/../../x", ".git/config", "notes/.git/hooks/pre-commit", "a\\b", "a//b"],
)
async def test_unsafe_untracked_paths_are_refused(scene: Scene, path: str) -> None:
    """Hostile checkpoints: `..` and absolute paths in untracked files are refused first."""
    bad = source_records.UntrackedFile(path=path, mode=0o644, data=b"escaped\n")
    hostile = dataclasses.replace(scene.captured, untracked=(*scene.captured.untracked, bad))
    await _refused(scene, hostile, "source: unsafe path in untracked files")


async def test_a_symlink_in_the_worktree_pointing_out_is_refused(scene: Scene) -> None:
    """A symlink already in the worktree that leads outside is never written through."""
    (scene.existing / "notes").symlink_to(scene.outside)
    before = _state(scene)
    with pytest.raises(source_records.SourceError) as raised:
        await source.apply(scene.existing, scene.captured, scene.project.url)
    assert str(raised.value) == "source: unsafe path in untracked files"
    assert _state(scene) == before


async def test_a_symlink_the_patch_creates_cannot_be_written_through(scene: Scene) -> None:
    """A patch may carry a symlink pointing out; untracked files are still never written
    through it, and nothing lands outside."""
    patch = SYMLINK_OUT_PATCH.replace(b"OUTSIDE", str(scene.outside).encode())
    through = source_records.UntrackedFile(path="escape/planted.txt", mode=0o644, data=b"escaped\n")
    hostile = dataclasses.replace(scene.captured, patch=patch, untracked=(through,))
    outside_before = git_repos.snapshot(scene.outside)
    with pytest.raises(source_records.SourceError) as raised:
        await source.apply(scene.existing, hostile, scene.project.url)
    assert str(raised.value) == "source: unsafe path in untracked files"
    assert git_repos.snapshot(scene.outside) == outside_before
    missing = scene.existing.parent / "fresh"
    with pytest.raises(source_records.SourceError):
        await source.apply(missing, hostile, scene.project.url)
    assert git_repos.snapshot(scene.outside) == outside_before
    assert not missing.exists()


async def test_a_patch_that_does_not_apply_leaves_the_worktree(scene: Scene) -> None:
    """A patch that does not fit the head commit is checked on a scratch index first."""
    hostile = dataclasses.replace(scene.captured, patch=NOT_APPLYING_PATCH)
    await _refused(scene, hostile, "source: patch does not apply")


async def test_a_bundle_from_another_history_is_refused(
    scene: Scene, tmp_path: pathlib.Path
) -> None:
    """A bundle whose prerequisites the repository lacks does not apply."""
    other = tmp_path / "other"
    other.mkdir()
    git_repos.git(other, "init", "-q")
    for n in (1, 2):
        git_repos.write(other, "unrelated.txt", f"unrelated history {n}\n")
        git_repos.git(other, "add", "unrelated.txt")
        git_repos.git(other, "commit", "-q", "-m", f"unrelated {n}")
    git_repos.git(other, "bundle", "create", "-q", str(tmp_path / "foreign.bundle"), "HEAD~1..HEAD")
    foreign = (tmp_path / "foreign.bundle").read_bytes()
    hostile = dataclasses.replace(scene.captured, bundle=foreign)
    await _refused(scene, hostile, "source: bundle does not apply")


async def test_garbage_bundle_is_refused(scene: Scene) -> None:
    """Bytes that are not a bundle do not apply."""
    hostile = dataclasses.replace(scene.captured, bundle=b"# v2 git bundle\nnot really\n")
    await _refused(scene, hostile, "source: bundle does not apply")


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({"head_commit": "HEAD"}, "source: commit id is malformed"),
        ({"base_commit": "--upload-pack=evil"}, "source: commit id is malformed"),
        ({"head_commit": "f" * 40}, "source: head commit is missing"),
        ({"branch": "-evil"}, "source: branch name is malformed"),
        ({"branch": "a..b"}, "source: branch name is malformed"),
    ],
)
async def test_inconsistent_records_are_refused(
    scene: Scene, change: dict[str, str], reason: str
) -> None:
    """Commit ids and branch names are checked before git ever sees them as arguments."""
    await _refused(scene, dataclasses.replace(scene.captured, **change), reason)  # type: ignore[arg-type]


async def test_a_folder_with_files_but_no_repository_is_refused(
    scene: Scene, tmp_path: pathlib.Path
) -> None:
    """Cloning happens only into a missing or empty folder; other files are never clobbered."""
    folder = tmp_path / "occupied"
    folder.mkdir()
    (folder / "mine.txt").write_text("mine")
    with pytest.raises(source_records.SourceError) as raised:
        await source.apply(folder, scene.captured, scene.project.url)
    assert str(raised.value) == "source: worktree is not empty and holds no repository"
    assert sorted(p.name for p in folder.iterdir()) == ["mine.txt"]
    assert (folder / "mine.txt").read_text() == "mine"


async def test_a_failed_clone_is_refused_and_cleaned_up(
    scene: Scene, tmp_path: pathlib.Path
) -> None:
    """A clone that fails is `source: clone failed`; the empty folder stays empty."""
    folder = tmp_path / "empty"
    folder.mkdir()
    with pytest.raises(source_records.SourceError) as raised:
        await source.apply(folder, scene.captured, str(tmp_path / "no-such-repo.git"))
    assert str(raised.value) == "source: clone failed"
    assert list(folder.iterdir()) == []


async def test_no_repository_and_a_partial_bundle_is_refused(
    scene: Scene, tmp_path: pathlib.Path
) -> None:
    """With no URL to clone and no full history, there is nothing to restore from."""
    folder = tmp_path / "empty"
    folder.mkdir()
    without_bundle = dataclasses.replace(scene.captured, bundle=None)
    with pytest.raises(source_records.SourceError) as raised:
        await source.apply(folder, without_bundle, "")
    assert str(raised.value) == "source: no repository to clone"
    with pytest.raises(source_records.SourceError) as partial:
        await source.apply(folder, scene.captured, "")
    assert str(partial.value) == "source: bundle does not apply"
    assert list(folder.iterdir()) == []
