"""The Restorer gRPC servicer: one restore per sidecar life, streamed to the worker entry point.

`Restore` streams each step, then ends with ready (the command the supervisor runs) or refused
(a reason of the spec's table). Only one restore runs in a sidecar's life: it runs in its own
task, so an entry point that disconnects does not cut it short, and every later `Restore` call
returns the stored result. With `checkpoint_remote` the outcome (or the refusal) is reported to
the controller over `Recovery.ReportRestore` (progress, then exactly one outcome or refusal)
before the entry point hears it, and the restorer logs exactly one line

    {"event": "restore_verified", "execution_id": …, "recovery": …, "checkpoint_id": …,
     "watermark": …}

with no credentials and no conversation content. A controller that refuses the outcome stops
the launch too: that attempt is no longer the one the decision admitted.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import pathlib
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any

import grpc
from agentihooks.swarm.v2 import restorer_pb2, restorer_pb2_grpc

from services.common import errors, logs, rpc, settings
from services.restorer import fetching, launching, metrics, reporting, restores, restoring, retrying

SERVICE_NAME = "agentihooks.swarm.v2.Restorer"
LAUNCH_UNAVAILABLE = "launch record unavailable"
INTERNAL = "restorer: internal error"
log = logging.getLogger("services.restorer")

OnReady = Callable[[launching.LaunchRecord, restores.Attempt], None]


@dataclasses.dataclass(frozen=True)
class Places:
    """Where restores write when the settings do not say: the attempt folder, the harness home.

    `attempt_dir` None means the worktree's parent; `harness_home` None means the user's home.
    """

    attempt_dir: pathlib.Path | None = None
    harness_home: pathlib.Path | None = None
    harness_env: Mapping[str, str] = dataclasses.field(default_factory=dict)

    def attempt(self, worktree: pathlib.Path) -> restores.Attempt:
        """The attempt's folders for `worktree`."""
        return restores.Attempt(
            worktree=worktree,
            attempt_dir=self.attempt_dir or worktree.parent,
            harness_home=self.harness_home or pathlib.Path.home(),
            harness_env=self.harness_env,
        )


async def load_launch_record(conf: settings.RestorerSettings) -> launching.LaunchRecord:
    """The launch record: the mounted file when configured, else fetched from the controller.

    Raises:
        launching.MalformedDirective, launching.MalformedLaunchRecord: see `launching.parse`.
        errors.Refusal: no way to get a launch record, or the controller refused or is down.
    """
    if conf.launch_record_file is not None:
        return await asyncio.to_thread(launching.read_file, conf.launch_record_file)
    if conf.control_addr and conf.worker_credential:
        return await launching.fetch(conf.control_addr, conf.worker_credential)
    raise errors.Unavailable(LAUNCH_UNAVAILABLE)


# --- the one restore -------------------------------------------------------------------------


class _Restoration:
    """The events of this sidecar's one restore, as they happen."""

    def __init__(self) -> None:
        self.events: list[restores.Event] = []
        self.changed = asyncio.Condition()
        self.task: asyncio.Task[None] | None = None

    @property
    def result(self) -> restores.Ready | restores.Refused | None:
        if self.events and not isinstance(self.events[-1], restores.Step):
            return self.events[-1]
        return None

    async def publish(self, event: restores.Event) -> None:
        async with self.changed:
            self.events.append(event)
            self.changed.notify_all()

    async def follow(self, start: int) -> AsyncIterator[restores.Event]:
        """Events from index `start` until the result (a late caller passes the result's)."""
        index = start
        while True:
            async with self.changed:
                while len(self.events) <= index:
                    await self.changed.wait()
                batch = self.events[index:]
            index += len(batch)
            for event in batch:
                yield event
                if not isinstance(event, restores.Step):
                    return


class RestorerService(restorer_pb2_grpc.RestorerServicer):
    """The sidecar's Restorer service.

    Args:
        conf: the restorer's settings (launch record source, controller, storage).
        places: default folders when the settings name none.
        load: how the launch record is obtained (tests may pass their own).
        on_ready: called once with the launch record and folders after a delivered restore
            (the sidecar starts capturing there).
    """

    def __init__(
        self,
        conf: settings.RestorerSettings,
        *,
        places: Places | None = None,
        load: Callable[[], Awaitable[launching.LaunchRecord]] | None = None,
        on_ready: OnReady | None = None,
        report_retry: retrying.Retry = reporting.REPORT_RETRY,
    ) -> None:
        self._conf = conf
        self._places = places or Places(conf.attempt_dir, conf.harness_home, conf.harness_env)
        self._load = load or (lambda: load_launch_record(conf))
        self._on_ready = on_ready
        self._report_retry = report_retry
        self._restoration = _Restoration()
        self._started = False
        self.metrics = metrics.Metrics()
        self.launch: launching.LaunchRecord | None = None

    def register(self, server: grpc.aio.Server) -> None:
        """Add this servicer to `server`."""
        restorer_pb2_grpc.add_RestorerServicer_to_server(self, server)

    async def aclose(self) -> None:
        """Wait for a restore still running (it is never cut off half way)."""
        task = self._restoration.task
        if task is not None:
            await asyncio.shield(task)

    @rpc.handled
    async def Restore(
        self, request: restorer_pb2.RestoreRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> AsyncIterator[restorer_pb2.RestoreEvent]:
        start = self._begin(request.worktree)
        async for event in self._restoration.follow(start):
            yield reporting.event_pb(event)

    @rpc.handled
    async def GetRestoreStatus(
        self,
        request: restorer_pb2.GetRestoreStatusRequest,
        context: grpc.aio.ServicerContext[Any, Any],
    ) -> restorer_pb2.RestoreStatus:
        status = restorer_pb2.RestoreStatus(
            state=self.state, restore_outcomes_by_type=self.metrics.restore_outcomes_by_type()
        )
        result = self._restoration.result
        if isinstance(result, restores.Ready):
            status.ready.CopyFrom(reporting.ready_pb(result))
        elif isinstance(result, restores.Refused):
            status.refused.reason = result.reason
        return status

    @property
    def state(self) -> str:
        """`idle`, `restoring`, `ready` or `refused`."""
        result = self._restoration.result
        if isinstance(result, restores.Ready):
            return "ready"
        if isinstance(result, restores.Refused):
            return "refused"
        return "restoring" if self._started else "idle"

    @property
    def result(self) -> restores.Ready | restores.Refused | None:
        """The stored result, once there is one."""
        return self._restoration.result

    async def wait(self) -> restores.Ready | restores.Refused:
        """Run the restore if nobody asked yet, and return its result (the `restore` command)."""
        if not self._started:
            raise errors.Malformed("malformed", "no restore was requested")
        if self.result is not None:
            return self.result
        async for event in self._restoration.follow(len(self._restoration.events)):
            if not isinstance(event, restores.Step):
                return event
        raise AssertionError("a restore ends in a result")

    def start(self, worktree: str) -> None:
        """Start the one restore for `worktree` (a later call changes nothing)."""
        self._begin(worktree)

    def _begin(self, worktree: str) -> int:
        """Start the restore on the first call; return where this caller starts following."""
        if self._started:
            events = self._restoration.events
            # A second call gets the stored result only (or waits for it).
            return len(events) - 1 if self.result is not None else len(events)
        path = pathlib.Path(worktree)
        if not worktree or not path.is_absolute():
            raise errors.Malformed("malformed", "worktree must be an absolute path")
        self._started = True
        self._restoration.task = asyncio.get_running_loop().create_task(
            self._guarded(path), name="restore"
        )
        return 0

    async def _guarded(self, worktree: pathlib.Path) -> None:
        """Run the restore; whatever happens, callers get a result to act on."""
        try:
            await self._run(worktree)
        except Exception as error:
            # The type only is logged: its message may hold values.
            logs.event(log, "restore_failed", logging.ERROR, exception=type(error).__name__)
            if self.result is None:
                self.metrics.refused(INTERNAL)
                await self._restoration.publish(restores.Refused(INTERNAL))

    async def _run(self, worktree: pathlib.Path) -> None:
        events = self._restoration
        attempt = self._places.attempt(worktree)
        launch: launching.LaunchRecord | None = None
        remote = self._conf.checkpoint_remote
        # Before the launch record is read, the attempt is known by the execution id the
        # controller put in this worker's environment.
        known = os.environ.get(settings.PREFIX + "EXECUTION_ID", "")
        try:
            launch = await self._load()
        except launching.MalformedDirective as error:
            remote = remote or error.checkpoint_remote
            await events.publish(restores.Step("directive", "started"))
            refused = restores.Refused(error.reason)
            await self._finish(None, refused, remote, execution_id=error.execution_id or known)
            return
        except errors.Refusal as error:
            await events.publish(restores.Step("directive", "started"))
            await self._finish(None, restores.Refused(error.reason), remote, execution_id=known)
            return
        self.launch = launch
        remote = launch.checkpoint_remote
        if remote:
            # "the worker sets AGENTIHOOKS_CHECKPOINT_REMOTE=true for itself"
            os.environ[settings.PREFIX + "CHECKPOINT_REMOTE"] = "true"
        result: restores.Ready | restores.Refused = restores.Refused(INTERNAL)
        try:
            async with fetching.granted_store(
                launch, self._conf.storage, launch.restore_grant
            ) as store:
                async for event in restoring.restore(launch, attempt, store):
                    if isinstance(event, restores.Step):
                        await events.publish(event)
                    else:
                        result = event
        except Exception as error:
            # Every restore ends in a result the entry point can act on; the type only is
            # logged, its message may hold values.
            logs.event(log, "restore_failed", logging.ERROR, exception=type(error).__name__)
        await self._finish(launch, result, remote)
        if isinstance(self.result, restores.Ready) and self._on_ready is not None:
            self._on_ready(launch, attempt)

    async def _finish(
        self,
        launch: launching.LaunchRecord | None,
        result: restores.Ready | restores.Refused,
        remote: bool,
        *,
        execution_id: str = "",
    ) -> None:
        """Report (when remote), log, count, then publish the result.

        `execution_id` names the attempt when no launch record could be read.
        """
        execution_id = launch.scope.execution_id if launch else execution_id
        # A seat's first attempt (generation 1) replaces nobody: there is no recovery whose
        # outcome the controller waits for, so it has nothing to report.
        first_attempt = launch is not None and launch.scope.execution_generation == 1
        if remote and not first_attempt:
            await self._restoration.publish(restores.Step("report", "started"))
            refused = await self._report(execution_id, [*self._restoration.events, result])
            if refused is not None:
                result = refused
            await self._restoration.publish(
                restores.Step("report", "done" if refused is None else "skipped")
            )
        if isinstance(result, restores.Ready):
            self.metrics.outcome(result.recovery)
            logs.event(
                log,
                "restore_verified" if remote and not first_attempt else "restore_ready",
                execution_id=execution_id,
                recovery=result.recovery.value,
                checkpoint_id=result.checkpoint_id,
                watermark=result.watermark,
            )
        else:
            self.metrics.refused(result.reason)
            logs.event(
                log,
                "restore_refused",
                logging.WARNING,
                execution_id=execution_id,
                reason=result.reason,
            )
        await self._restoration.publish(result)

    async def _report(
        self, execution_id: str, events: list[restores.Event]
    ) -> restores.Refused | None:
        conf = self._conf
        if not conf.control_addr or not conf.worker_credential:
            return restores.Refused(reporting.CONTROLLER_UNAVAILABLE)
        return await reporting.report_restore(
            conf.control_addr,
            conf.worker_credential,
            execution_id,
            events,
            retry=self._report_retry,
        )
