"""`agentihooks-restorer` as an OS process: `serve`, `restore` and `capture`.

DESIGN.md §6: each server takes `--listen HOST:PORT`, logs one JSON object per line to stderr
and stops cleanly on SIGTERM. `restore` prints its result as JSON; `capture` its checkpoint.
"""

from __future__ import annotations

import asyncio
import json
import os
import pathlib
import signal
import sys

import grpc
import pytest
from agentihooks.swarm.v2 import restorer_pb2, restorer_pb2_grpc

from services.common import directives, settings
from tests.integration.restorer import sidecar_support as kit
from tests.support import ports

C = directives.Continuity
REPO = pathlib.Path(__file__).resolve().parents[3]
pytestmark = pytest.mark.usefixtures("usual_umask")


def _env(extra: dict[str, str]) -> dict[str, str]:
    return {
        "PATH": os.environ["PATH"],
        "HOME": os.environ.get("HOME", "/root"),
        "PYTHONPATH": f"{REPO}{os.pathsep}{REPO / 'services' / 'proto'}",
        **{f"AGENTIHOOKS_{k}": v for k, v in extra.items()},
    }


async def _run(*args: str, env: dict[str, str]) -> tuple[int, str, str]:
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "services.restorer.main",
        *args,
        env=env,
        cwd=REPO,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(), 120)
    return process.returncode or 0, out.decode(), err.decode()


async def _prepared(tmp_path: pathlib.Path) -> tuple[kit.Scene, dict[str, str]]:
    scene = kit.make_scene(tmp_path)
    root = tmp_path / "checkpoints"
    captured = await kit.capture(
        scene, settings.load_storage({"AGENTIHOOKS_CHECKPOINT_ROOT": str(root)})
    )
    launch = scene.launch(kit.directive_for(captured, C.NATIVE))
    return scene, {
        "LAUNCH_RECORD": scene.write_launch(launch),
        "CHECKPOINT_ROOT": str(root),
        "ATTEMPT_DIR": str(scene.attempt_dir),
        "HARNESS_HOME": str(scene.home),
    }


async def test_serve_restores_over_grpc_logs_json_and_stops_on_sigterm(
    tmp_path: pathlib.Path,
) -> None:
    """`serve --listen`: the Restorer service answers on loopback, every stderr line is one
    JSON object, and SIGTERM stops it with exit status 0."""
    scene, extra = await _prepared(tmp_path)
    port = ports.free_port()
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "services.restorer.main",
        "serve",
        "--listen",
        f"127.0.0.1:{port}",
        "--capture-interval",
        "0",
        env=_env(extra),
        cwd=REPO,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            await asyncio.wait_for(channel.channel_ready(), 30)
            stub = restorer_pb2_grpc.RestorerStub(channel)
            events = [
                e
                async for e in stub.Restore(
                    restorer_pb2.RestoreRequest(worktree=str(scene.worktree))
                )
            ]
        assert events[-1].HasField("ready")
    finally:
        process.send_signal(signal.SIGTERM)
        _, err = await asyncio.wait_for(process.communicate(), 30)
    assert process.returncode == 0, err
    lines = [json.loads(line) for line in err.decode().splitlines()]
    names = [line.get("event") for line in lines]
    assert names[0] == "listening" and names[-1] == "stopped"
    assert "restore_ready" in names
    assert kit.CONVERSATION_SECRET not in err.decode()


async def test_restore_prints_its_result_as_json(tmp_path: pathlib.Path) -> None:
    """`restore --worktree`: one restore in this process, its result as one JSON object."""
    scene, extra = await _prepared(tmp_path)
    code, out, err = await _run("restore", "--worktree", str(scene.worktree), env=_env(extra))
    assert code == 0, err
    result = json.loads(out)
    assert result["state"] == "ready" and result["recovery"] == "native"
    assert result["command"][1:3] == ["--resume", kit.SESSION_ID]


async def test_restore_prints_a_refusal_and_exits_non_zero(tmp_path: pathlib.Path) -> None:
    """A refused one-shot restore prints the reason and exits non-zero."""
    scene, extra = await _prepared(tmp_path)
    del extra["CHECKPOINT_ROOT"]
    code, out, _ = await _run("restore", "--worktree", str(scene.worktree), env=_env(extra))
    assert code == 3
    assert json.loads(out) == {
        "state": "refused",
        "reason": "no checkpoint store is configured for this worker",
    }


async def test_capture_prints_the_checkpoint(tmp_path: pathlib.Path) -> None:
    """`capture --worktree`: one capture now, printed as JSON."""
    scene = kit.make_scene(tmp_path)
    fenced = scene.launch(directives.FRESH, scope=kit.SCOPE)
    extra = {
        "LAUNCH_RECORD": scene.write_launch(fenced, "fenced.json"),
        "CHECKPOINT_ROOT": str(tmp_path / "checkpoints"),
        "HARNESS_HOME": str(scene.fenced_home),
    }
    code, out, err = await _run(
        "capture", "--worktree", str(scene.project.worktree), env=_env(extra)
    )
    assert code == 0, err
    result = json.loads(out)
    assert result["state"] == "captured" and result["continuity"] == "native"
    assert result["native_session_id"] == kit.SESSION_ID and result["watermark"] == 3
