"""The worker Pod exactly as the controller renders it (templates.render_pod through
KubernetesRuntime.launch), executed: the restorer sidecar (the real ``agentihooks-restorer
serve``), the credential from the attempt's Secret, the template's user and volumes."""

from __future__ import annotations

import json
import socket

import pytest

from services.controller.pods import kubernetes, runtime, templates
from tests.integration.kubelet import pods
from tests.support import ports
from tests.support.kube import objects

NS = "workers"
TOKEN = "wk-kubelet-test-credential"

CHECK = """
import json, os, socket, sys, time
port, token = int(sys.argv[1]), sys.argv[2]
facts = {
    "uid": os.getuid(),
    "gid": os.getgid(),
    "home": os.environ["HOME"],
    "credential": os.environ["AGENTIHOOKS_WORKER_CREDENTIAL"] == token,
    "control": os.environ.get("AGENTIHOOKS_CONTROL_ADDR"),
}
open("/work/worker-was-here", "w").write("yes")
facts["home_writable"] = os.access("/home/agent", os.W_OK)
deadline = time.monotonic() + 60
while True:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=5).close()
        facts["restorer_listening"] = True
        break
    except OSError:
        if time.monotonic() > deadline:
            facts["restorer_listening"] = False
            break
        time.sleep(0.1)
print(json.dumps(facts), flush=True)
"""


def _port_free(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) != 0


async def test_the_controllers_worker_pod_runs_with_its_restorer_sidecar(
    k8s_emulator, kubelet
) -> None:
    if not _port_free(templates.RESTORER_PORT):
        pytest.fail(
            f"port {templates.RESTORER_PORT} (the restorer's, fixed by the template) is taken:"
            " stop what listens there"
        )
    rt = kubernetes.KubernetesRuntime(k8s_emulator.api_client, NS, templates.default_pod_template())
    spec = runtime.LaunchSpec(
        swarm="example",
        seat="eng-1",
        execution_id="e-1",
        generation=1,
        image="registry.local/agent-worker:1.4.2",
        command=("python3", "-c", CHECK, str(templates.RESTORER_PORT), TOKEN),
        worker_credential=TOKEN,
        env={"AGENTIHOOKS_CONTROL_ADDR": "127.0.0.1:9"},
    )
    try:
        await rt.launch(spec)  # the Pod first, then its Secret: the kubelet waits for it
        name = templates.pod_name("example", "e-1")
        pod = await kubelet.wait_for_pod(NS, name, pods.terminal)
        [attempt] = await rt.list_attempts("example")
    finally:
        await rt.aclose()

    restorer_runs = sorted(kubelet.log_path(NS, name, "restorer").parent.glob("*.log"))
    if any("Failed to bind to address" in run.read_text() for run in restorer_runs):
        pytest.fail(f"port {templates.RESTORER_PORT} was taken while the test ran")
    facts = json.loads(kubelet.logs(NS, name, "worker"))
    assert facts == {
        "uid": 1000,
        "gid": 1000,
        "home": "/home/agent",
        "credential": True,
        "control": "127.0.0.1:9",
        "home_writable": True,
        "restorer_listening": True,
    }
    assert pods.phase(pod) == "Succeeded"
    restorer = objects.container_status(pod, "restorer")
    # Stopped by SIGTERM once the worker ended, cleanly.
    assert restorer["state"]["terminated"]["exitCode"] == 0, kubelet.logs(NS, name, "restorer")
    assert restorer["restartCount"] == 0
    assert '"listening"' in kubelet.logs(NS, name, "restorer")
    assert (kubelet.volume_path(NS, name, "work") / "worker-was-here").read_text() == "yes"
    assert (attempt.failure, attempt.alive) == (None, False)


async def test_a_grpc_startup_probe_waits_for_the_restorers_health_service(
    k8s_emulator, kubelet
) -> None:
    port = ports.free_port()
    await pods.create_secret(k8s_emulator, "cred", {"credential": TOKEN})
    restorer = {
        "name": "restorer",
        "image": pods.IMAGE,
        "restartPolicy": "Always",
        "command": ["agentihooks-restorer", "serve", "--listen", f"127.0.0.1:{port}"],
        "env": [
            {"name": "AGENTIHOOKS_CONTROL_ADDR", "value": "127.0.0.1:9"},
            {
                "name": "AGENTIHOOKS_WORKER_CREDENTIAL",
                "valueFrom": {"secretKeyRef": {"name": "cred", "key": "credential"}},
            },
        ],
        "startupProbe": {
            "grpc": {"port": port},
            "periodSeconds": 1,
            "timeoutSeconds": 20,
            "failureThreshold": 120,
        },
    }
    # The worker checks the health service answers SERVING the moment it starts.
    check = f"""
import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
with grpc.insecure_channel("127.0.0.1:{port}") as channel:
    answer = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=20)
print(health_pb2.HealthCheckResponse.ServingStatus.Name(answer.status))
"""
    body = pods.pod("probed", [pods.python("worker", check)], init=[restorer], grace=30)
    await pods.create(k8s_emulator, body)
    pod = await kubelet.wait_for_pod(pods.NS, "probed", pods.terminal)

    assert kubelet.logs(pods.NS, "probed", "worker") == "SERVING\n"
    assert pods.phase(pod) == "Succeeded"
    assert pods.state(pod, "restorer")["terminated"]["exitCode"] == 0
