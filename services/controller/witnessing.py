"""Write back what the cluster witnessed: a decision Redis lost, from the Pod it admitted.

Redis replication is asynchronous, so a failover can lose writes Redis acknowledged: a seat
back at a generation whose decision was accepted, its replacement's Pod running on. A listing
pass notices such a Pod (`observations.unexpected_witnesses`: newer than every attempt the
records expect of its seat, carrying the decision that admitted it), and the seat's worker
writes the decision back (`restore.lua`) before anything else, instead of fencing the replaced
attempt as evicted and asking again. Afterwards the seat is where the lost writes had left it:
a different second choice is refused as the spec says, and the fence keeps the true reason.
"""

from __future__ import annotations

import logging

from services.common import logs
from services.controller import admitting, replacing, telemetry, witnesses
from services.controller.pods import runtime as pods
from services.controller.state import reading, records, transitions

log = logging.getLogger("services.controller.recovery")


async def restore(
    ctx: replacing.Context, attempt: pods.Attempt, read: records.Seat | None = None
) -> str:
    """Write back the decision `attempt`'s worker carries, unless the records know its
    generation. Idempotent: a repeat finds the seat at that generation (`known`).

    `read` is the seat as its worker read it when its work began, if it did: a seat's
    generation never goes back, so one read at the generation already is `known` without
    reading it again (a resync brings many such seats in a storm: their replacement was
    launched between its read of the expected attempts and its list).

    Returns:
        The script's status (`restored`, `known`, `conflict`, `diverged`, `no_seat`), or
        `unreadable` when the worker carries no witness of this controller's format for
        itself.
    """
    replacement = witnesses.decode(attempt.witness or "")
    if replacement is None or (
        replacement.swarm,
        replacement.seat,
        replacement.execution_id,
        replacement.generation,
    ) != (ctx.swarm, attempt.seat, attempt.execution_id, attempt.generation):
        logs.event(
            log,
            "witness_unreadable",
            logging.WARNING,
            swarm=ctx.swarm,
            seat=attempt.seat,
            execution_id=attempt.execution_id,
        )
        return "unreadable"
    # A read first: a replacement launched but not yet recorded as launched is new to the
    # resync too, and a seat the records have at its generation needs no write (the script
    # checks again, atomically).
    if read is not None and read.generation >= replacement.generation:
        return transitions.RestoreStatus.KNOWN
    seat = await reading.seat(ctx.client, ctx.swarm, attempt.seat)
    if seat is not None and seat.generation >= replacement.generation:
        return transitions.RestoreStatus.KNOWN
    fence = witnesses.replaced_fence(replacement)
    decision = witnesses.decision_fields(replacement)
    recovery = admitting.task_recovery_accepted(fence, decision, replacement.directive, replacement)
    admitted = replacement.admission
    assert admitted is not None  # decoded witnesses always name their decision
    detail = telemetry.detail(
        decision="accepted",
        action="restore_from_pod",
        choice=admitted.choice.value,
        source=admitted.source.value,
        reason=admitted.fence_reason,
        directive=replacement.directive.to_json(),
        replacement_execution_id=replacement.execution_id,
    )
    restored = await ctx.writer.restore(
        replacement,
        fence=witnesses.fence_fields(replacement),
        decision=decision,
        task_recovery=recovery,
        detail=detail,
    )
    status, seat_generation = restored.status, restored.expected_generation
    if status is transitions.RestoreStatus.KNOWN:
        return status
    logs.event(
        log,
        "decision_restored"
        if status is transitions.RestoreStatus.RESTORED
        else "decision_not_restored",
        logging.WARNING,
        swarm=ctx.swarm,
        seat=attempt.seat,
        execution_id=fence.execution_id,
        replacement_execution_id=replacement.execution_id,
        generation=replacement.generation,
        reason=admitted.fence_reason,
        choice=admitted.choice.value,
        status=status,
        **({"expected_generation": seat_generation} if seat_generation is not None else {}),
    )
    return status
