"""`agentihooks`: the operator's command line. It talks gRPC to the controller and never writes
Redis itself.

    agentihooks swarm NAME status [--json]
    agentihooks swarm NAME restore-decision SEAT resume|fresh [--agent AGENT]
    agentihooks swarm NAME apply FILE
    agentihooks swarm NAME pause | unpause
    agentihooks swarm NAME events [--follow]

The controller address comes from AGENTIHOOKS_CONTROL_ADDR (default 127.0.0.1:50051) and the
credential from AGENTIHOOKS_TOKEN (an operator token or a master's credential), falling back to
AGENTIHOOKS_OPERATOR_TOKEN.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import pathlib
import sys
from collections.abc import Mapping, Sequence

import grpc
from agentihooks.swarm.v2 import recovery_pb2 as pb
from agentihooks.swarm.v2 import recovery_pb2_grpc as pb_grpc
from agentihooks.swarm.v2 import types_pb2

from services.cli import rendering

DEFAULT_CONTROL_ADDR = "127.0.0.1:50051"
IDLE_S = 1.0
CHOICES = {"resume": types_pb2.CHOICE_RESUME, "fresh": types_pb2.CHOICE_FRESH}


class CliError(Exception):
    """A failure to show the operator as one line, with exit code 1."""


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="agentihooks", description="Operate agent swarms.")
    parser.add_argument("--control", help="controller gRPC HOST:PORT (AGENTIHOOKS_CONTROL_ADDR)")
    top = parser.add_subparsers(dest="group", required=True)
    swarm = top.add_parser("swarm", help="work with one swarm")
    swarm.add_argument("swarm", metavar="NAME")
    cmds = swarm.add_subparsers(dest="command", required=True)
    status = cmds.add_parser("status", help="tasks, seats and handoff cards")
    status.add_argument("--json", action="store_true", help="print JSON")
    decide = cmds.add_parser("restore-decision", help="choose resume or fresh for a seat")
    decide.add_argument("seat")
    decide.add_argument("choice", choices=sorted(CHOICES))
    decide.add_argument("--agent", default="operator", help="the choosing agent (default operator)")
    apply = cmds.add_parser("apply", help="declare or update the swarm from a YAML/JSON document")
    apply.add_argument("file", type=pathlib.Path)
    cmds.add_parser("pause", help="set the recovery-paused switch")
    cmds.add_parser("unpause", help="clear the recovery-paused switch")
    events = cmds.add_parser("events", help="fence, recovery and outcome events")
    events.add_argument("--follow", action="store_true", help="keep waiting for new events")
    events.add_argument("--after", default="0", help="only events after this id (default: all)")
    return parser


def _token(env: Mapping[str, str]) -> str:
    token = env.get("AGENTIHOOKS_TOKEN") or env.get("AGENTIHOOKS_OPERATOR_TOKEN")
    if not token:
        raise CliError("no credential: set AGENTIHOOKS_TOKEN (operator token or master credential)")
    return token


def _refusal(exc: grpc.aio.AioRpcError) -> CliError:
    code = exc.code()
    if code == grpc.StatusCode.UNAVAILABLE:
        return CliError(f"the controller is unavailable: {exc.details()}")
    if code == grpc.StatusCode.DEADLINE_EXCEEDED:
        return CliError("the controller did not answer in time")
    return CliError(f"{exc.details()} ({code.name.lower()})")


async def _run(args: argparse.Namespace, env: Mapping[str, str]) -> int:
    addr = args.control or env.get("AGENTIHOOKS_CONTROL_ADDR") or DEFAULT_CONTROL_ADDR
    creds = (("authorization", f"Bearer {_token(env)}"),)
    async with grpc.aio.insecure_channel(addr) as channel:
        stub = pb_grpc.RecoveryStub(channel)
        try:
            return await _dispatch(stub, args, creds)
        except grpc.aio.AioRpcError as exc:
            raise _refusal(exc) from None


async def _dispatch(
    stub: pb_grpc.RecoveryStub, args: argparse.Namespace, creds: Sequence[tuple[str, str]]
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
        request = pb.RestoreDecisionRequest(
            swarm=swarm, seat=args.seat, choice=CHOICES[args.choice], agent=args.agent
        )
        status = await stub.GetSwarmStatus(
            pb.GetSwarmStatusRequest(swarm=swarm), metadata=creds, timeout=15
        )
        if status.runtime == "kubernetes":
            # For a Kubernetes attempt the command only records the request; the controller
            # applies it under its lease on its next recovery pass.
            recorded = await stub.RequestRestoreDecision(request, metadata=creds, timeout=15)
            verb = "recorded" if recorded.recorded else "already recorded"
            print(
                f"{args.choice} for {recorded.execution_id} {verb}; "
                "the controller applies it on its next pass"
            )
            return 0
        answer = await stub.RestoreDecision(request, metadata=creds, timeout=30)
        print(rendering.decision_text(answer))
        return 0
    if args.command == "apply":
        try:
            document = args.file.read_text()
        except OSError as exc:
            raise CliError(f"cannot read {args.file}: {exc.strerror}") from None
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
                event = await asyncio.wait_for(anext(events), wait)
            except (TimeoutError, StopAsyncIteration):
                stream.cancel()
                return 0
            print(json.dumps(rendering.event_json(event)), flush=True)
    raise CliError(f"unknown command {args.command}")


def main(argv: Sequence[str] | None = None, env: Mapping[str, str] | None = None) -> None:
    """Entry point of the `agentihooks` command."""
    args = _parser().parse_args(argv)
    try:
        code = asyncio.run(_run(args, env if env is not None else os.environ))
    except CliError as exc:
        print(f"agentihooks: {exc}", file=sys.stderr)
        raise SystemExit(1) from None
    except KeyboardInterrupt:
        raise SystemExit(130) from None
    raise SystemExit(code)


if __name__ == "__main__":
    main()
