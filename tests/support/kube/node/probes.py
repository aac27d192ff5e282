"""Container probes (startup, readiness, liveness) as a kubelet runs them: exec in the container,
TCP, HTTP(S) and gRPC health, to the Pod's address."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Mapping, Sequence
from typing import Any

import aiohttp

from tests.support.kube.node import (
    context,
    environments,
    pods,
    processes,
    runtime,
    statuses,
)

log = logging.getLogger("tests.kubelet")


def container_port(spec: Mapping[str, Any], port: int | str) -> int:
    if isinstance(port, int) or str(port).isdigit():
        return int(port)
    for entry in spec.get("ports") or ():
        if entry.get("name") == port:
            return int(entry["containerPort"])
    raise ValueError(f"no port named {port!r}")


async def grpc_probe(host: str, port: int, service: str, timeout: float) -> bool:
    import grpc  # only probes need it
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    async with grpc.aio.insecure_channel(f"{host}:{port}") as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        try:
            answer = await stub.Check(
                health_pb2.HealthCheckRequest(service=service), timeout=timeout
            )
        except grpc.aio.AioRpcError:
            return False
        return bool(answer.status == health_pb2.HealthCheckResponse.SERVING)


class Prober:
    """Runs the probes of one node's containers."""

    def __init__(
        self,
        node: context.NodeContext,
        containers: runtime.ContainerRuntime,
        identities: environments.Environments,
        writer: statuses.StatusWriter,
    ) -> None:
        self.context = node
        self.runtime = containers
        self.environments = identities
        self.statuses = writer

    async def loop(self, pod: pods.Pod, c: pods.Container, kind: str) -> None:
        probe = c.spec[kind]
        period = float(probe.get("periodSeconds", 10))
        timeout = float(probe.get("timeoutSeconds", 1))
        need_success = int(probe.get("successThreshold", 1))
        need_failure = int(probe.get("failureThreshold", 3))
        if kind != "startupProbe" and "startupProbe" in c.spec:
            await c.started_event.wait()
        await asyncio.sleep(float(probe.get("initialDelaySeconds", 0)))
        successes = failures = 0
        while c.running:
            await self.context.gate()
            ok = await self.once(pod, c, probe, timeout)
            if not self.context.running.is_set():
                continue  # the node froze meanwhile: the result means nothing
            successes, failures = (successes + 1, 0) if ok else (0, failures + 1)
            if kind == "startupProbe":
                if ok:
                    runtime.mark_started(c)
                    if "readinessProbe" not in c.spec:
                        c.ready = True
                    await self.statuses.sync(pod)
                    return
                if failures >= need_failure:
                    await self.runtime.kill(pod, c, pods.grace_period(pod))
                    return
            elif kind == "readinessProbe":
                if ok and successes >= need_success and not c.ready:
                    c.ready = True
                    await self.statuses.sync(pod)
                elif not ok and failures >= need_failure and c.ready:
                    c.ready = False
                    await self.statuses.sync(pod)
            elif not ok and failures >= need_failure:
                await self.runtime.kill(pod, c, pods.grace_period(pod))
                return
            await asyncio.sleep(period)

    async def once(
        self, pod: pods.Pod, c: pods.Container, probe: Mapping[str, Any], timeout: float
    ) -> bool:
        try:
            if "exec" in probe:
                return await self.run_exec(pod, c, probe["exec"].get("command") or [], timeout)
            if "tcpSocket" in probe:
                port = container_port(c.spec, probe["tcpSocket"]["port"])
                host = probe["tcpSocket"].get("host") or pod.ip
                async with asyncio.timeout(timeout):
                    _, writer = await asyncio.open_connection(host, port)
                writer.close()
                with contextlib.suppress(OSError):
                    await writer.wait_closed()
                return True
            if "httpGet" in probe:
                get = probe["httpGet"]
                port = container_port(c.spec, get["port"])
                url = (
                    f"{get.get('scheme', 'HTTP').lower()}://{get.get('host') or pod.ip}:{port}"
                    f"{get.get('path', '/')}"
                )
                assert self.context.api.session is not None
                # As a kubelet does: an HTTPS probe does not verify the certificate.
                async with self.context.api.session.get(
                    url, timeout=aiohttp.ClientTimeout(total=timeout), ssl=False
                ) as response:
                    return 200 <= response.status < 400
            if "grpc" in probe:
                return await grpc_probe(
                    pod.ip, int(probe["grpc"]["port"]), probe["grpc"].get("service") or "", timeout
                )
        except (OSError, TimeoutError, aiohttp.ClientError, ValueError):
            return False
        return False

    async def run_exec(
        self, pod: pods.Pod, c: pods.Container, command: Sequence[str], timeout: float
    ) -> bool:
        if pod.sandbox is None or not command:
            return False
        try:
            uid, gid, groups, no_new_privs = self.environments.identity(pod, c)
            env = await self.environments.environment(pod, c, uid)
        except pods.ConfigError:
            return False
        identity = (uid, gid, groups, no_new_privs)
        launch = environments.launch_settings(c, list(command), env, identity)
        proc, failure = await self.runtime.launch(pod, c, launch, None)
        if proc is None:
            return False
        try:
            async with asyncio.timeout(timeout):
                code = await proc.wait()
        except TimeoutError:
            processes.kill_group(proc)
            await processes.reap(proc)
            return False
        finally:
            self.context.procs.discard(proc)
        return failure is None and code == 0
