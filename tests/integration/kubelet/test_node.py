"""Node loss: a stopped node's processes are frozen and its Ready condition goes Unknown; a
started node thaws them. And the scheduler binds to ready nodes only."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

from services.controller.pods import classifying
from tests.integration.kubelet import pods
from tests.support.kube import clusters, objects

TICK = """
import os, time
n = 0
while True:
    n += 1
    with open("/beat/count.tmp", "w") as f:
        f.write(str(n))
    os.replace("/beat/count.tmp", "/beat/count")
    time.sleep(0.02)
"""


def count(kubelet) -> int:
    try:
        path = kubelet.volume_path(pods.NS, "ticker", "beat") / "count"
    except KeyError:  # not on the node yet
        return 0
    return int(path.read_text()) if path.exists() else 0


async def advancing(kubelet, since: int) -> int:
    """Wait (without a fixed deadline on the process itself) until the counter moves on."""
    result = await kubelet.wait_for_pod(pods.NS, "ticker", lambda _: count(kubelet) > since + 5)
    assert result is not None
    return count(kubelet)


async def test_a_stopped_node_freezes_its_pods_and_goes_unknown(k8s_emulator, kubelet) -> None:
    body = pods.pod(
        "ticker",
        [pods.python("worker", TICK, volumeMounts=[{"name": "beat", "mountPath": "/beat"}])],
        volumes=[{"name": "beat", "emptyDir": {}}],
    )
    await pods.create(k8s_emulator, body)
    await kubelet.wait_for_pod(pods.NS, "ticker", lambda p: pods.phase(p) == "Running")
    await advancing(kubelet, 0)
    pid = kubelet.pid(pods.NS, "ticker", "worker")
    assert pid is not None

    await kubelet.stop()
    assert kubelet.stopped
    node = k8s_emulator.get("nodes", "node-1")
    assert objects.condition(node, "Ready") == "Unknown"
    frozen = count(kubelet)
    await asyncio.sleep(1.0)  # a frozen process cannot move, however slow the machine
    assert count(kubelet) == frozen
    assert pods.exists(f"/proc/{pid}")
    # The Pod still says Running (nobody can update it), and the controller sees node loss.
    pod = k8s_emulator.get("pods", "ticker", pods.NS)
    assert pods.phase(pod) == "Running"
    assert classifying.classify(pod, {"node-1": node}, datetime.now(UTC)) == (
        classifying.FailureReason.NODE_LOST
    )

    await kubelet.start()
    node = k8s_emulator.get("nodes", "node-1")
    assert objects.condition(node, "Ready") == "True"
    await advancing(kubelet, frozen)
    assert kubelet.pid(pods.NS, "ticker", "worker") == pid


async def test_a_pod_deleted_while_the_node_is_stopped_waits_for_it(k8s_emulator, kubelet) -> None:
    body = pods.pod(
        "ticker",
        [pods.python("worker", TICK, volumeMounts=[{"name": "beat", "mountPath": "/beat"}])],
        volumes=[{"name": "beat", "emptyDir": {}}],
        grace=5,
    )
    await pods.create(k8s_emulator, body)
    await advancing(kubelet, 0)
    await kubelet.stop()

    await pods.delete(k8s_emulator, "ticker")
    await asyncio.sleep(0.5)
    # Terminating, as on a real cluster: nothing on the lost node can finish it.
    assert k8s_emulator.get("pods", "ticker", pods.NS)["metadata"]["deletionTimestamp"]

    await kubelet.start()
    await kubelet.wait_for_pod(pods.NS, "ticker", lambda p: p is None)


async def test_the_scheduler_binds_to_ready_nodes_only(k8s_emulator, kubelet, kube_scheduler):
    k8s_emulator.add_node("node-down", ready=None)
    for index in range(3):
        await pods.create(k8s_emulator, pods.pod(f"p{index}", [pods.shell("worker", "true")]))
    for index in range(3):
        pod = await kubelet.wait_for_pod(pods.NS, f"p{index}", pods.terminal)
        assert pod["spec"]["nodeName"] == "node-1"
    assert set(kube_scheduler.bound.values()) == {"node-1"}


async def test_a_cluster_spreads_pods_over_its_ready_nodes(k8s_emulator, tmp_path) -> None:
    nodes = ("node-a", "node-b")
    async with clusters.cluster(
        k8s_emulator, nodes=nodes, root=tmp_path, backoff=(1.0, 10.0), heartbeat=0.2
    ) as cluster:
        for index in range(4):
            await pods.create(
                k8s_emulator, pods.pod(f"spread-{index}", [pods.shell("w", "hostname")])
            )
        placed = {}
        for index in range(4):
            name = f"spread-{index}"
            pod = await cluster.kubelets["node-a"].wait_for_pod(pods.NS, name, pods.terminal)
            node = pod["spec"]["nodeName"]
            placed[name] = node
            assert cluster.kubelets[node].logs(pods.NS, name, "w") == f"{name}\n"
        assert sorted(placed.values()) == ["node-a", "node-a", "node-b", "node-b"]
        # The heartbeat keeps posting Ready True.
        before = k8s_emulator.get("nodes", "node-b")["metadata"]["resourceVersion"]
        await cluster.kubelets["node-a"].wait_for_pod(
            pods.NS,
            "spread-0",
            lambda _: k8s_emulator.get("nodes", "node-b")["metadata"]["resourceVersion"] != before,
        )
    for name in nodes:
        assert not (tmp_path / name / "pods").exists()
