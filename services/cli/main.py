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

import asyncio
import os
import sys
from collections.abc import Mapping, Sequence

from services.cli import arguments, calling, environment, exits, rendering


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
        raise SystemExit(exits.EXIT_STDOUT_CLOSED) from None
    raise SystemExit(code)


def _main(argv: Sequence[str] | None, env: Mapping[str, str]) -> int:
    """Parse, run and report; returns the exit code. Every line written to stderr passes
    through `rendering.redacted`, so no error repeats a credential."""
    secrets = environment.secrets(env)
    try:
        args = arguments.parser().parse_args(argv)
    except arguments.UsageError as exc:
        exc.parser.print_usage(sys.stderr)
        message = rendering.redacted(str(exc), secrets)
        print(f"{exc.parser.prog}: error: {message}", file=sys.stderr)
        return exits.EXIT_USAGE
    try:
        return asyncio.run(calling.run(args, env))
    except exits.CliError as exc:
        print(f"agentihooks: {rendering.redacted(str(exc), secrets)}", file=sys.stderr)
        return exc.code
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    main()
