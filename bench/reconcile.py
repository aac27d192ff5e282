"""The recovery pass over 10,000 worker Pods, and failure-to-replacement latency with the watch.

Both run in this process against the Kubernetes API emulator
(tests/support/kube/apiserver/emulator.py, through the real kubernetes-asyncio client) and a real
redis-server, each against a baseline measured in the same run:

1. **Pass.** One swarm of 10,000 seats (legacy spawns, restore automation on), each with a
   worker Pod rendered from the default template with the sidecar, bound to one of 20 Ready
   nodes, with a kubelet-like status. Each round, 1% of the Pods fail (OOMKilled, Evicted, a
   non-zero exit, node lost) and one `Recovery.reconcile` is timed: the Pod and Node lists,
   every Pod classified, and for each of the 100 failures fence, releases (grants revoked, slot
   ended, Pod and Secret deleted), decision and admission, and the replacement's Pod and Secret
   created. Baseline: the same Pod list call through kubernetes-asyncio with
   ``_preload_content=False`` plus ``json.loads`` of the same response. Between rounds (not
   timed) each replacement reports its outcome (which closes its recovery) and an untimed pass
   follows, so every round starts alike. Best of five each. For scale it also times a pass
   with no new failure (the lists, every Pod classified, the attention set read: what
   bench/reconcile_list.py measured before it was folded in here).
2. **Latency.** A swarm of 200 seats with its controller loop running (`Recovery.run`: lease,
   the Pod and Node watches, the seat queue the watch brings failed workers' seats to, resyncs
   at least every 2 s, the default interval). One Pod at a time is set to failed and the time
   until the API server receives its replacement's creation is taken; then the replacement
   reports its outcome (which closes the recovery) before the next failure.
   Baseline: a bare kubernetes-asyncio client that watches 200 Pods of another label in the
   same emulator (raw lines, ``json.loads``) and, on the same kind of event, creates one Pod of
   the same shape. The two alternate, 200 failures each; p50 and p99 of each.

The pass seeds its Pods straight into the emulator's store (a setup runtime that renders each
first attempt's Pod as the Kubernetes runtime would), so setup takes seconds, not minutes.
With ``--models`` it also prints, once, the 10,000-Pod list deserialized into kubernetes-asyncio
model objects, for scale. Prints the absolute figures, then
``RESULT reconcile_pass ratio=<float> target=2.0 ok|short`` and
``RESULT replacement_latency_p99 ratio=<float> target=3.0 ok|short``.

Run: .venv/bin/python bench/reconcile.py [--models] [--only=pass|--only=latency]   (not a test:
timings stay out of `make test`)
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import gc
import json
import logging
import os
import pathlib
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import zlib
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

import redis.asyncio as aioredis
from kubernetes_asyncio import client

from services.common import directives, revocations, tokens
from services.controller import recovering, replacing
from services.controller.pods import kubernetes, runtime, templates
from services.controller.state import keys, reading, records
from tests.support import ports
from tests.support.kube.apiserver import emulator as k8s_emulator

PASS_TARGET = 2.0
LATENCY_TARGET = 3.0
PODS = 10_000
NODES = 20
ROUNDS = 5
LATENCY_SEATS = 200
FAILURES = 200
NS = "workers"
IMAGE = "registry.local/agent-worker:1.4.2"
GRANT_KEY = "bench-grant-key-" + "g" * 32
RUNNING = {"running": {"startedAt": "2026-12-02T14:00:00Z"}}


def container(name: str, state: dict[str, Any]) -> dict[str, Any]:
    return {
        "name": name,
        "image": IMAGE,
        "imageID": f"{IMAGE}@sha256:{'0' * 64}",
        "containerID": f"containerd://{'a' * 64}",
        "ready": "running" in state,
        "started": "running" in state,
        "restartCount": 0,
        "state": state,
        "lastState": {},
    }


def pod_status(index: int, failure: int | None = None) -> dict[str, Any]:
    """A kubelet-like status: running, or failed in one of four ways (`failure` 0-3)."""
    phase, reason = "Running", None
    worker: dict[str, Any] = RUNNING
    if failure is not None:
        phase = "Failed" if failure != 3 else "Unknown"  # 3: the node stopped reporting
        reason = "Evicted" if failure == 1 else None
        code = {0: (137, "OOMKilled"), 1: (137, "Error"), 2: (3, "Error")}.get(failure)
        worker = {"terminated": {"exitCode": code[0], "reason": code[1]}} if code else RUNNING
    status: dict[str, Any] = {
        "phase": phase,
        "hostIP": "10.0.0.1",
        "podIP": f"10.1.{index // 250 % 250}.{index % 250}",
        "startTime": "2026-12-02T14:00:00Z",
        "qosClass": "Burstable",
        "conditions": [
            {"type": t, "status": "True", "lastTransitionTime": "2026-12-02T14:00:00Z"}
            for t in ("PodReadyToStartContainers", "Initialized", "Ready", "PodScheduled")
        ],
        "containerStatuses": [container("worker", worker)],
        "initContainerStatuses": [container("restorer", RUNNING)],
    }
    if reason:
        status["reason"] = reason
    return status


def running_pod(spec: runtime.LaunchSpec) -> dict[str, Any]:
    """The Pod the Kubernetes runtime renders for `spec`, scheduled and running."""
    pod = templates.render_pod(templates.default_pod_template(), spec, namespace=NS)
    index = zlib.crc32(spec.seat.encode())
    pod["spec"]["nodeName"] = f"node-{index % NODES}"
    pod["status"] = pod_status(index)
    return pod


class Seeding:
    """A setup-only `PodRuntime`: a launch puts the rendered Pod straight into the emulator's
    store (no HTTP), so applying a 10,000-seat swarm takes seconds."""

    def __init__(self, k8s: k8s_emulator.K8sEmulator) -> None:
        self._k8s = k8s

    async def list_attempts(self, swarm: str) -> list[runtime.Attempt]:
        return []

    async def watch(self, swarm: str) -> AsyncIterator[runtime.Change]:
        await asyncio.Event().wait()
        yield runtime.Change()

    async def launch(self, spec: runtime.LaunchSpec) -> None:
        self._k8s.bulk_create_pods(NS, [running_pod(spec)])

    async def remove(self, swarm: str, execution_id: str) -> None:
        return None

    async def aclose(self) -> None:
        return None


def document(swarm: str, seats: int) -> dict[str, Any]:
    """A swarm of legacy-spawn seats: each failure is replaced fresh without a choice."""
    return {
        "swarm": swarm,
        "worker_image": IMAGE,
        "harness": "claude_code",
        "command": ["claude", "--print"],
        "restore_automation": True,
        "projects": [{"name": "app", "repository": "https://git.example/app.git"}],
        "masters": [{"agent": "master@bench-1", "credential": "bench-master-credential"}],
        "accounts": [{"name": "acct-a", "slots": 10_000}, {"name": "acct-b", "slots": 10_000}],
        "seats": [
            {
                "seat": seat_name(i),
                "legacy_spawn": True,
                "task": {"id": f"t-{i}", "text": f"task {i}", "awaiting": "worker"},
            }
            for i in range(seats)
        ],
    }


def seat_name(index: int) -> str:
    return f"seat-{index:05d}"


_DIE_WITH_PARENT = """
import ctypes, os, signal, sys
ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
if os.getppid() != int(sys.argv[1]):
    sys.exit(1)  # the bench died before the line above
os.execv(sys.argv[2], sys.argv[2:])
"""


def dying_with_this_process(args: list[str]) -> list[str]:
    """`args` run so that the process gets SIGTERM when this one ends, however it ends (a
    bench killed mid-run leaves no redis-server behind): it sets its parent-death signal,
    then becomes the program (no `preexec_fn`, which is unsafe once threads run)."""
    return [sys.executable, "-c", _DIE_WITH_PARENT, str(os.getpid()), *args]


@contextlib.asynccontextmanager
async def redis_server() -> AsyncIterator[aioredis.Redis]:
    """A throwaway redis-server on a free loopback port."""
    exe = shutil.which("redis-server")
    if exe is None:
        raise SystemExit("redis-server is not installed (make setup installs it)")
    port = ports.free_port()
    with tempfile.TemporaryDirectory() as folder:
        args = [exe, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--dir", folder]
        proc = await asyncio.create_subprocess_exec(
            *dying_with_this_process([*args, "--appendonly", "no"]), stdout=subprocess.DEVNULL
        )
        try:
            redis = aioredis.Redis.from_url(f"redis://127.0.0.1:{port}/0")
            try:
                ports.wait_port(port)
                yield redis
            finally:
                await redis.aclose()
        finally:
            proc.terminate()
            await proc.wait()


async def seeded(
    k8s: k8s_emulator.K8sEmulator,
    redis: aioredis.Redis,
    swarm: str,
    seats: int,
    *,
    lease_ttl_ms: int,
) -> recovering.Recovery:
    """Apply the swarm (real scripts, Pods seeded), then a controller on the real runtime."""
    setup = recovering.Recovery(
        redis,
        swarm,
        Seeding(k8s),
        grant_key=GRANT_KEY,
        worker_image=IMAGE,
        holder="setup",
        lease_ttl_ms=3_600_000,  # no renewer runs while it applies
    )
    assert await setup.lease.acquire()
    applied = await setup.apply_swarm(document(swarm, seats))
    assert len(applied.admitted_executions) == seats
    await setup.lease.release()
    # The client the controller process builds (`kubernetes.ApiClient`), not the library's
    # plain one: what a replacement costs is measured on the path it takes in a cluster.
    api = k8s.client(kubernetes.ApiClient)
    pods = kubernetes.KubernetesRuntime(api, NS, templates.default_pod_template())
    return recovering.Recovery(
        redis,
        swarm,
        pods,
        grant_key=GRANT_KEY,
        worker_image=IMAGE,
        holder="controller",
        lease_ttl_ms=lease_ttl_ms,
    )


async def report_outcomes(recovery: recovering.Recovery, execution_ids: list[str]) -> None:
    """Each replacement reports its fresh outcome with its own credential (as ReportRestore)."""
    revoked = revocations.RedisRevocations(recovery.client)
    for execution in await reading.executions(recovery.client, recovery.swarm, execution_ids):
        token = replacing.worker_token(GRANT_KEY, execution)
        cred = await tokens.check_worker_credential(GRANT_KEY, token, revoked)
        await recovery.report_restore(
            records.Worker(cred),
            recovery=directives.Continuity.FRESH,
            checkpoint_id=None,
            session_id=None,
            watermark=None,
        )


def settle_heap() -> None:
    """Collect, then freeze what setup left (the emulator's store and history of 10,000 Pods):
    otherwise full garbage collections over it land at random in the timed calls of both
    sides."""
    gc.collect()
    gc.freeze()


async def timed(call: Callable[[], Awaitable[Any]]) -> tuple[float, Any]:
    start = time.perf_counter()
    result = await call()
    return time.perf_counter() - start, result


async def bench_pass(redis: aioredis.Redis) -> float:
    """Part 1; returns the ratio."""
    swarm = "bench"
    async with k8s_emulator.serving() as k8s:
        for n in range(NODES):
            k8s.add_node(f"node-{n}")
        started = time.perf_counter()
        # Passes are called directly here, with no renewer: a lease that outlives the bench.
        recovery = await seeded(k8s, redis, swarm, PODS, lease_ttl_ms=3_600_000)
        print(f"setup: {PODS} seats applied and seeded in {time.perf_counter() - started:.1f} s")
        settle_heap()
        assert await recovery.lease.acquire()
        core = client.CoreV1Api(k8s.api_client)
        selector = f"{runtime.LABEL_MANAGED_BY}={runtime.MANAGED_BY},{runtime.LABEL_SWARM}={swarm}"

        async def baseline() -> Any:
            response = await core.list_namespaced_pod(
                NS, label_selector=selector, _preload_content=False
            )
            body = await response.read()
            response.release()
            return json.loads(body)

        await baseline()  # warm both paths (connections, caches)
        await recovery.reconcile()
        base_times, pass_times, quiet_times = [], [], []
        for round_ in range(ROUNDS):
            # 1% of the Pods fail: a different hundred seats each round, four kinds of failure.
            failing = [i for i in range(PODS) if i % 100 == 7 + round_]
            for n, i in enumerate(failing):
                execution = keys.execution_id(swarm, seat_name(i), 1)
                k8s.set_pod_status(NS, templates.pod_name(swarm, execution), pod_status(i, n % 4))
            elapsed, parsed = await timed(baseline)
            base_times.append(elapsed)
            elapsed, report = await timed(recovery.reconcile)
            pass_times.append(elapsed)
            assert len(parsed["items"]) == PODS
            assert len(report.fenced) == len(failing) == len(report.accepted), report
            assert len(report.launched) == len(failing) and not report.errors, report
            # Not timed: the replacements report (closing their recoveries), a pass follows.
            await report_outcomes(
                recovery, [keys.execution_id(swarm, seat_name(i), 2) for i in failing]
            )
            await recovery.reconcile()
            assert await reading.attention(redis, swarm) == []
            # For scale: a pass with nothing to do (lists, classifies, reads the attention set).
            elapsed, report = await timed(recovery.reconcile)
            quiet_times.append(elapsed)
            assert not (report.fenced or report.launched or report.errors), report
        models = None
        if "--models" in sys.argv:
            models, _ = await timed(lambda: core.list_namespaced_pod(NS, label_selector=selector))
        await recovery.runtime.aclose()
    size = len(json.dumps(parsed)) / 2**20
    ms = [f"{t * 1000:.0f}" for t in pass_times]
    print(f"pods: {PODS} ({size:.1f} MiB of JSON), failed per round: {PODS // 100}, nodes: {NODES}")
    print(f"baseline (list + json.loads): best {min(base_times) * 1000:.0f} ms")
    print(f"reconcile pass (100 recoveries): best {min(pass_times) * 1000:.0f} ms (rounds: {ms})")
    print(f"for scale, a pass with no new failure: best {min(quiet_times) * 1000:.0f} ms")
    if models is not None:
        print(f"for scale, list into model objects: {models * 1000:.0f} ms")
    ratio = min(pass_times) / min(base_times)
    verdict = "ok" if ratio <= PASS_TARGET else "short"
    print(f"RESULT reconcile_pass ratio={ratio:.2f} target={PASS_TARGET} {verdict}")
    return ratio


class CreateClock(collections.Counter[str]):
    """The emulator's call counter, also noting when each Pod creation reaches the server."""

    def __init__(self, calls: collections.Counter[str]) -> None:
        super().__init__(calls)
        self.created = asyncio.Event()
        self.at = 0.0

    def __setitem__(self, call: str, count: int) -> None:
        super().__setitem__(call, count)
        if call == "create pods":
            self.at = time.perf_counter()
            self.created.set()


async def bare_client(k8s: k8s_emulator.K8sEmulator, swarm: str, ready: asyncio.Event) -> None:
    """The latency baseline: watch one label's Pods; on a Pod turning Failed, create one Pod."""
    core = client.CoreV1Api(k8s.client())
    selector = f"{runtime.LABEL_SWARM}={swarm}"
    response = await core.list_namespaced_pod(
        NS,
        label_selector=selector,
        watch=True,
        resource_version=str(k8s.resource_version),
        timeout_seconds=3600,
        _preload_content=False,
    )
    ready.set()
    try:
        while line := await response.content.readline():
            event = json.loads(line)
            pod = event["object"]
            if event["type"] != "MODIFIED" or pod["status"].get("phase") != "Failed":
                continue
            labels = pod["metadata"]["labels"]
            spec = runtime.LaunchSpec(
                swarm=swarm,
                seat=labels[runtime.LABEL_SEAT],
                execution_id=labels[runtime.LABEL_EXECUTION] + "-r",
                generation=2,
                image=IMAGE,
                command=("claude", "--print"),
                worker_credential="unused",
            )
            body = templates.render_pod(templates.default_pod_template(), spec, namespace=NS)
            created = await core.create_namespaced_pod(NS, body, _preload_content=False)
            await created.read()
            created.release()
    finally:
        response.close()


def quantiles(samples: list[float]) -> tuple[float, float]:
    cuts = statistics.quantiles(samples, n=100, method="inclusive")
    return cuts[49], cuts[98]


async def bench_latency(redis: aioredis.Redis) -> float:
    """Part 2; returns the p99 ratio."""
    swarm, other = "lat", "lat-base"
    async with k8s_emulator.serving() as k8s:
        for n in range(NODES):
            k8s.add_node(f"node-{n}")
        recovery = await seeded(k8s, redis, swarm, LATENCY_SEATS, lease_ttl_ms=10_000)
        base_pods = []
        for i in range(FAILURES):
            spec = runtime.LaunchSpec(
                other, seat_name(i), f"{other}.{seat_name(i)}.1", 1, IMAGE, ("claude",), "unused"
            )
            base_pods.append(running_pod(spec))
        k8s.bulk_create_pods(NS, base_pods)
        settle_heap()
        clock = CreateClock(k8s.calls)
        k8s.calls = clock
        stop, ready = asyncio.Event(), asyncio.Event()
        loop = asyncio.create_task(recovery.run(stop, interval_s=2.0))
        baseline = asyncio.create_task(bare_client(k8s, other, ready))
        await ready.wait()

        async def watching() -> None:
            # The controller's Pod and Node watches, and the bare client's.
            assert recovery.lease.is_held() and k8s.open_watches >= 3

        await ports.eventually(watching, timeout=10)
        await asyncio.sleep(0.5)
        ours, theirs = [], []

        def launched(execution: str) -> Callable[[], Awaitable[None]]:
            async def check() -> None:
                found = await reading.execution(redis, swarm, execution)
                assert found is not None and found.launched

            return check

        async def failure(pod: str, status: dict[str, Any]) -> float:
            await asyncio.sleep(0.02)  # whatever the last failure set going has finished
            clock.created.clear()
            start = time.perf_counter()
            k8s.set_pod_status(NS, pod, status)
            await asyncio.wait_for(clock.created.wait(), 30)
            return clock.at - start

        for i in range(FAILURES):
            first = keys.execution_id(swarm, seat_name(i), 1)
            second = keys.execution_id(swarm, seat_name(i), 2)
            ours.append(await failure(templates.pod_name(swarm, first), pod_status(i, i % 4)))
            # The replacement comes up and reports its outcome before the next failure.
            await ports.eventually(launched(second), timeout=10, every=0.002)
            await report_outcomes(recovery, [second])
            base_pod = base_pods[i]["metadata"]["name"]
            theirs.append(await failure(base_pod, pod_status(i, 2)))
        stop.set()
        await loop
        baseline.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await baseline
        await recovery.runtime.aclose()
    (p50, p99), (b50, b99) = quantiles(ours), quantiles(theirs)
    print(f"latency swarm: {LATENCY_SEATS} seats, {FAILURES} failures one at a time")
    print(
        f"failure -> replacement Pod created, with the watch: p50 {p50 * 1000:.1f} ms, "
        f"p99 {p99 * 1000:.1f} ms"
    )
    print(
        f"bare client (watch event -> create one Pod): p50 {b50 * 1000:.1f} ms, "
        f"p99 {b99 * 1000:.1f} ms"
    )
    ratio = p99 / b99
    verdict = "ok" if ratio <= LATENCY_TARGET else "short"
    print(f"RESULT replacement_latency_p99 ratio={ratio:.2f} target={LATENCY_TARGET} {verdict}")
    return ratio


async def main() -> int:
    # Warnings from the core (a lease given up at the end) would interleave with the figures.
    logging.getLogger("services").setLevel(logging.ERROR)
    parts = [a.split("=", 1)[1] for a in sys.argv[1:] if a.startswith("--only=")]
    async with redis_server() as redis:
        if not parts or "pass" in parts:
            await bench_pass(redis)
            await redis.flushall()
        if not parts or "latency" in parts:
            await bench_latency(redis)
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
