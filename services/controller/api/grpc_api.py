"""The Recovery gRPC service: authenticate, call the swarm's Recovery, translate the answer.

No recovery logic lives here. Refusals from the core pass through `rpc.handled`, which maps them
to status codes in one place; a write on a replica without the lease answers UNAVAILABLE.
"""

from __future__ import annotations

import functools
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeAlias, TypeVar

import grpc
from agentihooks.swarm.v2 import recovery_pb2 as pb
from agentihooks.swarm.v2 import recovery_pb2_grpc as pb_grpc

from services.common import errors, logs, rpc, tokens
from services.controller import authorizing, policy, recovering, telemetry
from services.controller import hub as hubs
from services.controller.api import convert, forwarding
from services.controller.state import keys, records, scripting

SERVICE_NAME = "agentihooks.swarm.v2.Recovery"
WATCH_BLOCK_MS = 1000
_T = TypeVar("_T")
F = TypeVar("F", bound=Callable[..., Any])
log = logging.getLogger("services.controller.api")

Context: TypeAlias = "grpc.aio.ServicerContext[Any, Any]"


def _named_swarm(request: pb.RestoreDecisionRequest) -> str | None:
    """The swarm a decision request names, as far as it names one (not yet validated): whose
    masters to look the caller up among first."""
    return request.swarm or keys.swarm_of(request.execution_id) or None


async def _core(swarm: str, call: Awaitable[_T]) -> _T:
    """Await a core call of `swarm`; a lost lease (this replica does not hold the swarm) raises
    `hubs.NotHolder`, which `_forwarded` sends on to the holder."""
    try:
        return await call
    except scripting.LeaseLost:
        raise hubs.NotHolder(swarm) from None
    except Exception as exc:
        refusal = recovering.refusal_of(exc)
        if refusal is not None and refusal is not exc:
            raise refusal from None
        raise


def _forwarded(response: Callable[[bytes], Any]) -> Callable[[F], F]:
    """Send a call that reached a replica without the swarm's lease on to the replica that
    holds it (`forwarding`). Client-streaming methods forward the one message that counts
    (`NotHolder.request`)."""

    def wrap(method: F) -> F:
        name = method.__name__

        @functools.wraps(method)
        async def call(self: RecoveryService, request: Any, context: Context) -> Any:
            try:
                return await method(self, request, context)
            except hubs.NotHolder as refusal:
                sent = request if refusal.request is None else refusal.request
                return await self._channels.forward(name, response, refusal, sent, context)

        return call  # type: ignore[return-value]

    return wrap


class RecoveryService(pb_grpc.RecoveryServicer):
    """Serves `agentihooks.swarm.v2.Recovery` for every swarm of a Hub."""

    def __init__(self, hub: hubs.Hub) -> None:
        self._hub = hub
        self._channels = forwarding.Channels(hub, SERVICE_NAME)

    async def aclose(self) -> None:
        """Close the channels to the other replicas."""
        await self._channels.aclose()

    def register(self, server: grpc.aio.Server) -> None:
        pb_grpc.add_RecoveryServicer_to_server(self, server)

    async def authenticate(self, token: str | None) -> authorizing.Caller:
        """Who the caller is, checked before any request is read (`rpc.Authenticating`):
        unauthenticated for no or an unknown credential, forbidden_scope for a revoked one.
        The handler gets the caller resolved here (`_caller`)."""
        caller = self._hub.principals.caller(token)
        await caller.principal(None)
        return caller

    async def _caller(self, context: Context, swarm: str | None) -> records.Principal:
        """The call's principal for `swarm`, as `authenticate` resolved it."""
        token = tokens.bearer(rpc.metadata(context))
        caller = rpc.authenticated(token)
        if not isinstance(caller, authorizing.Caller):
            caller = self._hub.principals.caller(token)  # served without the interceptor
        return await caller.principal(swarm)

    async def _authorized(
        self, context: Context, swarm: str | None, action: policy.Action
    ) -> records.Principal:
        """The call's principal, once the policy lets it do `action` in `swarm`."""
        principal = await self._caller(context, swarm)
        await authorizing.authorize(self._hub.client, swarm, action, principal)
        return principal

    async def _target(self, request: pb.RestoreDecisionRequest) -> tuple[str, str]:
        """The swarm and the execution-or-seat a decision request names."""
        target = request.execution_id or request.seat
        if not target:
            raise errors.Malformed("malformed", "name the execution_id or the seat")
        swarm = request.swarm or (keys.swarm_of(request.execution_id) or "")
        if not swarm:
            raise errors.Malformed("malformed", "name the swarm")
        if request.execution_id and keys.swarm_of(request.execution_id) not in (None, swarm):
            raise errors.Malformed("malformed", "the execution belongs to another swarm")
        return swarm, target

    @rpc.handled
    @_forwarded(pb.ApplySwarmResponse.FromString)
    async def ApplySwarm(
        self, request: pb.ApplySwarmRequest, context: Context
    ) -> pb.ApplySwarmResponse:
        await self._authorized(context, None, policy.Action.APPLY)
        if not request.document.strip():
            raise errors.Malformed("malformed", "the swarm document is empty")
        from services.controller import swarms

        parsed = swarms.parse(request.document)
        if await self._hub.holder_elsewhere(parsed.swarm) is not None:
            raise hubs.NotHolder(parsed.swarm)
        await self._hub.wait_until_leader(parsed.swarm)
        recovery = await self._hub.recovery(parsed.swarm, create=True)
        applied = await _core(recovery.swarm, recovery.apply_swarm(request.document))
        return pb.ApplySwarmResponse(
            swarm=applied.swarm,
            admitted_executions=list(applied.admitted_executions),
            updated_seats=list(applied.updated_seats),
        )

    @rpc.handled
    @_forwarded(pb.RestoreDecisionResponse.FromString)
    async def RestoreDecision(
        self, request: pb.RestoreDecisionRequest, context: Context
    ) -> pb.RestoreDecisionResponse:
        caller = await self._caller(context, _named_swarm(request))
        swarm, target = await self._target(request)
        choice = convert.choice(request.choice)
        recovery = await self._hub.recovery(swarm)
        result = await _core(
            recovery.swarm, recovery.restore_decision(target, choice, request.agent or None, caller)
        )
        return pb.RestoreDecisionResponse(
            decision=convert.decision(result.decision), repeated=result.repeated
        )

    @rpc.handled
    @_forwarded(pb.RequestRestoreDecisionResponse.FromString)
    async def RequestRestoreDecision(
        self, request: pb.RestoreDecisionRequest, context: Context
    ) -> pb.RequestRestoreDecisionResponse:
        caller = await self._caller(context, _named_swarm(request))
        swarm, target = await self._target(request)
        choice = convert.choice(request.choice)
        recovery = await self._hub.recovery(swarm)
        since = await telemetry.last_id(self._hub.client, swarm)
        recorded = await _core(
            recovery.swarm,
            recovery.request_restore_decision(target, choice, request.agent or None, caller),
        )
        return pb.RequestRestoreDecisionResponse(
            execution_id=recorded.execution_id,
            choice=convert.CHOICE_PB[recorded.choice],
            recorded=recorded.recorded,
            since_event=since,
        )

    @rpc.handled
    async def GetSwarmStatus(
        self, request: pb.GetSwarmStatusRequest, context: Context
    ) -> pb.SwarmStatus:
        await self._authorized(context, request.swarm, policy.Action.READ)
        recovery = await self._hub.recovery(request.swarm)
        return convert.status(await recovery.status(), self._hub.runtime_name)

    @rpc.handled
    async def WatchRecovery(
        self, request: pb.WatchRecoveryRequest, context: Context
    ) -> AsyncIterator[pb.RecoveryEvent]:
        await self._authorized(context, request.swarm, policy.Action.READ)
        recovery = await self._hub.recovery(request.swarm)
        after = request.after or await telemetry.last_id(self._hub.client, request.swarm)
        while True:
            for event in await recovery.events(after, block_ms=WATCH_BLOCK_MS):
                after = event.id
                yield pb.RecoveryEvent(
                    id=event.id,
                    kind=event.kind,
                    swarm=event.swarm,
                    seat=event.seat,
                    execution_id=event.execution_id,
                    expected_generation=event.expected_generation,
                    observed_generation=event.observed_generation,
                    controller_epoch=event.controller_epoch,
                    detail_json=json.dumps(dict(event.detail), sort_keys=True),
                    at=event.at,
                )

    @rpc.handled
    @_forwarded(pb.PauseState.FromString)
    async def PauseRecovery(
        self, request: pb.PauseRecoveryRequest, context: Context
    ) -> pb.PauseState:
        await self._authorized(context, request.swarm, policy.Action.SWITCH)
        recovery = await self._hub.recovery(request.swarm)
        await _core(recovery.swarm, recovery.pause())
        logs.event(log, "recovery_paused", swarm=request.swarm)
        return pb.PauseState(swarm=request.swarm, paused=await recovery.paused())

    @rpc.handled
    @_forwarded(pb.PauseState.FromString)
    async def UnpauseRecovery(
        self, request: pb.PauseRecoveryRequest, context: Context
    ) -> pb.PauseState:
        await self._authorized(context, request.swarm, policy.Action.SWITCH)
        recovery = await self._hub.recovery(request.swarm)
        await _core(recovery.swarm, recovery.unpause())
        logs.event(log, "recovery_unpaused", swarm=request.swarm)
        return pb.PauseState(swarm=request.swarm, paused=await recovery.paused())

    async def _worker_recovery(
        self, context: Context
    ) -> tuple[records.Principal, recovering.Recovery]:
        worker = await self._caller(context, None)
        return worker, await self._hub.recovery(policy.attempt_swarm(worker))

    @rpc.handled
    async def GetLaunchRecord(
        self, request: pb.GetLaunchRecordRequest, context: Context
    ) -> pb.LaunchRecord:
        worker, recovery = await self._worker_recovery(context)
        return convert.launch_record(await recovery.launch_record(worker))

    @rpc.handled
    @_forwarded(pb.RestoreReportAck.FromString)
    async def ReportRestore(
        self, request_iterator: AsyncIterator[pb.RestoreReport], context: Context
    ) -> pb.RestoreReportAck:
        worker, recovery = await self._worker_recovery(context)
        final: pb.RestoreReport | None = None
        async for report in request_iterator:
            kind = report.WhichOneof("report")
            if kind == "progress":
                continue
            if final is not None:
                raise errors.Malformed(
                    "malformed", "a restore report carries exactly one outcome or refusal"
                )
            final = report
        if final is None:
            raise errors.Malformed("malformed", "the stream ended without an outcome or refusal")
        try:
            return await self._report(worker, recovery, final)
        except hubs.NotHolder as refusal:
            refusal.request = [final]  # the stream, as far as it counts, for the holder
            raise

    async def _report(
        self, worker: records.Principal, recovery: recovering.Recovery, final: pb.RestoreReport
    ) -> pb.RestoreReportAck:
        if final.WhichOneof("report") == "refusal":
            if not final.refusal.reason:
                raise errors.Malformed("malformed", "a refusal names its reason")
            await _core(recovery.swarm, recovery.report_refusal(worker, final.refusal.reason))
            return pb.RestoreReportAck()
        o = final.outcome
        reported = await _core(
            recovery.swarm,
            recovery.report_restore(
                worker,
                recovery=convert.continuity(o.recovery),
                checkpoint_id=o.checkpoint_id or None,
                session_id=o.session_id or None,
                watermark=o.watermark if o.HasField("watermark") else None,
            ),
        )
        return pb.RestoreReportAck(
            outcome=convert.outcome(reported.outcome), repeated=reported.repeated
        )

    @rpc.handled
    @_forwarded(pb.ReportCaptureResponse.FromString)
    async def ReportCapture(
        self, request: pb.ReportCaptureRequest, context: Context
    ) -> pb.ReportCaptureResponse:
        worker, recovery = await self._worker_recovery(context)
        await _core(
            recovery.swarm,
            recovery.report_capture(
                worker,
                native_session_id=request.native_session_id or None,
                archive_watermark=request.archive_watermark if request.archive_watermark else None,
                checkpoint_id=request.checkpoint_id or None,
                final=request.final,
            ),
        )
        return pb.ReportCaptureResponse()
