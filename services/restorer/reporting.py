"""Reporting a restore to the controller (Recovery.ReportRestore) and its wire forms.

"A worker launched with checkpoint_remote: true then reports the outcome to the controller":
a client stream of progress messages, then exactly one outcome or one refusal, with the
replacement's own worker credential. The controller accepts an outcome only while this
replacement is still the seat's current attempt; an outcome it refuses, or one that cannot be
reported at all, stops the launch.
"""

from __future__ import annotations

import datetime
from collections.abc import AsyncIterator
from typing import Any

import grpc
from agentihooks.swarm.v2 import recovery_pb2, recovery_pb2_grpc, restorer_pb2, types_pb2

from services.restorer import launching, restoring, retrying

CONTROLLER_UNAVAILABLE = "controller unavailable: the outcome could not be reported"
REPORT_RETRY = retrying.Retry(attempts=8, base_s=0.25, cap_s=5.0)


def ready_pb(ready: restoring.Ready) -> restorer_pb2.RestoreReady:
    """The `RestoreReady` message of a delivered restore."""
    message = restorer_pb2.RestoreReady(
        recovery=launching.continuity_pb(ready.recovery),
        command=list(ready.command),
        checkpoint_id=ready.checkpoint_id or "",
        cwd=ready.cwd,
        stdin_path=ready.stdin_path or "",
    )
    if ready.watermark is not None:
        message.watermark = ready.watermark
    return message


def event_pb(event: restoring.Event) -> restorer_pb2.RestoreEvent:
    """One event on the `Restore` stream."""
    if isinstance(event, restoring.Step):
        return restorer_pb2.RestoreEvent(
            step=restorer_pb2.RestoreStep(step=event.step, status=event.status)
        )
    if isinstance(event, restoring.Ready):
        return restorer_pb2.RestoreEvent(ready=ready_pb(event))
    return restorer_pb2.RestoreEvent(refused=restorer_pb2.RestoreRefused(reason=event.reason))


def _outcome_pb(execution_id: str, ready: restoring.Ready) -> types_pb2.RestoreOutcome:
    outcome = types_pb2.RestoreOutcome(
        execution_id=execution_id,
        recovery=launching.continuity_pb(ready.recovery),
        checkpoint_id=ready.checkpoint_id or "",
        session_id=ready.session_id or "",
        reported_at=datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
    )
    if ready.watermark is not None:
        outcome.watermark = ready.watermark
    return outcome


async def report_restore(
    control_addr: str,
    worker_credential: str,
    execution_id: str,
    events: list[restoring.Event],
    *,
    retry: retrying.Retry = REPORT_RETRY,
) -> restoring.Refused | None:
    """Report progress, then the one outcome or refusal, over `Recovery.ReportRestore`.

    Returns:
        None when the controller acknowledged; a Refused when it refused the outcome or could
        not be reached (the launch must stop either way).
    """
    final = events[-1]
    reports: list[recovery_pb2.RestoreReport] = [
        recovery_pb2.RestoreReport(
            progress=recovery_pb2.RestoreProgress(step=e.step, status=e.status)
        )
        for e in events
        if isinstance(e, restoring.Step)
    ]
    if isinstance(final, restoring.Ready):
        reports.append(recovery_pb2.RestoreReport(outcome=_outcome_pb(execution_id, final)))
    else:
        assert isinstance(final, restoring.Refused)
        reports.append(
            recovery_pb2.RestoreReport(refusal=recovery_pb2.RestoreRefusal(reason=final.reason))
        )

    async with grpc.aio.insecure_channel(control_addr) as channel:
        stub = recovery_pb2_grpc.RecoveryStub(channel)

        async def call() -> Any:
            async def stream() -> AsyncIterator[recovery_pb2.RestoreReport]:
                for report in reports:
                    yield report

            return await stub.ReportRestore(
                stream(), metadata=retrying.bearer(worker_credential), timeout=30.0
            )

        try:
            await retry.call(call)
        except grpc.aio.AioRpcError as error:
            if error.code() in retrying.TRANSIENT:
                return restoring.Refused(CONTROLLER_UNAVAILABLE)
            return restoring.Refused(f"controller: {retrying.reason_of(error)}")
    return None
