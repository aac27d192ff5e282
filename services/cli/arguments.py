"""The `agentihooks` command line: its subcommands, their options and help.

Usage errors are raised (`UsageError`) rather than printed, so `main` can redact them: they
repeat what was typed, a pasted token included.
"""

from __future__ import annotations

import argparse
import pathlib
import re
from typing import NoReturn

from agentihooks.swarm.v2 import types_pb2

DEFAULT_WAIT_S = 120.0
CHOICES = {"resume": types_pb2.CHOICE_RESUME, "fresh": types_pb2.CHOICE_FRESH}

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


class UsageError(Exception):
    """argparse's usage error, raised instead of printed so `main` can redact it."""

    def __init__(self, parser: argparse.ArgumentParser, message: str) -> None:
        super().__init__(message)
        self.parser = parser


class _Parser(argparse.ArgumentParser):
    """argparse whose usage errors (they repeat what was typed, a pasted token included) are
    shown by `main`, which redacts them; subcommand parsers are of the same class."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(self, message)


def _event_id(value: str) -> str:
    """An event id as the controller's stream writes it (`1764669600000-0`, or `0`): anything
    else is a usage error here rather than an internal error from the controller."""
    if not re.fullmatch(r"[0-9]+(-[0-9]+)?", value):
        raise argparse.ArgumentTypeError(
            f"{value!r} is not an event id: use one `events` printed, such as 1764669600000-0,"
            " or 0 for all"
        )
    return value


def parser() -> argparse.ArgumentParser:
    root = _Parser(
        prog="agentihooks",
        description="Operate agent swarms: fenced restore decisions.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    root.add_argument("--control", help="controller gRPC HOST:PORT (AGENTIHOOKS_CONTROL_ADDR)")
    top = root.add_subparsers(dest="group", required=True)
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
    return root
