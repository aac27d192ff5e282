"""Source round trip with real git: the restored tree equals the captured one byte for byte."""

from __future__ import annotations

import asyncio
import dataclasses
import errno
import os
import pathlib

import pytest

from services.restorer import checkouts, paths, source, source_records
from tests.support import git_repos

pytestmark = pytest.mark.usefixtures("usual_umask")


async def test_capture_holds_commits_patch_and_untracked(tmp_path: pathlib.Path) -> None:
    """Committed commits as a bundle from the remote's base, uncommitted changes as a binary
    patch, untracked files with their modes; ignored files stay behind."""
    project = git_repos.project(tmp_path)
    captured = await source.capture(project.worktree)
    assert captured.repository == project.url
    assert captured.branch == "main"
    assert captured.base_commit == project.base
    assert captured.head_commit == git_repos.git(project.worktree, "rev-parse", "HEAD")
    assert captured.head_commit != captured.base_commit
    assert captured.bundle is not None and captured.bundle.startswith(b"# v2 git bundle")
    assert captured.patch is not None and b"GIT binary patch" in captured.patch
    assert b"deleted file mode" in captured.patch and b"new mode 100755" in captured.patch
    modes = {item.path: item.mode for item in captured.untracked}
    assert modes == {
        "blob.dat": 0o644,
        "notes/deep/nested/idea.md": 0o644,
        "notes/todo.txt": 0o644,
        "notes/ünïcode name.txt": 0o644,
        "tools/helper.sh": 0o755,
    }
    assert captured.skipped_untracked == 0
    assert git_repos.SECRET_LINE not in repr(captured)


async def test_capture_takes_no_lock_and_changes_nothing(tmp_path: pathlib.Path) -> None:
    """A capture runs beside a working agent: it leaves the worktree and its index alone."""
    project = git_repos.project(tmp_path)
    index = project.worktree / ".git" / "index"
    before = (git_repos.snapshot(project.worktree), index.read_bytes(), index.stat().st_mtime_ns)
    await source.capture(project.worktree)
    after = (git_repos.snapshot(project.worktree), index.read_bytes(), index.stat().st_mtime_ns)
    assert after == before


@pytest.mark.parametrize("target", ["missing", "empty"])
async def test_restore_into_an_empty_folder_clones_first(
    tmp_path: pathlib.Path, target: str
) -> None:
    """Spec: source is applied to the worktree, cloning the project first when the worktree
    has no repository; the tree equals the captured one byte for byte, modes included."""
    project = git_repos.project(tmp_path)
    want = git_repos.snapshot(project.worktree, git_repos.IGNORED)
    captured = await source.capture(project.worktree)
    restored = tmp_path / "replacement" / "worktree"
    if target == "empty":
        restored.mkdir(parents=True)
    await source.apply(restored, captured, project.url)
    assert git_repos.snapshot(restored) == want
    assert git_repos.git(restored, "rev-parse", "HEAD") == captured.head_commit
    assert git_repos.git(restored, "symbolic-ref", "--short", "HEAD") == "main"
    assert git_repos.git(restored, "rev-parse", "--abbrev-ref", "main@{upstream}") == "origin/main"
    assert not (restored / "build" / "out.o").exists()


async def test_restore_into_an_existing_checkout_at_the_base(tmp_path: pathlib.Path) -> None:
    """A replacement whose checkout was already prepared at the base gets the same tree."""
    project = git_repos.project(tmp_path)
    want = git_repos.snapshot(project.worktree, git_repos.IGNORED)
    captured = await source.capture(project.worktree)
    existing = tmp_path / "existing"
    git_repos.git(tmp_path, "clone", "-q", project.url, str(existing))
    assert git_repos.git(existing, "rev-parse", "HEAD") == captured.base_commit
    await source.apply(existing, captured, project.url)
    assert git_repos.snapshot(existing) == want
    assert git_repos.git(existing, "rev-parse", "HEAD") == captured.head_commit


async def test_a_retried_restore_gives_the_same_tree(tmp_path: pathlib.Path) -> None:
    """Applying the same capture again (a restarted restore) changes nothing further."""
    project = git_repos.project(tmp_path)
    want = git_repos.snapshot(project.worktree, git_repos.IGNORED)
    captured = await source.capture(project.worktree)
    restored = tmp_path / "restored"
    await source.apply(restored, captured, project.url)
    await source.apply(restored, captured, project.url)
    assert git_repos.snapshot(restored) == want


async def test_without_a_remote_the_bundle_carries_the_full_history(
    tmp_path: pathlib.Path,
) -> None:
    """No remote: the bundle holds the full history, so an empty folder needs no clone."""
    worktree = tmp_path / "solo"
    worktree.mkdir()
    git_repos.git(worktree, "init", "-q")
    git_repos.write(worktree, "a.txt", "one\n")
    git_repos.git(worktree, "add", "a.txt")
    git_repos.git(worktree, "commit", "-q", "-m", "only")
    git_repos.write(worktree, "a.txt", "two\n")
    git_repos.write(worktree, "new/untracked.bin", b"\x00\x01", 0o600)
    want = git_repos.snapshot(worktree)
    captured = await source.capture(worktree)
    assert captured.repository == ""
    assert captured.base_commit == captured.head_commit  # the root commit
    assert captured.bundle is not None
    restored = tmp_path / "restored"
    await source.apply(restored, captured, "")
    assert git_repos.snapshot(restored) == want


async def test_a_clean_worktree_has_no_bundle_and_no_patch(tmp_path: pathlib.Path) -> None:
    """Nothing committed since the base and no change: bundle and patch are None."""
    project = git_repos.origin_and_clone(tmp_path)
    captured = await source.capture(project.worktree)
    assert (captured.bundle, captured.patch, captured.untracked) == (None, None, ())
    assert captured.head_commit == captured.base_commit == project.base
    restored = tmp_path / "restored"
    await source.apply(restored, captured, project.url)
    assert git_repos.snapshot(restored) == git_repos.snapshot(project.worktree)


async def test_a_detached_head_restores_detached(tmp_path: pathlib.Path) -> None:
    """A worktree on no branch is restored at the same commit, on no branch."""
    project = git_repos.project(tmp_path)
    git_repos.git(project.worktree, "checkout", "-q", "--detach")
    want = git_repos.snapshot(project.worktree, git_repos.IGNORED)
    captured = await source.capture(project.worktree)
    assert captured.branch == ""
    restored = tmp_path / "restored"
    await source.apply(restored, captured, project.url)
    assert git_repos.snapshot(restored) == want
    assert git_repos.git(restored, "rev-parse", "HEAD") == captured.head_commit


async def test_untracked_symlinks_are_skipped_and_counted(tmp_path: pathlib.Path) -> None:
    """The record cannot carry an untracked symlink; the capture says how many it left out."""
    project = git_repos.origin_and_clone(tmp_path)
    (project.worktree / "link").symlink_to("README.md")
    captured = await source.capture(project.worktree)
    assert captured.untracked == ()
    assert captured.skipped_untracked == 1


async def test_staged_untracked_files_are_moved_into_place(tmp_path: pathlib.Path) -> None:
    """Untracked files written ahead into a staging folder (while the checkout is made) end up
    exactly as if written in place, modes included; the staging folder then goes, and every
    change is staged in the index as before (the patch checked out in one pass)."""
    project = git_repos.project(tmp_path)
    want = git_repos.snapshot(project.worktree, git_repos.IGNORED)
    captured = await source.capture(project.worktree)
    attempt = tmp_path / "attempt"
    attempt.mkdir()
    restored = attempt / "worktree"
    staged = source.StagedUntracked(attempt, captured.untracked)
    try:
        await source.apply(restored, captured, project.url, staged=staged)
    finally:
        await staged.discard()
    assert git_repos.snapshot(restored) == want
    assert sorted(p.name for p in attempt.iterdir()) == ["worktree"]
    assert git_repos.git(restored, "diff", "--name-only") == ""  # nothing left unstaged
    staged_paths = git_repos.git(restored, "diff", "--cached", "--name-only").splitlines()
    assert staged_paths == git_repos.git(project.worktree, "diff", "HEAD", "--name-only").split()


async def test_a_staging_folder_on_another_file_system_falls_back_to_writing(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Staging only saves time: when a staged file cannot be moved (EXDEV, the attempt folder
    on another file system), its bytes are written in place instead, with the same result."""
    project = git_repos.project(tmp_path)
    want = git_repos.snapshot(project.worktree, git_repos.IGNORED)
    captured = await source.capture(project.worktree)

    def cross_device(*args: object) -> pathlib.Path:
        raise OSError(errno.EXDEV, "Invalid cross-device link")

    monkeypatch.setattr(paths.TreeWriter, "place", cross_device)
    attempt = tmp_path / "attempt"
    attempt.mkdir()
    staged = source.StagedUntracked(attempt, captured.untracked)
    try:
        await source.apply(attempt / "worktree", captured, project.url, staged=staged)
    finally:
        await staged.discard()
    assert git_repos.snapshot(attempt / "worktree") == want
    assert sorted(p.name for p in attempt.iterdir()) == ["worktree"]


async def test_hostile_untracked_paths_are_not_even_staged(tmp_path: pathlib.Path) -> None:
    """An untracked path the record format refuses is refused before anything is written, and
    nothing of that capture is written ahead either."""
    project = git_repos.project(tmp_path)
    captured = await source.capture(project.worktree)
    hostile = dataclasses.replace(
        captured,
        untracked=(*captured.untracked, source_records.UntrackedFile("../escape", 0o644, b"x")),
    )
    attempt = tmp_path / "attempt"
    attempt.mkdir()
    staged = source.StagedUntracked(attempt, hostile.untracked)
    assert await staged.staged() == (None, [None] * len(hostile.untracked))
    with pytest.raises(source_records.SourceError, match="unsafe path in untracked files"):
        await source.apply(attempt / "worktree", hostile, project.url, staged=staged)
    await staged.discard()
    assert list(attempt.iterdir()) == []
    assert not (tmp_path / "escape").exists()


async def test_a_stopped_early_clone_leaves_nothing_behind(tmp_path: pathlib.Path) -> None:
    """An early clone stopped at any moment (even while git is being started, or while its
    index-pack helper is still writing) leaves no scratch folder and no git process writing
    one: a refused restore discards it."""
    origin = tmp_path / "origin"
    origin.mkdir()
    git_repos.git(origin, "init", "-q")
    # Big enough that the clone's helpers are still at work when it is stopped.
    (origin / "blob.bin").write_bytes(os.urandom(24 * 1024 * 1024))
    git_repos.git(origin, "add", "blob.bin")
    git_repos.git(origin, "commit", "-q", "-m", "big")
    attempt = tmp_path / "attempt"
    attempt.mkdir()
    for delay in (0.0, 0.0, 0.001, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.4):
        early = checkouts.EarlyClone(attempt, origin.as_uri())
        await asyncio.sleep(delay)
        await early.discard()
        # A helper left running would go on writing its folder: give it a moment to show.
        await asyncio.sleep(0.3)
        assert list(attempt.iterdir()) == [], f"left behind after {delay} s"
