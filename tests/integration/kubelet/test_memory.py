"""Memory limits are cgroup v1 memory cgroups: the kernel's OOM killer ends a container over its
limit, and the status says OOMKilled as a kubelet's does, which the controller classifies."""

from __future__ import annotations

from datetime import UTC, datetime

from services.controller.pods import classifying
from tests.integration.kubelet import pods

GROW = """
import sys
print("growing", flush=True)
chunks = []
while True:
    chunks.append(b"x" * (8 << 20))  # written, so charged to the cgroup
    print(len(chunks) * 8, "MiB", flush=True)
"""

FITS = """
block = b"x" * (16 << 20)
print("allocated", len(block) >> 20, "MiB", flush=True)
"""


def limited(name: str, script: str, limit: str) -> dict:
    return pods.python(
        name, script, resources={"requests": {"memory": limit}, "limits": {"memory": limit}}
    )


async def test_a_worker_over_its_memory_limit_is_oom_killed_and_classified_so(
    k8s_emulator, kubelet
) -> None:
    await pods.create(
        k8s_emulator, pods.pod("hungry", [limited(classifying.WORKER_CONTAINER, GROW, "96Mi")])
    )
    pod = await kubelet.wait_for_pod(pods.NS, "hungry", pods.terminal)

    terminated = pods.state(pod, "worker")["terminated"]
    assert terminated["reason"] == "OOMKilled"
    assert terminated["exitCode"] == 137
    assert pods.phase(pod) == "Failed"
    output = kubelet.logs(pods.NS, "hungry", "worker")
    assert "growing" in output
    # It really grew until the kernel stopped it near the limit, not before.
    grown = [int(line.split()[0]) for line in output.splitlines() if line.endswith("MiB")]
    assert 40 <= max(grown) <= 96
    node = k8s_emulator.get("nodes", "node-1")
    assert classifying.classify(pod, {"node-1": node}, datetime.now(UTC)) == (
        classifying.FailureReason.OOM_KILLED
    )
    # The container's cgroup went with it.
    uid = pod["metadata"]["uid"]
    assert list((kubelet.memory_cgroup / f"pod{uid}").glob("worker-*")) == []


async def test_a_worker_within_its_limit_completes(k8s_emulator, kubelet) -> None:
    await pods.create(
        k8s_emulator, pods.pod("modest", [limited(classifying.WORKER_CONTAINER, FITS, "96Mi")])
    )
    pod = await kubelet.wait_for_pod(pods.NS, "modest", pods.terminal)

    assert pods.phase(pod) == "Succeeded"
    assert pods.state(pod, "worker")["terminated"]["reason"] == "Completed"
    assert kubelet.logs(pods.NS, "modest", "worker") == "allocated 16 MiB\n"
    node = k8s_emulator.get("nodes", "node-1")
    assert classifying.classify(pod, {"node-1": node}, datetime.now(UTC)) is None


async def test_a_plain_sigkill_is_not_an_oom_kill(k8s_emulator, kubelet) -> None:
    """Exit 137 alone is no OOM: only the cgroup's own OOM kill count says OOMKilled."""
    script = "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"
    await pods.create(
        k8s_emulator, pods.pod("killed", [limited(classifying.WORKER_CONTAINER, script, "96Mi")])
    )
    pod = await kubelet.wait_for_pod(pods.NS, "killed", pods.terminal)

    assert pods.state(pod, "worker")["terminated"] | {"startedAt": 0, "finishedAt": 0} == {
        "exitCode": 137,
        "reason": "Error",
        "startedAt": 0,
        "finishedAt": 0,
        "containerID": pods.state(pod, "worker")["terminated"]["containerID"],
    }
    node = k8s_emulator.get("nodes", "node-1")
    assert classifying.classify(pod, {"node-1": node}, datetime.now(UTC)) == (
        classifying.FailureReason.APPLICATION_EXIT
    )
