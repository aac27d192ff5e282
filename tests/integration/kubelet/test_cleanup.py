"""Closing a kubelet leaves nothing behind: processes, cgroups, folders; and it cannot hang."""

from __future__ import annotations

import asyncio

from tests.integration.kubelet import pods
from tests.support.kube import api_client
from tests.support.kube.controllers import scheduling
from tests.support.kube.node import kubelet as kubelet_module

# Ignores SIGTERM and leaves a grandchild in its own session, writing both pids down.
STUBBORN = """
import os, signal, subprocess, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
child = subprocess.Popen(["sleep", "1000"], start_new_session=True)
with open("/out/%s" % os.environ["NAME"], "w") as f:
    f.write("%d %d" % (os.getpid(), child.pid))
while True:
    time.sleep(0.05)
"""


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


async def test_closing_kills_every_process_and_removes_its_cgroups_and_folders(
    k8s_emulator, tmp_path
) -> None:
    k8s_emulator.hold_deletions = True
    out = {"name": "out", "hostPath": {"path": str(tmp_path / "out")}}
    mount = [{"name": "out", "mountPath": "/out"}]

    def stubborn(name: str, **extra) -> dict:
        env = [{"name": "NAME", "value": name}]
        return pods.python(name, STUBBORN, env=env, volumeMounts=mount, **extra)

    root = tmp_path / "kubelet"
    async with scheduling.Scheduler(k8s_emulator.url):
        node = kubelet_module.Kubelet(k8s_emulator.url, "node-1", root=root)
        await node.start()
        try:
            body = pods.pod(
                "leftover",
                [stubborn("worker")],
                init=[stubborn("side", restartPolicy="Always")],
                volumes=[out],
            )
            await pods.create(k8s_emulator, body)
            await node.wait_for_pod(
                pods.NS,
                "leftover",
                lambda _: all((tmp_path / "out" / n).exists() for n in ("worker", "side")),
            )
            cgroup = node.memory_cgroup
            assert cgroup is not None and any(cgroup.iterdir())
        finally:
            await node.close()

    pids = [int(p) for n in ("worker", "side") for p in (tmp_path / "out" / n).read_text().split()]
    assert [pid for pid in pids if alive(pid)] == []
    assert not pods.exists(cgroup)
    assert not pods.exists(root)
    await node.close()  # twice is fine


async def test_cancelling_outlasts_a_swallowed_cancellation() -> None:
    """Python 3.11's ``wait_for`` returns instead of raising when what it waits for ends in the
    iteration the task is cancelled; the kubelet cancels again until its tasks really end."""
    loop = asyncio.get_running_loop()
    ended = loop.create_future()

    async def worker() -> None:
        await asyncio.wait_for(ended, 60)
        await asyncio.Event().wait()  # where a swallowed cancellation would leave it forever

    task = asyncio.create_task(worker())
    await asyncio.sleep(0)
    ended.set_result(None)
    await api_client.cancel_tasks([task])
    assert task.cancelled()
