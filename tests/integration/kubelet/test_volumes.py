"""Volumes in the Pod's mount namespace: shared emptyDirs, Secret files, and a host left alone."""

from __future__ import annotations

import os
import secrets
from pathlib import Path

from tests.integration.kubelet import pods

PROJECT = Path(__file__).resolve().parents[3]


async def test_an_empty_dir_and_a_secret_are_mounted_for_the_pod_only(
    k8s_emulator, kubelet
) -> None:
    place = f"/kubelet-test-{secrets.token_hex(4)}"  # absent on this machine
    shared, creds = f"{place}/shared", f"/etc/kubelet-test-{secrets.token_hex(4)}"
    await pods.create_secret(k8s_emulator, "files", {"token": "t0ken", "config": "a=1"})
    writer = pods.shell(
        "writer",
        f"echo from-init > {shared}/note && ls -ld {shared} | cut -c1-10",
        volumeMounts=[{"name": "shared", "mountPath": shared}],
    )
    reader = pods.python(
        "reader",
        f"""
import os, stat
print(open("{shared}/note").read(), end="")
print(open("{creds}/token").read())
print(sorted(os.listdir("{creds}")))
print(oct(stat.S_IMODE(os.stat("{creds}/token").st_mode)))
print(oct(stat.S_IMODE(os.stat("{creds}/custom").st_mode)))
try:
    open("{creds}/new", "w")
except OSError as exc:
    print("read-only", exc.errno == 30)
open("{shared}/from-reader", "w").write("hi")
""",
        volumeMounts=[
            {"name": "shared", "mountPath": shared},
            {"name": "creds", "mountPath": creds},
        ],
    )
    body = pods.pod(
        "mounts",
        [reader],
        init=[writer],
        volumes=[
            {"name": "shared", "emptyDir": {}},
            {
                "name": "creds",
                "secret": {
                    "secretName": "files",
                    "items": [
                        {"key": "token", "path": "token"},
                        {"key": "config", "path": "custom", "mode": 0o600},
                    ],
                },
            },
        ],
    )
    await pods.create(k8s_emulator, body)
    pod = await kubelet.wait_for_pod(pods.NS, "mounts", pods.terminal)

    assert pods.phase(pod) == "Succeeded", pod["status"]
    assert kubelet.logs(pods.NS, "mounts", "writer") == "drwxrwxrwx\n"
    assert kubelet.logs(pods.NS, "mounts", "reader").splitlines() == [
        "from-init",
        "t0ken",
        "['custom', 'token']",
        "0o644",
        "0o600",
        "read-only True",
    ]
    # Both containers used the same folder: the Pod's emptyDir on this machine.
    folder = kubelet.volume_path(pods.NS, "mounts", "shared")
    assert sorted(p.name for p in folder.iterdir()) == ["from-reader", "note"]
    # Nothing appeared on the host at the mount paths.
    assert not pods.exists(place)
    assert not pods.exists(creds)


async def test_a_volume_over_an_existing_host_folder_hides_it_in_the_pod_only(
    k8s_emulator, kubelet
) -> None:
    """The worker template mounts an emptyDir at /work, a folder this machine has (the project
    lives there): the Pod sees the volume, the host keeps its folder, and the project's commands
    still run."""
    host_folder = PROJECT.parent
    marker = f"kubelet-test-{secrets.token_hex(4)}"
    script = f"""
import os, services
open("{host_folder}/{marker}", "w").write("in the pod")
print(sorted(os.listdir("{host_folder}")))
print(services.__file__.startswith("{PROJECT}"))
"""
    worker = pods.python(
        "worker", script, volumeMounts=[{"name": "work", "mountPath": str(host_folder)}]
    )
    tool = pods.shell(
        "tool",
        "agentihooks-restorer --help | head -1",
        volumeMounts=[{"name": "work", "mountPath": str(host_folder)}],
    )
    body = pods.pod("shadow", [worker, tool], volumes=[{"name": "work", "emptyDir": {}}])
    before = sorted(os.listdir(host_folder))
    await pods.create(k8s_emulator, body)
    pod = await kubelet.wait_for_pod(pods.NS, "shadow", pods.terminal)

    assert pods.phase(pod) == "Succeeded", kubelet.logs(pods.NS, "shadow", "worker")
    listing, imported = kubelet.logs(pods.NS, "shadow", "worker").splitlines()
    # The volume, plus the mount point that keeps the project (the "image") visible.
    assert sorted(eval(listing)) == sorted([marker, PROJECT.name])
    assert imported == "True"
    assert kubelet.logs(pods.NS, "shadow", "tool").startswith("usage: agentihooks-restorer")
    assert sorted(os.listdir(host_folder)) == before
    volume = kubelet.volume_path(pods.NS, "shadow", "work")
    assert (volume / marker).read_text() == "in the pod"


async def test_a_missing_secret_volume_keeps_the_pod_creating(k8s_emulator, kubelet) -> None:
    body = pods.pod(
        "unmounted",
        [pods.shell("worker", "cat /creds/k", volumeMounts=[{"name": "c", "mountPath": "/creds"}])],
        volumes=[{"name": "c", "secret": {"secretName": "absent"}}],
    )
    await pods.create(k8s_emulator, body)
    pod = await kubelet.wait_for_pod(
        pods.NS, "unmounted", lambda p: "not found" in (p.get("status") or {}).get("message", "")
    )
    assert pods.phase(pod) == "Pending"
    assert pods.state(pod, "worker")["waiting"]["reason"] == "ContainerCreating"

    await pods.create_secret(k8s_emulator, "absent", {"k": "v"})
    pod = await kubelet.wait_for_pod(pods.NS, "unmounted", pods.terminal)
    assert kubelet.logs(pods.NS, "unmounted", "worker") == "v"
