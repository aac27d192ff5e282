"""Accepting a decision and admitting its one replacement on the same seat, next generation
(spec: "Replace"). The accept script is the arbiter of concurrent decisions.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from services.common import directives
from services.controller import releasing, replacing, telemetry
from services.controller.state import reading, records, transitions, writing


@dataclasses.dataclass(frozen=True)
class Admission:
    """The answer of `admit`: the script's status, the decision as recorded afterwards, and
    when accepted now the replacement and its seat as written, with the swarm's config they
    were admitted under (what launching the replacement needs: nothing is read again)."""

    status: transitions.AcceptStatus
    decision: records.Decision | None
    replacement: records.Execution | None = None
    seat: records.Seat | None = None
    config: records.SwarmConfig | None = None


def task_recovery_accepted(
    fence: records.Fence,
    decision_fields: Mapping[str, Any],
    directive: directives.Directive,
    replacement: records.Execution,
) -> dict[str, Any]:
    """The task's recovery field once a decision is accepted: the directive, status accepted."""
    return {
        "status": "accepted",
        **directive.to_json(),
        "choice": decision_fields["choice"],
        "fenced_execution_id": fence.execution_id,
        "execution_id": replacement.execution_id,
        "archive_watermark": fence.archive_watermark,
        "decided_at": decision_fields["decided_at"],
    }


async def admit(
    ctx: replacing.Context,
    fence: records.Fence,
    *,
    choice: records.Choice,
    directive: directives.Directive,
    source: records.DecisionSource,
    agent: str | None,
    automatic: bool,
    offer: records.Offer | None,
    request_field: str | None = None,
    config: records.SwarmConfig | None = None,
) -> Admission:
    """Accept the decision and admit one replacement on the same seat, next generation.

    The Lua script is the arbiter: of many concurrent identical calls one is `accepted` and
    the rest are `repeated`; a different choice after acceptance is a `conflict`. `config`
    may be passed when the caller just read it. The decision the answer carries is the one
    the script stored and returned: nothing is read back.
    """
    config = config or await reading.config(ctx.client, ctx.swarm)
    image = config.worker_image if config else ctx.worker_image
    now = ctx.writer.clock()
    admission = records.Admitted(
        choice=choice,
        source=source,
        agent=agent,
        decided_at=writing.rfc3339(now),
        # The script accepts only under this epoch (the lease check), so it is the one the
        # decision records.
        decision_epoch=ctx.writer.lease.epoch or 0,
        fence_reason=fence.reason,
        fence_epoch=fence.controller_epoch,
        fenced_at=fence.fenced_at,
        native_session_id=fence.native_session_id,
        archive_watermark=fence.archive_watermark,
        final_capture=fence.final_capture,
    )
    replacement = replacing.new_execution(
        swarm=ctx.swarm,
        seat=fence.seat,
        generation=fence.generation + 1,
        task_id=fence.task_id,
        task_generation=fence.task_generation,
        image=image,
        directive=directive,
        restores_from=fence,
        legacy_spawn=False,
        now=now,
        admission=admission,
    )
    fields: dict[str, str] = {
        "choice": choice.value,
        "source": source.value,
        "decided_at": writing.rfc3339(now),
        "replacement": replacement.execution_id,
        "replacement_generation": str(replacement.generation),
        **records.directive_fields(directive),
    }
    if agent:
        fields["agent"] = agent
    recovery = task_recovery_accepted(fence, fields, directive, replacement)
    detail = telemetry.detail(
        decision="accepted",
        choice=choice.value,
        source=source.value,
        agent=agent,
        directive=directive.to_json(),
        replacement_execution_id=replacement.execution_id,
    )

    async def accept() -> writing.Accepted:
        return await ctx.writer.accept(
            fence,
            choice=choice,
            decision=fields,
            replacement=replacement,
            task_recovery=recovery,
            automatic=automatic,
            request_field=request_field,
            detail=detail,
            offer=offer,
        )

    accepted = await accept()
    if accepted.status is transitions.AcceptStatus.RELEASING:
        fence = await releasing.release_authority(ctx, fence)
        accepted = await accept()
    return Admission(
        accepted.status, accepted.decision, accepted.replacement, accepted.seat, config
    )


async def accepted_before(
    ctx: replacing.Context, fence: records.Fence, choice: records.Choice
) -> Admission:
    """What the accept script answers a choice made without a directive: `repeated` (with the
    decision accepted before), `conflict`, or `unplanned` when neither (nothing written)."""
    accepted = await ctx.writer.accepted_before(fence, choice)
    return Admission(accepted.status, accepted.decision)
