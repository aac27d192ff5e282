"""`agentihooks-restorer`: the restorer sidecar, one-shot restore and capture, the worker entry.

Subcommands:
  serve    the sidecar: the Restorer gRPC service on loopback (`--listen`, default
           127.0.0.1:50053), then captures on an interval (and at once on SIGUSR1); JSON logs
           on stderr; stops cleanly on SIGTERM.
  restore  one restore in this process; prints its result as one JSON object.
  capture  one capture now; prints the checkpoint as one JSON object.
  entry    the worker entry point: restore through the sidecar, then exec the harness.

Settings come from the environment (`AGENTIHOOKS_…`, see `services.common.settings`).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import pathlib
import signal
import sys
from collections.abc import Mapping
from typing import Any

from services.common import errors, logs, rpc, settings
from services.restorer import capturing, entry, launching, local_worker, restoring, sidecar

log = logging.getLogger("services.restorer")


def _result_json(result: restoring.Ready | restoring.Refused) -> dict[str, Any]:
    if isinstance(result, restoring.Refused):
        return {"state": "refused", "reason": result.reason}
    return {
        "state": "ready",
        "recovery": result.recovery.value,
        "checkpoint_id": result.checkpoint_id,
        "watermark": result.watermark,
        "cwd": result.cwd,
        "command": list(result.command),
        "stdin_path": result.stdin_path,
    }


async def _exit_with(pid: int, stopping: asyncio.Event) -> None:
    """Set `stopping` once process `pid` is gone: a sidecar started beside a worker outside
    Kubernetes ends with it, as a native sidecar ends with its Pod's main container."""
    while True:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            stopping.set()
            return
        except PermissionError:
            pass
        await asyncio.sleep(0.5)


async def _serve(
    conf: settings.RestorerSettings, capture_interval_s: float, exit_with: int | None = None
) -> None:
    capturers: list[capturing.Capturer] = []
    tasks: list[asyncio.Task[None]] = []

    def start_capturing(launch: launching.LaunchRecord, attempt: restoring.Attempt) -> None:
        if capture_interval_s <= 0:
            return
        capturer = capturing.Capturer(
            launch,
            attempt,
            conf.storage,
            control_addr=conf.control_addr,
            worker_credential=conf.worker_credential,
        )
        capturers.append(capturer)
        tasks.append(asyncio.create_task(capturer.run(capture_interval_s), name="capture"))

    service = sidecar.RestorerService(conf, on_ready=start_capturing)
    server, port = await rpc.start_server(conf.listen, [service.register], [sidecar.SERVICE_NAME])
    logs.event(log, "listening", service="restorer", port=port)
    loop = asyncio.get_running_loop()

    def capture_now() -> None:
        for capturer in capturers:
            capturer.wake.set()

    loop.add_signal_handler(signal.SIGUSR1, capture_now)
    stopping = asyncio.Event()
    if exit_with is not None:
        tasks.append(asyncio.create_task(_exit_with(exit_with, stopping), name="exit-with"))
    try:
        await rpc.wait_for_termination(5.0, server, stopping=stopping)
    finally:
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await service.aclose()
    logs.event(log, "stopped", service="restorer")


async def _restore_once(conf: settings.RestorerSettings, worktree: pathlib.Path) -> int:
    service = sidecar.RestorerService(conf)
    service.start(str(worktree))
    result = await service.wait()
    print(json.dumps(_result_json(result), ensure_ascii=False))
    return 0 if isinstance(result, restoring.Ready) else entry.EXIT_REFUSED


async def _capture_once(conf: settings.RestorerSettings, worktree: pathlib.Path) -> int:
    try:
        launch = await sidecar.load_launch_record(conf)
    except errors.Refusal as error:
        print(json.dumps({"state": "failed", "reason": error.reason}))
        return 2
    places = sidecar.Places(conf.attempt_dir, conf.harness_home, conf.harness_env)
    capturer = capturing.Capturer(
        launch,
        places.attempt(worktree),
        conf.storage,
        control_addr=conf.control_addr,
        worker_credential=conf.worker_credential,
    )
    try:
        captured = await capturer.capture()
    except capturing.CaptureError as error:
        print(json.dumps({"state": "failed", "reason": str(error)}))
        return 1
    print(
        json.dumps(
            {
                "state": "captured",
                "checkpoint_id": captured.checkpoint_id,
                "continuity": captured.continuity,
                "native_session_id": captured.native_session_id,
                "watermark": captured.watermark,
                "written": captured.written,
            }
        )
    )
    return 0


def _settings(env: Mapping[str, str], listen: str | None) -> settings.RestorerSettings:
    values = dict(env)
    if listen:
        values[settings.PREFIX + "RESTORER_ADDR"] = listen
    try:
        return settings.load_restorer(values)
    except settings.SettingsError as error:
        print(f"agentihooks-restorer: {error}", file=sys.stderr)
        raise SystemExit(2) from None


def _missing(conf: settings.RestorerSettings, command: str) -> str | None:
    """The first setting `command` needs at start that is not set, as the line to print.

    A sidecar (or a one-shot restore or capture) without a mounted launch record fetches it
    from the controller with the attempt's own credential: both must be there before any
    restore step, or the attempt would only learn it once its restore is asked for.
    """
    if command not in ("serve", "restore", "capture") or conf.launch_record_file is not None:
        return None
    if conf.control_addr is None:
        return (
            f"{settings.PREFIX}CONTROL_ADDR is not set: the sidecar fetches its launch record"
            f" from the controller there (or set {settings.PREFIX}LAUNCH_RECORD to a file)"
        )
    if conf.worker_credential is None:
        return (
            f"{settings.PREFIX}WORKER_CREDENTIAL is not set: the sidecar fetches its launch"
            " record with the attempt's own credential"
        )
    return None


def _capture_interval(env: Mapping[str, str]) -> float:
    """`AGENTIHOOKS_CAPTURE_INTERVAL_S` (the controller passes it to every worker Pod), else
    the default; a value that is not a number of seconds stops the sidecar at start."""
    raw = env.get(settings.PREFIX + "CAPTURE_INTERVAL_S", "")
    if not raw:
        return capturing.DEFAULT_INTERVAL_S
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not value >= 0:
        print(
            f"agentihooks-restorer: {settings.PREFIX}CAPTURE_INTERVAL_S must be a number of"
            f" seconds, not {raw!r}",
            file=sys.stderr,
        )
        raise SystemExit(2)
    return value


def _worktree(value: str) -> pathlib.Path:
    path = pathlib.Path(value)
    if not path.is_absolute():
        path = pathlib.Path.cwd() / path
    return path


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
            "seconds between captures once restored (0: no captures; default:"
            f" AGENTIHOOKS_CAPTURE_INTERVAL_S, else {capturing.DEFAULT_INTERVAL_S:g})"
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
        "--wait", type=float, default=60.0, help="seconds to wait for the sidecar"
    )
    args = parser.parse_args(argv)
    logs.configure("restorer")
    conf = _settings(os.environ, getattr(args, "listen", None))
    missing = _missing(conf, args.command)
    if missing is not None:
        print(f"agentihooks-restorer: {missing}", file=sys.stderr)
        raise SystemExit(2)
    if args.command == "serve":
        interval = args.capture_interval
        if interval is None:
            interval = _capture_interval(os.environ)
        asyncio.run(_serve(conf, interval, args.exit_with))
        return
    if args.command == "worker":
        local_worker.run(os.environ)
    worktree = _worktree(args.worktree)
    if args.command == "restore":
        raise SystemExit(asyncio.run(_restore_once(conf, worktree)))
    if args.command == "capture":
        raise SystemExit(asyncio.run(_capture_once(conf, worktree)))
    entry.run(args.sidecar or conf.listen, worktree, wait_s=args.wait)


if __name__ == "__main__":
    main()
