"""Choosing resume or fresh for a fenced attempt: who may choose, what each choice picks, and
requests recorded for the next pass.

Only the operator, or a registered master of the swarm whose credential is bound to the named
agent, may choose; any other caller is refused with forbidden_scope, and the choice is never
inferred from a display name. A decision is accepted once per fenced attempt: repeating the
accepted choice returns the same decision, checkpoint and replacement and admits nothing new;
a different choice is refused with `no recovery decision is pending for this attempt`.
"""

from __future__ import annotations

import dataclasses
import logging

from services.common import errors, logs, redis_link
from services.controller import (
    admitting,
    authorizing,
    deciding,
    observations,
    policy,
    releasing,
    replacing,
    telemetry,
)
from services.controller.state import housekeeping, keys, reading, records, scripting, transitions

log = logging.getLogger("services.controller.decisions")

REFUSED_REQUEST = "controller: the recovery request for %s was refused: %s"
"""The log line of a recorded request the pass refused (spec wording)."""


@dataclasses.dataclass(frozen=True)
class Result:
    """An accepted decision; `repeated` when it was accepted before (nothing new admitted).
    `admitted`: the replacement accepted now, as written (what its seat's worker launches
    with nothing read again)."""

    decision: records.Decision
    repeated: bool
    admitted: observations.Admitted | None = None


@dataclasses.dataclass(frozen=True)
class Recorded:
    """A recorded request; `recorded` is False when the same one was already waiting."""

    execution_id: str
    choice: records.Choice
    recorded: bool


@dataclasses.dataclass(frozen=True)
class Chooser:
    """Who is choosing, as recorded with the decision."""

    source: records.DecisionSource
    agent: str | None
    credential_sha256: str | None = dataclasses.field(default=None, repr=False)


async def authorize(
    ctx: replacing.Context, caller: records.Principal, agent: str | None
) -> Chooser:
    """Check that the caller may choose for this swarm, as the named agent (`policy`'s
    `CHOOSE`); return who chooses, as the decision records it.

    Raises:
        errors.ForbiddenScope: a worker credential, a master of another swarm, a master whose
            credential is not bound to the named agent, or a master no longer registered.
    """
    role = await authorizing.authorize(ctx.client, ctx.swarm, policy.Action.CHOOSE, caller, agent)
    if role is policy.Role.OPERATOR:
        return Chooser(records.DecisionSource.OPERATOR, agent or "operator")
    if not isinstance(caller, records.Master):  # the only other role that may choose
        raise errors.ForbiddenScope()
    return Chooser(records.DecisionSource.MASTER, caller.agent, caller.credential_sha256)


async def resolve(ctx: replacing.Context, execution_or_seat: str) -> str:
    """The fenced attempt an execution id or a seat name stands for.

    A seat stands for its latest fenced attempt, or its current attempt when none was fenced
    (a choice for it is then refused as not pending).

    Raises:
        errors.NotFound: no such execution or seat in this swarm.
    """
    if keys.swarm_of(execution_or_seat) is not None:
        if await reading.execution(ctx.client, ctx.swarm, execution_or_seat) is None:
            raise errors.NotFound(
                "execution_not_found",
                f"no such execution in swarm {ctx.swarm}: {execution_or_seat}",
            )
        return execution_or_seat
    seat = await reading.seat(ctx.client, ctx.swarm, execution_or_seat)
    if seat is None:
        raise errors.NotFound("seat_not_found", _no_such_seat(ctx.swarm, execution_or_seat))
    return seat.fenced_execution_id or seat.current_execution_id


def _no_such_seat(swarm: str, asked: str) -> str:
    """The refusal's message: the seat asked for when it is a name; anything else (it may be
    any text, even a pasted credential) is not repeated, only what a seat name looks like."""
    if keys.is_name(asked):
        return f"no such seat in swarm {swarm}: {asked}"
    return (
        f"no such seat in swarm {swarm}: a seat name is lowercase letters, digits and '-', "
        "at most 24 characters"
    )


async def choose(
    ctx: replacing.Context,
    execution: str,
    choice: records.Choice,
    chooser: Chooser,
    *,
    request_field: str | None = None,
) -> Result:
    """Accept `choice` for the fenced attempt `execution`: its replacement is admitted; the
    seat's worker launches it (`reconciling`), like every other replacement.

    Raises:
        errors.Refused: `no recovery decision is pending for this attempt` (not fenced, or a
            different choice was accepted) or `no complete compatible checkpoint to resume
            from` (resume without a usable checkpoint; the seat keeps waiting).
        scripting.LeaseLost: this controller lost its lease; nothing was written.
    """
    fence = await reading.fence(ctx.client, ctx.swarm, execution)
    if fence is None:
        raise errors.Refused(deciding.NOT_PENDING)
    # The authority releases precede any replacement (the accept script checks them; after an
    # acceptance they are all recorded, so a repeat does nothing here). The lost attempt's Pod
    # is the seat's worker's to remove, after it launched the replacement: a decision call
    # does no runtime call of its own beside that worker.
    fence = await releasing.release_authority(ctx, fence)
    try:
        found = await ctx.checkpoints.newest_compatible(fence.scope, ctx.worker_image)
        directive = deciding.plan_for(choice, fence, found)
    except Exception:
        # No directive (resume without a usable checkpoint, a store that could not be
        # listed): the accept script still answers a repeat of the accepted choice (even
        # after a restart or an image change) or a conflict; only otherwise is what stopped
        # the plan the answer.
        answered = await admitting.accepted_before(ctx, fence, choice)
        if answered.status is transitions.AcceptStatus.UNPLANNED:
            raise
        return await _answer(ctx, fence, choice, answered, request_field)
    admission = await admitting.admit(
        ctx,
        fence,
        choice=choice,
        directive=directive,
        source=chooser.source,
        agent=chooser.agent,
        automatic=False,
        offer=deciding.offer(fence, found),
        request_field=request_field,
    )
    return await _answer(ctx, fence, choice, admission, request_field)


async def _answer(
    ctx: replacing.Context,
    fence: records.Fence,
    choice: records.Choice,
    admission: admitting.Admission,
    request_field: str | None,
) -> Result:
    """The accept script's answer as the caller's: accepted now, or a repeat (a recorded
    request it repeats is dropped with a `request` event); anything else is refused as not
    pending (a different choice was accepted, the attempt is not fenced or not current)."""
    decided = admission.decision
    status = admission.status
    if status is transitions.AcceptStatus.ACCEPTED and decided is not None:
        admitted = None
        if admission.replacement is not None and admission.seat is not None:
            admitted = observations.Admitted(
                fence, admission.replacement, admission.seat, admission.config
            )
        return Result(decided, repeated=False, admitted=admitted)
    if status is transitions.AcceptStatus.REPEATED and decided is not None:
        # Decided before: neither the fence, directive nor ledger is touched.
        if request_field is not None:
            await ctx.writer.drop_request(
                request_field,
                execution_id=fence.execution_id,
                seat=fence.seat,
                detail=telemetry.detail(request="repeated", choice=choice.value),
            )
        return Result(decided, repeated=True)
    raise errors.Refused(deciding.NOT_PENDING)


async def restore_decision(
    ctx: replacing.Context,
    execution_or_seat: str,
    choice: records.Choice,
    agent: str | None,
    caller: records.Principal,
) -> Result:
    """Choose resume or fresh now (`Recovery.RestoreDecision`); the caller has the seat
    worked (its replacement launched) before it answers.

    Args:
        ctx: The swarm's context.
        execution_or_seat: The fenced attempt's execution id, or the seat awaiting a decision.
        choice: resume or fresh.
        agent: The choosing agent, e.g. `master@example-1`; a master's credential must be
            bound to it.
        caller: The authenticated principal.

    Returns:
        The accepted decision, and whether it repeats an earlier acceptance.

    Raises:
        errors.ForbiddenScope: the caller may not choose.
        errors.NotFound: no such execution or seat.
        errors.Refused: see `choose`.
        scripting.LeaseLost: this replica is not the lease holder (map to UNAVAILABLE).
    """
    chooser = await authorize(ctx, caller, agent)
    execution = await resolve(ctx, execution_or_seat)
    return await choose(ctx, execution, choice, chooser)


async def request_restore_decision(
    ctx: replacing.Context,
    execution_or_seat: str,
    choice: records.Choice,
    agent: str | None,
    caller: records.Principal,
) -> Recorded:
    """Only record the choice; the seat's worker applies it under the lease and drops it
    (`Recovery.RequestRestoreDecision`). Requests are deduplicated by attempt and choice.

    Raises:
        errors.ForbiddenScope, errors.NotFound, scripting.LeaseLost: as `restore_decision`.
    """
    chooser = await authorize(ctx, caller, agent)
    execution = await resolve(ctx, execution_or_seat)
    request = records.Request(
        execution_id=records.ExecutionId(execution),
        choice=choice,
        source=chooser.source,
        agent=chooser.agent,
        credential_sha256=chooser.credential_sha256,
        requested_at=ctx.writer.now(),
    )
    recorded = await ctx.writer.record_request(request)
    return Recorded(execution, choice, recorded is housekeeping.RequestStatus.RECORDED)


async def apply_requests(
    ctx: replacing.Context, recorded: list[tuple[str, records.Request]]
) -> tuple[int, int]:
    """Apply recorded requests under the lease, then drop each (the decide step of their
    seat's reconcile). `recorded`: the seat's requests as its worker read them; one recorded
    since brings the seat back to the queue.

    A refused request is dropped and logged as `controller: the recovery request for
    EXECUTION was refused: REASON`. Returns (applied, refused).

    Raises:
        scripting.LeaseLost: the lease was lost; the rest of the requests stay recorded.
    """
    applied = refused = 0
    for field, request in recorded:
        chooser = Chooser(request.source, request.agent, request.credential_sha256)
        try:
            if request.source is records.DecisionSource.MASTER:
                # The master may have been unregistered (or rebound) since it asked.
                if not (request.agent and request.credential_sha256):
                    raise errors.ForbiddenScope()
                asker = records.Master(ctx.swarm, request.agent, request.credential_sha256)
                await authorize(ctx, asker, request.agent)
            await choose(ctx, request.execution_id, request.choice, chooser, request_field=field)
            applied += 1
        except scripting.LeaseLost:
            raise
        except errors.Refusal as refusal:
            await ctx.writer.drop_request(
                field,
                execution_id=request.execution_id,
                detail=telemetry.detail(
                    request="refused",
                    choice=request.choice.value,
                    reason=refusal.reason,
                    message=refusal.message,
                ),
            )
            log.warning(
                REFUSED_REQUEST,
                request.execution_id,
                refusal.message,
                extra={"fields": {"execution_id": request.execution_id, "reason": refusal.reason}},
            )
            refused += 1
        except Exception as exc:
            if redis_link.unreachable(exc):
                raise  # Redis is gone: the pass stops; the request stays for the next one
            # A store or runtime hiccup: the request stays recorded for the next pass.
            logs.event(
                log,
                "request_failed",
                logging.WARNING,
                swarm=ctx.swarm,
                execution_id=request.execution_id,
                exception=type(exc).__name__,
            )
    return applied, refused
