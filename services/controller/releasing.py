"""Releasing what a fenced attempt held: its grants and account slot (its authority), then its
Pod. Each release is recorded in the fence, so a controller restart resumes where it stopped and
never releases twice (spec: "Release").
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Sequence

from services.common import errors, logs
from services.controller import replacing
from services.controller.pods import runtime as pods
from services.controller.state import reading, records, transitions

log = logging.getLogger("services.controller.replacing")


async def release_authority(ctx: replacing.Context, fence: records.Fence) -> records.Fence:
    """Revoke the fenced attempt's grants and end its account slot, each once; return the
    fence as recorded now.

    The three are one script that records them in the fence with what they did: after a crash
    either all of them are recorded and skipped, or none is and all are done. What they revoke
    is read from the attempt's record by the script.

    Raises:
        errors.NotFound: the fenced attempt has no record (`execution_missing`).
    """
    todo = [kind for kind in records.AUTHORITY_RELEASES if not fence.released(kind)]
    if not todo:
        return fence
    eid = fence.execution_id
    at = ctx.writer.now()
    status = await ctx.writer.release(eid, todo, at=at)
    if status is transitions.ReleaseStatus.RELEASED:
        return recorded(ctx, fence, todo, at)
    if status is transitions.ReleaseStatus.EXECUTION_MISSING:
        raise errors.NotFound("execution_missing", "the fenced attempt has no record")
    return await reading.fence(ctx.client, ctx.swarm, eid) or fence


def recorded(
    ctx: replacing.Context, fence: records.Fence, kinds: Sequence[records.ReleaseKind], at: str
) -> records.Fence:
    """The fence with `kinds` recorded as released at `at`, as the release script just wrote
    them: no read back. (A kind another caller, a decision call, recorded meanwhile would show
    our time in this copy only, not in Redis.)"""
    done = tuple(records.Release(kind, at, ctx.writer.lease.epoch or 0) for kind in kinds)
    return dataclasses.replace(fence, releases=fence.releases + done)


async def remove_pod(ctx: replacing.Context, fence: records.Fence) -> records.Fence:
    """Remove the fenced attempt's Pod unless the fence records it removed; return the fence
    as recorded now. A Pod the runtime could not remove is retried on the next pass."""
    if fence.released(records.ReleaseKind.POD):
        return fence
    eid = fence.execution_id
    if not await remove(ctx, eid):
        return fence
    at = ctx.writer.now()
    released = await ctx.writer.release(eid, [records.ReleaseKind.POD], at=at)
    if released is transitions.ReleaseStatus.RELEASED:
        return recorded(ctx, fence, [records.ReleaseKind.POD], at)
    return await reading.fence(ctx.client, ctx.swarm, eid) or fence


async def remove(ctx: replacing.Context, eid: str) -> bool:
    """Remove a fenced attempt's Pod (nothing recorded); False when the runtime could not,
    logged."""
    try:
        await ctx.runtime.remove(ctx.swarm, eid)
    except pods.PodsError as exc:
        logs.event(
            log,
            "pod_remove_failed",
            logging.WARNING,
            swarm=ctx.swarm,
            execution_id=eid,
            exception=type(exc).__name__,
        )
        return False
    return True
