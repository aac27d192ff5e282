"""Rebuilding a worktree from a verified capture: the steps `source.apply` takes once its checks
passed, and the checks themselves.

Git fetches the bundles in order, applies the patch to the head commit on a scratch index (a
patch that does not apply stops here), then puts the branch on the head and checks out the head
with the patch into index and work tree in one pass (tracked files are reset to it, so a retried
restore starts over). Untracked files are written without following symlinks, moved in from a
staging folder when they were staged ahead.
"""

from __future__ import annotations

import errno
import os
import pathlib
import re
from collections.abc import Mapping, Sequence

from services.restorer import git_commands, paths, source_records, staged_files

COMMIT = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")
"""A full commit id (SHA-1 or SHA-256)."""
_RESTORE_REF = "refs/agentihooks/restore-head"


def patch_paths(numstat: bytes) -> list[str]:
    """Every path `git apply --numstat -z` reports (both sides of a rename or copy)."""
    found: list[str] = []
    fields = numstat.split(b"\x00")
    index = 0
    while index < len(fields):
        entry = fields[index]
        index += 1
        if not entry:
            continue
        parts = entry.split(b"\t", 2)
        if len(parts) != 3:
            raise source_records.SourceError("source: patch is malformed")
        if parts[2]:
            names = [parts[2]]
        else:
            names = fields[index : index + 2]
            index += 2
        for name in names:
            try:
                found.append(name.decode("utf-8"))
            except UnicodeDecodeError:
                raise source_records.SourceError("source: unsafe path in patch") from None
    return found


def worktree_state(worktree: pathlib.Path) -> str:
    """`missing`, `empty`, `repository` or `other` (files but no repository)."""
    if not os.path.lexists(worktree):
        return "missing"
    if not worktree.is_dir():
        return "other"
    if os.path.lexists(worktree / ".git"):
        return "repository"
    return "other" if any(worktree.iterdir()) else "empty"


def check_paths(root: pathlib.Path | None, relatives: Sequence[str], error: str) -> None:
    try:
        if root is None:
            for relative in relatives:
                paths.check_relative(relative)
        else:
            paths.safe_join_all(root, relatives)
    except paths.UnsafePath:
        raise source_records.SourceError(error) from None


def write_untracked(
    wt: pathlib.Path,
    files: Sequence[source_records.UntrackedFile],
    staging: staged_files.Staging | None,
    names: Sequence[str | None],
) -> None:
    """Write the untracked files, each with the no-follow checks, in one pass over the tree."""
    try:
        with paths.TreeWriter(wt) as writer:
            for item, name in zip(files, names, strict=True):
                if staging is not None and name is not None:
                    try:
                        writer.place(item.path, staging, name)
                        continue
                    except OSError as error:
                        if error.errno != errno.EXDEV:
                            raise
                writer.write(item.path, item.data, item.mode)
    except paths.UnsafePath:
        raise source_records.SourceError("source: unsafe path in untracked files") from None
    except OSError:
        raise source_records.SourceError("source: untracked file could not be written") from None


async def rebuild(
    wt: pathlib.Path,
    capture: source_records.SourceCapture,
    repository_url: str,
    state: str,
    scratch: pathlib.Path,
    env: Mapping[str, str],
) -> None:
    """Clone or init when needed, fetch the bundle, check the patch, check out, apply."""
    patch_file = scratch / "source.patch"
    if state != "repository":
        if repository_url:
            await git_commands.git_ok(
                [
                    "clone",
                    "--quiet",
                    "--no-checkout",
                    "--origin",
                    "origin",
                    "--",
                    repository_url,
                    str(wt),
                ],
                cwd=scratch,
                env=env,
                error="source: clone failed",
            )
        else:
            await git_commands.git_ok(
                ["init", "--quiet", str(wt)], cwd=scratch, env=env, error="source: init failed"
            )
    for number, bundle in enumerate(capture.all_bundles()):
        # In order: each incremental bundle's prerequisites are commits the ones before it
        # brought (or the base), so git refuses a bundle out of order.
        bundle_file = scratch / f"source-{number}.bundle"
        bundle_file.write_bytes(bundle)
        await git_commands.git_ok(
            [
                "-c",
                "fetch.fsckObjects=true",
                "fetch",
                "--quiet",
                "--no-tags",
                "--no-write-fetch-head",
                str(bundle_file),
                f"+HEAD:{_RESTORE_REF}",
            ],
            cwd=wt,
            env=env,
            error="source: bundle does not apply",
        )
        bundle_file.unlink()
    head = capture.head_commit
    await git_commands.git_ok(
        ["cat-file", "-e", f"{head}^{{commit}}"],
        cwd=wt,
        env=env,
        error="source: head commit is missing",
    )
    tree = f"{head}^{{tree}}"
    if capture.patch:
        # The patch is applied to a scratch index first: one that does not apply stops the
        # restore before the work tree changes, and one that does gives the tree to check out.
        scratch_env = {**env, "GIT_INDEX_FILE": str(scratch / "index")}
        await git_commands.git_ok(
            ["read-tree", head], cwd=wt, env=scratch_env, error="source: head commit is missing"
        )
        await git_commands.git_ok(
            ["apply", "--cached", "--binary", "--whitespace=nowarn", str(patch_file)],
            cwd=wt,
            env=scratch_env,
            error="source: patch does not apply",
        )
        written = await git_commands.git_ok(
            ["write-tree"], cwd=wt, env=scratch_env, error="source: patch does not apply"
        )
        tree = written.decode("ascii", errors="replace").strip()
        if not COMMIT.fullmatch(tree):
            raise source_records.SourceError("source: patch does not apply")
    # HEAD moves to the head commit (on the branch), then index and work tree become the head
    # with the patch in one checkout: every uncommitted change staged, tracked files reset
    # (so a retried restore starts over). One pass, so no second process has to re-read the
    # files this checkout just wrote to trust the index it wrote.
    if capture.branch:
        await git_commands.git_ok(
            ["update-ref", "-m", "agentihooks restore", f"refs/heads/{capture.branch}", head],
            cwd=wt,
            env=env,
            error="source: checkout failed",
        )
        await git_commands.git_ok(
            ["symbolic-ref", "HEAD", f"refs/heads/{capture.branch}"],
            cwd=wt,
            env=env,
            error="source: checkout failed",
        )
    else:
        await git_commands.git_ok(
            ["update-ref", "--no-deref", "-m", "agentihooks restore", "HEAD", head],
            cwd=wt,
            env=env,
            error="source: checkout failed",
        )
    await git_commands.git_ok(
        ["read-tree", "--reset", "-u", tree], cwd=wt, env=env, error="source: checkout failed"
    )
    await git_commands.git(["update-ref", "-d", _RESTORE_REF], cwd=wt, env=env)
    if capture.branch:
        # Best effort: the restored branch tracks its remote counterpart when there is one.
        await git_commands.git(
            ["branch", "--quiet", f"--set-upstream-to=origin/{capture.branch}"],
            cwd=wt,
            env=env,
        )
