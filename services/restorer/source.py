"""Capturing and applying a worktree's source with the real `git` CLI.

What a capture holds, field by field, is in `source_records`; how git runs, in `git_commands`.

Applying refuses hostile input before writing anything (unsafe or `.git/` paths in the patch
or the untracked files, symlinks in an existing worktree leading out), clones the project when
the worktree has no repository, fetches the bundles in order (one bundle in schema version 2,
a chain of incremental ones in version 3: `bundles`), applies the patch to the head commit on a
scratch index (a patch that does not apply stops here), then puts the branch on the head and
checks out the head with the patch into index and work tree in one pass (tracked files are
reset to it, so a retried restore starts over), and writes the untracked files without
following symlinks (moving them in from a staging folder when `StagedUntracked` wrote them
ahead). Staged versus unstaged is not preserved (every change ends up staged); the working
tree is. Repositories whose attributes convert line endings or run filters are restored as
git's checkout writes them.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import pathlib
import stat
import tempfile
import threading
from collections.abc import Mapping, Sequence

from services.restorer import (
    checkouts,
    git_commands,
    paths,
    source_records,
    staged_files,
    worktree_rebuilding,
)


async def _base(worktree: pathlib.Path, branch: str, env: Mapping[str, str]) -> str:
    """The merge-base of HEAD with its upstream, or "" when there is none."""
    candidates = []
    if branch:
        candidates += [f"{branch}@{{upstream}}", f"refs/remotes/origin/{branch}"]
    candidates.append("refs/remotes/origin/HEAD")
    for candidate in candidates:
        upstream = await git_commands.optional(
            ["rev-parse", "--verify", "--quiet", f"{candidate}^{{commit}}"], cwd=worktree, env=env
        )
        if upstream:
            base = await git_commands.optional(
                ["merge-base", "HEAD", upstream], cwd=worktree, env=env
            )
            if base:
                return base
    return ""


async def _bundle(
    worktree: pathlib.Path, revisions: Sequence[str], env: Mapping[str, str]
) -> bytes:
    with tempfile.TemporaryDirectory(prefix="agentihooks-capture-") as scratch:
        target = pathlib.Path(scratch) / "source.bundle"
        await git_commands.git_ok(
            ["bundle", "create", "--quiet", str(target), *revisions],
            cwd=worktree,
            env=env,
            error="source: bundle could not be created",
        )
        return target.read_bytes()


def _read_untracked(
    worktree: pathlib.Path, listing: bytes
) -> tuple[tuple[source_records.UntrackedFile, ...], int]:
    files: list[source_records.UntrackedFile] = []
    skipped = 0
    for raw in sorted(filter(None, listing.split(b"\x00"))):
        try:
            relative = raw.decode("utf-8")
            paths.check_relative(relative)
            full = worktree / relative
            if not stat.S_ISREG(full.lstat().st_mode):
                raise paths.UnsafePath("not a regular file")
            data = paths.read_file_no_follow(full)
            mode = stat.S_IMODE(full.lstat().st_mode) & 0o777
        except (UnicodeDecodeError, paths.UnsafePath, OSError):
            # A nested repository (`dir/`), a symlink, a file that vanished or a name the
            # record cannot carry: the record has no way to hold it.
            skipped += 1
            continue
        files.append(source_records.UntrackedFile(relative, mode, data))
    return tuple(files), skipped


async def capture(
    worktree: str | os.PathLike[str],
    *,
    extra_env: Mapping[str, str] | None = None,
    with_bundle: bool = True,
) -> source_records.SourceCapture:
    """Capture a worktree's committed, uncommitted and untracked source.

    Args:
        worktree: the top of a git worktree.
        extra_env: variables added to git's clean environment.
        with_bundle: make the one bundle of everything since base (schema version 2); a
            version 3 capture leaves it out and extends its bundle chain (`bundles`).

    Returns:
        The capture (see the module notes for how the base is chosen).

    Raises:
        source_records.SourceError: the folder is not a repository with a commit, or git failed.
    """
    wt = pathlib.Path(worktree)
    if not await asyncio.to_thread(wt.is_dir):
        raise source_records.SourceError("source: worktree is missing")
    env = git_commands.git_environment(extra_env)
    head = await git_commands.optional(
        ["rev-parse", "--verify", "--quiet", "HEAD^{commit}"], cwd=wt, env=env
    )
    if not head:
        raise source_records.SourceError("source: worktree has no repository with a commit")
    branch = await git_commands.optional(
        ["symbolic-ref", "--quiet", "--short", "HEAD"], cwd=wt, env=env
    )
    repository = await git_commands.optional(
        ["config", "--get", "remote.origin.url"], cwd=wt, env=env
    )
    base = await _base(wt, branch, env)
    bundle: bytes | None = None
    rooted = not base
    if not rooted:
        if with_bundle and base != head:
            bundle = await _bundle(wt, [f"{base}..HEAD"], env)
    else:
        roots = (
            await git_commands.optional(["rev-list", "--max-parents=0", "HEAD"], cwd=wt, env=env)
        ).split()
        if not roots:
            raise source_records.SourceError("source: history could not be read")
        base = roots[-1]  # the oldest root when histories were merged
        if with_bundle:
            bundle = await _bundle(wt, ["HEAD"], env)
    diff = await git_commands.git_ok(
        [
            "diff",
            "--binary",
            "--full-index",
            "--no-renames",
            "--no-color",
            "--no-ext-diff",
            "--no-textconv",
            "--no-relative",
            "--ignore-submodules=all",
            "--src-prefix=a/",
            "--dst-prefix=b/",
            "HEAD",
            "--",
        ],
        cwd=wt,
        env=env,
        error="source: uncommitted changes could not be read",
    )
    listing = await git_commands.git_ok(
        ["ls-files", "--others", "--exclude-standard", "-z"],
        cwd=wt,
        env=env,
        error="source: untracked files could not be listed",
    )
    untracked, skipped = await asyncio.to_thread(_read_untracked, wt, listing)
    return source_records.SourceCapture(
        repository=repository,
        branch=branch,
        base_commit=base,
        head_commit=head,
        bundle=bundle,
        patch=diff or None,
        untracked=untracked,
        skipped_untracked=skipped,
        rooted=rooted,
    )


# --- apply ---------------------------------------------------------------------------------


async def apply(
    worktree: str | os.PathLike[str],
    capture: source_records.SourceCapture,
    repository_url: str,
    *,
    extra_env: Mapping[str, str] | None = None,
    staged: StagedUntracked | None = None,
) -> None:
    """Rebuild a captured worktree: clone if needed, bundle, head, patch, untracked files.

    Args:
        worktree: the replacement's worktree: missing, empty, or a checkout of the project.
        capture: the captured source (from a verified checkpoint).
        repository_url: where to clone from when the worktree has no repository (a URL or a
            local path); may be empty when the bundle holds the full history.
        extra_env: variables added to git's clean environment (clone credentials).
        staged: the capture's untracked files, already being staged (the caller discards it).

    Raises:
        source_records.SourceError: hostile or inconsistent input (refused before anything
            is written), or a git step failed.
    """
    wt = pathlib.Path(worktree)
    env = git_commands.git_environment(extra_env)
    for commit in (capture.base_commit, capture.head_commit):
        if not worktree_rebuilding.COMMIT.fullmatch(commit):
            raise source_records.SourceError("source: commit id is malformed")
    untracked_paths = [item.path for item in capture.untracked]
    worktree_rebuilding.check_paths(None, untracked_paths, "source: unsafe path in untracked files")
    with tempfile.TemporaryDirectory(prefix="agentihooks-restore-") as scratch_name:
        scratch = pathlib.Path(scratch_name)
        if capture.branch:
            await git_commands.git_ok(
                ["check-ref-format", "--branch", capture.branch],
                cwd=scratch,
                env=env,
                error="source: branch name is malformed",
            )
        patch_file = scratch / "source.patch"
        patched: list[str] = []
        if capture.patch:
            patch_file.write_bytes(capture.patch)
            numstat = await git_commands.git_ok(
                ["apply", "--numstat", "-z", str(patch_file)],
                cwd=scratch,
                env=env,
                error="source: patch is malformed",
            )
            patched = worktree_rebuilding.patch_paths(numstat)
            worktree_rebuilding.check_paths(None, patched, "source: unsafe path in patch")
        state = await asyncio.to_thread(worktree_rebuilding.worktree_state, wt)
        if state == "other":
            raise source_records.SourceError(
                "source: worktree is not empty and holds no repository"
            )
        if state == "repository":
            worktree_rebuilding.check_paths(wt, patched, "source: unsafe path in patch")
            worktree_rebuilding.check_paths(
                wt, untracked_paths, "source: unsafe path in untracked files"
            )
        elif not repository_url and not capture.all_bundles():
            raise source_records.SourceError("source: no repository to clone")

        # Nothing above wrote anything; from here on the worktree changes.
        try:
            await worktree_rebuilding.rebuild(wt, capture, repository_url, state, scratch, env)
            staging: staged_files.Staging | None = None
            names: list[str | None] = [None] * len(capture.untracked)
            if staged is not None and staged.files is capture.untracked:
                staging, names = await staged.staged()
            await asyncio.to_thread(
                worktree_rebuilding.write_untracked, wt, capture.untracked, staging, names
            )
        except source_records.SourceError:
            if state != "repository":
                await asyncio.to_thread(checkouts.undo, wt, state == "missing")
            raise


class StagedUntracked:
    """Untracked files being written ahead into a staging folder (`staged_files.Staging`).

    Writing many files is slow, and nothing about their bytes waits on git: staging starts as
    soon as the verified bytes are at hand, in a worker thread, while the checkout is still
    being made; `apply` then only moves each staged file into place, with every path check.
    A file that could not be staged (or a folder on another file system) is written there
    directly instead, so staging can only save time, never change the result.

    Args:
        folder: where the staging folder is made (the attempt folder).
        files: the untracked files, exactly as `apply` will get them in its capture.
    """

    def __init__(
        self, folder: pathlib.Path, files: tuple[source_records.UntrackedFile, ...]
    ) -> None:
        self.files = files
        self._stop = threading.Event()
        self._staging: staged_files.Staging | None = None
        self._names: list[str | None] = [None] * len(files)
        self._task = asyncio.ensure_future(asyncio.to_thread(self._stage, folder))

    def _stage(self, folder: pathlib.Path) -> None:
        if not self.files:
            return
        try:
            for item in self.files:
                paths.check_relative(item.path)
        except paths.UnsafePath:
            return  # `apply` refuses these files before writing anything: stage none
        try:
            self._staging = staged_files.Staging(folder)
            for index, item in enumerate(self.files):
                if self._stop.is_set():
                    return
                self._names[index] = self._staging.add(item.data, item.mode)
        except OSError:
            return  # what is not staged is written directly

    async def staged(self) -> tuple[staged_files.Staging | None, list[str | None]]:
        """Wait for staging to end: the staging folder and each file's staged name, if any."""
        with contextlib.suppress(Exception):
            await asyncio.shield(self._task)
        return self._staging, self._names

    async def discard(self) -> None:
        """Stop staging and remove the staging folder with whatever was not placed."""
        self._stop.set()
        await self.staged()
        if self._staging is not None:
            await asyncio.to_thread(self._staging.close)
            self._staging = None
