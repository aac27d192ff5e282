"""compose.yaml says what the code does.

The file is read as Docker Compose reads it (YAML with merge keys, then `${VAR:-default}`
interpolation from the shell), and each service of this project's image goes through its
console script's real `main()` with the environment Compose would give it (its env files, written
from the committed examples with dummy values, then `environment`), up to the moment it would
serve. Ports, healthchecks and `depends_on` are checked against where the services then listen.
tests/integration/test_deploy_commands.py runs the healthchecks and the bucket script for real.
"""

from __future__ import annotations

import pathlib
import re
import shutil
import subprocess
import urllib.parse
from collections.abc import Mapping
from typing import Any

import pytest
import yaml

from services.checkpoint_store import service as store_service
from services.common import settings
from services.controller import main as controller_main
from services.controller.api import grpc_api
from tests.unit.test_deploy_manifests import (
    AWS_VARIABLES,
    IMAGE,
    REPO,
    controller_reads,
    env_file_keys,
    host_of,
    ignored,
    port_of,
    section_8,
    shell_block,
    start,
    unread,
)

COMPOSE = REPO / "compose.yaml"
S3_FILE_VARIABLES = AWS_VARIABLES | {"MINIO_ROOT_USER", "MINIO_ROOT_PASSWORD"}
"""deploy/compose/s3.env is MinIO's root user and, the same account, the services' AWS pair."""

_INTERPOLATION = re.compile(
    r"\$\$|\$\{(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?:(?P<op>:?[-?])(?P<arg>[^}]*))?\}"
    r"|\$(?P<bare>[A-Za-z_][A-Za-z0-9_]*)"
)


def interpolate(value: Any, shell: Mapping[str, str]) -> Any:
    """Compose's interpolation of every string in `value` from the shell's variables."""
    if isinstance(value, dict):
        return {k: interpolate(v, shell) for k, v in value.items()}
    if isinstance(value, list):
        return [interpolate(v, shell) for v in value]
    if not isinstance(value, str):
        return value

    def one(match: re.Match[str]) -> str:
        if match.group(0) == "$$":
            return "$"
        name = match.group("name") or match.group("bare")
        op, arg = match.group("op"), match.group("arg")
        current = shell.get(name)
        empty = current is None or (op is not None and op.startswith(":") and current == "")
        if op in (":-", "-") and empty:
            return str(arg)
        if op in (":?", "?") and empty:
            pytest.fail(f"compose.yaml needs {name} from the shell: {arg}")
        assert current is not None, f"compose.yaml uses ${name} with no default"
        return current

    return _INTERPOLATION.sub(one, value)


def load(shell: Mapping[str, str] | None = None) -> dict[str, Any]:
    document = yaml.safe_load(COMPOSE.read_text())
    return dict(interpolate(document, shell or {}))


def env_file_values(path: pathlib.Path) -> dict[str, str]:
    """The dummy values an operator's env file would hold, from its committed example."""
    example = path.with_name(path.name + ".example")
    assert example.exists(), f"{example.relative_to(REPO)} is missing"
    values = {}
    for key in env_file_keys(example):
        # The AWS pair is MinIO's root user: the same values.
        alias = {
            "AWS_ACCESS_KEY_ID": "MINIO_ROOT_USER",
            "AWS_SECRET_ACCESS_KEY": "MINIO_ROOT_PASSWORD",
        }
        values[key] = f"dummy-{alias.get(key, key).lower()}-0123456789abcdef0123456789abcdef"
    return values


def service_env(service: dict[str, Any]) -> dict[str, str]:
    """The container's environment: its env files in order, then `environment`."""
    env: dict[str, str] = {}
    for name in service.get("env_file") or ():
        env.update(env_file_values(REPO / name))
    environment = service.get("environment") or {}
    if isinstance(environment, list):
        environment = dict(item.split("=", 1) for item in environment)
    env.update({k: str(v) for k, v in environment.items()})
    return env


def published(service: dict[str, Any]) -> dict[int, str]:
    """Container port -> the host address it is published on."""
    found = {}
    for mapping in service.get("ports") or ():
        host_ip, host_port, container_port = str(mapping).split(":")
        assert host_port == container_port, mapping
        found[int(container_port)] = host_ip
    return found


def grpc_healthcheck(service: dict[str, Any]) -> tuple[str, str]:
    """(address, service name) the service's Python gRPC healthcheck asks."""
    test = service["healthcheck"]["test"]
    assert test[:3] == ["CMD", "python", "-c"], test
    code = test[3]
    compile(code, "healthcheck", "exec")
    (address,) = re.findall(r'insecure_channel\("([^"]+)"\)', code)
    (name,) = re.findall(r'HealthCheckRequest\(service="([^"]*)"\)', code)
    return address, name


def test_the_services_and_their_one_image() -> None:
    """The three services of this project and the worker run one image, built from this
    repository and tagged with AGENTIHOOKS_WORKER_IMAGE, which the controller also runs with as
    its compatibility key."""
    for shell, image in (({}, IMAGE), ({"AGENTIHOOKS_WORKER_IMAGE": "other:2"}, "other:2")):
        services = load(shell)["services"]
        assert set(services) == {
            "redis",
            "minio",
            "create-bucket",
            "checkpoint-store",
            "controller",
        }
        ours = {n for n, s in services.items() if s.get("build")}
        assert ours == {"create-bucket", "checkpoint-store", "controller"}
        for name in ours:
            assert services[name]["build"] == "." and services[name]["image"] == image, name
        assert services["controller"]["environment"]["AGENTIHOOKS_WORKER_IMAGE"] == image


def test_the_store_starts_with_its_compose_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    services = load()["services"]
    store = services["checkpoint-store"]
    env = service_env(store)
    started = start(store["command"], env, monkeypatch)
    conf = started.conf
    assert started.loader == "load_store"
    assert host_of(conf.listen) == "0.0.0.0"
    defaults = settings.load_store(
        {"AGENTIHOOKS_GRANT_KEY": "k" * 32, "AGENTIHOOKS_CHECKPOINT_ROOT": "/checkpoints"}
    )
    assert port_of(conf.listen) == port_of(defaults.listen)
    assert published(store) == {port_of(conf.listen): "127.0.0.1"}
    assert grpc_healthcheck(store) == (
        f"127.0.0.1:{port_of(conf.listen)}",
        store_service.SERVICE_NAME,
    )
    assert not unread(env, started.read, S3_FILE_VARIABLES)
    _check_storage(services, conf.storage)
    _check_redis(services, conf.redis_url)


def test_the_controller_starts_with_its_compose_environment_and_runs_the_workers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    services = load()["services"]
    controller = services["controller"]
    env = service_env(controller)
    started = start(controller["command"], env, monkeypatch)
    conf = started.conf
    assert started.loader == "load_controller"
    assert conf.runtime == "local"
    defaults = settings.load_controller(
        {"AGENTIHOOKS_GRANT_KEY": "k" * 32, "AGENTIHOOKS_OPERATOR_TOKEN": "t" * 16}
        | {"AGENTIHOOKS_WORKER_IMAGE": IMAGE}
    )
    assert host_of(conf.listen) == "0.0.0.0" and host_of(conf.http) == "0.0.0.0"
    assert port_of(conf.listen) == port_of(defaults.listen)
    assert port_of(conf.http) == port_of(defaults.http)
    assert published(controller) == {
        port_of(conf.listen): "127.0.0.1",
        port_of(conf.http): "127.0.0.1",
    }
    assert grpc_healthcheck(controller) == (
        f"127.0.0.1:{port_of(conf.listen)}",
        grpc_api.SERVICE_NAME,
    )
    assert not unread(env, controller_reads(started, env), S3_FILE_VARIABLES)
    _check_storage(services, conf.storage)
    _check_redis(services, conf.redis_url)

    # The store, as the controller and its workers reach it.
    store_conf = start(
        services["checkpoint-store"]["command"],
        service_env(services["checkpoint-store"]),
        monkeypatch,
    ).conf
    assert conf.store_addr == f"checkpoint-store:{port_of(store_conf.listen)}"

    # The worker folders are on a volume the image's user owns.
    volumes = {v.split(":")[1]: v.split(":")[0] for v in controller["volumes"]}
    assert volumes[str(conf.workdir)] in load()["volumes"]
    assert str(conf.workdir) in (REPO / "Dockerfile").read_text()
    assert controller.get("init") is True  # reaps the workers' processes

    # Each worker: `agentihooks-restorer worker` with what the local runtime gives it.
    assert conf.entry_point == ("agentihooks-restorer", "worker")
    worker_env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": "/home/agent"}
    worker_env |= controller_main.worker_settings(conf, f"127.0.0.1:{port_of(conf.listen)}", env)
    worker = start(list(conf.entry_point), worker_env, monkeypatch)
    assert worker.loader == "load_restorer"
    assert worker.conf.control_addr == f"127.0.0.1:{port_of(conf.listen)}"
    assert worker.conf.storage == conf.storage


def _check_storage(services: dict[str, Any], storage: settings.StorageSettings) -> None:
    """The bucket lives in the minio service on its default port, and create-bucket makes the
    same bucket there."""
    assert storage.checkpoint_bucket == "agentihooks-checkpoints"
    endpoint = urllib.parse.urlsplit(storage.s3_endpoint_url or "")
    assert (endpoint.scheme, endpoint.hostname, endpoint.port) == ("http", "minio", 9000)
    assert services["minio"]["command"] == ["server", "/data"]  # the API on its default :9000
    bucket_env = service_env(services["create-bucket"])
    assert bucket_env["AGENTIHOOKS_CHECKPOINT_BUCKET"] == storage.checkpoint_bucket
    assert bucket_env["AGENTIHOOKS_S3_ENDPOINT_URL"] == storage.s3_endpoint_url


def _check_redis(services: dict[str, Any], url: str) -> None:
    parsed = urllib.parse.urlsplit(url)
    assert (parsed.hostname, parsed.port or 6379) == ("redis", 6379)
    command = services["redis"]["command"]
    assert command[0] == "redis-server" and "--port" not in command
    assert command[command.index("--appendonly") + 1] == "yes"
    assert "redis-data:/data" in services["redis"]["volumes"]


def test_create_bucket_is_a_one_shot_python_script() -> None:
    service = load()["services"]["create-bucket"]
    assert service["restart"] == "no" and "healthcheck" not in service
    command = service["command"]
    assert command[:2] == ["python", "-c"]
    compile(command[2], "create-bucket", "exec")
    env = service_env(service)
    for name in re.findall(r'os\.environ\["(\w+)"\]', command[2]):
        assert name in env, name
    assert {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"} <= env.keys()


def test_every_dependency_waits_for_a_healthy_or_finished_service() -> None:
    services = load()["services"]
    for name, service in services.items():
        if name != "create-bucket":
            assert "healthcheck" in service, f"{name} has no healthcheck"
        for target, condition in (service.get("depends_on") or {}).items():
            assert target in services, f"{name} depends on the unknown {target}"
            if condition["condition"] == "service_healthy":
                assert "healthcheck" in services[target], f"{name} waits on {target}'s health"
            else:
                assert condition["condition"] == "service_completed_successfully"
                assert services[target]["restart"] == "no", target
    needs = {
        "controller": {"redis", "checkpoint-store"},
        "checkpoint-store": {"redis", "create-bucket"},
        "create-bucket": {"minio"},
    }
    for name, targets in needs.items():
        assert set(services[name]["depends_on"]) == targets, name


def test_compose_env_files_are_ignored_and_their_examples_complete() -> None:
    for name, keys in (
        ("keys.env", {"AGENTIHOOKS_GRANT_KEY"}),
        ("operator.env", {"AGENTIHOOKS_OPERATOR_TOKEN"}),
        ("s3.env", S3_FILE_VARIABLES - {"AWS_DEFAULT_REGION"}),
    ):
        path = f"deploy/compose/{name}"
        assert ignored(path), f"{path} is not git-ignored"
        assert not ignored(path + ".example")
        assert set(env_file_keys(REPO / (path + ".example"))) == keys
    used = {f for s in load()["services"].values() for f in s.get("env_file") or ()}
    assert used == {f"deploy/compose/{n}.env" for n in ("keys", "operator", "s3")}


def test_the_guides_compose_commands_write_the_env_files(tmp_path: pathlib.Path) -> None:
    folder = tmp_path / "deploy" / "compose"
    folder.mkdir(parents=True)
    for example in (REPO / "deploy" / "compose").glob("*.example"):
        shutil.copy(example, folder / example.name)
    script = shell_block("deploy/compose/keys.env <<EOF")
    setup = script[: script.index("docker compose")]
    subprocess.run(["bash", "-euc", setup], cwd=tmp_path, check=True, timeout=60)
    written = {}
    for name in ("keys.env", "operator.env", "s3.env"):
        path = folder / name
        assert path.stat().st_mode & 0o077 == 0, f"{name} is readable by others"
        assert env_file_keys(path) == env_file_keys(folder / (name + ".example"))
        written.update(line.split("=", 1) for line in path.read_text().splitlines())
    settings.load_controller(
        {k: v for k, v in written.items() if k.startswith(settings.PREFIX)}
        | {"AGENTIHOOKS_WORKER_IMAGE": IMAGE}
    )
    assert written["AWS_ACCESS_KEY_ID"] == written["MINIO_ROOT_USER"]
    assert written["AWS_SECRET_ACCESS_KEY"] == written["MINIO_ROOT_PASSWORD"]
    assert len(written["MINIO_ROOT_PASSWORD"]) >= 8  # MinIO's minimum
    command = "sed -n 's/^AGENTIHOOKS_OPERATOR_TOKEN=//p' deploy/compose/operator.env"
    assert command in section_8()
    token = subprocess.run(
        ["bash", "-c", command], cwd=tmp_path, capture_output=True, text=True, check=True
    ).stdout.strip()
    assert token == written["AGENTIHOOKS_OPERATOR_TOKEN"]
    assert "docker compose up -d --build" in script
