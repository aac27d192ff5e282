"""The `agentihooks` subcommands, each as the calls it makes to the controller's Recovery
service, and what it prints of the answers.
"""

from __future__ import annotations

import argparse
import asyncio
import json
from collections.abc import Mapping, Sequence

import grpc
from agentihooks.swarm.v2 import recovery_pb2 as pb
from agentihooks.swarm.v2 import recovery_pb2_grpc as pb_grpc

from services.cli import arguments, environment, exits, rendering
from services.common import tls, tls_settings

IDLE_S = 1.0


async def run(args: argparse.Namespace, env: Mapping[str, str]) -> int:
    addr = environment.control_addr(args, env)
    creds = (("authorization", f"Bearer {environment.token(env)}"),)
    try:
        tls_conf = tls_settings.load(env)
    except tls_settings.TLSError as exc:
        raise exits.CliError(str(exc), exits.EXIT_USAGE) from None
    async with tls.channel(addr, tls_conf) as channel:
        stub = pb_grpc.RecoveryStub(channel)
        try:
            return await _dispatch(stub, args, creds, addr)
        except grpc.aio.AioRpcError as exc:
            raise exits.refusal(exc, addr) from None


async def _dispatch(
    stub: pb_grpc.RecoveryStub,
    args: argparse.Namespace,
    creds: Sequence[tuple[str, str]],
    addr: str,
) -> int:
    swarm = args.swarm
    if args.command == "status":
        status = await stub.GetSwarmStatus(
            pb.GetSwarmStatusRequest(swarm=swarm), metadata=creds, timeout=15
        )
        if args.json:
            print(json.dumps(rendering.status_json(status), indent=2))
        else:
            print(rendering.status_text(status))
        return 0
    if args.command == "restore-decision":
        return await _restore_decision(stub, args, creds, addr)
    if args.command == "apply":
        try:
            document = args.file.read_text()
        except OSError as exc:
            raise exits.CliError(
                f"cannot read {args.file}: {exc.strerror}", exits.EXIT_USAGE
            ) from None
        applied = await stub.ApplySwarm(
            pb.ApplySwarmRequest(document=document), metadata=creds, timeout=30
        )
        admitted = ", ".join(applied.admitted_executions) or "none"
        print(
            f"swarm {applied.swarm}: admitted {admitted}; "
            f"updated {len(applied.updated_seats)} seat(s)"
        )
        return 0
    if args.command in ("pause", "unpause"):
        call = stub.PauseRecovery if args.command == "pause" else stub.UnpauseRecovery
        state = await call(pb.PauseRecoveryRequest(swarm=swarm), metadata=creds, timeout=15)
        print(f"swarm {state.swarm}: recovery {'paused' if state.paused else 'not paused'}")
        return 0
    if args.command == "events":
        stream = stub.WatchRecovery(
            pb.WatchRecoveryRequest(swarm=swarm, after=args.after), metadata=creds
        )
        events = aiter(stream)
        while True:
            try:
                # Without --follow: print what is recorded, then stop once the stream is quiet.
                wait = None if args.follow else IDLE_S
                async with asyncio.timeout(wait):
                    event = await anext(events)
            except (TimeoutError, StopAsyncIteration):
                stream.cancel()
                return 0
            print(json.dumps(rendering.event_json(event)), flush=True)
    raise exits.CliError(f"unknown command {args.command}")


async def _restore_decision(
    stub: pb_grpc.RecoveryStub,
    args: argparse.Namespace,
    creds: Sequence[tuple[str, str]],
    addr: str,
) -> int:
    """Choose for a seat: recorded for the next pass (Kubernetes) or applied now (local)."""
    swarm = args.swarm
    request = pb.RestoreDecisionRequest(
        swarm=swarm, seat=args.seat, choice=arguments.CHOICES[args.choice], agent=args.agent
    )
    status = await stub.GetSwarmStatus(
        pb.GetSwarmStatusRequest(swarm=swarm), metadata=creds, timeout=15
    )
    try:
        if status.runtime == "kubernetes":
            # For a Kubernetes attempt the command only records the request; the controller
            # applies it under its lease on its next recovery pass.
            recorded = await stub.RequestRestoreDecision(request, metadata=creds, timeout=15)
            verb = "recorded" if recorded.recorded else "already recorded"
            print(
                f"{args.choice} for {recorded.execution_id} {verb}; "
                "the controller applies it on its next pass",
                flush=True,
            )
            if args.no_wait:
                return exits.EXIT_OK
            return await _await_pass(stub, swarm, recorded, creds, args.wait_timeout)
        answer = await stub.RestoreDecision(request, metadata=creds, timeout=30)
    except grpc.aio.AioRpcError as exc:
        error = exits.refusal(exc, addr)
        if exc.code() == grpc.StatusCode.NOT_FOUND:
            # The swarm exists (its status just answered): the seat or attempt typed does not.
            raise exits.CliError(f"{error}; {rendering.seat_names(status)}", error.code) from None
        if exc.code() == grpc.StatusCode.FAILED_PRECONDITION:
            raise exits.CliError(
                f"{error}{await _accepted_note(stub, swarm, args.seat, creds)}", error.code
            ) from None
        raise error from None
    print(rendering.decision_text(answer))
    return exits.EXIT_OK


async def _accepted_note(
    stub: pb_grpc.RecoveryStub, swarm: str, attempt: str, creds: Sequence[tuple[str, str]]
) -> str:
    """After a refusal: which decision was accepted for the attempt (an execution id or a
    seat), read from the swarm's status now, as "; …"; "" when none was or status fails (the
    refusal itself is what the operator must see)."""
    try:
        status = await stub.GetSwarmStatus(
            pb.GetSwarmStatusRequest(swarm=swarm), metadata=creds, timeout=15
        )
    except grpc.aio.AioRpcError:
        return ""
    accepted = rendering.accepted_decision(status, attempt)
    return f"; {accepted}" if accepted else ""


async def _await_pass(
    stub: pb_grpc.RecoveryStub,
    swarm: str,
    recorded: pb.RequestRestoreDecisionResponse,
    creds: Sequence[tuple[str, str]],
    timeout_s: float,
) -> int:
    """Follow the swarm's events from just before the request until the pass that applied or
    dropped it; print that outcome and return its exit code."""
    execution = recorded.execution_id
    stream = stub.WatchRecovery(
        pb.WatchRecoveryRequest(swarm=swarm, after=recorded.since_event or "0-0"), metadata=creds
    )
    try:
        async with asyncio.timeout(timeout_s):
            async for event in stream:
                if event.execution_id != execution:
                    continue
                detail = json.loads(event.detail_json or "{}")
                if event.kind == "recovery" and detail.get("decision") == "accepted":
                    replacement = detail.get("replacement_execution_id") or "none"
                    print(f"applied: {detail.get('choice')} accepted; replacement {replacement}")
                    return exits.EXIT_OK
                if event.kind == "request" and detail.get("request") == "repeated":
                    print(f"applied: {detail.get('choice')} was already accepted")
                    return exits.EXIT_OK
                if event.kind == "request" and detail.get("request") == "refused":
                    message, reason = detail.get("message"), detail.get("reason")
                    # The spec's refusals carry their text as the reason: say it once.
                    said = f"{message} ({reason})" if reason and reason != message else message
                    accepted = await _accepted_note(stub, swarm, execution, creds)
                    raise exits.CliError(
                        f"the request for {execution} was refused: {said}{accepted}",
                        exits.EXIT_REFUSED,
                    )
    except TimeoutError:
        raise exits.CliError(
            f"no pass applied the request within {timeout_s:g} s; it stays recorded"
            " (see `agentihooks swarm NAME status`)",
            exits.EXIT_UNAVAILABLE,
        ) from None
    finally:
        stream.cancel()
    raise exits.CliError("the controller ended the event stream", exits.EXIT_UNAVAILABLE)
