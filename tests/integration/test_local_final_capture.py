"""The sidecar's final capture on the local runtime: worker processes on this machine.

Issue 21: "When the worker container exits or is killed ... the sidecar captures everything
complete that the worker wrote, reports it as final, and only then ends ... Same on the local
runtime." The controller runs as its own process (`agentihooks-controller`, local runtime, a
local checkpoint folder, real Redis); each worker is `agentihooks-restorer worker` (the sidecar
beside the entry point, which execs the harness). The harness is
`tests/support/record_writer.py`: it writes its first turn, waits for the test, writes a burst
of records and says so in its witness folder; the test then kills it with SIGKILL at once, long
before the next periodic capture is due.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import pathlib
import shlex
import signal
import sys
from collections.abc import AsyncIterator

import grpc
import pytest
import redis.asyncio as aioredis
from agentihooks.swarm.v2 import recovery_pb2 as pb
from agentihooks.swarm.v2 import recovery_pb2_grpc as pb_grpc

from services.common import tls, tls_settings
from services.controller import deciding
from services.controller.state import keys, reading
from tests.support import certificates, git_repos, ports
from tests.support import controller_server as cs
from tests.support import redis_server as redis_servers

pytestmark = pytest.mark.slow

SWARM = "local"
FIRST, SECOND = f"{SWARM}.eng-1.1", f"{SWARM}.eng-1.2"
WAIT_S = 180.0
BURST = 12
CAPTURE_INTERVAL_S = "30"
"""Long: the records of the burst are written after the last periodic capture and the worker
is killed before the next one is due, so only the final capture can archive them."""
WRITER = pathlib.Path(__file__).resolve().parents[1] / "support" / "record_writer.py"


class Local:
    """A controller process on the local runtime and what the test looks at."""

    def __init__(self, root: pathlib.Path, redis: aioredis.Redis, stub: pb_grpc.RecoveryStub):
        self.root = root
        self.redis = redis
        self.stub = stub
        self.witness = root / "witness"
        self.transport = "plaintext"

    def attempt(self, execution: str) -> pathlib.Path:
        return self.root / "workers" / SWARM / execution


def _bin(root: pathlib.Path, witness: pathlib.Path) -> pathlib.Path:
    bin_dir = root / "bin"
    bin_dir.mkdir()
    settings = {
        "WRITER_WITNESS_DIR": str(witness),
        "WRITER_BURST_FILE": str(root / "burst"),
        "WRITER_BURST": str(BURST),
    }
    assigned = " ".join(f"{k}={shlex.quote(v)}" for k, v in settings.items())
    claude = bin_dir / "claude"
    claude.write_text(
        f"#!/bin/sh\n{assigned} exec {shlex.quote(sys.executable)} -P"
        f' {shlex.quote(str(WRITER))} "$@"\n'
    )
    claude.chmod(0o755)
    return bin_dir


@pytest.fixture(params=["plaintext", "mutual_tls"])
async def local(
    request: pytest.FixtureRequest, tmp_path: pathlib.Path, redis_server: redis_servers.RedisServer
) -> AsyncIterator[Local]:
    """The controller and its workers, plaintext or with mutual TLS on every connection (issue
    24: the controller requires a client certificate; the workers get its TLS files, so the
    launch record, the restore, every capture report and the final one go over mutual TLS)."""
    flush = aioredis.Redis.from_url(redis_server.url)
    await flush.flushall()
    await flush.aclose()
    witness = tmp_path / "witness"
    witness.mkdir()
    port, http = ports.free_port(), ports.free_port()
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("AGENTIHOOKS_")},
        "PATH": f"{_bin(tmp_path, witness)}:{os.environ.get('PATH', '')}",
        "AGENTIHOOKS_REDIS_URL": redis_server.url,
        "AGENTIHOOKS_GRANT_KEY": cs.GRANT_KEY,
        "AGENTIHOOKS_OPERATOR_TOKEN": cs.OPERATOR_TOKEN,
        "AGENTIHOOKS_WORKER_IMAGE": cs.IMAGE,
        "AGENTIHOOKS_RUNTIME": "local",
        "AGENTIHOOKS_WORKDIR": str(tmp_path / "workers"),
        "AGENTIHOOKS_CHECKPOINT_ROOT": str(tmp_path / "checkpoints"),
        "AGENTIHOOKS_CAPTURE_INTERVAL_S": CAPTURE_INTERVAL_S,
        "AGENTIHOOKS_PASS_INTERVAL_MS": "300",
    }
    tls_env: dict[str, str] = {}
    if request.param == "mutual_tls":
        ca = certificates.Authority(tmp_path / "pki")
        tls_env = certificates.tls_env(ca, ca.issue("controller"), client_ca=ca)
        env.update(tls_env)
    (tmp_path / "checkpoints").mkdir()
    log = (tmp_path / "controller.log").open("wb")
    controller = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "services.controller.main",
        "--listen",
        f"127.0.0.1:{port}",
        "--http",
        f"127.0.0.1:{http}",
        env=env,
        stdout=log,
        stderr=log,
    )
    conf = tls_settings.load(tls_env)
    channel = tls.channel(f"localhost:{port}", conf)
    client = aioredis.Redis.from_url(redis_server.url)
    try:
        found = Local(tmp_path, client, pb_grpc.RecoveryStub(channel))
        found.transport = request.param
        yield found
    finally:
        controller.send_signal(signal.SIGTERM)
        try:
            async with asyncio.timeout(60):
                await controller.wait()
        except TimeoutError:
            controller.kill()
            await controller.wait()
        log.close()
        for folder in (tmp_path / "workers" / SWARM).glob("*"):
            _kill_attempt(folder)
        await channel.close()
        await client.aclose()


def _kill_attempt(folder: pathlib.Path) -> None:
    """End whatever of an attempt still runs (its process group: the worker and sidecar)."""
    try:
        state = json.loads((folder / "attempt.json").read_text())
    except (OSError, ValueError):
        return
    group = state.get("group")
    if group:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(int(group), signal.SIGKILL)


def _document(root: pathlib.Path) -> str:
    project = git_repos.project(root / "project")
    return json.dumps(
        {
            "swarm": SWARM,
            "worker_image": cs.IMAGE,
            "harness": "claude_code",
            "command": ["claude", "-p", "Write the progress notes"],
            "restore_automation": True,
            "projects": [{"name": "app", "repository": project.url}],
            "accounts": [{"name": "acct-a", "slots": 2}],
            "seats": [{"seat": "eng-1", "task": {"text": "Write the progress notes"}}],
        }
    )


async def test_records_written_after_the_last_periodic_capture_survive_a_killed_worker(
    local: Local,
) -> None:
    """Issue 21: "When the worker container exits or is killed ... the sidecar captures
    everything complete that the worker wrote, reports it as final ... The fence then states
    its lost tail truthfully: none after a final capture ... Same on the local runtime." The
    worker's first turn reaches a periodic capture; it then writes a burst of records and is
    killed (SIGKILL) at once, its sidecar alive; the fence names no lost tail after a
    watermark that counts the burst, and the native replacement finds every record."""

    document = _document(local.root)

    async def applied() -> None:
        try:
            await local.stub.ApplySwarm(
                pb.ApplySwarmRequest(document=document), metadata=cs.OPERATOR
            )
        except grpc.aio.AioRpcError as error:  # the controller is still starting
            raise AssertionError(error.code()) from None

    await ports.eventually(applied, timeout=WAIT_S)

    async def captured() -> int:
        execution = await reading.execution(local.redis, SWARM, FIRST)
        assert execution is not None and deciding.holds_conversation(execution.archive_watermark), (
            execution
        )
        return int(execution.archive_watermark or 0)

    periodic = await ports.eventually(captured, timeout=WAIT_S)
    (local.root / "burst").touch()

    async def burst_written() -> int:
        done = local.witness / "burst-1"
        assert done.exists()
        return int(done.read_text())

    written_count = await ports.eventually(burst_written, timeout=WAIT_S)
    os.kill(int((local.witness / "pid-1").read_text()), signal.SIGKILL)
    written = (local.witness / "written-1.jsonl").read_bytes().splitlines(keepends=True)
    assert len(written) == written_count > periodic

    async def fenced() -> dict[str, object]:
        fence = await reading.fence(local.redis, SWARM, FIRST)
        assert fence is not None
        return fence.to_json()

    fence = await ports.eventually(fenced, timeout=WAIT_S)
    sidecar_log = (local.attempt(FIRST) / "sidecar.log").read_text()
    assert f'"transport": "{local.transport}"' in sidecar_log, sidecar_log[-3000:]
    assert fence["lost_tail"] == {"after_watermark": len(written), "length": "none"}, (
        fence,
        sidecar_log[-3000:],
    )
    raw = await local.redis.xrange(keys.events(SWARM))
    [detail] = [
        json.loads(f[b"detail"])
        for _, f in raw
        if f[b"kind"] == b"fence" and f[b"execution_id"] == FIRST.encode()
    ]
    assert detail["lost_tail"] == {"after_watermark": len(written), "length": "none"}

    async def resumed() -> bytes:
        restored = local.witness / "restored-2.jsonl"
        assert restored.exists()
        return restored.read_bytes()

    restored = await ports.eventually(resumed, timeout=WAIT_S)
    assert restored.splitlines(keepends=True) == written
    decision = await reading.decision(local.redis, SWARM, FIRST)
    assert decision is not None and decision.replacement_execution_id == SECOND
    assert decision.directive is not None and decision.directive.recovery.value == "native"
