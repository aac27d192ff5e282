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

Before anything else asks for a restore, the address a command needs must answer (`reach`):
tried again with a bounded backoff for a while (a Pod's containers start together; the
controller may be between two replicas), one JSON line per retry, then a loud line naming the
variable and a distinct exit code. An address that is not HOST:PORT is refused at once.
"""

from __future__ import annotations

import asyncio
import dataclasses
import errno
import json
import logging
import os
import pathlib
import stat
import sys
from collections.abc import Mapping, MutableMapping
from typing import NoReturn, TextIO

import grpc
from agentihooks.swarm.v2 import restorer_pb2, restorer_pb2_grpc, types_pb2
from grpc_health.v1 import health_pb2, health_pb2_grpc

from services.common import directives, logs, settings, tls
from services.restorer import retrying

EXIT_SETTINGS = 2
"""A setting is missing or is not of its form (an address that is not HOST:PORT)."""
EXIT_REFUSED = 3
EXIT_UNAVAILABLE = 4
"""The entry point: the restorer sidecar did not come up (or gave no result)."""
EXIT_UNREACHABLE = 5
"""The sidecar (`serve`, `restore`, `capture`): the controller or the checkpoint store does not
answer at the address its setting names."""
EXIT_EXEC_FAILED = 127
RESTORER_ADDR = settings.PREFIX + "RESTORER_ADDR"
HIDDEN_FROM_HARNESS = (settings.PREFIX + "WORKER_CREDENTIAL",)
_WORDS = {
    types_pb2.CONTINUITY_NATIVE: directives.Continuity.NATIVE.value,
    types_pb2.CONTINUITY_RECONSTRUCTED: directives.Continuity.RECONSTRUCTED.value,
    types_pb2.CONTINUITY_FRESH: directives.Continuity.FRESH.value,
}
log = logging.getLogger("services.restorer")


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


# --- the start check: a setting's address answers ---------------------------------------------


@dataclasses.dataclass(frozen=True)
class Address:
    """An address a command needs at start: the setting that names it, and who answers there.

    `unreached` says what did not happen, e.g. "the controller was not reached"; `bound` names
    what set the time waited, when something did.
    """

    variable: str
    value: str
    unreached: str
    bound: str | None = settings.PREFIX + "START_TIMEOUT_S"


@dataclasses.dataclass(frozen=True)
class Patience:
    """How long a start check waits for an address and how it spaces its tries.

    Bounded by time, not by a count of tries as `retrying.Retry` is: the controller's absence
    during a rollout lasts seconds whatever the number of tries. Each try is a fresh channel,
    so gRPC's own reconnect backoff (up to two minutes) never delays seeing a peer come back.
    """

    timeout_s: float
    first_wait_s: float = 0.25
    max_wait_s: float = 5.0
    try_s: float = 10.0

    def wait_s(self, tries: int) -> float:
        """The wait after try number `tries` (1-based): doubled each time, capped."""
        return min(self.max_wait_s, self.first_wait_s * 2.0 ** (tries - 1))


class Unreachable(Exception):
    """An address did not answer within the start timeout; the message is the loud line.

    It names the variable, its address and gRPC's transport error: no credential is ever sent
    to, or said about, the address checked.
    """

    def __init__(self, address: Address, timeout_s: float, last_error: str) -> None:
        bound = f" ({address.bound})" if address.bound else ""
        super().__init__(
            f"{address.variable}={address.value} does not answer: {address.unreached} in"
            f" {round(timeout_s, 1):g} s{bound}; gRPC: {last_error}"
        )


def check_form(address: Address) -> None:
    """Refuse at once an address no try could reach.

    The settings loader has already refused what is not HOST:PORT; a port 0 or blanks in the
    host pass that form but never answer, so waiting for them would only delay the same line.

    Raises:
        settings.SettingsError: the message names the variable.
    """
    host, _, port = address.value.rpartition(":")
    if (
        not host
        or not port.isdigit()
        or not 0 < int(port) <= 65535
        or host != "".join(host.split())
    ):
        raise settings.SettingsError(f"{address.variable} must be HOST:PORT, not {address.value!r}")


async def _answers(target: str, timeout_s: float) -> str | None:
    """None when a gRPC server answers at `target`, else gRPC's transport error.

    Any answer counts, NOT_SERVING and UNIMPLEMENTED too: the address is right, and a
    controller waiting for Redis is retried through by the calls themselves.
    """
    async with tls.channel(target) as channel:
        try:
            await health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(), timeout=timeout_s
            )
        except grpc.aio.AioRpcError as error:
            if error.code() in retrying.TRANSIENT:
                return str(error.details() or error.code().name)
    return None


async def reach(address: Address, patience: Patience) -> None:
    """Return once something answers at `address`; log one JSON line per retry (and one
    when it answers after a retry).

    Raises:
        settings.SettingsError: the address is not of its form (no try is made).
        Unreachable: nothing answered within `patience.timeout_s`.
    """
    check_form(address)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + patience.timeout_s
    tries = 0
    while True:
        tries += 1
        # The last try still gets a whole second: a deadline of 0 means one real try.
        try_s = min(patience.try_s, max(deadline - loop.time(), 1.0))
        error = await _answers(address.value, try_s)
        if error is None:
            if tries > 1:
                logs.event(
                    log,
                    "start_check_answered",
                    variable=address.variable,
                    address=address.value,
                    attempts=tries,
                )
            return
        left = deadline - loop.time()
        if left <= 0:
            raise Unreachable(address, patience.timeout_s, error)
        wait_s = min(patience.wait_s(tries), left)
        logs.event(
            log,
            "start_check_retry",
            logging.WARNING,
            variable=address.variable,
            address=address.value,
            attempt=tries,
            retry_in_s=round(wait_s, 3),
            error=error,
        )
        await asyncio.sleep(wait_s)


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
    async with tls.channel(sidecar_addr) as channel:
        try:
            async with asyncio.timeout(wait_s):
                await channel.channel_ready()
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


async def _restore(sidecar: Address, worktree: pathlib.Path, wait_s: float) -> Launch | Stop:
    await reach(sidecar, Patience(wait_s))
    return await restore_through_sidecar(
        sidecar.value, worktree, wait_s=wait_s, progress=sys.stderr
    )


def run(
    sidecar_addr: str,
    worktree: pathlib.Path,
    *,
    wait_s: float = 60.0,
    variable: str = RESTORER_ADDR,
    bound: str | None = None,
) -> NoReturn:
    """The `entry` subcommand: prepare, restore through the sidecar, then exec or exit.

    `variable` names where `sidecar_addr` came from and `bound` what set `wait_s`, for the
    line printed when the sidecar does not come up.
    """
    prepare_checkout(worktree)
    sidecar = Address(variable, sidecar_addr, "the restorer sidecar did not come up", bound)
    try:
        outcome = asyncio.run(_restore(sidecar, worktree, wait_s))
    except settings.SettingsError as error:
        print(f"agentihooks-restorer: {error}", file=sys.stderr, flush=True)
        raise SystemExit(EXIT_SETTINGS) from None
    except (Unreachable, SidecarUnavailable) as error:
        print(f"agentihooks-restorer: {error}", file=sys.stderr, flush=True)
        raise SystemExit(EXIT_UNAVAILABLE) from None
    supervise(outcome)
