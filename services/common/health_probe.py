"""An exec probe for a gRPC server that serves (mutual) TLS.

The kubelet's built-in ``grpc`` probe dials plaintext only, so a Pod whose server serves TLS
runs this instead: ``python3 -m services.common.health_probe ADDRESS [SERVICE]`` asks the
server's ``grpc.health.v1.Health`` with the container's own TLS settings (its CA bundle, and its
certificate as the client certificate a server requiring one asks for) and exits 0 when the
service is SERVING, 1 otherwise (NOT_SERVING, no answer, a refused handshake). It prints one
line saying which. deploy/k8s/checkpoint-store.yaml uses it for the store's readiness, which
goes NOT_SERVING while Redis does not answer.
"""

from __future__ import annotations

import argparse
import asyncio
import sys

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from services.common import tls, tls_settings

TIMEOUT_S = 3.0


async def check(address: str, service: str, timeout: float = TIMEOUT_S) -> str:
    """The serving status `address` reports for `service` ("" is the server as a whole), by
    its enum name, or ``UNAVAILABLE: …`` when it did not answer."""
    async with tls.channel(address, tls_settings.from_environment()) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        try:
            answer = await stub.Check(
                health_pb2.HealthCheckRequest(service=service), timeout=timeout
            )
        except grpc.aio.AioRpcError as exc:
            return f"{exc.code().name}: {exc.details()}"
    return str(health_pb2.HealthCheckResponse.ServingStatus.Name(answer.status))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python3 -m services.common.health_probe")
    parser.add_argument("address", help="HOST:PORT of the gRPC server (a name its certificate has)")
    parser.add_argument("service", nargs="?", default="", help="the service to ask about")
    args = parser.parse_args(argv)
    try:
        status = asyncio.run(check(args.address, args.service))
    except (OSError, tls_settings.TLSError) as exc:
        status = f"cannot read the TLS files: {exc}"
    print(f"{args.address} {args.service or '(server)'}: {status}")
    raise SystemExit(0 if status == "SERVING" else 1)


if __name__ == "__main__":
    main(sys.argv[1:])
