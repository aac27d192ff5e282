"""Deleting a Pod: SIGTERM, the grace period, SIGKILL, then the kubelet's delete at grace 0."""

from __future__ import annotations

import time

from tests.integration.kubelet import pods

# Ignores SIGTERM (recording it), keeps a child process, and says when it is set up.
STUBBORN = """
import os, signal, subprocess, time
def term(*_):
    with open("/out/events", "a") as f:
        f.write("TERM %f\\n" % time.time())
signal.signal(signal.SIGTERM, term)
child = subprocess.Popen(["sleep", "1000"])
with open("/out/child", "w") as f:
    f.write(str(child.pid))
with open("/out/events", "a") as f:
    f.write("READY %f\\n" % time.time())
while True:
    time.sleep(0.05)
"""

POLITE = """
import signal, sys, time
def term(*_):
    with open("/out/events", "a") as f:
        f.write("TERM %f\\n" % time.time())
    sys.exit(0)
signal.signal(signal.SIGTERM, term)
with open("/out/events", "a") as f:
    f.write("READY %f\\n" % time.time())
while True:
    time.sleep(0.05)
"""


def out_volume(tmp_path) -> dict:
    return {"name": "out", "hostPath": {"path": str(tmp_path / "out"), "type": "DirectoryOrCreate"}}


def worker(script: str) -> dict:
    return pods.python("worker", script, volumeMounts=[{"name": "out", "mountPath": "/out"}])


def events(tmp_path) -> list[tuple[str, float]]:
    path = tmp_path / "out" / "events"
    lines = path.read_text().splitlines() if path.exists() else []
    return [(kind, float(moment)) for kind, moment in (line.split() for line in lines)]


async def until_ready(kubelet, tmp_path, name: str) -> None:
    await kubelet.wait_for_pod(
        pods.NS, name, lambda p: any(kind == "READY" for kind, _ in events(tmp_path))
    )


async def test_a_process_ignoring_sigterm_is_killed_after_the_grace_period(
    k8s_emulator, kubelet, tmp_path
) -> None:
    body = pods.pod("stubborn", [worker(STUBBORN)], volumes=[out_volume(tmp_path)], grace=3)
    await pods.create(k8s_emulator, body)
    await until_ready(kubelet, tmp_path, "stubborn")
    child = int((tmp_path / "out" / "child").read_text())
    assert pods.exists(f"/proc/{child}")

    async with pods.PodWatch(k8s_emulator, "stubborn") as watch:
        asked = time.time()
        await pods.delete(k8s_emulator, "stubborn")
        terminating = k8s_emulator.get("pods", "stubborn", pods.NS)
        final = await watch.until_deleted()
    gone = time.time()

    # Terminating while the grace period runs: the API kept it for the kubelet.
    assert terminating["metadata"]["deletionTimestamp"]
    assert terminating["metadata"]["deletionGracePeriodSeconds"] == 3
    [(_, termed)] = [e for e in events(tmp_path) if e[0] == "TERM"]
    assert termed >= asked
    assert gone - asked >= 3.0  # SIGKILL only once the grace period ran out
    terminated = pods.state(final, "worker")["terminated"]
    assert (terminated["exitCode"], terminated["reason"]) == (137, "Error")
    assert pods.phase(final) == "Failed"
    assert not pods.exists(f"/proc/{child}") or _zombie(child)
    # The kubelet finished the deletion itself, at grace 0, once the containers were dead.
    assert k8s_emulator.calls["delete pods"] == 2
    assert kubelet.pod_uids() == []


async def test_a_process_that_stops_on_sigterm_ends_the_deletion_early(
    k8s_emulator, kubelet, tmp_path
) -> None:
    body = pods.pod("polite", [worker(POLITE)], volumes=[out_volume(tmp_path)], grace=120)
    await pods.create(k8s_emulator, body)
    await until_ready(kubelet, tmp_path, "polite")

    async with pods.PodWatch(k8s_emulator, "polite") as watch:
        asked = time.monotonic()
        await pods.delete(k8s_emulator, "polite")
        final = await watch.until_deleted()

    assert time.monotonic() - asked < 60  # well within the 120 s grace period
    assert [kind for kind, _ in events(tmp_path)] == ["READY", "TERM"]
    terminated = pods.state(final, "worker")["terminated"]
    assert (terminated["exitCode"], terminated["reason"]) == (0, "Completed")
    assert pods.phase(final) == "Succeeded"
    # The last status the kubelet wrote came before its delete.
    statuses = [pods.phase(obj) for kind, obj in watch.versions if kind == "MODIFIED"]
    assert statuses[-1] == "Succeeded"


async def test_a_finished_pod_is_deleted_at_once_and_its_volumes_removed(
    k8s_emulator, kubelet
) -> None:
    body = pods.pod(
        "done",
        [
            pods.shell(
                "worker",
                "echo hi > /scratch/x",
                volumeMounts=[{"name": "s", "mountPath": "/scratch"}],
            )
        ],
        volumes=[{"name": "s", "emptyDir": {}}],
    )
    await pods.create(k8s_emulator, body)
    await kubelet.wait_for_pod(pods.NS, "done", pods.terminal)
    folder = kubelet.volume_path(pods.NS, "done", "s")
    assert (folder / "x").read_text() == "hi\n"

    await pods.delete(k8s_emulator, "done")
    await kubelet.wait_for_pod(pods.NS, "done", lambda p: p is None)
    await kubelet.wait_for_pod(pods.NS, "done", lambda _: not folder.exists())
    # Logs outlive the Pod until the kubelet closes, for the test to read.
    assert kubelet.logs(pods.NS, "done", "worker") == ""


def _zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True
