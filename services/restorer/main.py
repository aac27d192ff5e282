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
import dataclasses
import json
import logging
import os
import pathlib
import signal
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from typing import Any

import grpc
from agentihooks.swarm.v2 import restorer_pb2

from services.common import errors, logs, rpc, settings, tls_settings
from services.restorer import (
    capturing,
    entry,
    following,
    launching,
    local_worker,
    qualifying,
    restoring,
    sidecar,
)

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


async def _reach_all(needed: Sequence[entry.Address], timeout_s: float) -> None:
    """Return once every address in `needed` answers, in order, all within `timeout_s`.

    Raises:
        entry.Unreachable: one did not answer in the time left.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    for address in needed:
        await entry.reach(address, entry.Patience(max(0.0, deadline - loop.time())))


def _unreached(checking: asyncio.Task[None]) -> entry.Unreachable | None:
    """The start check's failure, once it has given up."""
    if not checking.done() or checking.cancelled():
        return None
    error = checking.exception()
    return error if isinstance(error, entry.Unreachable) else None


class _Checked(sidecar.RestorerService):
    """The sidecar's service, whose restore starts only once the start check has passed.

    The sidecar listens at once (its Pod's entry point and probes find it), but a restore asked
    for meanwhile waits for the controller and the store to answer; when the check gives up the
    call ends UNAVAILABLE and the sidecar stops, no restore step run.
    """

    def __init__(
        self,
        conf: settings.RestorerSettings,
        checking: asyncio.Task[None],
        on_ready: sidecar.OnReady,
    ) -> None:
        super().__init__(conf, on_ready=on_ready)
        self._checking = checking

    @rpc.handled
    async def Restore(
        self, request: restorer_pb2.RestoreRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> AsyncIterator[restorer_pb2.RestoreEvent]:
        try:
            await asyncio.shield(self._checking)
        except entry.Unreachable:
            raise errors.Unavailable(
                "unavailable", "the sidecar stops: a setting's address does not answer"
            ) from None
        async for event in super().Restore(request, context):
            yield event


FINAL_CAPTURE_S = 10.0
"""How long the final capture may take: within the controller's wait for it (15 s after the
worker stopped) and the worker Pod's termination grace (30 s)."""


async def _final_captures(capturers: Sequence[capturing.Capturer]) -> None:
    """Capture and report, as final, everything complete the worker wrote; bounded, and never
    raising (the sidecar ends either way; without a final report the fence says the lost
    tail's length is unknown)."""
    for capturer in capturers:
        try:
            async with asyncio.timeout(FINAL_CAPTURE_S):
                await capturer.capture(final=True)
        except TimeoutError:
            logs.event(log, "final_capture_failed", logging.WARNING, reason="timeout")
        except capturing.CaptureError as error:
            logs.event(log, "final_capture_failed", logging.WARNING, reason=str(error))
        except Exception as error:
            # The type only: its message may hold paths.
            logs.event(log, "final_capture_failed", logging.ERROR, exception=type(error).__name__)


async def _stopped(tasks: Sequence[asyncio.Task[None]]) -> None:
    """Cancel `tasks` and wait until they ended; a task that failed is logged (the start
    check's failure is read later), so the final capture runs all the same."""
    for task in tasks:
        task.cancel()
    for task in tasks:
        try:
            await task
        except (asyncio.CancelledError, entry.Unreachable):
            pass
        except Exception as error:
            # The type only: its message may hold paths.
            logs.event(
                log,
                "task_failed",
                logging.ERROR,
                task=task.get_name(),
                exception=type(error).__name__,
            )


async def _serve(
    conf: settings.RestorerSettings,
    capture_interval_s: float,
    exit_with: int | None = None,
    needed: Sequence[entry.Address] = (),
    cadence: following.Cadence | None = None,
) -> int:
    """The sidecar. `cadence` None captures on the interval only (no following)."""
    capturers: list[capturing.Capturer] = []
    followers: list[following.Follower] = []
    loops: list[asyncio.Task[None]] = []  # the capture loops, stopped before the final capture
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
        if cadence is None:
            loops.append(asyncio.create_task(capturer.run(capture_interval_s), name="capture"))
            return
        follower = following.Follower(
            capturer,
            following.session_folder(launch.harness, attempt.harness_home, attempt.harness_env),
            attempt.worktree,
            dataclasses.replace(cadence, interval_s=capture_interval_s),
        )
        followers.append(follower)
        loops.append(asyncio.create_task(follower.run(), name="capture"))

    stopping = asyncio.Event()
    checking = asyncio.create_task(_reach_all(needed, conf.start_timeout_s), name="start-check")

    def stop_if_unreached(task: asyncio.Task[None]) -> None:
        if _unreached(task) is not None:
            stopping.set()

    checking.add_done_callback(stop_if_unreached)
    service = _Checked(conf, checking, on_ready=start_capturing)
    try:
        server, port = await rpc.start_server(
            conf.listen, [service.register], [sidecar.SERVICE_NAME], tls_conf=conf.tls
        )
        transport = tls_settings.transport(conf.tls)
        logs.event(log, "listening", service="restorer", port=port, transport=transport)
        loop = asyncio.get_running_loop()

        def capture_now() -> None:
            for capturer in capturers:
                capturer.wake.set()
            for follower in followers:
                follower.capture_now()

        loop.add_signal_handler(signal.SIGUSR1, capture_now)
        if exit_with is not None:
            tasks.append(asyncio.create_task(_exit_with(exit_with, stopping), name="exit-with"))
        await rpc.wait_for_termination(5.0, server, stopping=stopping)
        # SIGTERM (a native sidecar gets it once the worker container stopped, and on a Pod's
        # termination) or the worker process gone (--exit-with): archive what it completed,
        # once the capture loops stopped, so the final capture is the last one.
        await _stopped(loops)
        await _final_captures(capturers)
    finally:
        await _stopped([checking, *tasks, *loops])
        for capturer in capturers:
            await capturer.aclose()
        await service.aclose()
    unreached = _unreached(checking)
    if unreached is not None:
        print(f"agentihooks-restorer: {unreached}", file=sys.stderr, flush=True)
        return entry.EXIT_UNREACHABLE
    logs.event(log, "stopped", service="restorer")
    return 0


async def _start_check(conf: settings.RestorerSettings, needed: Sequence[entry.Address]) -> bool:
    """Wait for `needed` to answer (one-shot commands); False, said on stderr, when one
    does not."""
    try:
        await _reach_all(needed, conf.start_timeout_s)
    except entry.Unreachable as error:
        print(f"agentihooks-restorer: {error}", file=sys.stderr, flush=True)
        return False
    return True


async def _once(
    conf: settings.RestorerSettings,
    needed: Sequence[entry.Address],
    command: Callable[[settings.RestorerSettings, pathlib.Path], Awaitable[int]],
    worktree: pathlib.Path,
) -> int:
    """A one-shot command (`restore`, `capture`), once `needed` answers; else exit code 5."""
    if not await _start_check(conf, needed):
        return entry.EXIT_UNREACHABLE
    return await command(conf, worktree)


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


def _needed(conf: settings.RestorerSettings, command: str) -> list[entry.Address]:
    """The addresses `command` needs answering at start, before any restore step, in order.

    The controller when the launch record is fetched from it (what `_missing` asks for), and
    the checkpoint store when checkpoints go through it (`AGENTIHOOKS_CHECKPOINT_REMOTE`, set
    by the controller for such a swarm) and its address is given: the restore then reaches
    the store the launch record names, which the controller writes from that same setting.
    """
    if command not in ("serve", "restore", "capture"):
        return []
    needed: list[entry.Address] = []
    if conf.launch_record_file is None and conf.control_addr is not None:
        needed.append(
            entry.Address(
                settings.PREFIX + "CONTROL_ADDR",
                conf.control_addr,
                "the controller, where the sidecar fetches its launch record, was not reached",
            )
        )
    if conf.checkpoint_remote and conf.store_addr is not None:
        needed.append(
            entry.Address(
                settings.PREFIX + "STORE_ADDR",
                conf.store_addr,
                "the checkpoint store, through which the sidecar reads and writes"
                " checkpoints, was not reached",
            )
        )
    return needed


def _capture_interval(env: Mapping[str, str]) -> float:
    """`AGENTIHOOKS_CAPTURE_INTERVAL_S` (the controller passes it to every worker Pod), else
    the default; a value that is not a number of seconds stops the sidecar at start."""
    return _number(env, "CAPTURE_INTERVAL_S", capturing.DEFAULT_INTERVAL_S, "a number of seconds")


def _number(env: Mapping[str, str], name: str, default: float, form: str) -> float:
    """The setting `AGENTIHOOKS_{name}`, a number not below zero, else `default`; any other
    value stops the sidecar at start (exit code 2), naming the variable."""
    raw = env.get(settings.PREFIX + name, "")
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not 0 <= value < float("inf"):
        print(
            f"agentihooks-restorer: {settings.PREFIX}{name} must be {form}, not {raw!r}",
            file=sys.stderr,
        )
        raise SystemExit(2)
    return value


def _capture_cadence(env: Mapping[str, str]) -> following.Cadence | None:
    """How the sidecar follows the attempt (`AGENTIHOOKS_CAPTURE_LAG_S`, `…_SOURCE_PERIOD_S`,
    `…_WATCH_MAX_DIRS`, `…_FORCE_POLLING`); None when `AGENTIHOOKS_CAPTURE_LAG_S` is 0
    (captures on the interval only). A malformed value stops the sidecar at start."""
    lag = _number(env, "CAPTURE_LAG_S", following.DEFAULT_LAG_S, "a number of seconds")
    period = _number(
        env, "CAPTURE_SOURCE_PERIOD_S", following.DEFAULT_SOURCE_PERIOD_S, "a number of seconds"
    )
    dirs = _number(
        env, "CAPTURE_WATCH_MAX_DIRS", following.DEFAULT_MAX_WATCHED_DIRS, "a number of folders"
    )
    polling = env.get(settings.PREFIX + "CAPTURE_FORCE_POLLING", "").strip().lower()
    if polling not in ("", "true", "false"):
        print(
            f"agentihooks-restorer: {settings.PREFIX}CAPTURE_FORCE_POLLING must be true or"
            f" false, not {polling!r}",
            file=sys.stderr,
        )
        raise SystemExit(2)
    if lag == 0:
        return None
    return following.Cadence(
        lag_s=lag,
        source_period_s=period,
        max_watched_dirs=int(dirs),
        force_polling=polling == "true",
    )


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
    conf = _settings(os.environ, getattr(args, "listen", None))
    missing = _missing(conf, args.command)
    if missing is not None:
        print(f"agentihooks-restorer: {missing}", file=sys.stderr)
        raise SystemExit(entry.EXIT_SETTINGS)
    needed = _needed(conf, args.command)
    try:
        for address in needed:
            entry.check_form(address)
    except settings.SettingsError as error:
        print(f"agentihooks-restorer: {error}", file=sys.stderr)
        raise SystemExit(entry.EXIT_SETTINGS) from None
    if args.command == "serve":
        interval = args.capture_interval
        if interval is None:
            interval = _capture_interval(os.environ)
        cadence = _capture_cadence(os.environ)
        try:
            code = asyncio.run(_serve(conf, interval, args.exit_with, needed, cadence))
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
    worktree = _worktree(args.worktree)
    if args.command == "restore":
        raise SystemExit(asyncio.run(_once(conf, needed, _restore_once, worktree)))
    if args.command == "capture":
        raise SystemExit(asyncio.run(_once(conf, needed, _capture_once, worktree)))
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
