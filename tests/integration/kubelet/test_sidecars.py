"""Native sidecars: started first, waited for (startup probe or a running process), restarted
when they exit, stopped with SIGTERM after the main containers ended."""

from __future__ import annotations

import json

import pytest

from tests.integration.kubelet import pods
from tests.support import ports
from tests.support.kube import objects

SHARED = {"name": "shared", "emptyDir": {}}
MOUNT = [{"name": "shared", "mountPath": "/shared"}]

# The sidecar takes a while to become ready, then waits for SIGTERM and records whether the
# main container had already finished when it came.
SIDECAR = """
import os, signal, sys, time
def stop(*_):
    done = os.path.exists("/shared/main-done")
    with open("/shared/sidecar-terminated", "w") as f:
        f.write("main-done=%s" % done)
    sys.exit(0)
signal.signal(signal.SIGTERM, stop)
time.sleep(1.5)
open("/shared/ready", "w").close()
print("ready", flush=True)
while True:
    time.sleep(0.05)
"""

MAIN = """
import os, time
with open("/shared/main-started", "w") as f:
    f.write("ready=%s" % os.path.exists("/shared/ready"))
time.sleep(0.3)
open("/shared/main-done", "w").close()
"""


def startup_probe(handler: dict) -> dict:
    # Generous timeouts and threshold: CI shares two cores.
    return {**handler, "periodSeconds": 1, "timeoutSeconds": 20, "failureThreshold": 120}


def sidecar(script: str, **extra) -> dict:
    return pods.python("restorer", script, restartPolicy="Always", volumeMounts=MOUNT, **extra)


async def test_the_main_container_waits_for_the_sidecars_startup_probe(
    k8s_emulator, kubelet
) -> None:
    probe = startup_probe({"exec": {"command": ["test", "-f", "/shared/ready"]}})
    body = pods.pod(
        "ordered",
        [pods.python("worker", MAIN, volumeMounts=MOUNT)],
        init=[sidecar(SIDECAR, startupProbe=probe)],
        volumes=[SHARED],
        grace=30,
    )
    await pods.create(k8s_emulator, body)
    pod = await kubelet.wait_for_pod(pods.NS, "ordered", pods.terminal)

    shared = kubelet.volume_path(pods.NS, "ordered", "shared")
    assert (shared / "main-started").read_text() == "ready=True"
    assert (shared / "sidecar-terminated").read_text() == "main-done=True"
    assert pods.phase(pod) == "Succeeded"
    assert pods.state(pod, "worker")["terminated"]["exitCode"] == 0
    restorer = objects.container_status(pod, "restorer")
    assert restorer["state"]["terminated"]["exitCode"] == 0
    assert restorer["restartCount"] == 0
    assert kubelet.logs(pods.NS, "ordered", "restorer") == "ready\n"
    assert objects.condition(pod, "Initialized") == "True"
    assert objects.condition(pod, "Ready") == "False"


async def test_while_running_the_pod_reports_the_started_sidecar_and_is_ready(
    k8s_emulator, kubelet
) -> None:
    probe = startup_probe({"exec": {"command": ["test", "-f", "/shared/ready"]}})
    wait_for_go = "import os, time\nwhile not os.path.exists('/shared/go'): time.sleep(0.05)"
    body = pods.pod(
        "running",
        [pods.python("worker", wait_for_go, volumeMounts=MOUNT)],
        init=[sidecar(SIDECAR, startupProbe=probe)],
        volumes=[SHARED],
    )
    await pods.create(k8s_emulator, body)

    def waiting_on_probe(pod) -> bool:
        restorer = objects.container_status(pod, "restorer")
        return "running" in restorer.get("state", {}) and restorer.get("started") is False

    pod = await kubelet.wait_for_pod(pods.NS, "running", waiting_on_probe)
    assert pods.phase(pod) == "Pending"
    assert pods.state(pod, "worker") == {"waiting": {"reason": "PodInitializing"}}
    assert objects.condition(pod, "Initialized") == "False"

    pod = await kubelet.wait_for_pod(
        pods.NS, "running", lambda p: objects.condition(p, "Ready") == "True"
    )
    assert pods.phase(pod) == "Running"
    restorer = objects.container_status(pod, "restorer")
    assert (restorer["started"], restorer["ready"]) == (True, True)
    worker = objects.container_status(pod, "worker")
    assert (worker["started"], worker["ready"]) == (True, True)
    assert set(pod["status"]) >= {"startTime", "hostIP", "podIP", "conditions"}

    (kubelet.volume_path(pods.NS, "running", "shared") / "go").touch()
    pod = await kubelet.wait_for_pod(pods.NS, "running", pods.terminal)
    assert pods.phase(pod) == "Succeeded"


async def test_a_tcp_startup_probe_gates_the_main_container(k8s_emulator, kubelet) -> None:
    port = ports.free_port()
    listener = f"""
import socket, time
time.sleep(1.0)
server = socket.socket()
server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
server.bind(("127.0.0.1", {port}))
server.listen(16)
while True:
    server.accept()[0].close()
"""
    connect = f"""
import socket
socket.create_connection(("127.0.0.1", {port}), timeout=5).close()
print("connected", flush=True)
"""
    body = pods.pod(
        "tcp",
        [pods.python("worker", connect)],
        init=[
            pods.python(
                "listener",
                listener,
                restartPolicy="Always",
                startupProbe=startup_probe({"tcpSocket": {"port": port}}),
            )
        ],
    )
    await pods.create(k8s_emulator, body)
    pod = await kubelet.wait_for_pod(pods.NS, "tcp", pods.terminal)

    assert pods.phase(pod) == "Succeeded"
    assert kubelet.logs(pods.NS, "tcp", "worker") == "connected\n"
    # The listener ignores nothing: SIGTERM ended it (128 + 15).
    assert pods.state(pod, "listener")["terminated"]["exitCode"] == 143


async def test_a_sidecar_that_exits_is_restarted_while_the_pod_runs(k8s_emulator, kubelet) -> None:
    flaky = """
import os, sys, time
runs = len(os.listdir("/shared"))
open("/shared/run-%d" % (runs + 1), "w").close()
print("run", runs + 1, flush=True)
if runs == 0:
    sys.exit(3)
while True:
    time.sleep(0.05)
"""
    wait_second_run = (
        "import os, time\nwhile not os.path.exists('/shared/run-2'): time.sleep(0.05)\n"
    )
    body = pods.pod(
        "flaky",
        [pods.python("worker", wait_second_run, volumeMounts=MOUNT)],
        init=[sidecar(flaky)],
        volumes=[SHARED],
    )
    await pods.create(k8s_emulator, body)
    pod = await kubelet.wait_for_pod(pods.NS, "flaky", pods.terminal)

    assert pods.phase(pod) == "Succeeded"
    restorer = objects.container_status(pod, "restorer")
    assert restorer["restartCount"] == 1
    assert restorer["lastState"]["terminated"]["exitCode"] == 3
    assert restorer["state"]["terminated"]["exitCode"] == 143
    assert kubelet.logs(pods.NS, "flaky", "restorer", previous=True) == "run 1\n"
    assert kubelet.logs(pods.NS, "flaky", "restorer") == "run 2\n"


async def test_ordinary_init_containers_run_to_completion_in_order(k8s_emulator, kubelet) -> None:
    def step(name: str) -> dict:
        script = f"import time\ntime.sleep(0.2)\nopen('/shared/log', 'a').write('{name}\\n')"
        return pods.python(name, script, volumeMounts=MOUNT)

    body = pods.pod(
        "steps",
        [pods.python("worker", "print(open('/shared/log').read(), end='')", volumeMounts=MOUNT)],
        init=[step("first"), step("second")],
        volumes=[SHARED],
    )
    await pods.create(k8s_emulator, body)
    pod = await kubelet.wait_for_pod(pods.NS, "steps", pods.terminal)

    assert kubelet.logs(pods.NS, "steps", "worker") == "first\nsecond\n"
    for name in ("first", "second"):
        assert pods.state(pod, name)["terminated"]["reason"] == "Completed"


async def test_a_failed_init_container_fails_the_pod(k8s_emulator, kubelet) -> None:
    body = pods.pod(
        "broken",
        [pods.shell("worker", "echo never")],
        init=[pods.shell("setup", "echo nope >&2; exit 4")],
    )
    await pods.create(k8s_emulator, body)
    pod = await kubelet.wait_for_pod(pods.NS, "broken", pods.terminal)

    assert pods.phase(pod) == "Failed"
    assert pods.state(pod, "setup")["terminated"]["exitCode"] == 4
    assert "waiting" in pods.state(pod, "worker")
    assert kubelet.logs(pods.NS, "broken", "setup") == "nope\n"
    with pytest.raises(KeyError):
        kubelet.logs(pods.NS, "broken", "worker")
    assert json.dumps(pod)  # plain JSON all the way
