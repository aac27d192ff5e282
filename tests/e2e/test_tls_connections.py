"""Every connection of a worker Pod that really runs is TLS, and plaintext is refused.

Issue 24: "TLS everywhere, mutual TLS where a service calls a service ... the worker Pod template
mounts what the sidecar needs." The cluster (`tests.e2e.kube_cluster`) runs the controller with
TLS, the store with mutual TLS, and worker Pods from the shipped template, which mounts the
workers' certificate Secret for the worker and its sidecar.
"""

from __future__ import annotations

import json

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from services.common import tls, tls_settings
from services.controller import deciding
from services.controller.pods import classifying, templates
from services.controller.state import reading
from tests.e2e.kube_cluster import (
    FIRST,
    SWARM,
    WAIT_S,
    Cluster,
    _document,
    _pod_exists,
    cluster,
)
from tests.support import certificates, ports

pytestmark = pytest.mark.slow
__all__ = ["cluster"]


async def _health(target: str, conf: tls_settings.TLSSettings) -> str:
    """The server's overall health status through a channel of `conf`, or the error's code."""
    async with tls.channel(target, conf) as channel:
        try:
            answer = await health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(), timeout=5
            )
        except grpc.aio.AioRpcError as exc:
            return str(exc.code().name)
    return str(health_pb2.HealthCheckResponse.ServingStatus.Name(answer.status))


@pytest.mark.worker_failure("none")
async def test_a_worker_pod_talks_tls_on_every_connection(cluster: Cluster) -> None:
    """The worker Pod mounts the workers' certificate read-only for both containers; its sidecar
    serves TLS to the entry point (which restored through it), fetches its launch record from
    the controller, uploads a checkpoint to the store over mutual TLS and reports it to the
    controller. The controller and the store answer no plaintext client, and the store no TLS
    client without a certificate of the CA."""
    assert cluster.tls is not None
    await cluster.ctl.apply(_document(cluster))
    pod = await ports.eventually(_pod_exists(cluster, FIRST), timeout=WAIT_S)
    volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
    assert volumes["tls"]["secret"]["secretName"] == templates.WORKER_TLS_SECRET
    for c in (*pod["spec"]["initContainers"], *pod["spec"]["containers"]):
        mounts = {m["name"]: m for m in c["volumeMounts"]}
        assert mounts["tls"]["readOnly"] is True, c["name"]
        env = {e["name"]: e.get("value") for e in c["env"]}
        assert env[tls_settings.CA_FILE] == f"{templates.TLS_FOLDER}/ca.crt", c["name"]

    # A checkpoint of the conversation went to the store (mutual TLS) and its report reached
    # the controller (TLS): the controller holds its watermark.
    async def captured() -> None:
        execution = await reading.execution(cluster.ctl.redis, SWARM, FIRST)
        assert execution is not None and deciding.holds_conversation(execution.archive_watermark)

    await ports.eventually(captured, timeout=WAIT_S)
    sidecar = cluster.logs(FIRST, classifying.RESTORER_CONTAINER)
    events = [json.loads(x).get("event") for x in sidecar.splitlines() if x.startswith("{")]
    assert "tls_files_loaded" in events and "restore_ready" in events, sidecar[-3000:]
    assert "store_failed" not in events and "capture_failed" not in events, sidecar[-3000:]
    worker = cluster.logs(FIRST, classifying.WORKER_CONTAINER)
    assert '"step": "continuation"' in worker, worker[-3000:]  # the entry dialed its sidecar

    # The servers answer TLS clients of the CA only.
    ca_only = tls_settings.TLSSettings(ca_file=cluster.tls.authority.bundle)
    store = _store_addr(pod)
    assert await _health(cluster.ctl.addr, ca_only) == "SERVING"
    assert await _health(cluster.ctl.addr, tls_settings.PLAINTEXT) == "UNAVAILABLE"
    assert await _health(store, tls_settings.PLAINTEXT) == "UNAVAILABLE"
    assert await _health(store, ca_only) == "UNAVAILABLE"  # no client certificate
    assert await _health(store, cluster.tls.store) == "SERVING"
    other = certificates.Authority(cluster.image / "other-ca", "other-ca")
    stranger = other.issue("stranger")
    foreign = tls_settings.load(certificates.tls_env(cluster.tls.authority, stranger))
    assert await _health(store, foreign) == "UNAVAILABLE"  # a certificate of another CA


def _store_addr(pod: dict[str, object]) -> str:
    """The store address the controller gave the worker Pod."""
    spec = pod["spec"]
    assert isinstance(spec, dict)
    [worker] = [c for c in spec["containers"] if c["name"] == classifying.WORKER_CONTAINER]
    values = {e["name"]: e.get("value") for e in worker["env"]}
    return str(values["AGENTIHOOKS_STORE_ADDR"])
