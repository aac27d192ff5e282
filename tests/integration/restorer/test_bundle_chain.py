"""Committed source as a chain of incremental git bundles (checkpoint schema version 3).

Issue 21 (part 1): "Committed source as incremental bundles (prerequisites: the previous
checkpoint's tips)". Real git throughout: each bundle is read back with `git bundle
list-heads` / its header, and applied to a fresh repository the way a restore applies it.
"""

from __future__ import annotations

import pathlib

import pytest

from services.common.checkpoints import chained_records
from services.restorer import bundles, source, source_records
from tests.support import git_repos

Bundle = chained_records.Bundle


def _prerequisites(data: bytes) -> list[str]:
    """The commits a bundle requires (its header's `-<commit>` lines)."""
    header = data.split(b"\n\n", 1)[0].decode("ascii").splitlines()
    return [line[1:41] for line in header if line.startswith("-")]


def _commit(worktree: pathlib.Path, name: str, text: str = "") -> str:
    git_repos.write(worktree, f"{name}.txt", text or f"{name}\n")
    git_repos.git(worktree, "add", f"{name}.txt")
    git_repos.git(worktree, "commit", "-q", "-m", name)
    return git_repos.git(worktree, "rev-parse", "HEAD")


async def _extend(
    worktree: pathlib.Path, previous: tuple[Bundle, ...], base: str | None
) -> tuple[source_records.SourceCapture, tuple[Bundle, ...], dict[str, bytes]]:
    captured = await source.capture(worktree, with_bundle=False)
    chain, made = await bundles.extend(worktree, captured, base, previous)
    return captured, chain, made


def _apply(target: pathlib.Path, chain: tuple[Bundle, ...], stored: dict[str, bytes]) -> None:
    """Fetch each bundle in order into `target`, as the restore does."""
    for number, bundle in enumerate(chain):
        path = target.parent / f"{target.name}-{number}.bundle"
        path.write_bytes(stored[bundle.sha256])
        git_repos.git(target, "fetch", "-q", str(path), "+HEAD:refs/restored")


@pytest.fixture
def project(tmp_path: pathlib.Path) -> git_repos.Project:
    """A clone of an origin, at origin/main: the upstream holds the base."""
    return git_repos.origin_and_clone(tmp_path)


async def test_a_new_bundle_requires_the_previous_tip_and_holds_only_new_commits(
    project: git_repos.Project,
) -> None:
    """The first bundle holds base..HEAD; the next one only what was committed since, its
    prerequisite the previous bundle's tip."""
    worktree = project.worktree
    # A first bundle larger than the next one, so the next one does not swallow it.
    first_tip = _commit(worktree, "one", "".join(f"{n:x}{n * 7919:x}\n" for n in range(3000)))
    captured, chain, made = await _extend(worktree, (), None)
    assert captured.base_commit == project.base and [b.tip for b in chain] == [first_tip]
    assert _prerequisites(made[chain[0].sha256]) == [project.base]
    second_tip = _commit(worktree, "two")
    _, grown, added = await _extend(worktree, chain, captured.base_commit)
    assert grown[0] == chain[0] and [b.tip for b in grown] == [first_tip, second_tip]
    assert list(added) == [grown[1].sha256]
    assert _prerequisites(added[grown[1].sha256]) == [first_tip]


async def test_an_unmoved_head_adds_no_bundle(project: git_repos.Project) -> None:
    """No new commit: the chain is kept as it is and nothing is uploaded."""
    _commit(project.worktree, "one")
    captured, chain, _ = await _extend(project.worktree, (), None)
    again, kept, made = await _extend(project.worktree, chain, captured.base_commit)
    assert kept == chain and made == {}
    git_repos.git(project.worktree, "reset", "-q", "--hard", project.base)
    _, back, made = await _extend(project.worktree, chain, again.base_commit)
    assert back == () and made == {}  # HEAD is the base again: nothing to bring


async def test_a_chain_applied_in_order_rebuilds_head_and_out_of_order_is_refused(
    tmp_path: pathlib.Path,
) -> None:
    """A repository with no upstream: the first bundle holds the whole history (no
    prerequisites), the next ones build on its tip; applied in order to an empty repository
    they bring HEAD. Out of order, git refuses the bundle whose prerequisites are missing."""
    worktree = tmp_path / "alone"
    worktree.mkdir()
    git_repos.git(worktree, "init", "-q")
    _commit(worktree, "root")
    captured, chain, stored = await _extend(worktree, (), None)
    assert captured.rooted and _prerequisites(stored[chain[0].sha256]) == []
    for name in ("a", "b"):
        _commit(worktree, name, f"{name}\n" * 2000)
        captured, chain, made = await _extend(worktree, chain, captured.base_commit)
        stored.update(made)
    assert len(chain) >= 2
    target = tmp_path / "target"
    target.mkdir()
    git_repos.git(target, "init", "-q")
    _apply(target, chain, stored)
    assert git_repos.git(target, "rev-parse", "refs/restored") == captured.head_commit
    wrong = tmp_path / "wrong"
    wrong.mkdir()
    git_repos.git(wrong, "init", "-q")
    with pytest.raises(Exception, match="returned non-zero"):
        _apply(wrong, tuple(reversed(chain)), stored)


async def test_a_moved_base_starts_the_chain_over(project: git_repos.Project) -> None:
    """Rebased onto a newer upstream: the old bundles no longer build on the base, so the
    chain starts over with one bundle of everything since the new base."""
    worktree = project.worktree
    _commit(worktree, "one")
    captured, chain, _ = await _extend(worktree, (), None)
    git_repos.git(worktree, "reset", "-q", "--hard", project.base)
    _commit(worktree, "upstream")
    git_repos.git(worktree, "push", "-q", "origin", "HEAD:main")
    git_repos.git(worktree, "fetch", "-q", "origin")
    tip = _commit(worktree, "two")
    moved, again, made = await _extend(worktree, chain, captured.base_commit)
    assert moved.base_commit != captured.base_commit
    assert [b.tip for b in again] == [tip] and list(made) == [again[0].sha256]


async def test_many_additions_keep_the_chain_short(project: git_repos.Project) -> None:
    """Each restore fetches every bundle: a new bundle swallows the ones before it while they
    are no larger, so sixteen similar commits make a chain of a handful of bundles, which
    still brings HEAD."""
    worktree = project.worktree
    chain: tuple[Bundle, ...] = ()
    base: str | None = None
    stored: dict[str, bytes] = {}
    for number in range(16):
        _commit(worktree, f"c{number}", f"commit {number}\n" * 50)
        captured, chain, made = await _extend(worktree, chain, base)
        base = captured.base_commit
        stored.update(made)
    assert 1 <= len(chain) <= 5
    target = worktree.parent / "target"
    git_repos.git(worktree.parent, "clone", "-q", project.url, str(target))
    _apply(target, chain, stored)
    assert git_repos.git(target, "rev-parse", "refs/restored") == captured.head_commit
