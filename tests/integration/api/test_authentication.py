"""Every RPC and route checks the credential first, then validates, then looks up.

A caller with no credential, and one with a forged credential, get the same answer whatever
the request names: a malformed request, an unknown execution or swarm, and a real one are
indistinguishable to them, so nobody learns which executions exist without a credential.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import aiohttp
import grpc
import pytest
from agentihooks.swarm.v2 import recovery_pb2 as pb
from agentihooks.swarm.v2 import types_pb2

from services.controller.api import http_api
from tests.support import controller_server as cs

FORGED = (("authorization", "Bearer forged-credential-0123456789"),)
NONE: tuple[tuple[str, str], ...] = ()
WRONG_SCHEME = (("authorization", "Basic b3BlcmF0b3I6cGFzcw=="),)
CALLERS = {"no credential": NONE, "forged": FORGED, "not a bearer": WRONG_SCHEME}

Call = Callable[[cs.Controller, tuple[tuple[str, str], ...]], Awaitable[Any]]


def _decision(**fields: Any) -> pb.RestoreDecisionRequest:
    return pb.RestoreDecisionRequest(**fields)


async def _reports() -> AsyncIterator[pb.RestoreReport]:
    yield pb.RestoreReport(progress=pb.RestoreProgress(step="verify", status="started"))


async def _drain(stream: Any) -> None:
    async for _ in stream:
        pass


CALLS: dict[str, Call] = {
    "ApplySwarm empty": lambda c, md: c.stub.ApplySwarm(pb.ApplySwarmRequest(), metadata=md),
    "ApplySwarm valid": lambda c, md: c.stub.ApplySwarm(
        pb.ApplySwarmRequest(document=cs.document()), metadata=md
    ),
    "RestoreDecision no swarm": lambda c, md: c.stub.RestoreDecision(_decision(), metadata=md),
    "RestoreDecision unknown execution": lambda c, md: c.stub.RestoreDecision(
        _decision(execution_id="example.eng-9.7", choice=types_pb2.CHOICE_FRESH), metadata=md
    ),
    "RestoreDecision real seat": lambda c, md: c.stub.RestoreDecision(
        _decision(swarm="example", seat="eng-1", choice=types_pb2.CHOICE_FRESH), metadata=md
    ),
    "RequestRestoreDecision unknown swarm": lambda c, md: c.stub.RequestRestoreDecision(
        _decision(swarm="nosuch", seat="eng-1", choice=types_pb2.CHOICE_RESUME), metadata=md
    ),
    "RequestRestoreDecision real seat": lambda c, md: c.stub.RequestRestoreDecision(
        _decision(swarm="example", seat="eng-1", choice=types_pb2.CHOICE_RESUME), metadata=md
    ),
    "GetSwarmStatus unknown": lambda c, md: c.stub.GetSwarmStatus(
        pb.GetSwarmStatusRequest(swarm="nosuch"), metadata=md
    ),
    "GetSwarmStatus real": lambda c, md: c.stub.GetSwarmStatus(
        pb.GetSwarmStatusRequest(swarm="example"), metadata=md
    ),
    "GetSwarmStatus malformed": lambda c, md: c.stub.GetSwarmStatus(
        pb.GetSwarmStatusRequest(swarm="../Bad Name"), metadata=md
    ),
    "PauseRecovery": lambda c, md: c.stub.PauseRecovery(
        pb.PauseRecoveryRequest(swarm="example"), metadata=md
    ),
    "UnpauseRecovery": lambda c, md: c.stub.UnpauseRecovery(
        pb.PauseRecoveryRequest(swarm="nosuch"), metadata=md
    ),
    "GetLaunchRecord": lambda c, md: c.stub.GetLaunchRecord(
        pb.GetLaunchRecordRequest(), metadata=md
    ),
    "ReportCapture": lambda c, md: c.stub.ReportCapture(
        pb.ReportCaptureRequest(native_session_id="s", archive_watermark=3), metadata=md
    ),
    "ReportRestore": lambda c, md: c.stub.ReportRestore(_reports(), metadata=md),
    "WatchRecovery real": lambda c, md: _drain(
        c.stub.WatchRecovery(pb.WatchRecoveryRequest(swarm="example"), metadata=md)
    ),
    "WatchRecovery unknown": lambda c, md: _drain(
        c.stub.WatchRecovery(pb.WatchRecoveryRequest(swarm="nosuch", after="x"), metadata=md)
    ),
}


async def test_every_rpc_refuses_a_caller_without_a_valid_credential_alike(
    controller: cs.Controller,
) -> None:
    """Each Recovery RPC (unary, client- and server-streaming), whatever its request names,
    answers UNAUTHENTICATED with one message to no credential, a forged one and a non-bearer
    one; nothing is written (the swarm stays as the operator left it)."""
    await controller.apply()
    before = await controller.status()
    for who, metadata in CALLERS.items():
        answers: set[tuple[grpc.StatusCode, str | None, str | None]] = set()
        for name, call in CALLS.items():
            with pytest.raises(grpc.aio.AioRpcError) as info:
                await call(controller, metadata)
            code = info.value.code()
            assert code == grpc.StatusCode.UNAUTHENTICATED, f"{name} / {who}: {code}"
            answers.add((code, cs.reason_of(info.value), info.value.details()))
        assert len(answers) == 1, (who, answers)
    after = await controller.status()
    assert after == before


async def test_health_and_reflection_need_no_credential(controller: cs.Controller) -> None:
    """Operators and probes reach health checking without a credential (grpcurl, kubelet)."""
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    health = health_pb2_grpc.HealthStub(controller.channel)
    answer = await health.Check(health_pb2.HealthCheckRequest(service=""))
    assert answer.status == health_pb2.HealthCheckResponse.SERVING


ROUTES = [
    ("POST", "/v1/executions/e-42/restore-decision", b'{"choice": "resume"}'),
    ("POST", "/v1/executions/example.eng-1.1/restore-decision", b'{"choice": "fresh"}'),
    ("POST", "/v1/executions/example.eng-1.1/restore-decision", b"not json"),
    ("GET", "/v1/swarms/example/status", b""),
    ("GET", "/v1/swarms/nosuch/status", b""),
    ("GET", "/v1/nothing-here", b""),
]


async def test_every_route_refuses_a_caller_without_a_valid_credential_alike(
    controller: cs.Controller,
) -> None:
    """HTTP: no credential, and a forged bearer, each get one 401 answer on every /v1/ route,
    whether it names a real execution, an unknown one (not 404), or a malformed body."""
    await controller.apply()
    runner, port = await http_api.start_http(controller.hub, "127.0.0.1:0")
    try:
        async with aiohttp.ClientSession() as http:
            for headers in ({}, {"Authorization": "Bearer forged-credential-0123456789"}):
                answers: set[tuple[int, str]] = set()
                for method, path, body in ROUTES:
                    async with http.request(
                        method, f"http://127.0.0.1:{port}{path}", data=body, headers=headers
                    ) as response:
                        answers.add((response.status, await response.text()))
                assert len(answers) == 1, (headers, answers)
                [(status, text)] = answers
                assert status == 401 and '"reason": "unauthenticated"' in text
    finally:
        await runner.cleanup()
