"""What the `agentihooks` command reads from its flags and environment: the controller's
address (checked to be HOST:PORT before any connection) and the credential, and the values no
line it writes may repeat.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping

from services.cli import exits, rendering
from services.common import addresses

DEFAULT_CONTROL_ADDR = "127.0.0.1:50051"
TOKEN_VARIABLES = ("AGENTIHOOKS_TOKEN", "AGENTIHOOKS_OPERATOR_TOKEN")


def control_addr(args: argparse.Namespace, env: Mapping[str, str]) -> str:
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
        shown = addresses.shown(rendering.redacted(given, secrets(env)))
        raise exits.CliError(
            f"the controller address must be HOST:PORT, for example {addresses.EXAMPLE}; "
            f"{source} is {shown}: {exc}",
            exits.EXIT_USAGE,
        ) from None
    return str(given)


def secrets(env: Mapping[str, str]) -> list[str]:
    return [env.get(name, "") for name in TOKEN_VARIABLES]


def token(env: Mapping[str, str]) -> str:
    token = env.get("AGENTIHOOKS_TOKEN") or env.get("AGENTIHOOKS_OPERATOR_TOKEN")
    if not token:
        raise exits.CliError(
            "no credential: set AGENTIHOOKS_TOKEN (operator token or master credential)",
            exits.EXIT_FORBIDDEN,
        )
    return token
