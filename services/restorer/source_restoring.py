"""The restore's source step: committed and uncommitted source applied to the worktree.

The worktree is cloned first when it has no repository; any failure is `source: …`. A fresh
attempt restores nothing, but still gets its project's checkout.

The registered project is cloned early, into a scratch folder of the attempt folder, while the
Validator runs (`SourceStep.start_early`, `checkouts.EarlyClone`); the worktree adopts it only
once this step begins, and a refused restore discards it. Once verified, the untracked files
are written ahead into a staging folder of the attempt folder while the checkout is made
(`source.StagedUntracked`), then moved into place with every path check.
"""

from __future__ import annotations

import asyncio
import os
import pathlib
from collections.abc import Mapping
from typing import Any

from services.common import directives
from services.restorer import checkouts, launching, restores, source, source_records

Continuity = directives.Continuity


class SourceStep:
    """The source step of one restore, and the clone it starts early."""

    def __init__(self, launch: launching.LaunchRecord, attempt: restores.Attempt) -> None:
        self._launch = launch
        self._attempt = attempt
        self._early_clone: checkouts.EarlyClone | None = None

    def start_early(self, project: launching.Project | None, captured: object) -> None:
        """Start cloning the registered `project` when the record not yet verified holds
        source (`captured`) and the worktree is empty."""
        # Only the registration's repository (the controller's word) is cloned this early:
        # a repository named by a record not yet verified is never contacted.
        repository = project.repository if project is not None else ""
        if isinstance(captured, dict) and repository and checkouts.is_empty(self._attempt.worktree):
            self._early_clone = checkouts.EarlyClone(self._attempt.attempt_dir, repository)

    async def restore(
        self, recovery: Continuity, record: Mapping[str, Any], fetch: restores.Fetch
    ) -> bool:
        """Apply the verified `record`'s source to the worktree; False when it holds none.

        Raises:
            restores.Stop: the source could not be fetched or applied.
        """
        if recovery is Continuity.FRESH:
            return await self._fresh_checkout()
        captured = record.get("source")
        if captured is None:
            return False
        repository = _repository(self._launch.project(record["project"]), captured)
        untracked = [
            source_records.UntrackedFile(item["path"], item["mode"], await fetch(item))
            for item in captured.get("untracked", [])
        ]
        capture = source_records.SourceCapture(
            repository=captured["repository"],
            branch=captured.get("branch") or "",
            base_commit=captured["base_commit"],
            head_commit=captured["head_commit"],
            bundle=await _optional(fetch, captured.get("bundle")),
            patch=await _optional(fetch, captured.get("patch")),
            untracked=tuple(untracked),
            # Version 3: incremental bundles, applied in the record's order.
            bundles=tuple([await fetch(b) for b in captured.get("bundles", ())]),
        )
        worktree = self._attempt.worktree
        # The verified bytes are written ahead while the clone is still being made; `apply`
        # then only moves them into place, each path checked there.
        staged = source.StagedUntracked(self._attempt.attempt_dir, capture.untracked)
        try:
            await self._apply(worktree, capture, repository, staged)
        finally:
            await staged.discard()
        return True

    async def _apply(
        self,
        worktree: pathlib.Path,
        capture: source_records.SourceCapture,
        repository: str,
        staged: source.StagedUntracked,
    ) -> None:
        was_missing = not await asyncio.to_thread(os.path.lexists, worktree)
        adopted = False
        early, self._early_clone = self._early_clone, None
        if early is not None:
            if early.repository == repository:
                adopted = await early.adopt(worktree)
            else:
                await early.discard()
        try:
            await source.apply(worktree, capture, repository, staged=staged)
        except source_records.SourceError as error:
            if adopted:
                # What the early clone put there goes too: the worktree was missing or empty.
                checkouts.undo(worktree, was_missing)
            raise restores.Stop(error.reason) from None

    async def _fresh_checkout(self) -> bool:
        """A fresh attempt restores nothing, but still gets its project's checkout."""
        projects = [p for p in self._launch.projects if p.repository]
        worktree = self._attempt.worktree
        if len(projects) != 1 or not checkouts.is_empty(worktree):
            return False
        if not await checkouts.clone(worktree, projects[0].repository):
            raise restores.Stop("source: clone failed")
        return True

    async def close(self) -> None:
        """Discard a clone the worktree did not adopt."""
        if self._early_clone is not None:
            await self._early_clone.discard()
            self._early_clone = None


async def _optional(fetch: restores.Fetch, entry: Mapping[str, Any] | None) -> bytes | None:
    return None if entry is None else await fetch(entry)


def _repository(project: launching.Project | None, captured: Mapping[str, Any]) -> str:
    """Where the project is cloned from: the registration's repository, else the record's."""
    recorded = captured.get("repository")
    if not isinstance(recorded, str) or recorded == restores.NO_ORIGIN:
        recorded = ""
    return (project.repository if project else "") or recorded
