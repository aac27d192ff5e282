"""One Pod's life on its node, as a kubelet lives it: volumes and sandbox (retried until they can
be set up), init containers in order and native sidecars kept running, then the main
containers supervised by the restart policy with back-off, and the end: termination within the
grace period, the terminal status, the deletion finished at grace 0."""

from __future__ import annotations

import asyncio
import logging
import secrets
import shutil

from tests.support.kube import api_client
from tests.support.kube.node import (
    cgroups,
    context,
    environments,
    pods,
    probes,
    processes,
    runtime,
    statuses,
    volumes,
)

log = logging.getLogger("tests.kubelet")


class PodLifecycle:
    """Lives the Pods of one node (see the module docstring); the kubelet starts one `run` per
    Pod it admits."""

    def __init__(
        self,
        node: context.NodeContext,
        held: dict[str, pods.Pod],
        finished: set[str],
        *,
        writer: statuses.StatusWriter,
        volume_setup: volumes.Volumes,
        identities: environments.Environments,
        containers: runtime.ContainerRuntime,
        prober: probes.Prober,
        backoff: tuple[float, float],
        config_retry: float,
    ) -> None:
        """Args:
        node: The node's shared state.
        held: The kubelet's Pods by uid; a Pod leaves it once it is gone.
        finished: The uids of Pods done with on this node (never admitted again).
        writer: Writes the Pods' statuses.
        volume_setup: Sets up the Pods' volumes.
        identities: Identities and environments of the containers.
        containers: Runs the sandboxes and containers.
        prober: Runs the containers' probes.
        backoff: First and longest restart back-off in seconds.
        config_retry: Seconds between tries to configure a container or set up volumes.
        """
        self._context = node
        self._pods = held
        self._finished = finished
        self._statuses = writer
        self._volumes = volume_setup
        self._environments = identities
        self._runtime = containers
        self._prober = prober
        self.backoff = backoff
        self.config_retry = config_retry

    async def run(self, pod: pods.Pod) -> None:
        await self._statuses.sync(pod)
        life = self._context.spawn(self._lifecycle(pod), f"lifecycle {pod.name}")
        deleted = self._context.spawn(pod.deleting.wait(), f"deleted {pod.name}")
        await asyncio.wait({life, deleted}, return_when=asyncio.FIRST_COMPLETED)
        if pod.deleting.is_set():
            grace = pods.MINIMUM_GRACE
            if not pod.gone:
                grace = float(pod.obj["metadata"].get("deletionGracePeriodSeconds") or 0)
        else:
            grace = float(pod.spec.get("terminationGracePeriodSeconds", 30))
        pod.terminating = True
        await api_client.cancel_tasks([life])
        await self._runtime.terminate(pod, grace)
        pod.final_phase = pod.final_phase or statuses.terminal_phase(pod)
        await self._statuses.sync(pod)
        await self._runtime.stop_sandbox(pod)
        await pod.deleting.wait()
        deleted.cancel()
        await self._context.gate()
        if not pod.gone:
            await self._statuses.finish_deletion(pod.obj)
        self._finished.add(pod.uid)
        await self._runtime.remove_cgroups(pod)
        del self._pods[pod.uid]
        shutil.rmtree(pod.folder, ignore_errors=True)

    async def _lifecycle(self, pod: pods.Pod) -> None:
        await self._prepare(pod)
        for c in pod.init:
            c.state = {"waiting": {"reason": "ContainerCreating"}}
            await self._statuses.sync(pod)
            if c.kind == "sidecar":
                c.supervisor = self._context.spawn(self._supervise(pod, c), f"{pod.name}/{c.name}")
                await c.started_event.wait()
                continue
            while True:
                if not await self.start_container(pod, c):
                    return
                code = await self._runtime.wait(pod, c)
                if code == 0:
                    c.ready = False
                    c.done = True
                    break
                if pod.spec.get("restartPolicy", "Always") == "Never":
                    pod.final_phase = "Failed"
                    return
                await self._back_off(pod, c)
        pod.initialized = True
        for c in pod.main:
            c.state = {"waiting": {"reason": "ContainerCreating"}}
        await self._statuses.sync(pod)
        for c in pod.main:
            c.supervisor = self._context.spawn(self._supervise(pod, c), f"{pod.name}/{c.name}")
        await asyncio.gather(*(c.supervisor for c in pod.main if c.supervisor))

    async def _supervise(self, pod: pods.Pod, c: pods.Container) -> None:
        policy = pod.spec.get("restartPolicy", "Always")
        while not pod.terminating:
            if not await self.start_container(pod, c):
                return
            code = await self._runtime.wait(pod, c)
            if pod.terminating:
                return
            if c.kind == "main" and (policy == "Never" or (policy == "OnFailure" and code == 0)):
                c.done = True
                return
            await self._back_off(pod, c)

    async def _back_off(self, pod: pods.Pod, c: pods.Container) -> None:
        first, longest = self.backoff
        delay = 0.0 if c.restart_count == 0 else min(first * 2 ** (c.restart_count - 1), longest)
        c.last_state = c.state
        if delay > 0:
            c.state = {
                "waiting": {
                    "reason": "CrashLoopBackOff",
                    "message": f"back-off {delay:g}s restarting failed container={c.name} "
                    f"pod={pod.name}_{pod.namespace}({pod.uid})",
                }
            }
            await self._statuses.sync(pod)
            await asyncio.sleep(delay)
        await self._context.gate()
        c.restart_count += 1

    async def _prepare(self, pod: pods.Pod) -> None:
        """Volumes, then the sandbox; retried (containers ContainerCreating) until they work."""
        while True:
            await self._context.gate()
            try:
                await self._runtime.start_sandbox(pod, await self._volumes.sandbox_config(pod))
                pod.message = None
                return
            except pods.MountError as exc:
                pod.message = str(exc)
                for c in pod.containers:
                    if "waiting" in c.state:
                        c.state = {"waiting": {**c.state["waiting"], "message": str(exc)}}
                await self._statuses.sync(pod)
                log.info("pod %s/%s: %s", pod.namespace, pod.name, exc)
                await asyncio.sleep(self.config_retry)

    async def start_container(self, pod: pods.Pod, c: pods.Container) -> bool:
        """Start one run of a container, retrying config errors; False once the Pod stops."""
        while True:
            await self._context.gate()
            if pod.terminating:
                return False
            try:
                uid, gid, groups, no_new_privs = self._environments.identity(pod, c)
                env = await self._environments.environment(pod, c, uid)
            except pods.ConfigError as exc:
                c.state = {"waiting": {"reason": "CreateContainerConfigError", "message": str(exc)}}
                await self._statuses.sync(pod)
                await asyncio.sleep(self.config_retry)
                continue
            if not pod.terminating:
                break
        argv = [environments.expand(str(a), env) for a in c.spec.get("command") or ()]
        argv += [environments.expand(str(a), env) for a in c.spec.get("args") or ()]
        c.runs += 1
        c.container_id = f"tests-kubelet://{secrets.token_hex(32)}"
        c.cgroup = self._runtime.container_cgroup(pod, c)
        c.exit_code = None
        c.started = False
        c.ready = False
        c.started_event.clear()
        log_folder = pod.logs / c.name
        log_folder.mkdir(exist_ok=True)
        log_path = log_folder / f"{c.runs - 1}.log"
        if not argv:
            c.proc = None
            c.exit_code = 128
            c.state = pods.terminated(128, "StartError", "no command: the image has no entrypoint")
            log_path.write_text("")
            return True
        launch = environments.launch_settings(c, argv, env, (uid, gid, groups, no_new_privs))
        proc, failure = await self._runtime.launch(pod, c, launch, log_path)
        if failure is not None:
            c.proc = None
            c.exit_code = 128
            c.state = pods.terminated(128, "StartError", failure)
            if proc is not None:
                await processes.reap(proc)
                self._context.procs.discard(proc)
            await cgroups.remove(c.cgroup)
            c.cgroup = None
            return True
        c.proc = proc
        c.exited.clear()
        c.started_at = pods.now()
        c.state = {"running": {"startedAt": c.started_at}}
        probes = c.spec
        if "startupProbe" not in probes:
            runtime.mark_started(c)
        if "readinessProbe" not in probes and "startupProbe" not in probes:
            c.ready = True
        await self._statuses.sync(pod)
        for kind in ("startupProbe", "readinessProbe", "livenessProbe"):
            if kind in probes:
                c.probes.append(
                    self._context.spawn(self._prober.loop(pod, c, kind), f"{c.name} {kind}")
                )
        return True
