"""Restore outcomes, restore refusals and capture reports from worker attempts.

The controller accepts an outcome only from the replacement's own worker credential, only while
that replacement is still the seat's current attempt, and only when its continuity type,
checkpoint and session id equal the accepted directive. The stored outcome is marked verified
and keeps the fence's archive_watermark beside the restored watermark. A second identical report
returns the stored outcome; a different one is refused. Each report's script is the one check
that the credential is the attempt's own and the attempt still the seat's current, unfenced
one (see `state.reports`); the checks here are of the call's shape only.
"""

from __future__ import annotations

import dataclasses

from services.common import directives, errors
from services.controller import authorizing, policy, replacing, telemetry
from services.controller.state import reading, records, transitions

MISMATCH = "the reported {field} differs from the accepted directive"
CONFLICT = "a different outcome was already stored for this attempt"
NOT_REPLACEMENT = "this attempt is not a replacement: it has no restore to report"


@dataclasses.dataclass(frozen=True)
class Reported:
    """The stored outcome; `repeated` when an identical one was stored before."""

    outcome: records.Outcome
    repeated: bool


def _status_refusal(reply_status: str, field: str | None = None) -> errors.Refusal:
    # Outcome and refusal scripts answer the same words for the same refusals.
    if reply_status == transitions.OutcomeStatus.FORBIDDEN:
        return errors.ForbiddenScope()
    if reply_status == transitions.OutcomeStatus.NOT_REPLACEMENT:
        return errors.Refused("not_a_replacement", NOT_REPLACEMENT)
    if reply_status == transitions.OutcomeStatus.MISMATCH:
        return errors.Refused("outcome_mismatch", MISMATCH.format(field=field or "outcome"))
    return errors.Refused("outcome_conflict", CONFLICT)


async def report_restore(
    ctx: replacing.Context,
    caller: records.Principal,
    *,
    recovery: directives.Continuity,
    checkpoint_id: str | None,
    session_id: str | None,
    watermark: int | None,
) -> Reported:
    """Store a replacement's verified restore outcome (`Recovery.ReportRestore`'s outcome).

    Storing it writes the task's prior awaiting value back, puts the verified outcome on the
    task's recovery field and counts it in restore_outcomes_by_type.

    Raises:
        errors.ForbiddenScope: not the replacement's own credential, or the replacement is no
            longer the seat's current attempt (a fenced or superseded attempt stores nothing).
        errors.Refused: not a replacement, a field differs from the accepted directive, or a
            different outcome was already stored.
        scripting.LeaseLost: this replica is not the lease holder.
    """
    own = await authorizing.reporter(ctx.client, ctx.swarm, caller)
    held, cred = own.execution, own.credential
    replaced = held.restores_from_execution
    # Not a replacement: the script answers forbidden or not_replacement, in that order.
    fence = await reading.fence(ctx.client, ctx.swarm, replaced) if replaced else None
    outcome = records.Outcome(
        execution_id=held.execution_id,
        recovery=recovery,
        checkpoint_id=checkpoint_id or None,
        session_id=session_id or None,
        watermark=watermark,
        archive_watermark=fence.archive_watermark if fence else None,
        verified=True,
        reported_at=ctx.writer.now(),
    )
    task_recovery = {
        "status": "verified",
        **outcome.to_json(),
        "fenced_execution_id": held.restores_from_execution,
    }
    detail = telemetry.detail(
        outcome="verified",
        recovery=recovery.value,
        checkpoint_id=outcome.checkpoint_id,
        watermark=watermark,
        archive_watermark=outcome.archive_watermark,
    )
    stored = await ctx.writer.outcome(held, held.task_id, cred, outcome, task_recovery, detail)
    if stored.status is transitions.OutcomeStatus.STORED:
        return Reported(outcome, repeated=False)
    if stored.status is transitions.OutcomeStatus.REPEATED:
        kept = await reading.outcome(ctx.client, ctx.swarm, held.execution_id)
        return Reported(kept or outcome, repeated=True)
    raise _status_refusal(stored.status, stored.field)


async def report_refusal(ctx: replacing.Context, caller: records.Principal, reason: str) -> None:
    """Keep a replacement's reported restore refusal for status; it holds the attempt.

    The decision stays accepted and the task's awaiting does not change: the fenced attempt's
    claim and the accepted decision are left in place for the master or operator. While the
    refusal is kept the recovery pass neither fences nor replaces the replacement, even after
    its worker exits non-zero (its seat reads `restore_refused`); once the operator has fixed
    the cause and deleted the failed worker, the pass clears the refusal and launches the same
    execution again (see `recovering`). A verified outcome stored later clears it too.

    Raises:
        errors.ForbiddenScope: as `report_restore`.
        errors.Refused: not a replacement, or a verified outcome is stored already
            (`outcome_conflict`).
        errors.Malformed: no reason, or one longer than any of the spec's.
        scripting.LeaseLost: this replica is not the lease holder.
    """
    own = await authorizing.reporter(ctx.client, ctx.swarm, caller)
    held, cred = own.execution, own.credential
    if not reason or len(reason) > 200:
        # The credential is checked before the call is: a fenced attempt is forbidden first.
        await authorizing.attempt(ctx.client, ctx.swarm, policy.Action.REPORT, caller)
        raise errors.Malformed("malformed_refusal", "a refusal names a reason of the spec")
    detail = telemetry.detail(outcome="refused", reason=reason)
    status = await ctx.writer.refusal(held, cred, reason, detail)
    if status is not transitions.RefusalStatus.STORED:
        raise _status_refusal(status)


async def report_capture(
    ctx: replacing.Context,
    caller: records.Principal,
    *,
    native_session_id: str | None,
    archive_watermark: int | None,
    checkpoint_id: str | None = None,
    final: bool = False,
) -> None:
    """Record a running attempt's native session id and archive watermark (`ReportCapture`),
    which a later fence copies; a `final` report (the sidecar's last, once the worker stopped)
    lets that fence name no lost tail. A fenced attempt's report is refused and nothing is
    stored.

    Raises:
        errors.ForbiddenScope: not the current, unfenced attempt's own credential.
        errors.Malformed: a negative watermark.
        scripting.LeaseLost: this replica is not the lease holder.
    """
    own = await authorizing.reporter(ctx.client, ctx.swarm, caller)
    held, cred = own.execution, own.credential
    if archive_watermark is not None and archive_watermark < 0:
        await authorizing.attempt(ctx.client, ctx.swarm, policy.Action.REPORT, caller)
        raise errors.Malformed("malformed_capture", "an archive watermark is not negative")
    status = await ctx.writer.capture(
        held,
        cred,
        native_session_id,
        archive_watermark,
        checkpoint_id,
        final,
    )
    if status is not transitions.CaptureStatus.CAPTURED:
        raise errors.ForbiddenScope()


async def restore_outcomes_by_type(ctx: replacing.Context) -> dict[str, int]:
    """Recovery.restore_outcomes_by_type: verified outcomes counted as native, reconstructed
    and fresh."""
    return await reading.restore_outcomes_by_type(ctx.client, ctx.swarm)
