"""The decide step of a seat's reconcile: what the pass decides for a fenced attempt, and the
offer its pending decision shows.

A new fence is decided once (`decide`, on `deciding.decide`'s plan): an automatic resume or
fresh replacement is admitted at once; a plan to wait, or an admission the pause refused, leaves
the decision `recovery_pending` with the offer its card shows, for the master or operator.

Offers follow the worker image. A pending decision records the offer its card shows with the
compatibility key (the controller's worker image tag) it was worked out under. When the
controller now runs another worker image, the pass works the offer out again under the current
key and records it (`reoffer`: a `recovery` event with `action: reoffer`); it does not decide
again, the decision stays recovery_pending. A card read before that pass works the offer out
itself (`status`, through `current_offer`), so a card never offers a checkpoint that resume
would refuse.
"""

from __future__ import annotations

import logging

from services.common import logs
from services.controller import admitting, deciding, observations, replacing, telemetry
from services.controller.state import reading, records, transitions

log = logging.getLogger("services.controller.recovery")


async def decide(
    ctx: replacing.Context,
    fence: records.Fence,
    reads: reading.FencedReads,
    report: observations.PassReport,
) -> admitting.Admission | None:
    """Resume at once or wait for a choice; the admission when one was attempted."""
    config, held, paused = reads.config, reads.execution, reads.paused
    found = await ctx.checkpoints.newest_compatible(fence.scope, ctx.worker_image)
    switches = deciding.Switches(
        automation=config.restore_automation if config else False,
        paused=paused,
        legacy_spawn=held.legacy_spawn if held else False,
    )
    plan = deciding.decide(fence, found, switches)
    if plan.action is not deciding.Action.WAIT:
        assert plan.choice is not None and plan.directive is not None
        assert plan.source is not None
        admission = await admitting.admit(
            ctx,
            fence,
            choice=plan.choice,
            directive=plan.directive,
            source=plan.source,
            agent=None,
            automatic=True,
            offer=plan.offer,
            config=config,
        )
        if admission.status is transitions.AcceptStatus.ACCEPTED:
            report.accepted.append(fence.execution_id)
            return admission
        if admission.status is not transitions.AcceptStatus.PAUSED:
            return admission
    detail = telemetry.detail(
        decision=records.RECOVERY_PENDING,
        reason=fence.reason,
        offer=plan.offer.to_json() if plan.offer else None,
    )
    pended = await ctx.writer.pend(fence, plan.offer, detail, ctx.worker_image)
    if pended is transitions.PendStatus.PENDING:
        report.pending.append(fence.execution_id)
    return None


async def current_offer(ctx: replacing.Context, fence: records.Fence) -> records.Offer | None:
    """The offer of a fenced attempt under the controller's current compatibility key: what
    `resume` would pick now (the same listing `decisions.choose` reads)."""
    found = await ctx.checkpoints.newest_compatible(fence.scope, ctx.worker_image)
    return deciding.offer(fence, found)


async def reoffer(ctx: replacing.Context, fence: records.Fence, pending: records.Decision) -> None:
    """Record the pending decision's offer again, worked out under the current compatibility
    key (the worker image changed since it was recorded, or it was recorded without its
    key). Nothing is decided: the decision stays recovery_pending. When the checkpoint store
    cannot be listed the next pass tries again; the seat's other steps go on (its card works
    the offer out itself meanwhile)."""
    try:
        found = await current_offer(ctx, fence)
    except Exception as exc:
        logs.event(
            log,
            "reoffer_failed",
            logging.WARNING,
            swarm=ctx.swarm,
            execution_id=fence.execution_id,
            exception=type(exc).__name__,
        )
        return
    detail = telemetry.detail(
        decision=records.RECOVERY_PENDING,
        action="reoffer",
        reason=fence.reason,
        offer=found.to_json() if found else None,
        previous_offer=pending.offer.to_json() if pending.offer else None,
    )
    await ctx.writer.reoffer(fence, found, ctx.worker_image, detail)
