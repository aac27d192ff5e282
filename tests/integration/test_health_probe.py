"""The checkpoint store's readiness probe over mutual TLS, run as deploy/k8s/ runs it.

deploy/k8s/checkpoint-store.yaml cannot use the kubelet's `grpc` probe (it dials plaintext):
its exec probe runs `python3 -m services.common.health_probe localhost:50052 SERVICE` in the
store's container, with the container's TLS settings. Here that command runs against a real
gRPC server serving mutual TLS with a certificate issued as certificates/ issues the store's:
SERVING exits 0, NOT_SERVING (Redis unavailable) exits 1, and so does a probe that presents no
client certificate or trusts another CA.
"""

from __future__ import annotations

import asyncio
import os
import pathlib
import sys
from collections.abc import AsyncIterator, Mapping

import pytest
import yaml
from grpc_health.v1 import health

from services.common import rpc, tls_settings
from tests.support import certificates
from tests.unit import test_deploy_manifests as k8s

SERVICE = "agentihooks.swarm.v2.CheckpointStore"


def _probe_command() -> list[str]:
    """The store's readiness command, from the manifest."""
    store = (k8s.DEPLOY / "checkpoint-store.yaml").read_text()
    deployment = next(d for d in yaml.safe_load_all(store) if d["kind"] == "Deployment")
    command: list[str] = k8s.container(deployment, "store")["readinessProbe"]["exec"]["command"]
    return command


async def _run(command: list[str], env: Mapping[str, str]) -> tuple[int, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        *command[1:],
        env={**{k: v for k, v in os.environ.items() if not k.startswith("AGENTIHOOKS_")}, **env},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    out, _ = await asyncio.wait_for(proc.communicate(), timeout=60)
    assert proc.returncode is not None
    return proc.returncode, out.decode()


@pytest.fixture
async def store(
    tmp_path: pathlib.Path,
) -> AsyncIterator[tuple[int, health.aio.HealthServicer, dict[str, str], certificates.Authority]]:
    """A gRPC server serving the store's health over mutual TLS; its port, its health, the
    store container's TLS settings and the CA."""
    authority = certificates.Authority(tmp_path / "ca", "agentihooks-ca")
    leaf = authority.issue("agentihooks-checkpoint-store")
    env = certificates.tls_env(authority, leaf, client_ca=authority)
    servicer = health.aio.HealthServicer()
    server, port = await rpc.start_server(
        "127.0.0.1:0",
        [],
        [SERVICE],
        health_servicer=servicer,
        tls_conf=tls_settings.load(env),
    )
    try:
        yield port, servicer, env, authority
    finally:
        await server.stop(None)


async def test_the_store_readiness_probe_asks_its_health_over_mutual_tls(
    store: tuple[int, health.aio.HealthServicer, dict[str, str], certificates.Authority],
    tmp_path: pathlib.Path,
) -> None:
    port, servicer, env, _ = store
    command = _probe_command()
    assert command[:3] == ["python3", "-m", "services.common.health_probe"]
    assert command[3] == "localhost:50052" and command[4] == SERVICE
    command[3] = f"localhost:{port}"

    code, out = await _run(command, env)
    assert code == 0 and "SERVING" in out, out

    await rpc.set_serving(servicer, [SERVICE], False)  # as the store does when Redis is gone
    code, out = await _run(command, env)
    assert code == 1 and "NOT_SERVING" in out, out
    await rpc.set_serving(servicer, [SERVICE], True)

    # Without its certificate the store refuses the probe's handshake; another CA is refused.
    no_client = {tls_settings.CA_FILE: env[tls_settings.CA_FILE]}
    code, out = await _run(command, no_client)
    assert code == 1 and "UNAVAILABLE" in out, out
    other = certificates.Authority(tmp_path / "other", "other-ca")
    code, out = await _run(command, {**env, tls_settings.CA_FILE: str(other.bundle)})
    assert code == 1 and "UNAVAILABLE" in out, out
