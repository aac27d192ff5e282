"""Reporting to the controller: a restore (Recovery.ReportRestore) and its wire forms, and
captures (Recovery.ReportCapture), coalesced.

"A worker launched with checkpoint_remote: true then reports the outcome to the controller":
a client stream of progress messages, then exactly one outcome or one refusal, with the
replacement's own worker credential. The controller accepts an outcome only while this
replacement is still the seat's current attempt; an outcome it refuses, or one that cannot be
reported at all, stops the launch.

Captures are reported at most once per `REPORT_PERIOD_S` per attempt (`Coalesced`): a capture
made sooner is reported with the next report, which always carries the newest watermark; a
final report is sent at once, and nothing after it.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, Generic, TypeVar

import grpc
from agentihooks.swarm.v2 import recovery_pb2, recovery_pb2_grpc, restorer_pb2, types_pb2

from services.common import logs, tls, waiting
from services.restorer import captures, launching, restores, retrying

CONTROLLER_UNAVAILABLE = "controller unavailable: the outcome could not be reported"
REPORT_RETRY = retrying.Retry(attempts=8, base_s=0.25, cap_s=5.0)
REPORT_PERIOD_S = 1.0
"""The shortest time between two capture reports of one attempt."""

_T = TypeVar("_T")
log = logging.getLogger("services.restorer")


def ready_pb(ready: restores.Ready) -> restorer_pb2.RestoreReady:
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


def event_pb(event: restores.Event) -> restorer_pb2.RestoreEvent:
    """One event on the `Restore` stream."""
    if isinstance(event, restores.Step):
        return restorer_pb2.RestoreEvent(
            step=restorer_pb2.RestoreStep(step=event.step, status=event.status)
        )
    if isinstance(event, restores.Ready):
        return restorer_pb2.RestoreEvent(ready=ready_pb(event))
    return restorer_pb2.RestoreEvent(refused=restorer_pb2.RestoreRefused(reason=event.reason))


def _outcome_pb(execution_id: str, ready: restores.Ready) -> types_pb2.RestoreOutcome:
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
    events: list[restores.Event],
    *,
    retry: retrying.Retry = REPORT_RETRY,
) -> restores.Refused | None:
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
        if isinstance(e, restores.Step)
    ]
    if isinstance(final, restores.Ready):
        reports.append(recovery_pb2.RestoreReport(outcome=_outcome_pb(execution_id, final)))
    else:
        assert isinstance(final, restores.Refused)
        reports.append(
            recovery_pb2.RestoreReport(refusal=recovery_pb2.RestoreRefusal(reason=final.reason))
        )

    async with tls.channel(control_addr) as channel:
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
                return restores.Refused(CONTROLLER_UNAVAILABLE)
            return restores.Refused(f"controller: {retrying.reason_of(error)}")
    return None


class Coalesced(Generic[_T]):
    """Sends reports at most once per `period_s`; the newest report waiting wins.

    Reports are sent by a task of their own, one at a time, so a slow or unreachable
    controller never holds up a capture (unless its caller asks to wait for a report due now).

    Args:
        send: sends one report (`final` said as its second argument); it never raises.
        period_s: the shortest time between the starts of two sends.
    """

    def __init__(self, send: Callable[[_T, bool], Awaitable[None]], period_s: float) -> None:
        self._send = send
        self._period_s = period_s
        self._last_sent: float | None = None
        self._waiting: _T | None = None
        self._flush: asyncio.Task[None] | None = None
        self._sending = asyncio.Lock()
        self._closed = False
        self.sent = 0

    async def report(self, item: _T, *, wait: bool = True) -> None:
        """Send `item` once the period allows; a report waiting meanwhile is replaced by it.

        Args:
            wait: when the report is due now, return once it was sent.
        """
        if self._closed:
            return
        self._waiting = item
        if self._flush is not None:
            return  # a send is due: it takes the newest report
        due_in = self._due_in()
        self._flush = asyncio.create_task(self._later(due_in), name="capture-report")
        if wait and due_in <= 0:
            # `wait` returns even when `final` cancels the send: it never raises for it.
            await asyncio.wait([self._flush])

    async def final(self, item: _T) -> None:
        """Send `item` as final at once; nothing waiting or later is sent after it."""
        self._closed = True
        self._waiting = None
        await self.aclose()
        async with self._sending:
            self._last_sent = asyncio.get_running_loop().time()
            self.sent += 1
            await self._send(item, True)

    async def aclose(self) -> None:
        """Drop the send that is waiting or under way, if any."""
        flush, self._flush = self._flush, None
        if flush is not None:
            await waiting.cancel([flush])

    def _due_in(self) -> float:
        if self._last_sent is None:
            return 0.0
        return self._last_sent + self._period_s - asyncio.get_running_loop().time()

    async def _later(self, due_in: float) -> None:
        if due_in > 0:
            await asyncio.sleep(due_in)
        async with self._sending:
            self._flush = None  # a report from here on waits for the next period
            item, self._waiting = self._waiting, None
            if item is None or self._closed:
                return
            self._last_sent = asyncio.get_running_loop().time()
            self.sent += 1
            await self._send(item, False)


async def send_capture_report(
    control_addr: str,
    credential: str,
    retry: retrying.Retry,
    execution_id: str,
    captured: captures.Captured,
    *,
    final: bool,
) -> None:
    """Report one capture with `Recovery.ReportCapture` (`Coalesced` decides when); a report
    the controller does not take is logged, not raised: the checkpoint stands, and the next
    capture reports again."""
    request = recovery_pb2.ReportCaptureRequest(
        native_session_id=captured.native_session_id or "",
        archive_watermark=captured.watermark,
        checkpoint_id=captured.checkpoint_id,
        final=final,
    )
    async with tls.channel(control_addr) as channel:
        stub = recovery_pb2_grpc.RecoveryStub(channel)

        async def call() -> Any:
            return await stub.ReportCapture(
                request, metadata=retrying.bearer(credential), timeout=10.0
            )

        try:
            await retry.call(call)
        except grpc.aio.AioRpcError as error:
            # The checkpoint stands; the next capture reports again.
            logs.event(
                log,
                "capture_report_failed",
                logging.WARNING,
                reason=retrying.reason_of(error),
            )
        else:
            # The controller now holds this watermark: a fence from here on records it.
            logs.event(
                log,
                "capture_reported",
                execution_id=execution_id,
                checkpoint_id=captured.checkpoint_id,
                watermark=captured.watermark,
                final=final,
            )
