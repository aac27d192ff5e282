"""Committed source as a chain of incremental git bundles (checkpoint schema version 3).

The first bundle of a chain holds the commits since the base (the whole history of HEAD when
no upstream holds the base). A later capture whose HEAD brings new commits adds one bundle of
the commits not reachable from the chain's tips (the commits earlier bundles brought, each
bundle's `tip` its HEAD) nor from the base: those tips are its prerequisites, so it uploads
only what was committed since. A restore applies the bundles in order.

A chain starts over (one bundle of everything since the base) when the base moved (the branch
was rebased onto a newer upstream) or a tip is gone from the repository (history rewritten and
pruned): its bundles could no longer be applied on top of each other.

Each restore runs one `git fetch` per bundle, so the chain is kept short: a new bundle swallows
the bundles before it while they are no larger than what it holds so far (a binary counter for
equal commits), which keeps a chain of n additions to about log2(n) bundles, each commit's bytes
uploaded about log2(n) times at most. Commits are small next to a session's transcript; the
session chains never merge.
"""

from __future__ import annotations

import hashlib
import pathlib
import tempfile
from collections.abc import Mapping, Sequence

from services.common.checkpoints import chained_records
from services.restorer import git_commands, source_records

Bundle = chained_records.Bundle


async def extend(
    worktree: pathlib.Path,
    captured: source_records.SourceCapture,
    previous_base: str | None,
    previous: Sequence[Bundle],
    *,
    extra_env: Mapping[str, str] | None = None,
) -> tuple[tuple[Bundle, ...], dict[str, bytes]]:
    """The bundle chain that brings `captured.head_commit`, and the bundles it adds.

    Args:
        worktree: the top of the captured worktree.
        captured: the source capture (its base, head and whether the base is a root).
        previous_base: the base commit of the previous checkpoint's source, if any.
        previous: the previous checkpoint's bundles, in order.
        extra_env: variables added to git's clean environment.

    Returns:
        The chain in order, and the new bundles' bytes by SHA-256 (nothing when HEAD brings
        no commit the chain lacks).

    Raises:
        source_records.SourceError: git could not read the history or write a bundle.
    """
    env = git_commands.git_environment(extra_env)
    head, base = captured.head_commit, captured.base_commit
    # A root base is in the first bundle itself, so it is excluded only through the tips.
    floor = [] if captured.rooted else [base]
    if not captured.rooted and head == base:
        return (), {}  # the remote holds everything a restore needs
    kept = list(previous)
    if previous_base != base or not await _present(worktree, _tips(kept), env):
        kept = []
    if not kept:
        data = await _bundle(worktree, floor, env)
        return _with(kept, head, data)
    if not await _brings(worktree, [*floor, *_tips(kept)], env):
        return tuple(kept), {}
    data = await _bundle(worktree, [*floor, *_tips(kept)], env)
    held, swallowed = len(data), 0
    while kept and kept[-1].size <= held:
        held += kept.pop().size
        swallowed += 1
    if swallowed:
        data = await _bundle(worktree, [*floor, *_tips(kept)], env)
    return _with(kept, head, data)


def _with(
    kept: list[Bundle], head: str, data: bytes
) -> tuple[tuple[Bundle, ...], dict[str, bytes]]:
    bundle = Bundle(hashlib.sha256(data).hexdigest(), len(data), head)
    return (*kept, bundle), {bundle.sha256: data}


def _tips(chain: Sequence[Bundle]) -> list[str]:
    return list(dict.fromkeys(bundle.tip for bundle in chain))


def _revisions(excluded: Sequence[str]) -> bytes:
    """HEAD and the excluded commits, as `--stdin` reads them (no command-line limit)."""
    return "".join(["HEAD\n", *(f"^{commit}\n" for commit in excluded)]).encode("ascii")


async def _present(worktree: pathlib.Path, commits: Sequence[str], env: Mapping[str, str]) -> bool:
    """Whether every commit is in the repository."""
    if not commits:
        return True
    query = "".join(f"{commit}^{{commit}}\n" for commit in commits).encode("ascii")
    code, out = await git_commands.run_git(
        ["cat-file", "--batch-check"], cwd=worktree, env=env, stdin=query
    )
    lines = out.decode("ascii", errors="replace").splitlines()
    return code == 0 and len(lines) == len(commits) and all(" commit " in x for x in lines)


async def _brings(worktree: pathlib.Path, excluded: Sequence[str], env: Mapping[str, str]) -> bool:
    """Whether HEAD holds a commit none of `excluded` reaches (else a bundle would be empty)."""
    code, out = await git_commands.run_git(
        ["rev-list", "--count", "--stdin"], cwd=worktree, env=env, stdin=_revisions(excluded)
    )
    if code != 0:
        raise source_records.SourceError("source: history could not be read")
    return out.strip() not in (b"", b"0")


async def _bundle(worktree: pathlib.Path, excluded: Sequence[str], env: Mapping[str, str]) -> bytes:
    """A bundle of HEAD without what `excluded` reaches (those are its prerequisites)."""
    with tempfile.TemporaryDirectory(prefix="agentihooks-capture-") as scratch:
        target = pathlib.Path(scratch) / "source.bundle"
        code, _ = await git_commands.run_git(
            ["bundle", "create", "--quiet", str(target), "--stdin"],
            cwd=worktree,
            env=env,
            stdin=_revisions(excluded),
        )
        if code != 0:
            raise source_records.SourceError("source: bundle could not be created")
        return target.read_bytes()
