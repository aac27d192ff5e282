"""`agentihooks`: the operator's command line. It talks gRPC to the controller and never writes
Redis itself.

    agentihooks swarm NAME status [--json]
    agentihooks swarm NAME restore-decision SEAT resume|fresh [--agent AGENT] [--no-wait]
    agentihooks swarm NAME apply FILE
    agentihooks swarm NAME pause | unpause
    agentihooks swarm NAME events [--follow]

The controller address comes from --control or AGENTIHOOKS_CONTROL_ADDR (default
127.0.0.1:50051) and the credential from AGENTIHOOKS_TOKEN (an operator token or a master's
credential), falling back to AGENTIHOOKS_OPERATOR_TOKEN.

Exit codes, for scripts: 0 done; 1 any other error; 2 usage (also a controller address that is
not HOST:PORT); 3 refused (the controller's failed_precondition: for example no recovery
decision is pending for this attempt); 4 forbidden or unauthenticated (forbidden_scope, a
missing or wrong credential); 5 not found (no such swarm, seat or attempt); 6 the controller is
unavailable or did not answer in time; 141 stdout was closed before everything was printed
(`agentihooks swarm NAME events | head -1`).

No error message repeats a credential: AGENTIHOOKS_TOKEN and AGENTIHOOKS_OPERATOR_TOKEN are
redacted from every line the CLI writes to stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import pathlib
import re
import signal
import sys
from collections.abc import Mapping, Sequence
from typing import NoReturn

import grpc
from agentihooks.swarm.v2 import recovery_pb2 as pb
from agentihooks.swarm.v2 import recovery_pb2_grpc as pb_grpc
from agentihooks.swarm.v2 import types_pb2

from services.cli import rendering
from services.common import addresses, rpc, tls, tls_settings

DEFAULT_CONTROL_ADDR = "127.0.0.1:50051"
IDLE_S = 1.0
DEFAULT_WAIT_S = 120.0
CHOICES = {"resume": types_pb2.CHOICE_RESUME, "fresh": types_pb2.CHOICE_FRESH}


EXIT_OK = 0
EXIT_ERROR = 1
EXIT_USAGE = 2
EXIT_REFUSED = 3
EXIT_FORBIDDEN = 4
EXIT_NOT_FOUND = 5
EXIT_UNAVAILABLE = 6
# What a shell reports for a program that SIGPIPE ended (128 + 13), as for `yes | head -1`:
# the output was cut short, so not 0 (an events stream did not end by itself), and a
# `set -o pipefail` script sees the same status as for any other Unix tool in that place.
EXIT_STDOUT_CLOSED = 128 + signal.SIGPIPE
TOKEN_VARIABLES = ("AGENTIHOOKS_TOKEN", "AGENTIHOOKS_OPERATOR_TOKEN")

_EXIT_BY_CODE = {
    grpc.StatusCode.FAILED_PRECONDITION: EXIT_REFUSED,
    grpc.StatusCode.ALREADY_EXISTS: EXIT_REFUSED,
    grpc.StatusCode.PERMISSION_DENIED: EXIT_FORBIDDEN,
    grpc.StatusCode.UNAUTHENTICATED: EXIT_FORBIDDEN,
    grpc.StatusCode.NOT_FOUND: EXIT_NOT_FOUND,
    grpc.StatusCode.UNAVAILABLE: EXIT_UNAVAILABLE,
    grpc.StatusCode.DEADLINE_EXCEEDED: EXIT_UNAVAILABLE,
    grpc.StatusCode.INVALID_ARGUMENT: EXIT_USAGE,
}

EPILOG = """\
NAME is the swarm's name, as its document declares it (`swarm:`); SEAT one of its seats.
resume continues the fenced attempt from its newest complete, compatible checkpoint (native
when the checkpoint and the attempt allow it, else reconstructed from the transcript); fresh
starts a new conversation with no restored state.

examples:
  agentihooks swarm example status
  agentihooks swarm example status --json
  agentihooks swarm example restore-decision eng-2 resume
  agentihooks swarm example restore-decision eng-2 fresh --agent master@example-1
  agentihooks swarm example apply swarm.yaml
  agentihooks swarm example events --follow

environment: AGENTIHOOKS_CONTROL_ADDR (or --control), AGENTIHOOKS_TOKEN.
exit codes: 0 done, 1 error, 2 usage, 3 refused, 4 forbidden or unauthenticated, 5 not found,
6 controller unavailable, 141 stdout closed early (as in `... events | head -1`).
"""


class CliError(Exception):
    """A failure to show the operator as one line, with its exit code."""

    def __init__(self, message: str, code: int = EXIT_ERROR) -> None:
        super().__init__(message)
        self.code = code


class _UsageError(Exception):
    """argparse's usage error, raised instead of printed so `main` can redact it."""

    def __init__(self, parser: argparse.ArgumentParser, message: str) -> None:
        super().__init__(message)
        self.parser = parser


class _Parser(argparse.ArgumentParser):
    """argparse whose usage errors (they repeat what was typed, a pasted token included) are
    shown by `main`, which redacts them; subcommand parsers are of the same class."""

    def error(self, message: str) -> NoReturn:
        raise _UsageError(self, message)


def _event_id(value: str) -> str:
    """An event id as the controller's stream writes it (`1764669600000-0`, or `0`): anything
    else is a usage error here rather than an internal error from the controller."""
    if not re.fullmatch(r"[0-9]+(-[0-9]+)?", value):
        raise argparse.ArgumentTypeError(
            f"{value!r} is not an event id: use one `events` printed, such as 1764669600000-0,"
            " or 0 for all"
        )
    return value


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="agentihooks",
        description="Operate agent swarms: fenced restore decisions.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--control", help="controller gRPC HOST:PORT (AGENTIHOOKS_CONTROL_ADDR)")
    top = parser.add_subparsers(dest="group", required=True)
    swarm = top.add_parser(
        "swarm",
        help="work with one swarm",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    swarm.add_argument("swarm", metavar="NAME", help="the swarm's name, as its document declares")
    cmds = swarm.add_subparsers(dest="command", required=True)
    status = cmds.add_parser("status", help="tasks, seats and handoff cards")
    status.add_argument("--json", action="store_true", help="print JSON")
    decide = cmds.add_parser(
        "restore-decision",
        help="choose resume or fresh for a seat awaiting a decision",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    decide.add_argument("seat", metavar="SEAT", help="the seat whose attempt awaits a decision")
    decide.add_argument(
        "choice",
        choices=sorted(CHOICES),
        help="resume: from the newest usable checkpoint; fresh: a new conversation",
    )
    decide.add_argument("--agent", default="operator", help="the choosing agent (default operator)")
    decide.add_argument(
        "--no-wait",
        action="store_true",
        help="kubernetes: only record the request (default: wait for the pass that applies it)",
    )
    decide.add_argument(
        "--wait-timeout",
        type=float,
        default=DEFAULT_WAIT_S,
        metavar="SECONDS",
        help=f"kubernetes: how long to wait for that pass (default {DEFAULT_WAIT_S:g})",
    )
    apply = cmds.add_parser("apply", help="declare or update the swarm from a YAML/JSON document")
    apply.add_argument("file", type=pathlib.Path)
    cmds.add_parser("pause", help="set the recovery-paused switch")
    cmds.add_parser("unpause", help="clear the recovery-paused switch")
    events = cmds.add_parser("events", help="fence, recovery and outcome events")
    events.add_argument("--follow", action="store_true", help="keep waiting for new events")
    events.add_argument(
        "--after",
        default="0",
        type=_event_id,
        help="only events after this id, as `events` prints it (default: all)",
    )
    return parser


def _control_addr(args: argparse.Namespace, env: Mapping[str, str]) -> str:
    """The controller address, checked to be HOST:PORT before any connection is tried.

    Raises:
        CliError: (usage) the value is not HOST:PORT; the message names where it came from.
    """
    if args.control is not None:
        given, source = args.control, "--control"
    else:
        given = env.get("AGENTIHOOKS_CONTROL_ADDR", "").strip() or DEFAULT_CONTROL_ADDR
        source = "AGENTIHOOKS_CONTROL_ADDR"
    try:
        addresses.parse(given)
    except addresses.Malformed as exc:
        shown = addresses.shown(rendering.redacted(given, _secrets(env)))
        raise CliError(
            f"the controller address must be HOST:PORT, for example {addresses.EXAMPLE}; "
            f"{source} is {shown}: {exc}",
            EXIT_USAGE,
        ) from None
    return str(given)


def _secrets(env: Mapping[str, str]) -> list[str]:
    return [env.get(name, "") for name in TOKEN_VARIABLES]


def _token(env: Mapping[str, str]) -> str:
    token = env.get("AGENTIHOOKS_TOKEN") or env.get("AGENTIHOOKS_OPERATOR_TOKEN")
    if not token:
        raise CliError(
            "no credential: set AGENTIHOOKS_TOKEN (operator token or master credential)",
            EXIT_FORBIDDEN,
        )
    return token


def _refusal(exc: grpc.aio.AioRpcError, addr: str) -> CliError:
    code = exc.code()
    exit_code = _EXIT_BY_CODE.get(code, EXIT_ERROR)
    fix = f" at {addr}: check --control or AGENTIHOOKS_CONTROL_ADDR"
    if code == grpc.StatusCode.UNAVAILABLE:
        reason = _reason(exc)
        if reason:
            # The controller answered and said why it cannot serve (Redis does not answer, or
            # this replica does not hold the lease): its words, not a connection hint.
            return CliError(f"{exc.details()} ({reason})", exit_code)
        details = exc.details() or ""
        if "handshake" in details.lower() or "CERTIFICATE" in details:
            return CliError(
                f"the TLS handshake with the controller at {addr} failed: check"
                f" {tls_settings.CA_FILE} (the controller's certificate must be signed by it,"
                " unexpired and name the host you dial)",
                exit_code,
            )
        return CliError(
            f"the controller is unavailable{fix} (if it serves TLS, set {tls_settings.CA_FILE})",
            exit_code,
        )
    if code == grpc.StatusCode.DEADLINE_EXCEEDED:
        return CliError(f"the controller did not answer in time{fix}", exit_code)
    if code == grpc.StatusCode.UNAUTHENTICATED:
        hint = "; check AGENTIHOOKS_TOKEN"
        return CliError(f"{exc.details()} ({code.name.lower()}){hint}", exit_code)
    return CliError(f"{exc.details()} ({code.name.lower()})", exit_code)


def _reason(exc: grpc.aio.AioRpcError) -> str:
    """The reason code a controller sent with its refusal, or "" when none answered."""
    for key, value in exc.trailing_metadata() or ():
        if key == rpc.REASON_KEY:
            return value.decode() if isinstance(value, bytes) else str(value)
    return ""


async def _run(args: argparse.Namespace, env: Mapping[str, str]) -> int:
    addr = _control_addr(args, env)
    creds = (("authorization", f"Bearer {_token(env)}"),)
    try:
        tls_conf = tls_settings.load(env)
    except tls_settings.TLSError as exc:
        raise CliError(str(exc), EXIT_USAGE) from None
    async with tls.channel(addr, tls_conf) as channel:
        stub = pb_grpc.RecoveryStub(channel)
        try:
            return await _dispatch(stub, args, creds, addr)
        except grpc.aio.AioRpcError as exc:
            raise _refusal(exc, addr) from None


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
            raise CliError(f"cannot read {args.file}: {exc.strerror}", EXIT_USAGE) from None
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
    raise CliError(f"unknown command {args.command}")


async def _restore_decision(
    stub: pb_grpc.RecoveryStub,
    args: argparse.Namespace,
    creds: Sequence[tuple[str, str]],
    addr: str,
) -> int:
    """Choose for a seat: recorded for the next pass (Kubernetes) or applied now (local)."""
    swarm = args.swarm
    request = pb.RestoreDecisionRequest(
        swarm=swarm, seat=args.seat, choice=CHOICES[args.choice], agent=args.agent
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
                return EXIT_OK
            return await _await_pass(stub, swarm, recorded, creds, args.wait_timeout)
        answer = await stub.RestoreDecision(request, metadata=creds, timeout=30)
    except grpc.aio.AioRpcError as exc:
        error = _refusal(exc, addr)
        if exc.code() == grpc.StatusCode.NOT_FOUND:
            # The swarm exists (its status just answered): the seat or attempt typed does not.
            raise CliError(f"{error}; {rendering.seat_names(status)}", error.code) from None
        if exc.code() == grpc.StatusCode.FAILED_PRECONDITION:
            raise CliError(
                f"{error}{await _accepted_note(stub, swarm, args.seat, creds)}", error.code
            ) from None
        raise error from None
    print(rendering.decision_text(answer))
    return EXIT_OK


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
                    return EXIT_OK
                if event.kind == "request" and detail.get("request") == "repeated":
                    print(f"applied: {detail.get('choice')} was already accepted")
                    return EXIT_OK
                if event.kind == "request" and detail.get("request") == "refused":
                    message, reason = detail.get("message"), detail.get("reason")
                    # The spec's refusals carry their text as the reason: say it once.
                    said = f"{message} ({reason})" if reason and reason != message else message
                    accepted = await _accepted_note(stub, swarm, execution, creds)
                    raise CliError(
                        f"the request for {execution} was refused: {said}{accepted}",
                        EXIT_REFUSED,
                    )
    except TimeoutError:
        raise CliError(
            f"no pass applied the request within {timeout_s:g} s; it stays recorded"
            " (see `agentihooks swarm NAME status`)",
            EXIT_UNAVAILABLE,
        ) from None
    finally:
        stream.cancel()
    raise CliError("the controller ended the event stream", EXIT_UNAVAILABLE)


def main(argv: Sequence[str] | None = None, env: Mapping[str, str] | None = None) -> None:
    """Entry point of the `agentihooks` command."""
    environ = env if env is not None else os.environ
    try:
        try:
            code = _main(argv, environ)
        finally:
            # Flushed here rather than at interpreter exit, so that a closed stdout is caught
            # below instead of printing "Exception ignored … BrokenPipeError".
            sys.stdout.flush()
    except BrokenPipeError:
        # The reader went away (`… | head -1`): nothing is left to tell it. Point stdout at
        # /dev/null so the interpreter's own last flush finds no pipe either, and end quietly.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        raise SystemExit(EXIT_STDOUT_CLOSED) from None
    raise SystemExit(code)


def _main(argv: Sequence[str] | None, env: Mapping[str, str]) -> int:
    """Parse, run and report; returns the exit code. Every line written to stderr passes
    through `rendering.redacted`, so no error repeats a credential."""
    secrets = _secrets(env)
    try:
        args = _parser().parse_args(argv)
    except _UsageError as exc:
        exc.parser.print_usage(sys.stderr)
        message = rendering.redacted(str(exc), secrets)
        print(f"{exc.parser.prog}: error: {message}", file=sys.stderr)
        return EXIT_USAGE
    try:
        return asyncio.run(_run(args, env))
    except CliError as exc:
        print(f"agentihooks: {rendering.redacted(str(exc), secrets)}", file=sys.stderr)
        return exc.code
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    main()
