"""The worker entry point (supervisor): prepare the checkout, restore, then run the harness.

"The worker entry point runs the restore after its checkout is prepared and before the
supervisor starts the harness." The entry point makes sure the worktree folder exists, asks the
sidecar on loopback to restore (`Restorer.Restore`), prints each step as one JSON line on
stderr, and then either replaces itself with the command the sidecar handed back (the native
resume command, the original command with the opening prompt, or the original command) or
exits non-zero printing the refusal's reason. It never starts the harness on its own after a
refusal: there is no weaker fallback. When the sidecar names a file for the command's standard
input (a reconstructed opening prompt too long for one argument, in `continuation.txt`), that
file becomes the harness's stdin (fd 0) before it is exec'd.

The harness runs without the attempt's worker credential in its environment: it is the
sidecar's, and the agent has no use for it.
"""

from __future__ import annotations

import asyncio
import dataclasses
import errno
import json
import os
import pathlib
import stat
import sys
from collections.abc import Mapping, MutableMapping
from typing import NoReturn, TextIO

import grpc
from agentihooks.swarm.v2 import restorer_pb2, restorer_pb2_grpc, types_pb2

from services.common import directives, settings

EXIT_REFUSED = 3
EXIT_UNAVAILABLE = 4
EXIT_EXEC_FAILED = 127
HIDDEN_FROM_HARNESS = (settings.PREFIX + "WORKER_CREDENTIAL",)
_WORDS = {
    types_pb2.CONTINUITY_NATIVE: directives.Continuity.NATIVE.value,
    types_pb2.CONTINUITY_RECONSTRUCTED: directives.Continuity.RECONSTRUCTED.value,
    types_pb2.CONTINUITY_FRESH: directives.Continuity.FRESH.value,
}


@dataclasses.dataclass(frozen=True)
class Launch:
    """What the supervisor runs: the sidecar's ready, as plain values."""

    recovery: str
    command: tuple[str, ...] = dataclasses.field(repr=False)
    cwd: str
    checkpoint_id: str | None
    watermark: int | None
    stdin_path: str | None = None


@dataclasses.dataclass(frozen=True)
class Stop:
    """The sidecar refused the restore."""

    reason: str


class SidecarUnavailable(Exception):
    """The sidecar could not be reached or its stream ended without a result."""


def prepare_checkout(worktree: pathlib.Path) -> None:
    """Make sure the worktree folder exists (the restore clones into it when it is empty)."""
    worktree.mkdir(parents=True, exist_ok=True)


def _launch(ready: restorer_pb2.RestoreReady) -> Launch:
    return Launch(
        recovery=_WORDS.get(ready.recovery, "unspecified"),
        command=tuple(ready.command),
        cwd=ready.cwd,
        checkpoint_id=ready.checkpoint_id or None,
        watermark=ready.watermark if ready.HasField("watermark") else None,
        stdin_path=ready.stdin_path or None,
    )


async def restore_through_sidecar(
    sidecar_addr: str,
    worktree: pathlib.Path,
    *,
    wait_s: float = 60.0,
    attempts: int = 3,
    progress: TextIO | None = None,
) -> Launch | Stop:
    """Ask the sidecar to restore `worktree` and follow its stream to ready or refused.

    A stream that breaks is asked again: the sidecar runs one restore per life and answers a
    repeated call with the stored result.

    Raises:
        SidecarUnavailable: no result after `attempts` calls.
    """
    async with grpc.aio.insecure_channel(sidecar_addr) as channel:
        try:
            await asyncio.wait_for(channel.channel_ready(), wait_s)
        except TimeoutError:
            raise SidecarUnavailable("the restorer sidecar did not come up") from None
        stub = restorer_pb2_grpc.RestorerStub(channel)
        for _ in range(attempts):
            try:
                async for event in stub.Restore(
                    restorer_pb2.RestoreRequest(worktree=str(worktree))
                ):
                    kind = event.WhichOneof("event")
                    if kind == "step" and progress is not None:
                        line = {"event": "restore_step", "step": event.step.step}
                        line["status"] = event.step.status
                        print(json.dumps(line), file=progress, flush=True)
                    elif kind == "ready":
                        return _launch(event.ready)
                    elif kind == "refused":
                        return Stop(event.refused.reason)
            except grpc.aio.AioRpcError as error:
                if error.code() not in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED):
                    name = error.code().name
                    raise SidecarUnavailable(f"the restorer sidecar failed: {name}") from None
            await asyncio.sleep(0.5)
    raise SidecarUnavailable("the restorer sidecar gave no result")


def harness_environment(env: Mapping[str, str]) -> dict[str, str]:
    """The harness's environment: the worker's, without the sidecar's credential."""
    return {k: v for k, v in env.items() if k not in HIDDEN_FROM_HARNESS}


def supervise(
    outcome: Launch | Stop,
    env: MutableMapping[str, str] | None = None,
    stderr: TextIO | None = None,
) -> NoReturn:
    """Run the harness command (this process becomes it), or exit non-zero with the reason."""
    err = stderr or sys.stderr
    if isinstance(outcome, Stop):
        print(f"agentihooks-restorer: restore refused: {outcome.reason}", file=err, flush=True)
        raise SystemExit(EXIT_REFUSED)
    command = list(outcome.command)
    if not command:
        print("agentihooks-restorer: the restore gave no command to run", file=err, flush=True)
        raise SystemExit(EXIT_EXEC_FAILED)
    if outcome.stdin_path is not None:
        try:
            _open_as_stdin(outcome.stdin_path)
        except OSError as error:
            print(
                f"agentihooks-restorer: cannot open the opening prompt: {error.strerror}",
                file=err,
                flush=True,
            )
            raise SystemExit(EXIT_EXEC_FAILED) from None
    try:
        os.chdir(outcome.cwd)
        harness_env = harness_environment(env if env is not None else os.environ)
        # The command is the sidecar's, from the launch record; no shell ever sees it.
        os.execvpe(command[0], command, harness_env)  # noqa: S606
    except OSError as error:
        # The command may carry a conversation: name the cause only.
        print(
            f"agentihooks-restorer: cannot run the harness: {error.strerror}", file=err, flush=True
        )
        raise SystemExit(EXIT_EXEC_FAILED) from None


def _open_as_stdin(path: str) -> None:
    """Make the regular file at `path` this process's standard input (fd 0), kept across exec.

    Raises:
        OSError: it cannot be opened, is a symlink, or is not a regular file.
    """
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(errno.EINVAL, "not a regular file")
        os.dup2(fd, 0)
        # Inheritable even when the open itself returned fd 0: the harness reads its prompt
        # from it after exec.
        os.set_inheritable(0, True)
    finally:
        if fd != 0:
            os.close(fd)


def run(sidecar_addr: str, worktree: pathlib.Path, *, wait_s: float = 60.0) -> NoReturn:
    """The `entry` subcommand: prepare, restore through the sidecar, then exec or exit."""
    prepare_checkout(worktree)
    try:
        outcome = asyncio.run(
            restore_through_sidecar(sidecar_addr, worktree, wait_s=wait_s, progress=sys.stderr)
        )
    except SidecarUnavailable as error:
        print(f"agentihooks-restorer: {error}", file=sys.stderr, flush=True)
        raise SystemExit(EXIT_UNAVAILABLE) from None
    supervise(outcome)
