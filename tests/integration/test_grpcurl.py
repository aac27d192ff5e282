"""Operators use the real grpcurl: reflection lists the services, health answers SERVING."""

from __future__ import annotations

import asyncio
import json

from tests.support import binaries, store_server


async def _grpcurl(*args: str) -> tuple[int, str, str]:
    exe = binaries.require("grpcurl")
    proc = await asyncio.create_subprocess_exec(
        exe, *args, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    out, err = await asyncio.wait_for(proc.communicate(), 30)
    return proc.returncode or 0, out.decode(), err.decode()


async def test_grpcurl_lists_store_services_through_reflection(
    store_server: store_server.StoreServer,
) -> None:
    """`grpcurl -plaintext ADDR list` works with no proto files (server reflection)."""
    code, out, err = await _grpcurl("-plaintext", store_server.addr, "list")
    assert code == 0, err
    services = set(out.split())
    assert "agentihooks.swarm.v2.CheckpointStore" in services
    assert "grpc.health.v1.Health" in services
    code, out, err = await _grpcurl(
        "-plaintext", store_server.addr, "describe", "agentihooks.swarm.v2.CheckpointStore"
    )
    assert code == 0, err
    for rpc_name in (
        "PutObject",
        "CommitCheckpoint",
        "ListCheckpoints",
        "GetRecord",
        "Verify",
        "FetchObject",
    ):
        assert rpc_name in out


async def test_grpcurl_health_check_reports_serving(store_server: store_server.StoreServer) -> None:
    """Every server serves grpc.health.v1.Health."""
    code, out, err = await _grpcurl(
        "-plaintext",
        "-d",
        '{"service": "agentihooks.swarm.v2.CheckpointStore"}',
        store_server.addr,
        "grpc.health.v1.Health/Check",
    )
    assert code == 0, err
    assert json.loads(out) == {"status": "SERVING"}


async def test_grpcurl_call_without_grant_is_refused(
    store_server: store_server.StoreServer,
) -> None:
    """Every store call needs a grant: without one grpcurl shows Unauthenticated."""
    code, _out, err = await _grpcurl(
        "-plaintext",
        "-d",
        '{"checkpoint_id": "ckpt-7"}',
        store_server.addr,
        "agentihooks.swarm.v2.CheckpointStore/Verify",
    )
    assert code != 0
    assert "Unauthenticated" in err and "credential missing" in err
