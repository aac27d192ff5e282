"""The container runtime of one node: the Pod sandbox holding a Pod's namespaces and its containers'
roots (`mounting`), each container run started in it (`launching`) in a memory cgroup, waited for,
killed and recorded; and freezing the whole node."""

from __future__ import annotations

import asyncio
import contextlib
import decimal
import json
import logging
import os
import shutil
import signal
import sys
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from tests.support.kube import api_client
from tests.support.kube.node import (
    cgroups,
    context,
    environments,
    launching,
    mounting,
    pods,
    processes,
    resources,
    statuses,
)

log = logging.getLogger("tests.kubelet")


# The container launcher and the Pod sandbox run as files of their own (by path, with ``python -I
# -S``: isolated and quick to start, the standard library only).
_LAUNCHER = str(Path(launching.__file__))
_SANDBOX = str(Path(mounting.__file__))


def mark_started(c: pods.Container) -> None:
    c.started = True
    c.started_event.set()


class ContainerRuntime:
    """Runs the sandboxes and containers of one node's Pods."""

    def __init__(self, node: context.NodeContext, writer: statuses.StatusWriter) -> None:
        self.context = node
        self.statuses = writer
        self._stopped_groups: list[int] = []

    async def start_sandbox(self, pod: pods.Pod, config: Mapping[str, Any]) -> None:
        log_file = processes.open_append(pod.folder / "sandbox.log")
        try:
            proc = await asyncio.create_subprocess_exec(
                shutil.which("unshare") or "unshare",
                "--mount",
                "--uts",
                *(["--net"] if self.context.network is not None else []),
                "--propagation",
                "private",
                "--",
                sys.executable,
                "-I",
                "-S",
                _SANDBOX,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=log_file,
                start_new_session=True,
                env={mounting.ENVIRONMENT: json.dumps(config), "PATH": environments.DEFAULT_PATH},
            )
        finally:
            log_file.close()
        self.context.procs.add(proc)
        if self.context.freezer is not None:
            with contextlib.suppress(OSError):
                (self.context.freezer / "cgroup.procs").write_text(str(proc.pid))
        assert proc.stdout is not None
        line = (await proc.stdout.readline()).decode(errors="replace").strip()
        if line != "ready":
            if proc.stdin is not None:
                proc.stdin.close()
            await processes.reap(proc, kill=True)
            self.context.procs.discard(proc)
            raise pods.MountError(f"the Pod sandbox failed: {line or 'no answer'}")
        pod.sandbox = proc
        if self.context.network is not None:
            try:
                pod.ip = await asyncio.to_thread(self.context.network.attach, pod.uid, proc.pid)
            except OSError as exc:
                await self.stop_sandbox(pod)
                raise pods.MountError(f"the Pod network failed: {exc}") from exc
        pod.sandbox_ready = True
        pod.cgroup = self.context.memory / f"pod{pod.uid}" if self.context.memory else None
        if pod.cgroup is not None:
            pod.cgroup.mkdir(exist_ok=True)

    async def stop_sandbox(self, pod: pods.Pod) -> None:
        proc = pod.sandbox
        pod.sandbox_ready = False
        if proc is None:
            return
        pod.sandbox = None
        if proc.stdin is not None:
            proc.stdin.close()
        await processes.reap(proc, kill=True)
        self.context.procs.discard(proc)
        if self.context.network is not None:
            await asyncio.to_thread(self.context.network.detach, pod.uid)

    async def remove_cgroups(self, pod: pods.Pod) -> None:
        for c in pod.containers:
            await cgroups.remove(c.cgroup)
            c.cgroup = None
        await cgroups.remove(pod.cgroup)
        pod.cgroup = None

    def container_cgroup(self, pod: pods.Pod, c: pods.Container) -> Path | None:
        if pod.cgroup is None:
            return None
        folder = pod.cgroup / f"{c.name}-{c.runs}"
        folder.mkdir(exist_ok=True)
        limit = ((c.spec.get("resources") or {}).get("limits") or {}).get("memory")
        if limit is not None:
            size = str(
                int(resources.parse_quantity(limit).to_integral_value(decimal.ROUND_CEILING))
            )
            (folder / "memory.limit_in_bytes").write_text(size)
            with contextlib.suppress(OSError):
                (folder / "memory.memsw.limit_in_bytes").write_text(size)
            with contextlib.suppress(OSError):
                (folder / "memory.swappiness").write_text("0")
        return folder

    async def launch(
        self,
        pod: pods.Pod,
        c: pods.Container,
        launch: Mapping[str, Any],
        log_path: Path | None,
    ) -> tuple[asyncio.subprocess.Process | None, str | None]:
        """Run the launcher in the container's context; returns it and why it failed, if so."""
        assert pod.sandbox is not None
        cgroups = []
        if c.cgroup is not None:
            cgroups.append(str(c.cgroup / "cgroup.procs"))
        if self.context.freezer is not None:
            cgroups.append(str(self.context.freezer / "cgroup.procs"))
        read_end, write_end = os.pipe()
        config = {
            **launch,
            "cgroups": cgroups,
            "ns": f"/proc/{pod.sandbox.pid}/ns/mnt",
            "uts": f"/proc/{pod.sandbox.pid}/ns/uts",
            "net": f"/proc/{pod.sandbox.pid}/ns/net" if self.context.network is not None else None,
            "root": str(pod.folder / "roots" / c.name),
            "report": write_end,
        }
        output = processes.open_append(log_path) if log_path else None
        try:
            proc = await asyncio.create_subprocess_exec(
                sys.executable,
                "-I",
                "-S",
                _LAUNCHER,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=output if output else asyncio.subprocess.DEVNULL,
                stderr=output if output else asyncio.subprocess.DEVNULL,
                start_new_session=True,
                pass_fds=(write_end,),
                env={launching.ENVIRONMENT: json.dumps(config)},
            )
        except OSError as exc:
            os.close(read_end)
            return None, str(exc)
        finally:
            os.close(write_end)
            if output is not None:
                output.close()
        self.context.procs.add(proc)
        report = await processes.read_all(read_end)
        if report:
            return proc, report.decode(errors="replace")
        return proc, None

    async def wait(self, pod: pods.Pod, c: pods.Container) -> int:
        """Wait for the current run to end and record how it ended; returns its exit code."""
        proc = c.proc
        if proc is None:
            await self.statuses.sync(pod)
            return c.exit_code if c.exit_code is not None else 128
        code = await proc.wait()
        await self.record_exit(pod, c, proc, code)
        return c.exit_code if c.exit_code is not None else 128

    async def record_exit(
        self, pod: pods.Pod, c: pods.Container, proc: asyncio.subprocess.Process, code: int
    ) -> None:
        """Record a run's end once (whoever saw it first), kill its leftovers, drop its cgroup."""
        if c.proc is not proc:
            return
        c.proc = None
        self.context.procs.discard(proc)
        current = asyncio.current_task()
        for task in c.probes:
            if task is not current:
                task.cancel()
        c.probes.clear()
        cgroup, c.cgroup = c.cgroup, None
        exit_code = code if code >= 0 else 128 - code
        reason = "Completed" if exit_code == 0 else "Error"
        if cgroups.oom_kills(cgroup) > 0:
            reason = "OOMKilled"
        cgroups.kill(cgroup)
        c.exit_code = exit_code
        c.state = {
            "terminated": {
                "exitCode": exit_code,
                "reason": reason,
                "startedAt": c.started_at,
                "finishedAt": pods.now(),
                "containerID": c.container_id,
            }
        }
        c.ready = False
        c.started = False
        c.exited.set()
        await cgroups.remove(cgroup)
        await self.statuses.sync(pod)

    async def kill(self, pod: pods.Pod, c: pods.Container, grace: float) -> None:
        """SIGTERM the container's main process, SIGKILL everything of it after `grace`."""
        proc = c.proc
        if proc is None or proc.returncode is not None:
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(proc.pid, signal.SIGTERM)
        try:
            async with asyncio.timeout(max(grace, 0)):
                code = await proc.wait()
        except TimeoutError:
            processes.kill_group(proc)
            cgroups.kill(c.cgroup)
            code = await proc.wait()
        await self.record_exit(pod, c, proc, code)

    async def terminate(self, pod: pods.Pod, grace: float) -> None:
        """Main containers first, then sidecars in reverse order, within one grace period."""
        deadline = asyncio.get_running_loop().time() + grace

        async def stop(group: Iterable[pods.Container], ordered: bool) -> None:
            running = [c for c in group if c.running]
            if ordered:
                for c in running:
                    await self.kill(pod, c, deadline - asyncio.get_running_loop().time())
            else:
                await asyncio.gather(
                    *(
                        self.kill(pod, c, deadline - asyncio.get_running_loop().time())
                        for c in running
                    )
                )

        await stop(pod.main, ordered=False)
        await stop([c for c in reversed(pod.init) if c.kind == "sidecar"], ordered=True)
        await stop(pod.init, ordered=False)
        await api_client.cancel_tasks(
            [c.supervisor for c in pod.containers if c.supervisor is not None]
        )
        for c in pod.containers:
            proc = c.proc
            cgroups.kill(c.cgroup)
            if proc is not None:
                processes.kill_group(proc)
                await self.record_exit(pod, c, proc, await proc.wait())
            await api_client.cancel_tasks(c.probes)
            c.probes.clear()
            c.ready = False
            c.started = False

    async def freeze(self) -> None:
        if self.context.freezer is not None:
            (self.context.freezer / "freezer.state").write_text("FROZEN")
            deadline = time.monotonic() + 60
            while (self.context.freezer / "freezer.state").read_text().strip() != "FROZEN":
                if time.monotonic() > deadline:
                    raise TimeoutError(f"cgroup {self.context.freezer} does not freeze")
                await asyncio.sleep(0.02)
            return
        for proc in list(self.context.procs):
            if proc.returncode is None:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(proc.pid, signal.SIGSTOP)
                    self._stopped_groups.append(proc.pid)

    async def thaw(self) -> None:
        if self.context.freezer is not None:
            with contextlib.suppress(OSError):
                (self.context.freezer / "freezer.state").write_text("THAWED")
            return
        for group in self._stopped_groups:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(group, signal.SIGCONT)
        self._stopped_groups.clear()
