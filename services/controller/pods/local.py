"""`PodRuntime` with worker processes on this machine: the embedded default for trying the system.

Each attempt lives in ``workdir/{swarm}/{execution_id}/``: the worker runs there, its output goes
to ``worker.log``, and ``attempt.json`` records who it is and its pid, so a restarted controller
re-finds it. The folder is what a Pod is on Kubernetes: deleting it, or renaming it aside (which
keeps ``worker.log`` to read), deletes the attempt's worker from under the runtime, and the next
launch of that execution creates it again. A removed attempt keeps its folder, marked removed, and
is never started again.

Workers outlive the controller, so the controller is never their parent: a short-lived ``sh``
launcher starts a wrapper in the background in a new session and exits, and the wrapper (adopted
by init) runs the command and writes its exit code to ``exit_code``. Every runtime, the first or a
restarted one, then sees a worker the same way: a pid checked against its recorded start time (so a
reused pid is not taken for it) and a process group to signal. (`asyncio.create_subprocess_exec`
would not do: asyncio kills a still-running child when its transport is closed or collected.)
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import json
import os
import pathlib
import re
import shutil
import signal
import subprocess
import time
from collections.abc import AsyncIterator, Mapping
from typing import Any

from services.common import waiting
from services.controller.pods import classifying, runtime

_STATE = "attempt.json"
_EXIT = "exit_code"
_SAFE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,252}$")
_LAUNCHER = (
    '("$@"; code=$?; printf %s "$code" > exit_code.tmp && mv exit_code.tmp exit_code)'
    " </dev/null >>worker.log 2>&1 & echo $!"
)
# What a worker may inherit from the controller's environment: never the operator token.
_INHERITED = ("PATH", "HOME", "LANG", "LC_ALL", "TMPDIR", "TZ", "USER", "SYSTEMROOT")
_Key = tuple[str, str]


class LocalRuntime:
    """Worker attempts as local processes under one folder."""

    def __init__(
        self,
        workdir: pathlib.Path,
        *,
        base_env: Mapping[str, str] | None = None,
        stop_grace: float = 5.0,
        poll_interval: float = 0.1,
    ) -> None:
        """Build the runtime.

        Args:
            workdir: The folder holding one subfolder per swarm and attempt.
            base_env: The environment every worker starts from; by default a few harmless
                variables (PATH, HOME, locale) of the controller's own.
            stop_grace: Seconds between SIGTERM and SIGKILL when removing a running worker.
            poll_interval: Seconds between checks for exited workers.
        """
        self._workdir = workdir
        self._base_env = (
            dict(base_env)
            if base_env is not None
            else {k: os.environ[k] for k in _INHERITED if k in os.environ}
        )
        self._stop_grace = stop_grace
        self._poll_interval = poll_interval
        self._running: dict[_Key, dict[str, Any]] = {}  # state of each worker believed alive
        self._starting: set[_Key] = set()  # launches whose spawn is under way
        self._watchers: collections.defaultdict[str, set[asyncio.Event]] = collections.defaultdict(
            set
        )
        self._poller: asyncio.Task[None] | None = None
        self._closed = False

    async def list_attempts(self, swarm: str) -> list[runtime.Attempt]:
        """Every attempt of the swarm not removed; a worker gone without exit 0 failed."""
        attempts = []
        for state in self._scan(swarm):
            key = (swarm, state["execution_id"])
            alive = self._alive(key, state)
            failure = None
            if not alive and self._exit_code(key, state) != 0:
                # Non-zero, killed (perhaps for memory: not knowable here), or never recorded.
                failure = classifying.FailureReason.APPLICATION_EXIT
            attempts.append(
                runtime.Attempt(
                    swarm=swarm,
                    seat=state["seat"],
                    execution_id=state["execution_id"],
                    generation=int(state["generation"]),
                    failure=failure,
                    alive=alive,
                    witness=(state.get("annotations") or {}).get(runtime.ANNOTATION_DECISION),
                    identity=(state.get("annotations") or {}).get(runtime.ANNOTATION_ATTEMPT),
                )
            )
        return attempts

    async def watch(self, swarm: str) -> AsyncIterator[runtime.Change]:
        """Wake once at start, then whenever a worker of the swarm exits (a full pass each
        time: an exit is read from the worker's folder, which the list reads anyway)."""
        event = asyncio.Event()
        self._watchers[swarm].add(event)
        try:
            for state in self._scan(swarm):
                self._alive((swarm, state["execution_id"]), state)  # adopts live workers
            while not self._closed:
                yield runtime.Change(relist=True)
                await event.wait()
                event.clear()
        finally:
            self._watchers[swarm].discard(event)

    async def launch(self, spec: runtime.LaunchSpec) -> None:
        """Start the worker unless its attempt folder exists: a listed worker (running or
        exited) or a removed one starts nothing new; a folder deleted or renamed aside is a
        deleted worker, started again."""
        for what, value in (("swarm", spec.swarm), ("execution id", spec.execution_id)):
            if not _SAFE_NAME.match(value):
                raise runtime.PodsRefused(f"launch: the {what} is not a safe folder name")
        if not spec.command:
            raise runtime.PodsRefused(f"launch {spec.execution_id}: no command")
        if runtime.CREDENTIAL_ENV in spec.env:
            raise runtime.PodsRefused(f"launch: {runtime.CREDENTIAL_ENV} is set by the runtime")
        folder = self._folder(spec.swarm, spec.execution_id)
        folder.parent.mkdir(parents=True, exist_ok=True)
        try:
            folder.mkdir()
        except FileExistsError:
            return
        state: dict[str, Any] = {
            "swarm": spec.swarm,
            "seat": spec.seat,
            "execution_id": spec.execution_id,
            "generation": spec.generation,
            "image": spec.image,
            # The same annotations a Pod carries (the decision that admitted a replacement).
            "annotations": dict(spec.annotations),
            "pid": None,
            "group": None,
            "started": None,
            "exit_code": None,
            "removed": False,
        }
        key = (spec.swarm, spec.execution_id)
        # While the spawn runs in a thread, a concurrent list must see a worker starting, not
        # one that died before recording its pid.
        self._starting.add(key)
        try:
            _write_state(folder, state)  # before the spawn: a crash in between leaves a trace
            env = {**self._base_env, **spec.env, runtime.CREDENTIAL_ENV: spec.worker_credential}
            try:
                group, pid = await asyncio.to_thread(_spawn, folder, spec.command, env)
            except (OSError, ValueError, subprocess.SubprocessError) as exc:
                shutil.rmtree(folder, ignore_errors=True)  # nothing started: a retry may launch
                raise runtime.PodsUnavailable(f"launch {spec.execution_id}: {exc!r:.80}") from None
        finally:
            self._starting.discard(key)
        if (_read_state(folder) or {}).get("removed"):
            _signal_group(group, signal.SIGKILL)  # removed while it was being started
            return
        state.update(pid=pid, group=group, started=_start_ticks(pid))
        _write_state(folder, state)
        self._track((spec.swarm, spec.execution_id), state)

    async def remove(self, swarm: str, execution_id: str) -> None:
        """Stop the worker's process group (TERM, then KILL after the grace); mark it removed."""
        if not (_SAFE_NAME.match(swarm) and _SAFE_NAME.match(execution_id)):
            return
        folder = self._folder(swarm, execution_id)
        state = _read_state(folder)
        if state is None or state["removed"]:
            return
        group = state.get("group")
        # The whole group, not only the wrapper: a worker that ignores SIGTERM outlives its
        # wrapper, and a wrapper killed by someone else leaves the worker running.
        if group is not None and _group_alive(group):
            _signal_group(group, signal.SIGTERM)
            if not await _group_stopped(group, self._stop_grace):
                _signal_group(group, signal.SIGKILL)
                await _group_stopped(group, None)
        state["removed"] = True
        self._running.pop((swarm, execution_id), None)
        _write_state(folder, state)

    async def aclose(self) -> None:
        """Stop watching; the workers keep running."""
        self._closed = True
        for events in self._watchers.values():
            for event in events:
                event.set()
        if self._poller is not None:
            await waiting.cancel([self._poller])
            self._poller = None

    def _folder(self, swarm: str, execution_id: str) -> pathlib.Path:
        return self._workdir / swarm / execution_id

    async def swarms(self) -> set[str]:
        """The swarms with an attempt folder not removed (`runtime.Surveying`)."""
        root = self._workdir
        names = sorted(p.name for p in root.iterdir() if p.is_dir()) if root.is_dir() else []
        return {name for name in names if self._scan(name)}

    def _scan(self, swarm: str) -> list[dict[str, Any]]:
        if not _SAFE_NAME.match(swarm):
            return []
        folder = self._workdir / swarm
        found = []
        for path in sorted(folder.iterdir()) if folder.is_dir() else ():
            state = _read_state(path)
            # A folder renamed aside (to keep its log) no longer holds its attempt.
            if state is not None and not state["removed"] and path.name == state["execution_id"]:
                found.append(state)
        return found

    def _alive(self, key: _Key, state: dict[str, Any]) -> bool:
        """Whether the worker runs; tracks it for exit wakes when it does.

        A worker whose wrapper exited still counts as running while its restorer sidecar takes
        the final capture, for at most `classifying.FINAL_CAPTURE_WAIT` after the exit (as a
        Pod whose worker container stopped beside a running sidecar): a fence before the
        sidecar's final report would name a lost tail that is in fact archived."""
        if key in self._starting:
            return True
        alive = self._running_now(key, state)
        if alive:
            self._track(key, state)
        return alive

    def _running_now(self, key: _Key, state: Mapping[str, Any]) -> bool:
        pid, started, group = state.get("pid"), state.get("started"), state.get("group")
        if pid is not None and started is not None and _start_ticks(pid) == started:
            return True
        try:
            stopped = (self._folder(*key) / _EXIT).stat().st_mtime
        except OSError:
            return False  # killed with its wrapper: the sidecar went too, nothing to wait for
        waited = time.time() - stopped
        return (
            group is not None
            and waited < classifying.FINAL_CAPTURE_WAIT.total_seconds()
            and _group_alive(group)
        )

    def _exit_code(self, key: _Key, state: Mapping[str, Any]) -> int | None:
        """The wrapper's record, None when it never wrote one (killed with its worker)."""
        try:
            return int((self._folder(*key) / _EXIT).read_text())
        except (OSError, ValueError):
            code = state.get("exit_code")
            return int(code) if code is not None else None

    def _track(self, key: _Key, state: dict[str, Any]) -> None:
        self._running[key] = state
        if self._poller is None and not self._closed:
            self._poller = asyncio.get_running_loop().create_task(self._poll())

    async def _poll(self) -> None:
        """Notice exits: record the code while we know it and wake the swarm's watchers."""
        while True:
            await asyncio.sleep(self._poll_interval)
            for key, state in list(self._running.items()):
                if self._running_now(key, state):
                    continue
                self._running.pop(key, None)
                folder = self._folder(*key)
                code = self._exit_code(key, state)
                if code is not None and (current := _read_state(folder)) is not None:
                    current["exit_code"] = code  # kept beside the folder's own record
                    _write_state(folder, current)
                for event in self._watchers.get(key[0], ()):
                    event.set()


def _spawn(
    folder: pathlib.Path, command: tuple[str, ...], env: Mapping[str, str]
) -> tuple[int, int]:
    """Start the wrapper through the launcher; returns (process group, wrapper pid).

    The new session makes the launcher's pid the group of everything the worker starts (harness
    children too), and keeps a Ctrl-C meant for the controller away from the workers. The kernel
    does not hand out a pid while it still names a live process group.
    """
    launcher = subprocess.Popen(
        ["/bin/sh", "-c", _LAUNCHER, "agentihooks-worker", *command],
        cwd=folder,
        env=dict(env),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    output, _ = launcher.communicate(timeout=30)
    if launcher.returncode != 0:
        raise ValueError(f"the launcher exited {launcher.returncode}")
    return launcher.pid, int(output)


def _start_ticks(pid: int) -> int | None:
    """The process's start time (clock ticks after boot), None when it is gone or a zombie.

    Comparing it with the one recorded at launch tells our worker from a reused pid.
    """
    try:
        fields = pathlib.Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    except OSError:
        if pathlib.Path("/proc/self/stat").exists():
            return None
        try:  # no /proc (macOS): existence is all we can check
            os.kill(pid, 0)
        except OSError:
            return None
        return 0
    if fields[0] in ("Z", "X"):
        return None
    return int(fields[19])


def _group_alive(group: int) -> bool:
    """Whether any process of the group still runs (zombies waiting for init do not count)."""
    proc = pathlib.Path("/proc")
    if not (proc / "self" / "stat").exists():
        try:  # no /proc (macOS): the group exists, zombies or not
            os.killpg(group, 0)
        except OSError:
            return False
        return True
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rpartition(")")[2].split()
        except OSError:
            continue
        if int(fields[2]) == group and fields[0] not in ("Z", "X"):
            return True
    return False


async def _group_stopped(group: int, timeout: float | None) -> bool:
    """Wait (polling: processes that are not our children give no signal) for the group to end."""
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        if not _group_alive(group):
            return True
        if deadline is not None and time.monotonic() >= deadline:
            return False
        await asyncio.sleep(0.02)


def _signal_group(group: int, signum: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(group, signum)


def _read_state(folder: pathlib.Path) -> dict[str, Any] | None:
    try:
        state = json.loads((folder / _STATE).read_text())
    except (OSError, ValueError):
        return None
    return state if isinstance(state, dict) else None


def _write_state(folder: pathlib.Path, state: Mapping[str, Any]) -> None:
    temporary = folder / f"{_STATE}.tmp"
    temporary.write_text(json.dumps(state, sort_keys=True))
    temporary.replace(folder / _STATE)
