"""What a capture of a worktree's source holds, and the error capturing or applying it raises.

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

`source.capture` makes one, `source.apply` rebuilds a worktree from one. Errors are
`SourceError`, whose message is `source: ` and a short cause with no file contents and no paths.
"""

from __future__ import annotations

import dataclasses

from services.common import errors


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
