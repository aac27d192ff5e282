"""Capturing and applying a worktree's source with the real `git` CLI.

A capture holds what a replacement needs to rebuild the worktree byte for byte:

- `base_commit`: where the captured history starts. When the branch has an upstream (its
  configured upstream, else `origin/<branch>`, else `origin/HEAD`), the base is the merge-base
  of HEAD with it, which the remote already holds, and the bundle carries only `base..HEAD`
  (None when HEAD is the base). With no upstream at all the bundle carries the full history of
  HEAD and the base is its root commit, so a restore into an empty folder needs no clone.
- `patch`: `git diff --binary HEAD`, every staged and unstaged change to tracked files
  (deletions, mode changes, binary files, symlinks); None when clean.
- `untracked`: the files `git ls-files --others --exclude-standard` lists, with their bytes
  and permission bits. Ignored files are not captured (build output and secrets stay behind).
  Untracked symlinks, nested repositories and names that are not UTF-8 or not safe record
  paths cannot be carried by the record format; they are skipped and counted.

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

Git runs with no user or system configuration, no hooks, no prompts and no optional locks (a
capture never takes the running agent's index lock). Errors are `SourceError`, whose message is
`source: ` and a short cause with no file contents and no paths.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import errno
import os
import pathlib
import re
import shutil
import stat
import tempfile
import threading
from collections.abc import Mapping, Sequence

from services.common import errors
from services.restorer import paths

_PASSED_ENV = (
    "PATH",
    "HOME",
    "TMPDIR",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
    "GIT_SSL_CAINFO",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "NO_PROXY",
    "http_proxy",
    "https_proxy",
    "no_proxy",
)
_CONFIG = (
    "core.hooksPath=/dev/null",
    "core.fsmonitor=false",
    "protocol.file.allow=always",
    "protocol.ext.allow=never",
    "safe.directory=*",
    "gc.auto=0",
    "maintenance.auto=false",
    "advice.detachedHead=false",
    "init.defaultBranch=main",
    "submodule.recurse=false",
)
_COMMIT = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")
_RESTORE_REF = "refs/agentihooks/restore-head"


class SourceError(errors.Refused):
    """The captured source could not be captured or applied (spec reason `source: …`)."""

    def __init__(self, message: str) -> None:
        if not message.startswith("source: "):
            message = f"source: {message}"
        super().__init__(message, message)


@dataclasses.dataclass(frozen=True)
class UntrackedFile:
    """One untracked file: its path relative to the worktree, permission bits and bytes."""

    path: str
    mode: int
    data: bytes = dataclasses.field(repr=False)


@dataclasses.dataclass(frozen=True)
class SourceCapture:
    """What a restore needs to rebuild a worktree (see the module notes for each field).

    `bundles` are incremental bundles (schema version 3), applied in order after `bundle`.
    `rooted` is True when no upstream holds the base: the base is HEAD's root commit and the
    first bundle carries the whole history.
    """

    repository: str
    branch: str
    base_commit: str
    head_commit: str
    bundle: bytes | None = dataclasses.field(repr=False)
    patch: bytes | None = dataclasses.field(repr=False)
    untracked: tuple[UntrackedFile, ...] = ()
    skipped_untracked: int = 0
    bundles: tuple[bytes, ...] = dataclasses.field(default=(), repr=False)
    rooted: bool = False

    def all_bundles(self) -> tuple[bytes, ...]:
        """Every bundle to apply, in order."""
        return (self.bundle, *self.bundles) if self.bundle is not None else self.bundles


def git_environment(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """A clean environment for git: no user or system config, no prompts, fixed identity.

    Only a few variables pass through (PATH, HOME, TLS and proxy settings); `extra` adds more,
    for example a `GIT_ASKPASS` that supplies the project's clone credential.
    """
    env = {name: os.environ[name] for name in _PASSED_ENV if name in os.environ}
    env.update(
        {
            "LC_ALL": "C",
            "GIT_TERMINAL_PROMPT": "0",
            "GIT_CONFIG_NOSYSTEM": "1",
            "GIT_CONFIG_GLOBAL": "/dev/null",
            "GIT_OPTIONAL_LOCKS": "0",
            "GIT_SSH_COMMAND": "ssh -o BatchMode=yes",
            "GIT_AUTHOR_NAME": "agentihooks restorer",
            "GIT_AUTHOR_EMAIL": "restorer@agentihooks.invalid",
            "GIT_COMMITTER_NAME": "agentihooks restorer",
            "GIT_COMMITTER_EMAIL": "restorer@agentihooks.invalid",
        }
    )
    if extra:
        env.update(extra)
    return env


@dataclasses.dataclass(frozen=True)
class _Result:
    code: int
    out: bytes


async def run_git(
    args: Sequence[str],
    *,
    cwd: pathlib.Path,
    env: Mapping[str, str],
    stdin: bytes | None = None,
) -> tuple[int, bytes]:
    """Run git with the fixed safe configuration; (exit status, stdout). stderr is dropped (it
    may quote file contents or paths).

    Raises:
        SourceError: git is not installed.
    """
    result = await _git(args, cwd=cwd, env=env, stdin=stdin)
    return result.code, result.out


async def _git(
    args: Sequence[str],
    *,
    cwd: pathlib.Path,
    env: Mapping[str, str],
    stdin: bytes | None = None,
) -> _Result:
    command = ["git"]
    for setting in _CONFIG:
        command += ["-c", setting]
    command += list(args)
    try:
        process = await asyncio.create_subprocess_exec(
            *command,
            cwd=cwd,
            env=dict(env),
            stdin=asyncio.subprocess.DEVNULL if stdin is None else asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.DEVNULL,
        )
    except FileNotFoundError:
        raise SourceError("source: git is not installed") from None
    out, _ = await process.communicate(stdin)
    return _Result(process.returncode or 0, out)


async def _git_ok(
    args: Sequence[str], *, cwd: pathlib.Path, env: Mapping[str, str], error: str
) -> bytes:
    result = await _git(args, cwd=cwd, env=env)
    if result.code != 0:
        raise SourceError(error)
    return result.out


async def _optional(args: Sequence[str], *, cwd: pathlib.Path, env: Mapping[str, str]) -> str:
    result = await _git(args, cwd=cwd, env=env)
    return result.out.decode("utf-8", errors="replace").strip() if result.code == 0 else ""


# --- capture -------------------------------------------------------------------------------


async def _base(worktree: pathlib.Path, branch: str, env: Mapping[str, str]) -> str:
    """The merge-base of HEAD with its upstream, or "" when there is none."""
    candidates = []
    if branch:
        candidates += [f"{branch}@{{upstream}}", f"refs/remotes/origin/{branch}"]
    candidates.append("refs/remotes/origin/HEAD")
    for candidate in candidates:
        upstream = await _optional(
            ["rev-parse", "--verify", "--quiet", f"{candidate}^{{commit}}"], cwd=worktree, env=env
        )
        if upstream:
            base = await _optional(["merge-base", "HEAD", upstream], cwd=worktree, env=env)
            if base:
                return base
    return ""


async def _bundle(
    worktree: pathlib.Path, revisions: Sequence[str], env: Mapping[str, str]
) -> bytes:
    with tempfile.TemporaryDirectory(prefix="agentihooks-capture-") as scratch:
        target = pathlib.Path(scratch) / "source.bundle"
        await _git_ok(
            ["bundle", "create", "--quiet", str(target), *revisions],
            cwd=worktree,
            env=env,
            error="source: bundle could not be created",
        )
        return target.read_bytes()


def _read_untracked(
    worktree: pathlib.Path, listing: bytes
) -> tuple[tuple[UntrackedFile, ...], int]:
    files: list[UntrackedFile] = []
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
        files.append(UntrackedFile(relative, mode, data))
    return tuple(files), skipped


async def capture(
    worktree: str | os.PathLike[str],
    *,
    extra_env: Mapping[str, str] | None = None,
    with_bundle: bool = True,
) -> SourceCapture:
    """Capture a worktree's committed, uncommitted and untracked source.

    Args:
        worktree: the top of a git worktree.
        extra_env: variables added to git's clean environment.
        with_bundle: make the one bundle of everything since base (schema version 2); a
            version 3 capture leaves it out and extends its bundle chain (`bundles`).

    Returns:
        The capture (see the module notes for how the base is chosen).

    Raises:
        SourceError: the folder is not a repository with a commit, or git failed.
    """
    wt = pathlib.Path(worktree)
    if not await asyncio.to_thread(wt.is_dir):
        raise SourceError("source: worktree is missing")
    env = git_environment(extra_env)
    head = await _optional(["rev-parse", "--verify", "--quiet", "HEAD^{commit}"], cwd=wt, env=env)
    if not head:
        raise SourceError("source: worktree has no repository with a commit")
    branch = await _optional(["symbolic-ref", "--quiet", "--short", "HEAD"], cwd=wt, env=env)
    repository = await _optional(["config", "--get", "remote.origin.url"], cwd=wt, env=env)
    base = await _base(wt, branch, env)
    bundle: bytes | None = None
    rooted = not base
    if not rooted:
        if with_bundle and base != head:
            bundle = await _bundle(wt, [f"{base}..HEAD"], env)
    else:
        roots = (await _optional(["rev-list", "--max-parents=0", "HEAD"], cwd=wt, env=env)).split()
        if not roots:
            raise SourceError("source: history could not be read")
        base = roots[-1]  # the oldest root when histories were merged
        if with_bundle:
            bundle = await _bundle(wt, ["HEAD"], env)
    diff = await _git_ok(
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
    listing = await _git_ok(
        ["ls-files", "--others", "--exclude-standard", "-z"],
        cwd=wt,
        env=env,
        error="source: untracked files could not be listed",
    )
    untracked, skipped = await asyncio.to_thread(_read_untracked, wt, listing)
    return SourceCapture(
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


def _patch_paths(numstat: bytes) -> list[str]:
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
            raise SourceError("source: patch is malformed")
        if parts[2]:
            names = [parts[2]]
        else:
            names = fields[index : index + 2]
            index += 2
        for name in names:
            try:
                found.append(name.decode("utf-8"))
            except UnicodeDecodeError:
                raise SourceError("source: unsafe path in patch") from None
    return found


def _worktree_state(worktree: pathlib.Path) -> str:
    """`missing`, `empty`, `repository` or `other` (files but no repository)."""
    if not os.path.lexists(worktree):
        return "missing"
    if not worktree.is_dir():
        return "other"
    if os.path.lexists(worktree / ".git"):
        return "repository"
    return "other" if any(worktree.iterdir()) else "empty"


def _check_paths(root: pathlib.Path | None, relatives: Sequence[str], error: str) -> None:
    try:
        if root is None:
            for relative in relatives:
                paths.check_relative(relative)
        else:
            paths.safe_join_all(root, relatives)
    except paths.UnsafePath:
        raise SourceError(error) from None


async def apply(
    worktree: str | os.PathLike[str],
    capture: SourceCapture,
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
        SourceError: hostile or inconsistent input (refused before anything is written), or a
            git step failed.
    """
    wt = pathlib.Path(worktree)
    env = git_environment(extra_env)
    for commit in (capture.base_commit, capture.head_commit):
        if not _COMMIT.fullmatch(commit):
            raise SourceError("source: commit id is malformed")
    untracked_paths = [item.path for item in capture.untracked]
    _check_paths(None, untracked_paths, "source: unsafe path in untracked files")
    with tempfile.TemporaryDirectory(prefix="agentihooks-restore-") as scratch_name:
        scratch = pathlib.Path(scratch_name)
        if capture.branch:
            await _git_ok(
                ["check-ref-format", "--branch", capture.branch],
                cwd=scratch,
                env=env,
                error="source: branch name is malformed",
            )
        patch_file = scratch / "source.patch"
        patched: list[str] = []
        if capture.patch:
            patch_file.write_bytes(capture.patch)
            numstat = await _git_ok(
                ["apply", "--numstat", "-z", str(patch_file)],
                cwd=scratch,
                env=env,
                error="source: patch is malformed",
            )
            patched = _patch_paths(numstat)
            _check_paths(None, patched, "source: unsafe path in patch")
        state = await asyncio.to_thread(_worktree_state, wt)
        if state == "other":
            raise SourceError("source: worktree is not empty and holds no repository")
        if state == "repository":
            _check_paths(wt, patched, "source: unsafe path in patch")
            _check_paths(wt, untracked_paths, "source: unsafe path in untracked files")
        elif not repository_url and not capture.all_bundles():
            raise SourceError("source: no repository to clone")

        # Nothing above wrote anything; from here on the worktree changes.
        try:
            await _rebuild(wt, capture, repository_url, state, scratch, env)
            staging: paths.Staging | None = None
            names: list[str | None] = [None] * len(capture.untracked)
            if staged is not None and staged.files is capture.untracked:
                staging, names = await staged.staged()
            await asyncio.to_thread(_write_untracked, wt, capture.untracked, staging, names)
        except SourceError:
            if state != "repository":
                await asyncio.to_thread(_remove_created, wt, state)
            raise


class StagedUntracked:
    """Untracked files being written ahead into a staging folder (`paths.Staging`).

    Writing many files is slow, and nothing about their bytes waits on git: staging starts as
    soon as the verified bytes are at hand, in a worker thread, while the checkout is still
    being made; `apply` then only moves each staged file into place, with every path check.
    A file that could not be staged (or a folder on another file system) is written there
    directly instead, so staging can only save time, never change the result.

    Args:
        folder: where the staging folder is made (the attempt folder).
        files: the untracked files, exactly as `apply` will get them in its capture.
    """

    def __init__(self, folder: pathlib.Path, files: tuple[UntrackedFile, ...]) -> None:
        self.files = files
        self._stop = threading.Event()
        self._staging: paths.Staging | None = None
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
            self._staging = paths.Staging(folder)
            for index, item in enumerate(self.files):
                if self._stop.is_set():
                    return
                self._names[index] = self._staging.add(item.data, item.mode)
        except OSError:
            return  # what is not staged is written directly

    async def staged(self) -> tuple[paths.Staging | None, list[str | None]]:
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


def _write_untracked(
    wt: pathlib.Path,
    files: Sequence[UntrackedFile],
    staging: paths.Staging | None,
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
        raise SourceError("source: unsafe path in untracked files") from None
    except OSError:
        raise SourceError("source: untracked file could not be written") from None


async def _rebuild(
    wt: pathlib.Path,
    capture: SourceCapture,
    repository_url: str,
    state: str,
    scratch: pathlib.Path,
    env: Mapping[str, str],
) -> None:
    """Clone or init when needed, fetch the bundle, check the patch, check out, apply."""
    patch_file = scratch / "source.patch"
    if state != "repository":
        if repository_url:
            await _git_ok(
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
            await _git_ok(
                ["init", "--quiet", str(wt)], cwd=scratch, env=env, error="source: init failed"
            )
    for number, bundle in enumerate(capture.all_bundles()):
        # In order: each incremental bundle's prerequisites are commits the ones before it
        # brought (or the base), so git refuses a bundle out of order.
        bundle_file = scratch / f"source-{number}.bundle"
        bundle_file.write_bytes(bundle)
        await _git_ok(
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
    await _git_ok(
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
        await _git_ok(
            ["read-tree", head], cwd=wt, env=scratch_env, error="source: head commit is missing"
        )
        await _git_ok(
            ["apply", "--cached", "--binary", "--whitespace=nowarn", str(patch_file)],
            cwd=wt,
            env=scratch_env,
            error="source: patch does not apply",
        )
        written = await _git_ok(
            ["write-tree"], cwd=wt, env=scratch_env, error="source: patch does not apply"
        )
        tree = written.decode("ascii", errors="replace").strip()
        if not _COMMIT.fullmatch(tree):
            raise SourceError("source: patch does not apply")
    # HEAD moves to the head commit (on the branch), then index and work tree become the head
    # with the patch in one checkout: every uncommitted change staged, tracked files reset
    # (so a retried restore starts over). One pass, so no second process has to re-read the
    # files this checkout just wrote to trust the index it wrote.
    if capture.branch:
        await _git_ok(
            ["update-ref", "-m", "agentihooks restore", f"refs/heads/{capture.branch}", head],
            cwd=wt,
            env=env,
            error="source: checkout failed",
        )
        await _git_ok(
            ["symbolic-ref", "HEAD", f"refs/heads/{capture.branch}"],
            cwd=wt,
            env=env,
            error="source: checkout failed",
        )
    else:
        await _git_ok(
            ["update-ref", "--no-deref", "-m", "agentihooks restore", "HEAD", head],
            cwd=wt,
            env=env,
            error="source: checkout failed",
        )
    await _git_ok(
        ["read-tree", "--reset", "-u", tree], cwd=wt, env=env, error="source: checkout failed"
    )
    await _git(["update-ref", "-d", _RESTORE_REF], cwd=wt, env=env)
    if capture.branch:
        # Best effort: the restored branch tracks its remote counterpart when there is one.
        await _git(
            ["branch", "--quiet", f"--set-upstream-to=origin/{capture.branch}"],
            cwd=wt,
            env=env,
        )


def _remove_created(wt: pathlib.Path, state: str) -> None:
    """Undo a failed restore into a folder that was missing or empty: everything is ours."""
    if state == "missing":
        shutil.rmtree(wt, ignore_errors=True)
        return
    for child in list(wt.iterdir()):
        if child.is_dir() and not child.is_symlink():
            shutil.rmtree(child, ignore_errors=True)
        else:
            child.unlink(missing_ok=True)
