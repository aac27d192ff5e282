"""KubernetesRuntime.list_attempts over 10,000 worker Pods against the bare list call, same run.

The API emulator (tests/support/k8s_emulator.py, on loopback in this process) holds 10,000 worker
Pods of one swarm, rendered from the default template with the sidecar, bound to 20 Ready nodes,
each with a kubelet-like status; 1% have failed (OOMKilled, Evicted, non-zero exit, node lost).
In alternation, best of five each:

- list_attempts: the runtime's whole read of a pass: the Pod list by label and the Node list,
  parsed, every Pod classified into an Attempt;
- baseline: the same Pod list call through kubernetes-asyncio with ``_preload_content=False``
  plus ``json.loads`` of the same response.

With ``--models`` it also prints, once, the same list deserialized into kubernetes-asyncio model
objects, for scale (about 16 times the baseline here; it takes a while).
Prints the absolute figures, then ``RESULT reconcile_list ratio=<float> target=2.0 ok|short``.

Run: .venv/bin/python bench/reconcile_list.py [--models]
(not a test: timings stay out of `make test`)
"""

from __future__ import annotations

import asyncio
import json
import pathlib
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from kubernetes_asyncio import client

from services.controller.pods import kubernetes, runtime, templates
from tests.support import k8s_emulator

TARGET = 2.0
PODS = 10_000
NODES = 20
ROUNDS = 5
NS = "workers"
SWARM = "bench"
IMAGE = "registry.local/agent-worker:1.4.2"


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


def worker_pod(index: int) -> dict[str, Any]:
    spec = runtime.LaunchSpec(
        swarm=SWARM,
        seat=f"seat-{index}",
        execution_id=f"e-{index}",
        generation=1 + index % 3,
        image=IMAGE,
        command=("agentihooks-restorer", "entry", "--", "claude"),
        worker_credential="unused",
        env={"AGENTIHOOKS_CONTROL_ADDR": "controller:50051", "AGENTIHOOKS_SWARM": SWARM},
    )
    pod = templates.render_pod(templates.default_pod_template(), spec, namespace=NS)
    pod["spec"]["nodeName"] = f"node-{index % NODES}"
    running = {"running": {"startedAt": "2026-12-02T14:00:00Z"}}
    phase, reason, worker = "Running", None, running
    if index % 100 == 7:  # 1% failed, in four ways
        kind = (index // 100) % 4
        phase = "Failed" if kind != 3 else "Unknown"
        reason = "Evicted" if kind == 1 else None
        code = {0: (137, "OOMKilled"), 1: (137, "Error"), 2: (3, "Error")}.get(kind)
        worker = {"terminated": {"exitCode": code[0], "reason": code[1]}} if code else running
    pod["status"] = {
        "phase": phase,
        "hostIP": "10.0.0.1",
        "podIP": f"10.1.{index // 250}.{index % 250}",
        "startTime": "2026-12-02T14:00:00Z",
        "qosClass": "Burstable",
        "conditions": [
            {"type": t, "status": "True", "lastTransitionTime": "2026-12-02T14:00:00Z"}
            for t in ("PodReadyToStartContainers", "Initialized", "Ready", "PodScheduled")
        ],
        "containerStatuses": [container("worker", worker)],
        "initContainerStatuses": [container("restorer", running)],
    }
    if reason:
        pod["status"]["reason"] = reason
    return pod


async def timed(call: Callable[[], Awaitable[Any]]) -> tuple[float, Any]:
    start = time.perf_counter()
    result = await call()
    return time.perf_counter() - start, result


async def main() -> int:
    async with k8s_emulator.serving() as k8s:
        for n in range(NODES):
            k8s.add_node(f"node-{n}")
        k8s.bulk_create_pods(NS, (worker_pod(i) for i in range(PODS)))
        core = client.CoreV1Api(k8s.api_client)
        pods = kubernetes.KubernetesRuntime(k8s.api_client, NS, templates.default_pod_template())
        selector = f"{runtime.LABEL_MANAGED_BY}={runtime.MANAGED_BY},{runtime.LABEL_SWARM}={SWARM}"

        async def baseline() -> Any:
            response = await core.list_namespaced_pod(
                NS, label_selector=selector, _preload_content=False
            )
            body = await response.read()
            response.release()
            return json.loads(body)

        async def measured() -> Any:
            return await pods.list_attempts(SWARM)

        await baseline()  # warm both paths (connections, caches)
        await measured()
        base_times, run_times = [], []
        for _ in range(ROUNDS):
            elapsed, parsed = await timed(baseline)
            base_times.append(elapsed)
            elapsed, attempts = await timed(measured)
            run_times.append(elapsed)
        assert len(parsed["items"]) == PODS and len(attempts) == PODS
        failed = sum(1 for a in attempts if a.failure is not None)
        models = None
        if "--models" in sys.argv:
            models, _ = await timed(lambda: core.list_namespaced_pod(NS, label_selector=selector))
        await pods.aclose()
    size = len(json.dumps(parsed)) / 2**20
    print(f"pods: {PODS} ({size:.1f} MiB of JSON), failed: {failed}, nodes: {NODES}")
    print(f"baseline (list + json.loads): best {min(base_times) * 1000:.0f} ms")
    print(f"list_attempts (+ nodes, classify): best {min(run_times) * 1000:.0f} ms")
    if models is not None:
        print(f"for scale, list into model objects: {models * 1000:.0f} ms")
    ratio = min(run_times) / min(base_times)
    verdict = "ok" if ratio <= TARGET else "short"
    print(f"RESULT reconcile_list ratio={ratio:.2f} target={TARGET} {verdict}")
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
