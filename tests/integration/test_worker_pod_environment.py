"""The restorer container of a controller-built Pod starts with exactly its spec's environment.

Issue: the Pod spec carried no `AGENTIHOOKS_CONTROL_ADDR`, so every Kubernetes attempt's sidecar
answered `controller unavailable`. Here the controller runs with the Kubernetes runtime on the
API emulator and gives its Pods its own settings (as `agentihooks-controller` does); the test
plays kubelet for one container: it resolves the restorer container's `env` (values, and the
credential through its `secretKeyRef` from the attempt's Secret) and runs the container's own
command with that environment and nothing else but what an image supplies (PATH, HOME).
"""

from __future__ import annotations

import asyncio
import base64
import json
import pathlib
import signal
import sys
from collections.abc import AsyncIterator, Mapping
from typing import Any

import grpc
import pytest
from agentihooks.swarm.v2 import restorer_pb2, restorer_pb2_grpc

from services.common import settings
from services.controller import main as controller_main
from services.controller.pods import classifying
from tests.support import controller_server as cs
from tests.support import git_repos, ports, redis_server
from tests.support.kube.apiserver import emulator as k8s_emulator

START_TIMEOUT_S = 120.0
"""A Python process starting its gRPC server; generous for a loaded shared machine."""


def container_env(
    container: Mapping[str, Any], secrets: Mapping[str, Mapping[str, Any]]
) -> dict[str, str]:
    """A container's environment as the kubelet resolves it: values, and secretKeyRefs from
    the namespace's Secrets; any other source fails the test (this Pod must need none)."""
    env: dict[str, str] = {}
    for entry in container.get("env", []):
        if "value" in entry:
            env[entry["name"]] = entry["value"]
            continue
        ref = entry["valueFrom"]["secretKeyRef"]
        data = secrets[ref["name"]]["data"][ref["key"]]
        env[entry["name"]] = base64.b64decode(data).decode()
    return env


@pytest.fixture
async def controller(
    tmp_path: pathlib.Path,
    redis_server: redis_server.RedisServer,
    k8s_emulator: k8s_emulator.K8sEmulator,
) -> AsyncIterator[cs.Controller]:
    """A controller on the emulator whose Pods get its settings, its address on loopback."""
    root = await cs.empty_state(redis_server.url, tmp_path)
    listen = f"127.0.0.1:{ports.free_port()}"
    conf = settings.load_controller(
        {
            "AGENTIHOOKS_RUNTIME": "kubernetes",
            "AGENTIHOOKS_NAMESPACE": cs.NAMESPACE,
            "AGENTIHOOKS_CONTROL_ADDR": listen,
            "AGENTIHOOKS_WORKER_CONTROL_ADDR": listen,
            "AGENTIHOOKS_GRANT_KEY": cs.GRANT_KEY,
            "AGENTIHOOKS_OPERATOR_TOKEN": cs.OPERATOR_TOKEN,
            "AGENTIHOOKS_WORKER_IMAGE": cs.IMAGE,
        }
    )
    worker_env = controller_main.worker_settings(
        conf, conf.worker_control_addr or "", {"AGENTIHOOKS_CHECKPOINT_ROOT": str(root)}
    )
    ctl, server = await cs.start_controller(
        redis_server.url, k8s_emulator, root, listen=listen, worker_env=worker_env
    )
    try:
        yield ctl
    finally:
        await cs.stop_controller(ctl, server)


async def test_the_restorer_container_fetches_its_launch_record_with_its_spec_env(
    controller: cs.Controller, tmp_path: pathlib.Path
) -> None:
    """The sidecar, run as its container says with exactly the env the Pod spec gives it,
    fetches its launch record from the controller and restores (a fresh first attempt: the
    registered project is cloned into the worktree); no `controller unavailable`."""
    project = git_repos.project(tmp_path / "origin")
    document = json.loads(cs.document(seats=("eng-1",)))
    document["projects"] = [{"name": "app", "repository": project.url}]
    [execution] = (await controller.apply(json.dumps(document))).admitted_executions
    pod = await cs.wait_for_pod(controller, execution)
    [sidecar] = [
        c for c in pod["spec"]["initContainers"] if c["name"] == classifying.RESTORER_CONTAINER
    ]
    secrets = {
        s["metadata"]["name"]: s for s in controller.emulator.objects("secrets", cs.NAMESPACE)
    }
    env = container_env(sidecar, secrets)
    assert env["AGENTIHOOKS_CONTROL_ADDR"] == controller.addr
    command = list(sidecar["command"])
    # The container listens on its Pod's loopback; here the port is one free on this machine.
    listen = f"127.0.0.1:{ports.free_port()}"
    command[command.index("--listen") + 1] = listen
    home = tmp_path / "home"
    home.mkdir()
    image = {"PATH": f"{pathlib.Path(sys.executable).parent}:/usr/bin:/bin", "HOME": str(home)}
    # HOME is the worker's (the sidecar restores into the harness home the worker uses): in
    # the Pod it is the `home` volume's mount path; here that volume is a folder of the test.
    assert env["HOME"] == "/home/agent"
    process = await asyncio.create_subprocess_exec(
        *command,
        env={**image, **env, "HOME": str(home)},
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        await asyncio.to_thread(ports.wait_port, int(listen.rpartition(":")[2]), START_TIMEOUT_S)
        worktree = tmp_path / "worktree"
        async with grpc.aio.insecure_channel(listen) as channel:
            stub = restorer_pb2_grpc.RestorerStub(channel)
            events = [
                e async for e in stub.Restore(restorer_pb2.RestoreRequest(worktree=str(worktree)))
            ]
        last = events[-1]
        assert last.HasField("ready"), f"the restore was refused: {last}"
        assert list(last.ready.command) == ["claude", "--print"]
        assert (worktree / ".git").is_dir()
    finally:
        if process.returncode is None:
            process.send_signal(signal.SIGTERM)
        _, err = await process.communicate()
    assert b"controller unavailable" not in err, err.decode(errors="replace")[-2000:]


@pytest.mark.parametrize(
    ("missing", "variable"),
    [
        ("AGENTIHOOKS_CONTROL_ADDR", "AGENTIHOOKS_CONTROL_ADDR"),
        ("AGENTIHOOKS_WORKER_CREDENTIAL", "AGENTIHOOKS_WORKER_CREDENTIAL"),
    ],
)
async def test_the_sidecar_fails_at_start_naming_a_missing_setting(
    tmp_path: pathlib.Path, missing: str, variable: str
) -> None:
    """A sidecar with no way to fetch its launch record stops at once, exit 2, naming the
    variable, before any restore step."""
    env = {
        "PATH": f"{pathlib.Path(sys.executable).parent}:/usr/bin:/bin",
        "HOME": str(tmp_path),
        "AGENTIHOOKS_CONTROL_ADDR": "127.0.0.1:1",
        "AGENTIHOOKS_WORKER_CREDENTIAL": "a-credential",
    }
    del env[missing]
    process = await asyncio.create_subprocess_exec(
        "agentihooks-restorer",
        "serve",
        "--listen",
        f"127.0.0.1:{ports.free_port()}",
        env=env,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )
    _, err = await asyncio.wait_for(process.communicate(), START_TIMEOUT_S)
    assert process.returncode == 2
    assert variable in err.decode() and "is not set" in err.decode()
    assert "a-credential" not in err.decode()
