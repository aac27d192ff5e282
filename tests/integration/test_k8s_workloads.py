"""The emulator's workload controllers (tests/support/kube/controllers/workloads.py) with its
kubelet running the Pods, driven and watched by the real kubectl: `rollout status` finishes only
once the kubelet's Pods are ready."""

from __future__ import annotations

import pathlib
from collections.abc import AsyncIterator
from typing import Any

import pytest
import yaml

from tests.support import ports
from tests.support.kube import clusters, kubectl
from tests.support.kube.apiserver.emulator import K8sEmulator
from tests.support.kube.clusters import Cluster
from tests.support.kube.controllers import workloads as k8s_workloads
from tests.support.kube.node import kubelet as kubelet_module
from tests.support.kube.objects import condition

NS = "default"
DEADLINE_S = 180


def workload(kind: str, name: str, replicas: int, **spec: Any) -> dict[str, Any]:
    """A Deployment or StatefulSet of `sleep` containers, ready once their exec probe passes."""
    labels = {"app": name}
    container = {
        "name": "main",
        "image": "registry.local/agent-worker:test",
        "command": ["sh", "-c", "touch /tmp/ready-$HOSTNAME; exec sleep 3600"],
        "readinessProbe": {
            "exec": {"command": ["sh", "-c", "test -f /tmp/ready-$HOSTNAME"]},
            "periodSeconds": 1,
        },
    }
    return {
        "apiVersion": "apps/v1",
        "kind": kind,
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {"containers": [container], "terminationGracePeriodSeconds": 2},
            },
            **spec,
        },
    }


class Operator:
    def __init__(self, folder: pathlib.Path, emulator: K8sEmulator) -> None:
        self.folder = folder
        self.env = kubectl.environment(folder, emulator.url)

    async def run(self, script: str) -> str:
        return await kubectl.succeed(script, cwd=self.folder, env=self.env, timeout=DEADLINE_S + 60)

    async def apply(self, *objects: dict[str, Any]) -> str:
        path = self.folder / "objects.yaml"
        path.write_text(yaml.safe_dump_all(objects))
        return await self.run(f"kubectl apply -f {path}")


@pytest.fixture
async def running(k8s_emulator: K8sEmulator, tmp_path: pathlib.Path) -> AsyncIterator[Cluster]:
    reason = kubelet_module.unsupported_reason()
    if reason is not None:
        pytest.fail(f"the kubelet cannot run Pods on this machine: {reason}")
    async with (
        clusters.cluster(k8s_emulator, root=tmp_path / "nodes") as nodes,
        k8s_workloads.controllers(k8s_emulator.url),
    ):
        yield nodes


def owned(emulator: K8sEmulator, resource: str, owner_uid: str) -> list[dict[str, Any]]:
    return [
        o
        for o in emulator.objects(resource, NS)
        if any(r.get("uid") == owner_uid for r in o["metadata"].get("ownerReferences") or ())
    ]


async def until(check: Any, what: str) -> None:
    """Wait for `check()` to hold (deadline: `ports.MIN_DEADLINE_S` at least)."""

    async def holds() -> None:
        assert check(), what

    await ports.eventually(holds, timeout=DEADLINE_S, every=0.2)


async def test_a_deployment_rolls_out_once_its_pods_run_and_a_new_template_replaces_them(
    running: Cluster, k8s_emulator: K8sEmulator, tmp_path: pathlib.Path
) -> None:
    """`kubectl apply` of a Deployment: a ReplicaSet and its Pods are made, the kubelet runs
    them, and `kubectl rollout status` finishes once both are ready. `kubectl set env` changes
    the template: a second ReplicaSet's Pods come up, then the first is scaled to zero and its
    Pods stopped, and `rollout status` finishes again."""
    operator = Operator(tmp_path, k8s_emulator)
    await operator.apply(workload("Deployment", "web", 2))
    out = await operator.run(f"kubectl rollout status deployment/web --timeout={DEADLINE_S}s")
    assert 'deployment "web" successfully rolled out' in out
    deployment = k8s_emulator.get("deployments", "web", NS)
    (first,) = owned(k8s_emulator, "replicasets", deployment["metadata"]["uid"])
    pods = owned(k8s_emulator, "pods", first["metadata"]["uid"])
    assert len(pods) == 2 and all(condition(p, "Ready") == "True" for p in pods)
    (kubelet,) = running.kubelets.values()
    for pod in pods:
        assert kubelet.pid(NS, pod["metadata"]["name"], "main") is not None
    # `kubectl get pods` prints the server's table, each Pod 1/1 Running.
    shown = await operator.run("kubectl get pods")
    for pod in pods:
        (line,) = [li for li in shown.splitlines() if li.startswith(pod["metadata"]["name"])]
        assert line.split()[1:4] == ["1/1", "Running", "0"], shown

    await operator.run("kubectl set env deployment/web COLOR=blue")
    out = await operator.run(f"kubectl rollout status deployment/web --timeout={DEADLINE_S}s")
    assert 'deployment "web" successfully rolled out' in out
    sets = owned(k8s_emulator, "replicasets", deployment["metadata"]["uid"])
    (second,) = [s for s in sets if s["metadata"]["uid"] != first["metadata"]["uid"]]
    assert k8s_emulator.get("replicasets", first["metadata"]["name"], NS)["spec"]["replicas"] == 0
    new_pods = owned(k8s_emulator, "pods", second["metadata"]["uid"])
    assert len(new_pods) == 2
    for pod in new_pods:
        (main,) = pod["spec"]["containers"]
        assert {"name": "COLOR", "value": "blue"} in main["env"]
        assert condition(pod, "Ready") == "True"
    old_names = {p["metadata"]["name"] for p in pods}
    await until(
        lambda: not old_names & {p["metadata"]["name"] for p in k8s_emulator.objects("pods", NS)},
        "the old ReplicaSet's Pods were deleted",
    )


async def test_a_statefulset_starts_its_pods_in_order_and_scales_down_from_the_top(
    running: Cluster, k8s_emulator: K8sEmulator, tmp_path: pathlib.Path
) -> None:
    """A StatefulSet's Pod 1 is created only once Pod 0 runs and is ready; `rollout status`
    finishes once both are; `kubectl scale --replicas=1` stops Pod 1 and keeps Pod 0."""
    operator = Operator(tmp_path, k8s_emulator)
    await operator.apply(workload("StatefulSet", "db", 2, serviceName="db"))
    out = await operator.run(f"kubectl rollout status statefulset/db --timeout={DEADLINE_S}s")
    assert "partitioned roll out complete" in out or "roll out complete" in out, out
    first, second = k8s_emulator.get("pods", "db-0", NS), k8s_emulator.get("pods", "db-1", NS)
    ready_at = next(
        c["lastTransitionTime"] for c in first["status"]["conditions"] if c["type"] == "Ready"
    )
    assert second["metadata"]["creationTimestamp"] >= ready_at
    assert first["spec"]["hostname"] == "db-0" and first["spec"]["subdomain"] == "db"
    await operator.run("kubectl scale statefulset/db --replicas=1")
    await until(lambda: k8s_emulator.get("pods", "db-1", NS) is None, "db-1 was deleted")
    assert k8s_emulator.get("pods", "db-0", NS)["metadata"]["uid"] == first["metadata"]["uid"]
    out = await operator.run(f"kubectl rollout status statefulset/db --timeout={DEADLINE_S}s")
    assert "roll out complete" in out, out
