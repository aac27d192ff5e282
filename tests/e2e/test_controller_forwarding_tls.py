"""Controller replicas forward writes to the swarm's holder over TLS, expecting its peer name.

Issue 24: "every client ... dials TLS (... forwarding between replicas)". Replicas advertise the
addresses they listen on (Pod IPs in a cluster), which no issued certificate names; each
expects AGENTIHOOKS_TLS_PEER_NAME, the Service's name, on the other's certificate, as
deploy/k8s/controller.yaml sets it. Here the replicas' certificate names that Service name only,
so a forwarded call succeeds only by that name: real controller processes, real Redis, the
Kubernetes API emulator.
"""

from __future__ import annotations

import pathlib
import ssl

import aiohttp
import grpc
import pytest
import redis.asyncio as aioredis
from agentihooks.swarm.v2 import recovery_pb2 as pb
from agentihooks.swarm.v2 import recovery_pb2_grpc as pb_grpc

from services.common import tls, tls_settings
from services.controller.state import keys, reading, records
from tests.e2e import test_redis_outage as outage
from tests.e2e.test_controller_sharing import pause_through_the_other, redis
from tests.support import certificates, ports
from tests.support import controller_server as cs
from tests.support.kube.apiserver import emulator as k8s_emulator
from tests.support.redis_server import RestartableRedis

pytestmark = pytest.mark.slow
__all__ = ["redis"]

WAIT_S = outage.WAIT_S
SERVICE = "agentihooks-controller.agentihooks.svc"


async def test_a_forwarded_write_reaches_the_holder_over_tls_by_its_peer_name(
    tmp_path: pathlib.Path, redis: RestartableRedis
) -> None:
    """Two replicas serving TLS with a certificate that names only the Service. A pause sent
    to the replica without the lease is forwarded to the holder over gRPC with TLS, and a
    restore decision over HTTPS; each is applied once, by the holder. Plaintext reaches neither
    replica."""
    swarm = "forwarded"
    authority = certificates.Authority(tmp_path / "ca", "agentihooks-ca")
    leaf = authority.issue("agentihooks-controller", hosts=(SERVICE,))
    tls_env = {**certificates.tls_env(authority, leaf), tls_settings.PEER_NAME: SERVICE}
    conf = tls_settings.load(tls_env)
    client = aioredis.Redis.from_url(redis.url)
    try:
        async with k8s_emulator.serving() as emulator, outage.controllers() as running:
            env = {**outage.controller_env(tmp_path, emulator, redis.url), **tls_env}
            for _ in range(2):
                ctl = await outage.start_controller(env)
                running.append(ctl)
                assert ctl.events("listening")[0]["transport"] == "tls"
                # Plaintext gets no answer; the test then dials as a replica does: TLS,
                # expecting the peer name.
                plain = tls.channel(ctl.grpc_addr, tls_settings.PLAINTEXT)
                with pytest.raises(grpc.aio.AioRpcError) as refused:
                    await pb_grpc.RecoveryStub(plain).GetSwarmStatus(
                        pb.GetSwarmStatusRequest(swarm=swarm), metadata=cs.OPERATOR, timeout=5
                    )
                await plain.close()
                assert refused.value.code() == grpc.StatusCode.UNAVAILABLE
                await ctl.channel.close()
                ctl.channel = tls.channel(ctl.grpc_addr, conf, peer=True)
                ctl.stub = pb_grpc.RecoveryStub(ctl.channel)
            other = await pause_through_the_other(running, client, swarm)

            lost = keys.execution_id(swarm, "eng-1", 1)
            outage.fail_pod(emulator, swarm, lost)

            async def awaiting() -> None:
                decision = await reading.decision(client, swarm, lost)
                assert decision is not None
                assert decision.state is records.DecisionState.RECOVERY_PENDING

            await ports.eventually(awaiting, timeout=WAIT_S)
            https = other.http.replace("http://", "https://")
            context = ssl.create_default_context(cafile=authority.bundle)
            async with aiohttp.ClientSession() as http:
                async with http.post(
                    f"{https}/v1/executions/{lost}/restore-decision",
                    json={"choice": "fresh"},
                    headers={"Authorization": f"Bearer {cs.OPERATOR_TOKEN}"},
                    ssl=context,
                    server_hostname=SERVICE,
                ) as answer:
                    body = await answer.json()
                    assert answer.status == 200, body
                with pytest.raises(aiohttp.ClientError):
                    await http.get(f"{https.replace('https://', 'http://')}/healthz")
            assert body["repeated"] is False, body
            await ports.eventually(
                lambda: outage.launched(client, swarm, ("eng-1",), 2), timeout=WAIT_S
            )
            assert outage.pods_of(emulator, swarm) == [keys.execution_id(swarm, "eng-1", 2)]
            for ctl in running:
                # No traceback; the only lines that are not JSON are gRPC's own about the
                # plaintext attempts refused above.
                text = b"".join(ctl.raw).decode(errors="replace")
                assert "Traceback" not in text, text[-3000:]
                raw = [line["raw"] for line in ctl.lines if "raw" in line]
                assert all("Handshake failed" in line for line in raw), raw
    finally:
        await client.aclose()
