"""Container environment: values, $(VAR) references, Secrets through secretKeyRef (and the
CreateContainerConfigError a missing one gives), field references, working directory."""

from __future__ import annotations

import pytest

from tests.integration.kubelet import pods
from tests.support.kube import objects

PRINT_ENV = """
import os
for name in ("TOKEN", "GREETING", "POD", "NODE", "HOSTNAME"):
    print(name, os.environ.get(name), flush=True)
print("PATH", os.environ["PATH"].split(":")[0].endswith("/bin"))
print("CWD", os.getcwd())
"""


def from_secret(name: str, secret: str, key: str) -> dict:
    return {"name": name, "valueFrom": {"secretKeyRef": {"name": secret, "key": key}}}


async def test_values_and_secret_references_reach_the_process(k8s_emulator, kubelet) -> None:
    await pods.create_secret(k8s_emulator, "creds", {"token": "s3cr3t-value"})
    env = [
        from_secret("TOKEN", "creds", "token"),
        {"name": "GREETING", "value": "hello $(TOKEN) $$(TOKEN)"},
        {"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        {"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
    ]
    body = pods.pod(
        "envy", [pods.python("worker", PRINT_ENV, env=env, workingDir="/kubelet-test-cwd/deep")]
    )
    await pods.create(k8s_emulator, body)
    pod = await kubelet.wait_for_pod(pods.NS, "envy", pods.terminal)

    assert pods.phase(pod) == "Succeeded"
    assert kubelet.logs(pods.NS, "envy", "worker").splitlines() == [
        "TOKEN s3cr3t-value",
        "GREETING hello s3cr3t-value $(TOKEN)",
        "POD envy",
        "NODE node-1",
        "HOSTNAME envy",
        "PATH True",
        "CWD /kubelet-test-cwd/deep",
    ]
    assert not pods.exists("/kubelet-test-cwd")  # made inside the Pod's namespace only


async def test_a_missing_secret_holds_the_container_until_it_appears(k8s_emulator, kubelet) -> None:
    body = pods.pod(
        "patient", [pods.python("worker", PRINT_ENV, env=[from_secret("TOKEN", "later", "token")])]
    )
    await pods.create(k8s_emulator, body)

    def config_error(pod) -> bool:
        return pods.state(pod, "worker").get("waiting", {}).get("reason") == (
            "CreateContainerConfigError"
        )

    pod = await kubelet.wait_for_pod(pods.NS, "patient", config_error)
    assert pods.state(pod, "worker")["waiting"]["message"] == 'secret "later" not found'
    assert pods.phase(pod) == "Pending"
    with pytest.raises(KeyError):
        kubelet.logs(pods.NS, "patient", "worker")  # it never started

    await pods.create_secret(k8s_emulator, "later", {"token": "arrived"})
    pod = await kubelet.wait_for_pod(pods.NS, "patient", pods.terminal)
    assert pods.phase(pod) == "Succeeded"
    assert "TOKEN arrived" in kubelet.logs(pods.NS, "patient", "worker").splitlines()


async def test_a_missing_key_is_a_config_error_too(k8s_emulator, kubelet) -> None:
    await pods.create_secret(k8s_emulator, "partial", {"other": "x"})
    body = pods.pod(
        "keyless",
        [pods.python("worker", PRINT_ENV, env=[from_secret("TOKEN", "partial", "token")])],
    )
    await pods.create(k8s_emulator, body)

    pod = await kubelet.wait_for_pod(
        pods.NS,
        "keyless",
        lambda p: (
            "waiting" in pods.state(p, "worker")
            and pods.state(p, "worker")["waiting"]["reason"] == "CreateContainerConfigError"
        ),
    )
    assert pods.state(pod, "worker")["waiting"]["message"] == (
        "couldn't find key token in Secret default/partial"
    )


async def test_an_unknown_command_is_a_start_error(k8s_emulator, kubelet) -> None:
    body = pods.pod("typo", [{"name": "worker", "image": pods.IMAGE, "command": ["no-such-cmd"]}])
    await pods.create(k8s_emulator, body)
    pod = await kubelet.wait_for_pod(pods.NS, "typo", pods.terminal)

    terminated = pods.state(pod, "worker")["terminated"]
    assert (terminated["reason"], terminated["exitCode"]) == ("StartError", 128)
    assert "no-such-cmd" in terminated["message"]
    assert pods.phase(pod) == "Failed"


async def test_args_follow_the_command_and_restarts_follow_the_policy(
    k8s_emulator, kubelet
) -> None:
    """``OnFailure``: a failing container runs again (counting restarts) until it succeeds."""
    script = (
        "import os, sys\n"
        "n = len(os.listdir('/state'))\n"
        "open('/state/%d' % n, 'w').close()\n"
        "print(sys.argv[1:], n)\n"
        "sys.exit(0 if n == 2 else 1)\n"
    )
    container = {
        "name": "worker",
        "image": pods.IMAGE,
        "command": ["python3", "-c", script],
        "args": ["a", "b"],
        "volumeMounts": [{"name": "state", "mountPath": "/state"}],
    }
    body = pods.pod(
        "retry", [container], volumes=[{"name": "state", "emptyDir": {}}], restart="OnFailure"
    )
    await pods.create(k8s_emulator, body)
    pod = await kubelet.wait_for_pod(pods.NS, "retry", pods.terminal)

    status = objects.container_status(pod, "worker")
    assert (pods.phase(pod), status["restartCount"]) == ("Succeeded", 2)
    assert status["lastState"]["terminated"]["exitCode"] == 1
    assert kubelet.logs(pods.NS, "retry", "worker") == "['a', 'b'] 2\n"
    assert kubelet.logs(pods.NS, "retry", "worker", previous=True) == "['a', 'b'] 1\n"
