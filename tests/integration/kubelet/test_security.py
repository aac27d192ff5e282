"""securityContext: the containers' processes run as the user and groups the Pod asks for."""

from __future__ import annotations

from tests.integration.kubelet import pods

WHO = """
import os
print(os.getuid(), os.geteuid(), os.getgid(), sorted(os.getgroups()))
open("/data/mine", "w").write("x")
with open("/proc/self/status") as f:
    print([line.split()[1] for line in f if line.startswith("NoNewPrivs")][0])
try:
    open("/root/.kubelet-test", "w")
except PermissionError:
    print("no root")
"""


async def test_processes_run_as_the_pods_user_and_groups(k8s_emulator, kubelet) -> None:
    worker = pods.python(
        "worker",
        WHO,
        volumeMounts=[{"name": "data", "mountPath": "/data"}],
        securityContext={"allowPrivilegeEscalation": False},
    )
    body = pods.pod(
        "who",
        [worker],
        volumes=[{"name": "data", "emptyDir": {}}],
        security={"runAsUser": 4321, "runAsGroup": 4322, "fsGroup": 4323, "runAsNonRoot": True},
    )
    await pods.create(k8s_emulator, body)
    pod = await kubelet.wait_for_pod(pods.NS, "who", pods.terminal)

    assert pods.phase(pod) == "Succeeded", kubelet.logs(pods.NS, "who", "worker")
    assert kubelet.logs(pods.NS, "who", "worker").splitlines() == [
        "4321 4321 4322 [4323]",
        "1",
        "no root",
    ]
    written = (kubelet.volume_path(pods.NS, "who", "data") / "mine").stat()
    # The emptyDir is group fsGroup with the setgid bit, so files get that group.
    assert (written.st_uid, written.st_gid) == (4321, 4323)


async def test_a_container_user_overrides_the_pods(k8s_emulator, kubelet) -> None:
    worker = pods.shell("worker", "id -u; id -g", securityContext={"runAsUser": 1000})
    body = pods.pod("override", [worker], security={"runAsUser": 4321, "runAsGroup": 77})
    await pods.create(k8s_emulator, body)
    await kubelet.wait_for_pod(pods.NS, "override", pods.terminal)

    assert kubelet.logs(pods.NS, "override", "worker") == "1000\n77\n"


async def test_run_as_non_root_refuses_root(k8s_emulator, kubelet) -> None:
    body = pods.pod("rooted", [pods.shell("worker", "id")], security={"runAsNonRoot": True})
    await pods.create(k8s_emulator, body)
    pod = await kubelet.wait_for_pod(
        pods.NS,
        "rooted",
        lambda p: (
            "waiting" in pods.state(p, "worker")
            and pods.state(p, "worker")["waiting"]["reason"] == "CreateContainerConfigError"
        ),
    )
    assert "runAsNonRoot" in pods.state(pod, "worker")["waiting"]["message"]
