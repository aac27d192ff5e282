"""ConfigMaps (configMapKeyRef, envFrom configMapRef, configMap volumes) and
PersistentVolumeClaims (a claim's folder outlives its Pods): what the processes really see, and
how a missing ConfigMap or claim holds a Pod until it appears."""

from __future__ import annotations

import base64
import hashlib
import stat
from collections.abc import Mapping
from typing import Any

import pytest
from kubernetes_asyncio import client

from tests.integration.kubelet import pods
from tests.support.kube.apiserver import emulator as k8s_emulator_module

DEADLINE = 120.0  # seconds; these machines are loaded
BLOB = bytes(range(256)) * 3  # not UTF-8: only binaryData can hold it


async def create_config_map(
    k8s: k8s_emulator_module.K8sEmulator,
    name: str,
    data: Mapping[str, str],
    binary: Mapping[str, bytes] | None = None,
) -> None:
    """Create a ConfigMap through the API (``binaryData`` base64-encoded, as on the wire)."""
    body: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name},
        "data": dict(data),
    }
    if binary:
        body["binaryData"] = {k: base64.b64encode(v).decode() for k, v in binary.items()}
    await client.CoreV1Api(k8s.api_client).create_namespaced_config_map(pods.NS, body)


async def create_claim(k8s: k8s_emulator_module.K8sEmulator, name: str) -> None:
    """Create a PersistentVolumeClaim through the API, as a StatefulSet controller does."""
    body = {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": name},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
    }
    await client.CoreV1Api(k8s.api_client).create_namespaced_persistent_volume_claim(pods.NS, body)


def waiting_reason(pod: Mapping[str, Any] | None, container: str) -> str | None:
    return pods.state(pod, container).get("waiting", {}).get("reason")


def status_message(pod: Mapping[str, Any] | None) -> str:
    return str(((pod or {}).get("status") or {}).get("message") or "")


async def held_creating(kubelet: Any, name: str, missing: str) -> None:
    """Wait until the Pod's status says what is missing; it is Pending and its worker is
    waiting in ContainerCreating."""
    pod = await kubelet.wait_for_pod(
        pods.NS, name, lambda p: missing in status_message(p), timeout=DEADLINE
    )
    assert pods.phase(pod) == "Pending"
    assert waiting_reason(pod, "worker") == "ContainerCreating"


def claim_volume(name: str, claim: str, **extra: Any) -> dict[str, Any]:
    return {"name": name, "persistentVolumeClaim": {"claimName": claim, **extra}}


# -- environment ------------------------------------------------------------------------------

PRINT_ENV = """
import os
for name in sorted(os.environ):
    if name.startswith(("CFG_", "SEC_", "MODE", "LEVEL", "COLOR", "GREETING", "MISSING")):
        print(name, os.environ[name], flush=True)
"""


async def test_config_map_keys_and_env_from_reach_the_process(k8s_emulator, kubelet) -> None:
    await create_config_map(k8s_emulator, "settings", {"mode": "fast", "level": "3"})
    await create_config_map(
        k8s_emulator, "palette", {"COLOR": "blue", "MODE": "from-env-from", "LEVEL": "1"}
    )
    await pods.create_secret(k8s_emulator, "keys", {"token": "t0k"})
    env = [
        {"name": "MODE", "valueFrom": {"configMapKeyRef": {"name": "settings", "key": "mode"}}},
        {"name": "GREETING", "value": "level-$(LEVEL)-$(COLOR)"},
        {
            "name": "MISSING_KEY",
            "valueFrom": {
                "configMapKeyRef": {"name": "settings", "key": "absent", "optional": True}
            },
        },
        {
            "name": "MISSING_MAP",
            "valueFrom": {"configMapKeyRef": {"name": "nowhere", "key": "k", "optional": True}},
        },
    ]
    env_from = [
        {"configMapRef": {"name": "palette"}},
        {"configMapRef": {"name": "settings"}, "prefix": "CFG_"},
        {"secretRef": {"name": "keys"}, "prefix": "SEC_"},
        {"configMapRef": {"name": "nowhere", "optional": True}},
    ]
    body = pods.pod("configured", [pods.python("worker", PRINT_ENV, env=env, envFrom=env_from)])
    await pods.create(k8s_emulator, body)
    pod = await kubelet.wait_for_pod(pods.NS, "configured", pods.terminal, timeout=DEADLINE)

    assert pods.phase(pod) == "Succeeded", pod["status"]
    assert kubelet.logs(pods.NS, "configured", "worker").splitlines() == [
        "CFG_level 3",
        "CFG_mode fast",
        "COLOR blue",
        "GREETING level-1-blue",  # $(VAR) sees what envFrom set
        "LEVEL 1",
        "MODE fast",  # env wins over envFrom
        "SEC_token t0k",
    ]


async def test_a_missing_config_map_holds_the_container_until_it_appears(
    k8s_emulator, kubelet
) -> None:
    body = pods.pod(
        "awaiting",
        [pods.python("worker", PRINT_ENV, envFrom=[{"configMapRef": {"name": "later"}}])],
    )
    await pods.create(k8s_emulator, body)

    pod = await kubelet.wait_for_pod(
        pods.NS,
        "awaiting",
        lambda p: waiting_reason(p, "worker") == "CreateContainerConfigError",
        timeout=DEADLINE,
    )
    assert pods.state(pod, "worker")["waiting"]["message"] == 'configmap "later" not found'
    assert pods.phase(pod) == "Pending"
    with pytest.raises(KeyError):
        kubelet.logs(pods.NS, "awaiting", "worker")  # it never started

    await create_config_map(k8s_emulator, "later", {"COLOR": "arrived"})
    pod = await kubelet.wait_for_pod(pods.NS, "awaiting", pods.terminal, timeout=DEADLINE)
    assert pods.phase(pod) == "Succeeded", pod["status"]
    assert kubelet.logs(pods.NS, "awaiting", "worker") == "COLOR arrived\n"


async def test_a_missing_config_map_key_is_a_config_error_until_it_is_added(
    k8s_emulator, kubelet
) -> None:
    await create_config_map(k8s_emulator, "partial", {"other": "x"})
    env = [{"name": "MODE", "valueFrom": {"configMapKeyRef": {"name": "partial", "key": "mode"}}}]
    body = pods.pod("keyless-map", [pods.python("worker", PRINT_ENV, env=env)])
    await pods.create(k8s_emulator, body)

    pod = await kubelet.wait_for_pod(
        pods.NS,
        "keyless-map",
        lambda p: waiting_reason(p, "worker") == "CreateContainerConfigError",
        timeout=DEADLINE,
    )
    assert pods.state(pod, "worker")["waiting"]["message"] == (
        "couldn't find key mode in ConfigMap default/partial"
    )

    await client.CoreV1Api(k8s_emulator.api_client).patch_namespaced_config_map(
        "partial", pods.NS, {"data": {"mode": "late"}}
    )
    pod = await kubelet.wait_for_pod(pods.NS, "keyless-map", pods.terminal, timeout=DEADLINE)
    assert pods.phase(pod) == "Succeeded", pod["status"]
    assert kubelet.logs(pods.NS, "keyless-map", "worker") == "MODE late\n"


# -- configMap volumes ------------------------------------------------------------------------

READ_CONFIG = """
import hashlib, os, stat

def mode(path):
    return oct(stat.S_IMODE(os.stat(path).st_mode))

for root in ("/config", "/picked", "/maybe"):
    print(root, sorted(os.path.relpath(os.path.join(d, f), root)
                       for d, _, fs in os.walk(root) for f in fs))
print(open("/config/app.conf", encoding="utf-8").read())
print(mode("/config/app.conf"), mode("/config/blob.bin"))
print(hashlib.sha256(open("/config/blob.bin", "rb").read()).hexdigest())
print(open("/picked/conf/app.conf", encoding="utf-8").read())
print(mode("/picked/conf/app.conf"), mode("/picked/blob"))
print(open("/picked/blob", "rb").read() == open("/config/blob.bin", "rb").read())
for path in ("/config/new", "/picked/blob"):
    try:
        open(path, "w")
    except OSError as exc:
        print("read-only", path, exc.errno == 30)
"""


async def test_config_map_volumes_hold_data_and_binary_data_read_only(
    k8s_emulator, kubelet
) -> None:
    await create_config_map(
        k8s_emulator,
        "app",
        {"app.conf": "name=ünïcode\nsize=3", "unused": "u"},
        binary={"blob.bin": BLOB},
    )
    mounts = [
        {"name": "config", "mountPath": "/config"},
        {"name": "picked", "mountPath": "/picked"},
        {"name": "maybe", "mountPath": "/maybe"},
    ]
    volumes = [
        {"name": "config", "configMap": {"name": "app", "defaultMode": 0o640}},
        {
            "name": "picked",
            "configMap": {
                "name": "app",
                "items": [
                    {"key": "app.conf", "path": "conf/app.conf", "mode": 0o600},
                    {"key": "blob.bin", "path": "blob"},
                ],
            },
        },
        {"name": "maybe", "configMap": {"name": "not-there", "optional": True}},
    ]
    body = pods.pod(
        "config-files",
        [pods.python("reader", READ_CONFIG, volumeMounts=mounts)],
        volumes=volumes,
    )
    await pods.create(k8s_emulator, body)
    pod = await kubelet.wait_for_pod(pods.NS, "config-files", pods.terminal, timeout=DEADLINE)

    logs = kubelet.logs(pods.NS, "config-files", "reader")
    assert pods.phase(pod) == "Succeeded", logs
    assert logs.splitlines() == [
        "/config ['app.conf', 'blob.bin', 'unused']",
        "/picked ['blob', 'conf/app.conf']",
        "/maybe []",
        "name=ünïcode",
        "size=3",
        "0o640 0o640",
        hashlib.sha256(BLOB).hexdigest(),
        "name=ünïcode",
        "size=3",
        "0o600 0o644",
        "True",
        "read-only /config/new True",
        "read-only /picked/blob True",
    ]
    # The files are the Pod's: written under the kubelet's folder, modes as asked.
    folder = kubelet.volume_path(pods.NS, "config-files", "picked")
    assert stat.S_IMODE((folder / "conf" / "app.conf").stat().st_mode) == 0o600
    assert (folder / "blob").read_bytes() == BLOB


async def test_a_missing_config_map_volume_keeps_the_pod_creating(k8s_emulator, kubelet) -> None:
    body = pods.pod(
        "config-later",
        [pods.shell("worker", "cat /cfg/k", volumeMounts=[{"name": "c", "mountPath": "/cfg"}])],
        volumes=[{"name": "c", "configMap": {"name": "absent-config"}}],
    )
    await pods.create(k8s_emulator, body)
    await held_creating(kubelet, "config-later", 'configmap "absent-config" not found')

    await create_config_map(k8s_emulator, "absent-config", {"k": "v"})
    pod = await kubelet.wait_for_pod(pods.NS, "config-later", pods.terminal, timeout=DEADLINE)
    assert pods.phase(pod) == "Succeeded", pod["status"]
    assert kubelet.logs(pods.NS, "config-later", "worker") == "v"


# -- persistentVolumeClaim volumes ------------------------------------------------------------


async def test_a_claims_data_outlives_its_pod_for_the_replacement(k8s_emulator, kubelet) -> None:
    """A StatefulSet's Pod ``web-0`` writes to its claim, is deleted, and the replacement
    ``web-0`` (another user, same fsGroup) finds the data and can add to it."""
    await create_claim(k8s_emulator, "data-web-0")
    security = {"runAsUser": 4321, "fsGroup": 4323}
    first = pods.shell(
        "app",
        "mkdir /var/lib/app/logs && echo first > /var/lib/app/logs/note && "
        "ls -ld /var/lib/app | cut -c1-10",
        volumeMounts=[{"name": "data", "mountPath": "/var/lib/app"}],
    )
    body = pods.pod(
        "web-0", [first], volumes=[claim_volume("data", "data-web-0")], security=security
    )
    await pods.create(k8s_emulator, body)
    pod = await kubelet.wait_for_pod(pods.NS, "web-0", pods.terminal, timeout=DEADLINE)
    assert pods.phase(pod) == "Succeeded", pod["status"]
    assert kubelet.logs(pods.NS, "web-0", "app") == "drwxrwsrwx\n"
    first_uid = pod["metadata"]["uid"]

    await pods.delete(k8s_emulator, "web-0")
    await kubelet.wait_for_pod(pods.NS, "web-0", lambda p: p is None, timeout=DEADLINE)
    claim = kubelet.claim_path(pods.NS, "data-web-0")
    note = claim / "logs" / "note"
    assert note.read_text() == "first\n"  # still on this machine, the Pod gone
    written = note.stat()
    assert (written.st_uid, written.st_gid) == (4321, 4323)

    second = pods.shell(
        "app",
        "echo second >> /var/lib/app/logs/note && cat /var/lib/app/logs/note && id -u",
        volumeMounts=[{"name": "data", "mountPath": "/var/lib/app"}],
    )
    body = pods.pod(
        "web-0",
        [second],
        volumes=[claim_volume("data", "data-web-0")],
        security={**security, "runAsUser": 4400},
    )
    await pods.create(k8s_emulator, body)
    pod = await kubelet.wait_for_pod(
        pods.NS,
        "web-0",
        lambda p: p is not None and p["metadata"]["uid"] != first_uid and pods.terminal(p),
        timeout=DEADLINE,
    )
    logs = kubelet.logs(pods.NS, "web-0", "app")
    assert pods.phase(pod) == "Succeeded", logs
    # The fsGroup gave the first Pod's file group read/write, so the other user could append.
    assert logs == "first\nsecond\n4400\n"
    assert note.read_text() == "first\nsecond\n"
    assert stat.S_IMODE(note.stat().st_mode) & 0o060 == 0o060
    assert kubelet.volume_path(pods.NS, "web-0", "data") == claim


async def test_a_missing_claim_keeps_the_pod_creating_then_mounts_it_read_only(
    k8s_emulator, kubelet
) -> None:
    script = """
import os
print(sorted(os.listdir("/data")))
try:
    open("/data/new", "w")
except OSError as exc:
    print("read-only", exc.errno == 30)
"""
    body = pods.pod(
        "claimant",
        [pods.python("worker", script, volumeMounts=[{"name": "d", "mountPath": "/data"}])],
        volumes=[claim_volume("d", "later-claim", readOnly=True)],
    )
    await pods.create(k8s_emulator, body)
    await held_creating(kubelet, "claimant", 'persistentvolumeclaims "later-claim" not found')
    assert not pods.exists(kubelet.claim_path(pods.NS, "later-claim"))

    await create_claim(k8s_emulator, "later-claim")
    pod = await kubelet.wait_for_pod(pods.NS, "claimant", pods.terminal, timeout=DEADLINE)
    logs = kubelet.logs(pods.NS, "claimant", "worker")
    assert pods.phase(pod) == "Succeeded", logs
    assert logs.splitlines() == ["[]", "read-only True"]
    assert list(kubelet.claim_path(pods.NS, "later-claim").iterdir()) == []
