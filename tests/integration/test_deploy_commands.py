"""The deploy files' commands work against real servers (no Docker, no cluster).

Each command is taken from compose.yaml or the rendered deploy/k8s/ as it stands; only the
addresses change (the containers' host names and fixed ports become free loopback ports):
Redis started with the manifests' arguments and probed with their probe commands; the
create-bucket script against an S3 server (moto); the checkpoint store and the controller started
with Compose's command and environment, turning healthy by Compose's own healthchecks; the store
started with the Kubernetes manifest's environment against a Redis that wants a password.
"""

from __future__ import annotations

import contextlib
import os
import pathlib
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator, Mapping
from typing import Any

import boto3
import grpc
import pytest
from agentihooks.swarm.v2 import checkpoint_store_pb2 as pb
from agentihooks.swarm.v2 import checkpoint_store_pb2_grpc as pb_grpc

from services.common import tls_settings, tokens
from tests.support import binaries, ports
from tests.unit import test_deploy_compose as compose
from tests.unit import test_deploy_manifests as k8s

BIN = pathlib.Path(sys.executable).parent


class Redis:
    """A redis-server started with the given arguments on a free loopback port."""

    def __init__(self, args: list[str], folder: pathlib.Path) -> None:
        self.port = ports.free_port()
        where = ["--port", str(self.port), "--bind", "127.0.0.1", "--dir", str(folder)]
        self.proc = subprocess.Popen(
            [binaries.require("redis-server"), *args, *where],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        ports.wait_port(self.port)

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=30)


def shell(command: str, env: Mapping[str, str] | None = None) -> int:
    """Run a healthcheck's or probe's shell command; its exit code."""
    return subprocess.run(
        ["sh", "-c", command], env={**os.environ, **(env or {})}, timeout=60, check=False
    ).returncode


def redis_cli_at(command: str, port: int) -> str:
    assert "redis-cli ping" in command
    return command.replace("redis-cli ping", f"redis-cli -p {port} ping")


def test_redis_runs_with_the_manifests_arguments_and_its_probes_tell_ready(
    tmp_path: pathlib.Path,
) -> None:
    """The StatefulSet's redis-server arguments start Redis with an append-only file and a
    password; its readiness probe passes with the password (REDISCLI_AUTH) and fails without.
    Compose's Redis and healthcheck likewise."""
    rendered = k8s.render_with_dummy_secrets(tmp_path / "k8s")
    statefulset = rendered.one("StatefulSet", "agentihooks-redis")
    c = k8s.container(statefulset, "redis")
    env = k8s.container_env(rendered, statefulset, "redis")
    args = k8s.command_of(c, env)
    folder = tmp_path / "data"
    folder.mkdir()
    i = args.index("--dir")
    redis = Redis(args[1:i] + args[i + 2 :], folder)
    try:
        probe = redis_cli_at(c["readinessProbe"]["exec"]["command"][-1], redis.port)
        assert shell(probe, {"REDISCLI_AUTH": env["REDISCLI_AUTH"]}) == 0
        assert shell(probe, {"REDISCLI_AUTH": "wrong"}) != 0
        assert shell(probe) != 0
        assert (folder / "appendonlydir").is_dir()  # the append-only file, in --dir
    finally:
        redis.stop()

    service = compose.load()["services"]["redis"]
    (folder := tmp_path / "compose").mkdir()
    redis = Redis(service["command"][1:], folder)
    try:
        check = service["healthcheck"]["test"]
        assert check[0] == "CMD-SHELL"
        assert shell(redis_cli_at(check[1], redis.port)) == 0
    finally:
        redis.stop()
    assert shell(redis_cli_at(check[1], redis.port)) != 0


def _reset(endpoint: str) -> None:
    request = urllib.request.Request(f"{endpoint}/moto-api/reset", method="POST")
    with urllib.request.urlopen(request, timeout=30) as response:
        assert response.status == 200


def _s3_env(endpoint: str) -> dict[str, str]:
    return {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_EC2_METADATA_DISABLED": "true",
        "AGENTIHOOKS_S3_ENDPOINT_URL": endpoint,
    }


def _s3(endpoint: str) -> Any:
    credentials = _s3_env(endpoint)
    return boto3.client(
        "s3",
        endpoint_url=endpoint,
        region_name=credentials["AWS_DEFAULT_REGION"],
        aws_access_key_id=credentials["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=credentials["AWS_SECRET_ACCESS_KEY"],
    )


def test_create_bucket_makes_the_bucket_and_succeeds_again(moto_endpoint: str) -> None:
    service = compose.load()["services"]["create-bucket"]
    env = compose.service_env(service) | _s3_env(moto_endpoint)
    _reset(moto_endpoint)
    for _ in range(2):  # a second `docker compose up` finds the bucket and exits 0 too
        result = subprocess.run(
            [sys.executable, *service["command"][1:]],
            env={"PATH": os.environ["PATH"], **env},
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert result.returncode == 0, result.stderr
    _s3(moto_endpoint).head_bucket(Bucket=env["AGENTIHOOKS_CHECKPOINT_BUCKET"])


@contextlib.contextmanager
def running(command: list[str], env: Mapping[str, str], log: pathlib.Path) -> Iterator[None]:
    """A console script of this project (from the virtualenv) running until the block ends."""
    script = BIN / command[0]
    assert script.exists(), script
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [str(script), *command[1:]],
            env=dict(env),
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        yield
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)


def wait_healthy(test: list[str], log: pathlib.Path, timeout: float = 60.0) -> None:
    """Run a Compose healthcheck (`CMD python -c ...`) until it passes."""
    assert test[:2] == ["CMD", "python"]
    deadline = time.monotonic() + max(timeout, ports.MIN_DEADLINE_S)
    while True:
        result = subprocess.run(
            [sys.executable, *test[2:]], capture_output=True, timeout=60, check=False
        )
        if result.returncode == 0:
            return
        if time.monotonic() > deadline:
            pytest.fail(f"never healthy; its log:\n{log.read_text()[-3000:]}")
        time.sleep(0.2)


def relocate(value: Any, moves: Mapping[str, str]) -> Any:
    """`value` with each address of `moves` replaced (host names and fixed ports)."""
    if isinstance(value, list):
        return [relocate(v, moves) for v in value]
    if isinstance(value, dict):
        return {k: relocate(v, moves) for k, v in value.items()}
    if not isinstance(value, str):
        return value
    for old, new in moves.items():
        value = value.replace(old, new)
    return value


def test_the_compose_services_start_with_their_settings_and_turn_healthy(
    moto_endpoint: str, tmp_path: pathlib.Path
) -> None:
    """Redis, the bucket, then the store and the controller with compose.yaml's commands and
    environments; each turns healthy by its own healthcheck, and the controller's HTTP API
    answers."""
    redis = Redis(["--appendonly", "yes"], tmp_path)
    store_port, control_port, http_port = (ports.free_port() for _ in range(3))
    moves = {
        "redis://redis:6379": f"redis://127.0.0.1:{redis.port}",
        "http://minio:9000": moto_endpoint,
        "0.0.0.0:50052": f"127.0.0.1:{store_port}",
        "127.0.0.1:50052": f"127.0.0.1:{store_port}",
        "checkpoint-store:50052": f"127.0.0.1:{store_port}",
        "0.0.0.0:50051": f"127.0.0.1:{control_port}",
        "127.0.0.1:50051": f"127.0.0.1:{control_port}",
        "0.0.0.0:8080": f"127.0.0.1:{http_port}",
        "/var/lib/agentihooks/workers": str(tmp_path / "workers"),
    }
    services = relocate(compose.load()["services"], moves)
    base = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "LANG": "C.UTF-8"}
    _reset(moto_endpoint)
    try:
        bucket = services["create-bucket"]
        env = base | compose.service_env(bucket) | _s3_env(moto_endpoint)
        subprocess.run([sys.executable, *bucket["command"][1:]], env=env, check=True, timeout=120)

        store = services["checkpoint-store"]
        store_env = base | compose.service_env(store) | _s3_env(moto_endpoint)
        with running(store["command"], store_env, tmp_path / "store.log"):
            wait_healthy(store["healthcheck"]["test"], tmp_path / "store.log")
            controller = services["controller"]
            env = base | compose.service_env(controller) | _s3_env(moto_endpoint)
            with running(controller["command"], env, tmp_path / "controller.log"):
                wait_healthy(controller["healthcheck"]["test"], tmp_path / "controller.log")
                url = f"http://127.0.0.1:{http_port}/healthz"
                with urllib.request.urlopen(url, timeout=30) as response:
                    assert response.status == 200
    finally:
        redis.stop()


def test_the_kubernetes_store_reaches_redis_with_its_password(
    moto_endpoint: str, tmp_path: pathlib.Path
) -> None:
    """The store, with the environment its Deployment gives it (the Redis URL carrying the
    generated password, the grant key, its mounted TLS Secret), turns ready by its own exec
    readiness probe (gRPC health over mutual TLS) and answers a granted call over mutual TLS,
    which reads the revocations in a Redis that requires that password."""
    rendered = k8s.render_with_dummy_secrets(tmp_path / "k8s")
    password = rendered.secrets["keys.env"]["redis-password"]
    redis = Redis(["--requirepass", password], tmp_path)
    deployment = rendered.one("Deployment", "agentihooks-checkpoint-store")
    c = k8s.container(deployment, "store")
    env = k8s.container_env(rendered, deployment, "store")
    port = ports.free_port()
    mounted = tmp_path / "mounted"
    moves = {
        "@agentihooks-redis:6379": f"@127.0.0.1:{redis.port}",
        "0.0.0.0:50052": f"127.0.0.1:{port}",
        "localhost:50052": f"localhost:{port}",
        "/etc/agentihooks": str(mounted),
    }
    # The files the kubelet writes from the store's Secret volumes, where the env names them.
    for path, content in k8s.workload_files(rendered, deployment, "store").items():
        target = pathlib.Path(relocate(path, moves))
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(content)
    env = relocate(env, moves) | _s3_env(moto_endpoint)
    env |= {"PATH": os.environ["PATH"], "HOME": str(tmp_path)}
    command = relocate(k8s.command_of(c, env), moves)
    probe = relocate(c["readinessProbe"]["exec"]["command"], moves)
    assert probe[:3] == ["python3", "-m", "services.common.health_probe"], probe
    conf = tls_settings.load(env)
    _reset(moto_endpoint)
    _s3(moto_endpoint).create_bucket(Bucket=env["AGENTIHOOKS_CHECKPOINT_BUCKET"])
    try:
        with running(command, env, tmp_path / "store.log"):
            wait_until_probe_passes([sys.executable, *probe[1:]], env, tmp_path / "store.log")
            _, grant = tokens.mint_grant(
                env["AGENTIHOOKS_GRANT_KEY"],
                swarm="example",
                seat="eng-1",
                task_id="t-1",
                task_generation=1,
                execution_id="example.eng-1.1",
                execution_generation=1,
                rights=frozenset({tokens.Right.READ}),
            )
            assert conf.ca_file is not None and conf.cert_file and conf.key_file
            credentials = grpc.ssl_channel_credentials(
                conf.ca_file.read_bytes(), conf.key_file.read_bytes(), conf.cert_file.read_bytes()
            )
            with grpc.secure_channel(f"localhost:{port}", credentials) as channel:
                listed = pb_grpc.CheckpointStoreStub(channel).ListCheckpoints(
                    pb.ListCheckpointsRequest(compatibility_key=k8s.IMAGE),
                    metadata=[("authorization", f"Bearer {grant}")],
                    timeout=60,
                )
            assert list(listed.checkpoints) == []
    finally:
        redis.stop()


def wait_until_probe_passes(
    command: list[str], env: Mapping[str, str], log: pathlib.Path, timeout: float = 60.0
) -> None:
    """Run an exec probe, with the container's environment, until it exits 0."""
    deadline = time.monotonic() + max(timeout, ports.MIN_DEADLINE_S)
    while True:
        result = subprocess.run(
            command, env=dict(env), capture_output=True, timeout=60, check=False
        )
        if result.returncode == 0:
            return
        if time.monotonic() > deadline:
            pytest.fail(
                f"never ready: {result.stdout.decode()[-500:]}; its log:\n{log.read_text()[-3000:]}"
            )
        time.sleep(0.2)


def test_compose_grpc_healthchecks_fail_while_nothing_serves() -> None:
    """A healthcheck against a port where nothing listens exits non-zero (never a false
    healthy)."""
    free = ports.free_port()
    for name in ("checkpoint-store", "controller"):
        test = compose.load()["services"][name]["healthcheck"]["test"]
        test = relocate(test, {"127.0.0.1:50052": f"127.0.0.1:{free}"})
        test = relocate(test, {"127.0.0.1:50051": f"127.0.0.1:{free}"})
        result = subprocess.run(
            [sys.executable, *test[2:]], capture_output=True, timeout=60, check=False
        )
        assert result.returncode != 0, name
