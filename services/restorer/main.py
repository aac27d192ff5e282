"""`agentihooks-restorer`: the restorer sidecar, one-shot restore and capture, the worker entry.

Subcommands:
  serve    the sidecar: the Restorer gRPC service on loopback (`--listen`, default
           127.0.0.1:50053), then captures continuously: it follows the session files and
           the worktree (`AGENTIHOOKS_CAPTURE_LAG_S`, see `following`), with a capture on an
           interval as a safety net (and at once on SIGUSR1); JSON logs on stderr; stops
           cleanly on SIGTERM, after a final capture.
  restore  one restore in this process; prints its result as one JSON object.
  capture  one capture now; prints the checkpoint as one JSON object.
  entry    the worker entry point: restore through the sidecar, then exec the harness.
  qualify  run the native-resume qualification against the agent CLI installed here and
           print a verdict (`services.restorer.qualifying`); exit 0 qualified, 1 not.

Settings come from the environment (`AGENTIHOOKS_…`, see `services.common.settings`).

Exit codes: 2 a setting is missing or not of its form (named on stderr, before anything runs);
3 the restore was refused; 4 (`entry`) the restorer sidecar did not come up; 5 (`serve`,
`restore`, `capture`) the controller or the checkpoint store does not answer at the address
its setting names, within `AGENTIHOOKS_START_TIMEOUT_S`; 127 the harness could not be run.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys

from services.common import logs, rpc, settings
from services.restorer import (
    capturing,
    entry,
    local_worker,
    one_shots,
    qualifying,
    serving,
    start_settings,
)


def main(argv: list[str] | None = None) -> None:
    """Run one subcommand of `agentihooks-restorer`."""
    parser = argparse.ArgumentParser(
        prog="agentihooks-restorer", description=__doc__.split("\n")[0]
    )
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser("serve", help="run the restorer sidecar")
    serve.add_argument("--listen", help="HOST:PORT to serve gRPC on (default 127.0.0.1:50053)")
    serve.add_argument(
        "--capture-interval",
        type=float,
        default=None,
        help=(
            "seconds between captures once restored when nothing changed (0: no captures;"
            f" default: AGENTIHOOKS_CAPTURE_INTERVAL_S, else {capturing.DEFAULT_INTERVAL_S:g})"
        ),
    )
    serve.add_argument("--exit-with", type=int, metavar="PID", help="stop when process PID is gone")
    for name, text in (
        ("restore", "restore once in this process and print the result as JSON"),
        ("capture", "capture one checkpoint now and print it as JSON"),
        ("entry", "the worker entry point: restore through the sidecar, then run the harness"),
        ("worker", "a whole worker outside Kubernetes: start the sidecar, then the entry point"),
    ):
        sub = commands.add_parser(name, help=text)
        sub.add_argument(
            "--worktree",
            default=os.environ.get(settings.PREFIX + "WORKTREE") or os.getcwd(),
            help="the task worktree (default: AGENTIHOOKS_WORKTREE, else this folder)",
        )
    commands.choices["entry"].add_argument(
        "--sidecar", help="HOST:PORT of the sidecar (default: AGENTIHOOKS_RESTORER_ADDR)"
    )
    commands.choices["entry"].add_argument(
        "--wait",
        type=float,
        default=None,
        help="seconds to wait for the sidecar (default: AGENTIHOOKS_START_TIMEOUT_S, else 60)",
    )
    qualifying.add_parser(commands)
    args = parser.parse_args(argv)
    if args.command == "qualify":
        raise SystemExit(qualifying.run(args))
    logs.configure("restorer")
    conf = start_settings.load(os.environ, getattr(args, "listen", None))
    missing = start_settings.missing(conf, args.command)
    if missing is not None:
        print(f"agentihooks-restorer: {missing}", file=sys.stderr)
        raise SystemExit(entry.EXIT_SETTINGS)
    needed = start_settings.needed(conf, args.command)
    try:
        for address in needed:
            entry.check_form(address)
    except settings.SettingsError as error:
        print(f"agentihooks-restorer: {error}", file=sys.stderr)
        raise SystemExit(entry.EXIT_SETTINGS) from None
    if args.command == "serve":
        interval = args.capture_interval
        if interval is None:
            interval = start_settings.capture_interval(os.environ)
        cadence = start_settings.capture_cadence(os.environ)
        try:
            code = asyncio.run(serving.serve(conf, interval, args.exit_with, needed, cadence))
        except rpc.ListenError as exc:
            print(
                exc.line("agentihooks-restorer serve", "--listen or AGENTIHOOKS_RESTORER_ADDR"),
                file=sys.stderr,
            )
            raise SystemExit(1) from None
        if code:
            raise SystemExit(code)
        return
    if args.command == "worker":
        local_worker.run(os.environ)
    worktree = start_settings.worktree(args.worktree)
    if args.command == "restore":
        raise SystemExit(
            asyncio.run(one_shots.once(conf, needed, one_shots.restore_once, worktree))
        )
    if args.command == "capture":
        raise SystemExit(
            asyncio.run(one_shots.once(conf, needed, one_shots.capture_once, worktree))
        )
    waited = settings.PREFIX + "START_TIMEOUT_S" if args.wait is None else "--wait"
    entry.run(
        args.sidecar or conf.listen,
        worktree,
        wait_s=conf.start_timeout_s if args.wait is None else args.wait,
        variable="--sidecar" if args.sidecar else entry.RESTORER_ADDR,
        bound=waited,
    )


if __name__ == "__main__":
    main()
