"""deploy/k8s/ says what the code does.

`kubectl kustomize` (the real kubectl; no cluster) renders a temporary copy of deploy/k8s/ with
dummy secrets written from the committed `*.env.example` files, and every rendered object is
checked against the code: each workload's command goes through its console script's real
`main()` with the environment Kubernetes would give it (Secret, ConfigMap and field references
resolved, `$(VAR)` expanded, and the files of its Secret volumes written from certificates
issued as deploy/k8s/certificates/ asks) up to the moment it would serve; ports and probes
against the addresses it then listens on; Services against the addresses the code gives workers;
certificates against the names the code dials; RBAC against the Kubernetes API calls the
controller makes; the worker Pod template ConfigMap against the built-in template with the
workers' certificate mounted.
"""

from __future__ import annotations

import ast
import base64
import dataclasses
import functools
import importlib
import os
import pathlib
import re
import shutil
import subprocess
import tempfile
import tomllib
import urllib.parse
from collections.abc import Callable, Iterator, Mapping
from typing import Any, cast

import pytest
import yaml
from cryptography import x509

from services.checkpoint_store import service as store_service
from services.common import health_probe, logs, settings, tls_settings
from services.common.checkpoints import backends
from services.controller import main as controller_main
from services.controller.api import http_api
from services.controller.pods import runtime, templates
from services.restorer import entry as restorer_entry
from services.restorer import local_worker
from tests.support import certificates
from tests.support.kube import kubectl as kubectl_support

REPO = pathlib.Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy" / "k8s"
PODS = REPO / "services" / "controller" / "pods"
KUBERNETES_RUNTIME = PODS / "kubernetes.py"
ADAPTER_MODULES = [KUBERNETES_RUNTIME, PODS / "pod_launching.py"]
"""The modules of the Kubernetes adapter that make CoreV1Api calls: the runtime, and the Pod and
Secret launching it delegates to (which gets the runtime's CoreV1Api object and `_request`)."""
EVENT_RECORDER = REPO / "services" / "controller" / "pods" / "recording.py"
CONSOLE_SCRIPTS: dict[str, str] = tomllib.loads((REPO / "pyproject.toml").read_text())["project"][
    "scripts"
]
CLUSTER_SCOPED = {"Namespace", "ClusterRole", "ClusterRoleBinding"}
IMAGE = "registry.local/agent-worker:1.4.2"
"""The image `docker build -t ... .` makes in docs/operator-guide.md section 8."""

AWS_VARIABLES = {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_DEFAULT_REGION"}
"""What botocore reads for the checkpoint bucket (aioboto3's default session)."""


# --- Running a console script's real main() up to the moment it would serve ------------------


class _Stop(Exception):
    """Raised where the service would start serving."""


class ReadRecorder(dict[str, str]):
    """An environment that notes every variable the code reads from it."""

    def __init__(self, values: Mapping[str, str]) -> None:
        super().__init__(values)
        self.read: set[str] = set()

    def get(self, key: str, default: Any = None) -> Any:
        self.read.add(key)
        return super().get(key, default)

    def __getitem__(self, key: str) -> str:
        self.read.add(key)
        return super().__getitem__(key)

    def __contains__(self, key: object) -> bool:
        if isinstance(key, str):
            self.read.add(key)
        return super().__contains__(key)


@dataclasses.dataclass
class Started:
    """A service's settings as its main() loaded them, what it read to get them, and (the
    restorer's `entry` and `worker`) the arguments it would run the worker with."""

    loader: str
    conf: Any
    read: set[str]
    runs: tuple[Any, ...] = ()


def start(
    command: list[str],
    env: Mapping[str, str],
    monkeypatch: pytest.MonkeyPatch,
    cwd: str = "/",
    files: Mapping[str, bytes] | None = None,
) -> Started:
    """Run `command` (a console script and its arguments) through the script's real `main()`
    with `env` as the whole environment and `cwd` as its working folder, and stop it where it
    would start serving.

    The controller, the store and the sidecar go through every start-up check of their `main()`
    and stop at `asyncio.run`; the restorer's `entry` and `worker` stop where they would start
    the worker. A setting the code refuses fails the test with the code's own message. `files`
    are the container's mounted files by path (`mounted_files`): each TLS file a setting names must
    be one of them, and the code's own check reads their contents.
    """
    script, *argv = command
    assert script in CONSOLE_SCRIPTS, f"{script!r} is not a console script of pyproject.toml"
    module_name, function = CONSOLE_SCRIPTS[script].split(":")
    module = importlib.import_module(module_name)
    found: dict[str, Any] = {}

    def spy(name: str, real: Callable[[Mapping[str, str]], Any]) -> Callable[..., Any]:
        def loader(values: Mapping[str, str]) -> Any:
            recorder = ReadRecorder(values)
            try:
                conf = real(recorder)
            except settings.SettingsError as exc:
                pytest.fail(f"{script} refuses its settings: {exc}")
            found.update(loader=name, conf=conf, read=recorder.read)
            return conf

        return loader

    def run(coroutine: Any) -> None:
        coroutine.close()
        raise _Stop

    def run_worker(*args: Any, **kwargs: Any) -> None:
        found["runs"] = args
        raise _Stop

    with monkeypatch.context() as patch, tempfile.TemporaryDirectory() as folder:
        patch.setattr(tls_settings, "check", _mounted_check(files or {}, pathlib.Path(folder)))
        for name in ("load_controller", "load_store", "load_restorer"):
            patch.setattr(settings, name, spy(name, getattr(settings, name)))
        patch.setattr(logs, "configure", lambda *args, **kwargs: None)
        patch.setattr(restorer_entry, "run", run_worker)
        patch.setattr(local_worker, "run", run_worker)
        patch.setattr(os, "environ", dict(env))
        patch.setattr(os, "getcwd", lambda: cwd)
        if hasattr(module, "asyncio"):
            patch.setattr(module, "asyncio", _AsyncioStub(run))
        try:
            getattr(module, function)(argv)
        except _Stop:
            pass
        except SystemExit as exc:
            pytest.fail(f"{' '.join(command)} exited with {exc.code} (see its stderr above)")
        else:
            pytest.fail(f"{' '.join(command)} returned instead of serving")
    assert "loader" in found, f"{script} loaded no settings"
    return Started(found["loader"], found["conf"], found["read"], found.get("runs", ()))


_REAL_TLS_CHECK = tls_settings.check


def _mounted_check(
    files: Mapping[str, bytes], folder: pathlib.Path
) -> Callable[[tls_settings.TLSSettings], None]:
    """`tls_settings.check` on a container's mounted files: a path no mounted Secret holds is
    refused as the code refuses a missing file; the others are checked by the real code on
    copies in `folder`."""

    def check(conf: tls_settings.TLSSettings) -> None:
        copies: dict[str, pathlib.Path] = {}
        for field in ("cert_file", "key_file", "ca_file", "client_ca_file"):
            path = getattr(conf, field)
            if path is None:
                continue
            if str(path) not in files:
                raise tls_settings.TLSError(f"{field} {path} is in no mounted Secret volume")
            copies[field] = folder / f"{field}.pem"
            copies[field].write_bytes(files[str(path)])
        _REAL_TLS_CHECK(dataclasses.replace(conf, **copies))

    return check


def mounted_files(
    spec: Mapping[str, Any], c: Mapping[str, Any], issued: Mapping[str, Mapping[str, bytes]]
) -> dict[str, bytes]:
    """The files of container `c`'s Secret volumes (of Pod spec `spec`), as the kubelet writes
    them from the Secrets' data (`issued`: data by Secret name), by path."""
    volumes = {v["name"]: v for v in spec.get("volumes") or ()}
    files: dict[str, bytes] = {}
    for mount in c.get("volumeMounts") or ():
        source = volumes[mount["name"]].get("secret")
        if source is None:
            continue
        name = source["secretName"]
        assert name in issued, f"the Secret {name} is neither issued nor made by the guide"
        for key, content in issued[name].items():
            files[f"{mount['mountPath'].rstrip('/')}/{key}"] = content
    return files


def workload_files(rendered: Rendered, workload: dict[str, Any], name: str) -> dict[str, bytes]:
    """The mounted files of container `name` of a Deployment's Pods."""
    spec = workload["spec"]["template"]["spec"]
    return mounted_files(spec, container(workload, name), rendered.tls)


class _AsyncioStub:
    def __init__(self, run: Callable[[Any], None]) -> None:
        self.run = run


def controller_reads(started: Started, env: Mapping[str, str]) -> set[str]:
    """Every variable the controller reads: its settings, and what it passes on to workers."""
    recorder = ReadRecorder(env)
    controller_main.worker_settings(started.conf, "controller:1", recorder)
    return started.read | recorder.read


def unread(variables: Mapping[str, str], read: set[str], others: set[str]) -> set[str]:
    """The variables of `variables` that nothing reads: an AGENTIHOOKS_ one the service's code
    does not read, or another one not in `others`."""
    return {
        name
        for name in variables
        if (name not in read if name.startswith(settings.PREFIX) else name not in others)
    }


def port_of(address: str) -> int:
    return int(address.rpartition(":")[2])


def host_of(address: str) -> str:
    return address.rpartition(":")[0]


# --- Rendering deploy/k8s --------------------------------------------------------------------


@functools.cache
def kubectl() -> str:
    """The kubectl binary (with kustomize v5), or fail the test saying what is missing."""
    return kubectl_support.binary()


def dummy_secrets(folder: pathlib.Path) -> dict[str, dict[str, str]]:
    """Write secrets/NAME.env next to each secrets/NAME.env.example, with the same keys and
    dummy values long enough for every setting; returns them by file name."""
    written: dict[str, dict[str, str]] = {}
    for example in sorted((folder / "secrets").glob("*.env.example")):
        values = {
            key: f"dummy-{key.lower()}-{index:02d}-0123456789abcdef0123456789abcdef"
            for index, key in enumerate(env_file_keys(example))
        }
        target = example.with_name(example.name.removesuffix(".example"))
        target.write_text("".join(f"{k}={v}\n" for k, v in values.items()))
        written[target.name] = values
    return written


def env_file_keys(path: pathlib.Path) -> list[str]:
    """The keys of an env file (KEY=VALUE lines; # comments)."""
    keys = []
    for line in path.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            keys.append(line.partition("=")[0])
    return keys


def render(folder: pathlib.Path) -> list[dict[str, Any]]:
    result = subprocess.run(
        [kubectl(), "kustomize", str(folder)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, f"kubectl kustomize {folder} failed:\n{result.stderr}"
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


@dataclasses.dataclass
class Rendered:
    objects: list[dict[str, Any]]
    secrets: dict[str, dict[str, str]]
    folder: pathlib.Path
    tls: dict[str, dict[str, bytes]] = dataclasses.field(default_factory=dict)
    """The TLS Secrets' data by name, as certificates/ issues them (`issue`)."""

    def all(self, kind: str) -> list[dict[str, Any]]:
        return [o for o in self.objects if o["kind"] == kind]

    def one(self, kind: str, name: str) -> dict[str, Any]:
        found = [o for o in self.all(kind) if o["metadata"]["name"] == name]
        assert len(found) == 1, f"expected one {kind} {name}, found {len(found)}"
        return found[0]

    def generated(self, kind: str, name: str) -> dict[str, Any]:
        """A generated ConfigMap or Secret, by the name before kustomize's hash suffix."""
        found = [
            o
            for o in self.all(kind)
            if re.fullmatch(re.escape(name) + r"(-[a-z0-9]{10})?", o["metadata"]["name"])
        ]
        assert len(found) == 1, f"expected one generated {kind} {name}, found {len(found)}"
        return found[0]

    def data(self, kind: str, name: str) -> dict[str, str]:
        """A ConfigMap's or Secret's data by its rendered name, decoded."""
        obj = self.one(kind, name)
        if kind == "Secret":
            return {k: base64.b64decode(v).decode() for k, v in (obj.get("data") or {}).items()}
        return dict(obj.get("data") or {})

    def namespace(self) -> str:
        (namespace,) = self.all("Namespace")
        return str(namespace["metadata"]["name"])


def copy_deploy(folder: pathlib.Path) -> None:
    """Copy deploy/k8s/ to `folder` without any secrets env file an operator wrote."""
    shutil.copytree(DEPLOY, folder, ignore=shutil.ignore_patterns("*.env", ".gitignore"))
    shutil.copy(DEPLOY / "settings.env", folder / "settings.env")


def render_with_dummy_secrets(folder: pathlib.Path) -> Rendered:
    """deploy/k8s/ rendered from a copy in `folder` holding dummy secrets, with the TLS Secrets
    that its certificates/ asks cert-manager for."""
    copy_deploy(folder)
    secrets = dummy_secrets(folder)
    tls = issue(render(folder / "certificates"), folder.parent / "issued")
    return Rendered(render(folder), secrets, folder, tls)


CERT_MANAGER = "cert-manager.io/v1"


def issue(objects: list[dict[str, Any]], folder: pathlib.Path) -> dict[str, dict[str, bytes]]:
    """What cert-manager writes for `objects` (certificates/ rendered): for each Certificate
    signed by a CA Issuer, a Secret with ``tls.crt`` (naming its dnsNames and ipAddresses),
    ``tls.key`` and ``ca.crt``, signed by one test CA standing for the issued CA."""
    authority = certificates.Authority(folder, "agentihooks-ca")
    issuers = {o["metadata"]["name"]: o for o in objects if o["kind"] == "Issuer"}
    issued: dict[str, dict[str, bytes]] = {}
    for cert in (o for o in objects if o["kind"] == "Certificate"):
        spec = cert["spec"]
        if spec.get("isCA") or "ca" not in issuers[spec["issuerRef"]["name"]]["spec"]:
            continue
        leaf = authority.issue(
            cert["metadata"]["name"],
            hosts=(*spec.get("dnsNames", ()), *spec.get("ipAddresses", ())),
        )
        issued[spec["secretName"]] = {
            "tls.crt": leaf.cert.read_bytes(),
            "tls.key": leaf.key.read_bytes(),
            "ca.crt": authority.bundle.read_bytes(),
        }
    return issued


@pytest.fixture(scope="module")
def rendered(tmp_path_factory: pytest.TempPathFactory) -> Rendered:
    return render_with_dummy_secrets(tmp_path_factory.mktemp("deploy") / "k8s")


# --- Resolving a container's environment as the kubelet does ---------------------------------

POD_IP = "10.244.1.7"
"""The Pod IP `status.podIP` resolves to here."""

_REFERENCE = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_]*)\)")


def expand(text: str, env: Mapping[str, str]) -> str:
    """Kubernetes' `$(VAR)` expansion: defined variables expand, `$$` is `$`, others stay."""

    def one(match: re.Match[str]) -> str:
        if match.group(0) == "$$":
            return "$"
        name = match.group(1)
        return env[name] if name in env else match.group(0)

    return _REFERENCE.sub(one, text)


def container_env(rendered: Rendered, workload: dict[str, Any], container: str) -> dict[str, str]:
    """The environment the kubelet gives `container` of `workload`'s Pods: `envFrom` first,
    then `env` in order (each value expanding the variables before it)."""
    namespace = workload["metadata"]["namespace"]
    spec = workload["spec"]["template"]["spec"]
    (c,) = [c for c in spec["containers"] if c["name"] == container]
    env: dict[str, str] = {}
    for source in c.get("envFrom") or ():
        if "configMapRef" in source:
            env.update(rendered.data("ConfigMap", source["configMapRef"]["name"]))
        else:
            env.update(rendered.data("Secret", source["secretRef"]["name"]))
    for entry in c.get("env") or ():
        name = entry["name"]
        if "value" in entry:
            env[name] = expand(entry["value"], env)
            continue
        source = entry["valueFrom"]
        if "fieldRef" in source:
            # The downward API fields the manifests use, as a Pod would see them.
            field = source["fieldRef"]["fieldPath"]
            assert field in ("metadata.namespace", "status.podIP"), entry
            env[name] = namespace if field == "metadata.namespace" else POD_IP
        elif "secretKeyRef" in source:
            ref = source["secretKeyRef"]
            data = rendered.data("Secret", ref["name"])
            assert ref["key"] in data, f"{name}: Secret {ref['name']} has no key {ref['key']}"
            env[name] = data[ref["key"]]
        else:
            ref = source["configMapKeyRef"]
            data = rendered.data("ConfigMap", ref["name"])
            assert ref["key"] in data, f"{name}: ConfigMap {ref['name']} has no key {ref['key']}"
            env[name] = data[ref["key"]]
    return env


def container(workload: dict[str, Any], name: str) -> dict[str, Any]:
    (found,) = [c for c in workload["spec"]["template"]["spec"]["containers"] if c["name"] == name]
    return found


def command_of(c: dict[str, Any], env: Mapping[str, str]) -> list[str]:
    return [expand(part, env) for part in [*(c.get("command") or ()), *(c.get("args") or ())]]


def named_port(c: dict[str, Any], port: int | str) -> int:
    """A container port by number or by name."""
    if isinstance(port, int):
        assert port in {p["containerPort"] for p in c["ports"]}, f"{port} is not a container port"
        return port
    (found,) = [p["containerPort"] for p in c["ports"] if p["name"] == port]
    return int(found)


def service_port(service: dict[str, Any], workload: dict[str, Any], name: str) -> tuple[int, int]:
    """(Service port, container port it reaches) of the Service's port `name`."""
    (port,) = [p for p in service["spec"]["ports"] if p["name"] == name]
    pod = workload["spec"]["template"]
    assert service["spec"]["selector"].items() <= pod["metadata"]["labels"].items()
    target = port.get("targetPort", port["port"])
    reached = {named_port(c, target) for c in pod["spec"]["containers"] if c.get("ports")}
    assert len(reached) == 1
    return int(port["port"]), reached.pop()


# --- The tests -------------------------------------------------------------------------------


def test_namespace_comes_first_and_holds_every_namespaced_object(rendered: Rendered) -> None:
    """`kubectl apply -k` creates objects in the rendered order: the namespace before anything
    in it (the Secrets above all), and every namespaced object says which namespace."""
    assert rendered.objects[0]["kind"] == "Namespace"
    namespace = rendered.namespace()
    assert namespace == "agentihooks"
    for obj in rendered.objects:
        meta = obj["metadata"]
        if obj["kind"] in CLUSTER_SCOPED:
            assert "namespace" not in meta, meta["name"]
        else:
            assert meta.get("namespace") == namespace, f"{obj['kind']} {meta['name']}"
    order = [o["kind"] for o in rendered.objects]
    assert order.index("Secret") < order.index("Deployment")
    assert order.index("ConfigMap") < order.index("Deployment")


def test_the_controller_starts_with_its_manifest_and_listens_where_probed(
    rendered: Rendered, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The controller's `main()` accepts its command and environment; it reads every
    AGENTIHOOKS_ variable the manifest sets, listens on the Pod's addresses on the code's default
    ports, and its container ports and probes are those."""
    deployment = rendered.one("Deployment", "agentihooks-controller")
    c = container(deployment, "controller")
    env = container_env(rendered, deployment, "controller")
    files = workload_files(rendered, deployment, "controller")
    started = start(command_of(c, env), env, monkeypatch, files=files)
    conf = started.conf
    assert started.loader == "load_controller"
    assert conf.runtime == "kubernetes"
    assert conf.namespace == rendered.namespace()
    # Its peers forward writes to it at its Pod IP (a wildcard listener is no address).
    assert conf.advertise_host == POD_IP
    assert deployment["spec"]["strategy"]["type"] == "RollingUpdate"

    defaults = settings.load_controller(
        {"AGENTIHOOKS_GRANT_KEY": "k" * 32, "AGENTIHOOKS_OPERATOR_TOKEN": "t" * 16}
        | {"AGENTIHOOKS_WORKER_IMAGE": IMAGE}
    )
    assert host_of(conf.listen) == "0.0.0.0" and host_of(conf.http) == "0.0.0.0"
    assert port_of(conf.listen) == port_of(defaults.listen) == named_port(c, "grpc")
    assert port_of(conf.http) == port_of(defaults.http) == named_port(c, "http")
    readiness, liveness = c["readinessProbe"], c["livenessProbe"]
    assert readiness["httpGet"]["path"] == "/readyz"
    assert named_port(c, readiness["httpGet"]["port"]) == port_of(conf.http)
    routes = {r.resource.canonical for r in http_api.make_app(cast(Any, None)).router.routes()}
    assert "/readyz" in routes
    # Liveness asks whether the process serves, not whether Redis answers: a Redis outage
    # (readiness and gRPC health NOT_SERVING) must never restart the controller.
    assert liveness["httpGet"]["path"] == "/healthz" and "/healthz" in routes
    assert named_port(c, liveness["httpGet"]["port"]) == port_of(conf.http)

    others = AWS_VARIABLES | {"REDIS_PASSWORD"}
    assert not unread(env, controller_reads(started, env), others)
    assert "$(" not in " ".join(env.values())
    resources = c["resources"]
    assert {"cpu", "memory"} <= resources["requests"].keys() and "memory" in resources["limits"]


def test_the_controller_and_the_store_share_the_storage_settings(
    rendered: Rendered, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Both read the bucket and endpoint of the settings ConfigMap, and the object store's
    credentials of the s3 Secret; the bucket name is one the backend accepts."""
    settings_map = rendered.generated("ConfigMap", "agentihooks-settings")
    s3_secret = rendered.generated("Secret", "agentihooks-s3")
    confs = []
    for name, container_name in (
        ("agentihooks-controller", "controller"),
        ("agentihooks-checkpoint-store", "store"),
    ):
        deployment = rendered.one("Deployment", name)
        c = container(deployment, container_name)
        refs = {next(iter(source.values()))["name"] for source in c["envFrom"]}
        assert refs == {settings_map["metadata"]["name"], s3_secret["metadata"]["name"]}
        env = container_env(rendered, deployment, container_name)
        files = workload_files(rendered, deployment, container_name)
        confs.append(start(command_of(c, env), env, monkeypatch, files=files).conf.storage)
    controller, store = confs
    assert controller == store
    assert controller.checkpoint_bucket == settings_map["data"]["AGENTIHOOKS_CHECKPOINT_BUCKET"]
    assert set(s3_secret["data"]) == {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"}
    assert set(settings_map["data"]) <= AWS_VARIABLES | {
        "AGENTIHOOKS_CHECKPOINT_BUCKET",
        "AGENTIHOOKS_S3_ENDPOINT_URL",
    }
    backend = backends.open_backend(
        None, controller.checkpoint_bucket, controller.s3_endpoint_url
    )  # validates the bucket name and endpoint URL; opens nothing yet
    assert backend is not None


def test_the_store_starts_with_its_manifest_and_listens_where_probed(
    rendered: Rendered, monkeypatch: pytest.MonkeyPatch
) -> None:
    deployment = rendered.one("Deployment", "agentihooks-checkpoint-store")
    c = container(deployment, "store")
    env = container_env(rendered, deployment, "store")
    files = workload_files(rendered, deployment, "store")
    started = start(command_of(c, env), env, monkeypatch, files=files)
    conf = started.conf
    assert started.loader == "load_store"
    defaults = settings.load_store(
        {"AGENTIHOOKS_GRANT_KEY": "k" * 32, "AGENTIHOOKS_CHECKPOINT_ROOT": "/checkpoints"}
    )
    assert host_of(conf.listen) == "0.0.0.0"
    assert port_of(conf.listen) == port_of(defaults.listen) == named_port(c, "grpc")
    readiness, liveness = c["readinessProbe"], c["livenessProbe"]
    # Ready by the store service's gRPC health (NOT_SERVING while Redis does not answer). The
    # kubelet's `grpc` probe cannot do TLS: the container asks itself, over mutual TLS with its
    # own certificate, at a name that certificate has (test_health_probe runs the command).
    command = readiness["exec"]["command"]
    assert command[:3] == ["python3", "-m", health_probe.__name__]
    address, service = command[3:]
    assert port_of(address) == port_of(conf.listen) and service == store_service.SERVICE_NAME
    assert host_of(address) in names_on(files[str(conf.tls.cert_file)])
    # A connection accepted means alive; a Redis outage (NOT_SERVING) never restarts the store.
    assert set(liveness) & {"grpc", "httpGet", "exec"} == set()
    assert named_port(c, liveness["tcpSocket"]["port"]) == port_of(conf.listen)
    assert not unread(env, started.read, AWS_VARIABLES | {"REDIS_PASSWORD"})
    spec = deployment["spec"]["template"]["spec"]
    assert spec["automountServiceAccountToken"] is False  # no Kubernetes API access
    assert "serviceAccountName" not in spec
    assert deployment["spec"]["replicas"] == 2


def test_services_are_where_the_code_sends_workers_and_clients(
    rendered: Rendered, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Worker Pods reach the controller at AGENTIHOOKS_WORKER_CONTROL_ADDR's default (the
    Service `agentihooks-controller.NAMESPACE.svc` on the gRPC port) and the store at
    AGENTIHOOKS_STORE_ADDR; both name real Services and ports. The Redis URL of the controller
    and the store names the Redis Service, port and password."""
    namespace = rendered.namespace()
    controller = rendered.one("Deployment", "agentihooks-controller")
    store = rendered.one("Deployment", "agentihooks-checkpoint-store")
    redis = rendered.one("StatefulSet", "agentihooks-redis")
    env = container_env(rendered, controller, "controller")
    files = workload_files(rendered, controller, "controller")
    conf = start(
        command_of(container(controller, "controller"), env), env, monkeypatch, files=files
    ).conf

    assert settings.CONTROLLER_SERVICE == "agentihooks-controller"
    control = rendered.one("Service", settings.CONTROLLER_SERVICE)
    assert host_of(conf.worker_control_addr) == f"{settings.CONTROLLER_SERVICE}.{namespace}.svc"
    assert port_of(conf.worker_control_addr) == service_port(control, controller, "grpc")[0]
    assert service_port(control, controller, "grpc")[1] == port_of(conf.listen)
    assert service_port(control, controller, "http")[1] == port_of(conf.http)

    store_service = rendered.one("Service", "agentihooks-checkpoint-store")
    assert host_of(conf.store_addr) == f"agentihooks-checkpoint-store.{namespace}.svc"
    assert port_of(conf.store_addr) == service_port(store_service, store, "grpc")[0]
    store_env = container_env(rendered, store, "store")
    store_conf = start(
        command_of(container(store, "store"), store_env),
        store_env,
        monkeypatch,
        files=workload_files(rendered, store, "store"),
    )
    assert service_port(store_service, store, "grpc")[1] == port_of(store_conf.conf.listen)

    redis_service = rendered.one("Service", "agentihooks-redis")
    password = rendered.secrets["keys.env"]["redis-password"]
    for url in (conf.redis_url, store_conf.conf.redis_url):
        parsed = urllib.parse.urlsplit(url)
        assert parsed.hostname == redis_service["metadata"]["name"]
        assert (parsed.port, 6379) == service_port(redis_service, redis, "redis")
        assert parsed.password == password

    # What the controller gives every worker Pod, as its runtime renders it.
    worker_env = controller_main.worker_settings(conf, conf.worker_control_addr, env)
    assert worker_env["AGENTIHOOKS_CONTROL_ADDR"] == conf.worker_control_addr
    assert worker_env["AGENTIHOOKS_STORE_ADDR"] == conf.store_addr
    assert worker_env["AGENTIHOOKS_CHECKPOINT_BUCKET"] == conf.storage.checkpoint_bucket


def test_redis_keeps_an_append_only_file_on_a_volume_claim_and_needs_its_password(
    rendered: Rendered,
) -> None:
    redis = rendered.one("StatefulSet", "agentihooks-redis")
    c = container(redis, "redis")
    env = container_env(rendered, redis, "redis")
    args = command_of(c, env)
    assert args[0] == "redis-server" and "command" not in c  # the image's entry point stays
    options = dict(zip(args[1::2], args[2::2], strict=True))
    assert options["--appendonly"] == "yes"
    assert options["--requirepass"] == rendered.secrets["keys.env"]["redis-password"]
    assert env["REDISCLI_AUTH"] == options["--requirepass"]  # the probes' redis-cli
    (claim,) = redis["spec"]["volumeClaimTemplates"]
    mounts = {m["name"]: m["mountPath"] for m in c["volumeMounts"]}
    assert mounts[claim["metadata"]["name"]] == options["--dir"]
    assert c["readinessProbe"]["exec"]["command"][-1] == 'test "$(redis-cli ping)" = PONG'
    assert named_port(c, c["livenessProbe"]["tcpSocket"]["port"]) == 6379
    assert (
        redis["spec"]["serviceName"]
        == rendered.one("Service", "agentihooks-redis")["metadata"]["name"]
    )
    assert {"cpu", "memory"} <= c["resources"]["requests"].keys()
    assert "memory" in c["resources"]["limits"]
    assert redis["spec"]["template"]["spec"]["automountServiceAccountToken"] is False

    # Only the controller and the store are let in (worker Pods run agents in this namespace).
    (policy,) = rendered.all("NetworkPolicy")
    assert (
        policy["spec"]["podSelector"]["matchLabels"].items()
        <= redis["spec"]["template"]["metadata"]["labels"].items()
    )
    ((peer,),) = [rule["from"] for rule in policy["spec"]["ingress"]]
    (expression,) = peer["podSelector"]["matchExpressions"]
    admitted = {
        d["spec"]["template"]["metadata"]["labels"][expression["key"]]
        for d in rendered.all("Deployment")
    }
    assert expression["operator"] == "In" and set(expression["values"]) == admitted


def test_every_workload_is_hardened(rendered: Rendered) -> None:
    """Non-root, no privilege escalation, no capabilities, no service links (they would put
    AGENTIHOOKS_…_PORT variables into the environment), resources requested and limited."""
    workloads = rendered.all("Deployment") + rendered.all("StatefulSet")
    assert len(workloads) == 3
    for obj in workloads:
        name = obj["metadata"]["name"]
        spec = obj["spec"]["template"]["spec"]
        assert spec["securityContext"]["runAsNonRoot"] is True, name
        assert spec["enableServiceLinks"] is False, name
        for c in spec["containers"]:
            assert c["securityContext"]["allowPrivilegeEscalation"] is False, name
            assert c["securityContext"]["capabilities"]["drop"] == ["ALL"], name
            assert {"cpu", "memory"} <= c["resources"]["requests"].keys(), name
            assert "memory" in c["resources"]["limits"], name


# Every CoreV1Api call of the Kubernetes adapter (ADAPTER_MODULES), how it is made (through
# `_request`: one call; through `_follow`: a list, then a watch), and the verb it needs on which
# resource. A new call, or a call made another way, fails the test until it is listed here, and
# the Role or ClusterRole then has to grant its verb.
API_CALLS: dict[tuple[str, str], tuple[str, set[str]]] = {
    ("list_namespaced_pod", "request"): ("pods", {"list"}),  # list_attempts, no synced watch
    ("list_namespaced_pod", "follow"): ("pods", {"list", "watch"}),  # the one Pod watch
    ("create_namespaced_pod", "request"): ("pods", {"create"}),  # launch
    ("read_namespaced_pod", "request"): ("pods", {"get"}),  # launch: the name is taken (409)
    ("delete_namespaced_pod", "request"): ("pods", {"delete"}),  # remove
    ("create_namespaced_secret", "request"): ("secrets", {"create"}),  # launch
    ("patch_namespaced_secret", "request"): ("secrets", {"patch"}),  # launch: left-over Secret
    ("delete_namespaced_secret", "request"): ("secrets", {"delete"}),  # remove
    ("list_node", "request"): ("nodes", {"list"}),  # list_attempts, no synced watch: readiness
    ("list_node", "follow"): ("nodes", {"list", "watch"}),  # the one Node watch
}
CLUSTER_RESOURCES = {"nodes"}
# Every EventsV1Api call of services/controller/pods/recording.py (the Events on worker Pods):
# method -> (resource, verbs), in the API group events.k8s.io.
EVENT_CALLS: dict[str, tuple[str, set[str]]] = {
    "create_namespaced_event": ("events", {"create"}),  # an Event's first occurrence
    "patch_namespaced_event": ("events", {"patch"}),  # its series, when it repeats
}
EVENTS_GROUP = "events.k8s.io"


def api_method(node: ast.AST, attribute: str) -> str | None:
    """The method name when `node` is ``self.<attribute>.<method>``."""
    if (
        isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Attribute)
        and node.value.attr == attribute
        and isinstance(node.value.value, ast.Name)
        and node.value.value.id == "self"
    ):
        return node.attr
    return None


def event_calls() -> set[str]:
    """The EventsV1Api methods recording.py uses (every ``self._events.<method>``)."""
    tree = ast.parse(EVENT_RECORDER.read_text())
    return {m for node in ast.walk(tree) if (m := api_method(node, "_events")) is not None}


def core_method(node: ast.AST) -> str | None:
    """The method name when `node` is a CoreV1Api method: ``<anything>._core.<method>``
    (``self._core``, ``runtime._core``) or ``core.<method>``."""
    if not (isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load)):
        return None
    receiver = node.value
    if isinstance(receiver, ast.Attribute) and receiver.attr == "_core":
        return node.attr
    if isinstance(receiver, ast.Name) and receiver.id == "core":
        return node.attr
    return None


def call_kind(func: ast.expr) -> str | None:
    """How a call through `func` makes the API call passed to it: ``_request``/``request``
    (one call), ``_follow``/``follow`` (a list, then a watch), else None."""
    name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
    return {"request": "request", "follow": "follow"}.get(str(name).removeprefix("_"))


def core_calls(tree: ast.AST) -> set[tuple[str, str]]:
    """(CoreV1Api method, how) of every use of the CoreV1Api object in `tree`: passed to a
    request or follow wrapper, else "direct"."""
    calls, accounted = set(), set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call) or (how := call_kind(node.func)) is None:
            continue
        for arg in node.args:
            if (method := core_method(arg)) is not None:
                calls.add((method, how))
                accounted.add(id(arg))
    for node in ast.walk(tree):
        if (method := core_method(node)) is not None and id(node) not in accounted:
            calls.add((method, "direct"))
    return calls


def kubernetes_calls() -> set[tuple[str, str]]:
    """(CoreV1Api method, how) of every use of the CoreV1Api object in ADAPTER_MODULES."""
    return set().union(*(core_calls(ast.parse(m.read_text())) for m in ADAPTER_MODULES))


def test_the_api_call_scan_sees_every_way_of_making_a_call() -> None:
    """The scan classifies a call by how it is made, whatever holds the CoreV1Api object."""
    code = """
async def f(self, runtime, core, request):
    await self._request("a", self._core.read_namespaced_pod, "n")
    await request("b", core.create_namespaced_pod, "n")
    await self._follow("c", feed, runtime._core.list_node)
    await self._core.delete_namespaced_pod("n")
    method = core.patch_namespaced_secret
"""
    assert core_calls(ast.parse(code)) == {
        ("read_namespaced_pod", "request"),
        ("create_namespaced_pod", "request"),
        ("list_node", "follow"),
        ("delete_namespaced_pod", "direct"),
        ("patch_namespaced_secret", "direct"),
    }


def test_no_api_call_escapes_the_scan() -> None:
    """Only ADAPTER_MODULES reach the CoreV1Api object, so `kubernetes_calls` sees every call."""
    reaching = {
        path.relative_to(REPO).as_posix()
        for path in PODS.rglob("*.py")
        if re.search(r"\b_?core\.\w", path.read_text())
    }
    assert reaching == {path.relative_to(REPO).as_posix() for path in ADAPTER_MODULES}


def test_rbac_grants_exactly_what_the_controller_calls_need(rendered: Rendered) -> None:
    assert kubernetes_calls() == set(API_CALLS), (
        "the controller's Kubernetes API calls changed: list them in API_CALLS with their verbs"
    )
    assert event_calls() == set(EVENT_CALLS), (
        "the Event recorder's API calls changed: list them in EVENT_CALLS with their verbs"
    )
    # Only these modules touch the Kubernetes client (main.py only to configure it), each
    # with one API: the runtime CoreV1Api, the Event recorder EventsV1Api.
    users = {
        path.relative_to(REPO).as_posix()
        for path in (REPO / "services").rglob("*.py")
        if "kubernetes_asyncio" in path.read_text()
    }
    assert users == {
        "services/controller/main.py",
        "services/controller/pods/kubernetes.py",
        "services/controller/pods/recording.py",
    }
    assert "CoreV1Api" not in (REPO / "services/controller/main.py").read_text()
    assert re.findall(r"client\.(\w+Api)\(", KUBERNETES_RUNTIME.read_text()) == ["CoreV1Api"]
    assert re.findall(r"client\.(\w+Api)\(", EVENT_RECORDER.read_text()) == ["EventsV1Api"]

    needed: dict[tuple[str, str], set[str]] = {}
    for resource, verbs in API_CALLS.values():
        needed.setdefault(("", resource), set()).update(verbs)
    for resource, verbs in EVENT_CALLS.values():
        needed.setdefault((EVENTS_GROUP, resource), set()).update(verbs)

    def granted(role: dict[str, Any]) -> dict[tuple[str, str], set[str]]:
        found: dict[tuple[str, str], set[str]] = {}
        for rule in role["rules"]:
            assert len(rule["apiGroups"]) == 1, rule
            assert "resourceNames" not in rule and "nonResourceURLs" not in rule
            for resource in rule["resources"]:
                key = (rule["apiGroups"][0], resource)
                found.setdefault(key, set()).update(rule["verbs"])
        return found

    (role,) = rendered.all("Role")
    (cluster_role,) = rendered.all("ClusterRole")
    assert granted(role) == {k: v for k, v in needed.items() if k[1] not in CLUSTER_RESOURCES}
    assert granted(cluster_role) == {k: v for k, v in needed.items() if k[1] in CLUSTER_RESOURCES}
    assert granted(role)[(EVENTS_GROUP, "events")] == {"create", "patch"}

    # Bound to the controller's ServiceAccount only; nothing else holds any role.
    (account,) = rendered.all("ServiceAccount")
    subject = {
        "kind": "ServiceAccount",
        "name": account["metadata"]["name"],
        "namespace": rendered.namespace(),
    }
    (binding,) = rendered.all("RoleBinding")
    (cluster_binding,) = rendered.all("ClusterRoleBinding")
    assert binding["subjects"] == [subject] and cluster_binding["subjects"] == [subject]
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    assert binding["roleRef"]["kind"] == "Role"
    assert cluster_binding["roleRef"]["name"] == cluster_role["metadata"]["name"]
    assert cluster_binding["roleRef"]["kind"] == "ClusterRole"
    controller = rendered.one("Deployment", "agentihooks-controller")["spec"]["template"]["spec"]
    assert controller["serviceAccountName"] == account["metadata"]["name"]
    assert controller.get("automountServiceAccountToken", True) is True


def worker_pod(conf: Any, env: Mapping[str, str], template: Mapping[str, Any]) -> dict[str, Any]:
    """The Pod the controller of settings `conf` (its environment `env`) renders from
    `template` for a first attempt, with what it gives every worker."""
    spec = runtime.LaunchSpec(
        swarm="example",
        seat="eng-1",
        execution_id="example.eng-1.1",
        generation=1,
        image=conf.worker_image,
        command=conf.entry_point,
        worker_credential="credential",
        env={},
    )
    worker_env = controller_main.worker_settings(conf, conf.worker_control_addr, env)
    return templates.render_pod(template, spec, namespace=conf.namespace, defaults=worker_env)


def test_the_worker_pod_template_is_shipped_to_the_controller(
    rendered: Rendered, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The ConfigMap holds the built-in template, the controller mounts it where
    AGENTIHOOKS_POD_TEMPLATE points, and a worker Pod rendered from it by the controller's own
    code gets an entry point whose worktree lies in a volume, and the controller's addresses."""
    (template_map,) = [
        o
        for o in rendered.all("ConfigMap")
        if o["metadata"]["name"].startswith("agentihooks-worker-pod-template")
    ]
    controller = rendered.one("Deployment", "agentihooks-controller")
    c = container(controller, "controller")
    env = container_env(rendered, controller, "controller")
    files = workload_files(rendered, controller, "controller")
    conf = start(command_of(c, env), env, monkeypatch, files=files).conf

    volumes = {
        v["name"]: v["configMap"]["name"]
        for v in controller["spec"]["template"]["spec"]["volumes"]
        if "configMap" in v
    }
    mounted = {
        m["mountPath"]: volumes[m["name"]] for m in c["volumeMounts"] if m["name"] in volumes
    }
    assert mounted.get(str(conf.pod_template.parent)) == template_map["metadata"]["name"], (
        f"AGENTIHOOKS_POD_TEMPLATE {conf.pod_template} is not in the mounted template ConfigMap"
    )
    template = yaml.safe_load(template_map["data"][conf.pod_template.name])
    assert template == templates.with_worker_tls(templates.default_pod_template())

    pod = worker_pod(conf, env, template)
    worker = pod["spec"]["containers"][0]
    sidecar = pod["spec"]["initContainers"][0]
    for each in (worker, sidecar):
        values = {e["name"]: e.get("value") for e in each["env"]}
        assert values["AGENTIHOOKS_CONTROL_ADDR"] == conf.worker_control_addr
        assert values["AGENTIHOOKS_STORE_ADDR"] == conf.store_addr

    # The worker's command starts the entry point; the worktree it then restores into lies in a
    # volume whose root is the attempt folder (where the restorer writes), and the sidecar
    # mounts the same volumes and has the same home.
    assert worker["command"] == ["agentihooks-restorer", "entry"]
    worker_values = {e["name"]: e.get("value") or "credential" for e in worker["env"]}
    workdir = [args for keyword, args in dockerfile_instructions() if keyword == "WORKDIR"][-1]
    pod_files = mounted_files(pod["spec"], worker, rendered.tls)
    _, worktree = start(
        worker["command"], worker_values, monkeypatch, cwd=workdir, files=pod_files
    ).runs
    mounts = {m["mountPath"] for m in worker["volumeMounts"]}
    assert str(worktree.parent) in mounts and str(worktree) not in mounts
    assert sidecar["volumeMounts"] == worker["volumeMounts"]
    sidecar_values = {e["name"]: e.get("value") or "credential" for e in sidecar["env"]}
    assert sidecar_values["HOME"] == worker_values["HOME"] in mounts
    assert sidecar["command"][:2] == ["agentihooks-restorer", "serve"]
    started = start(sidecar["command"], sidecar_values, monkeypatch, files=pod_files)
    # The sidecar serves TLS with the workers' certificate and dials with it (its CA set).
    assert started.conf.tls.serving and started.conf.tls.dialing


def test_one_image_whose_tag_is_the_compatibility_key(
    rendered: Rendered, tmp_path: pathlib.Path
) -> None:
    """The controller and the store run the image the guide builds, the controller's
    AGENTIHOOKS_WORKER_IMAGE is that same image, and setting another tag under `images` moves
    all three."""
    controller = rendered.one("Deployment", "agentihooks-controller")
    store = rendered.one("Deployment", "agentihooks-checkpoint-store")
    env = container_env(rendered, controller, "controller")
    images = {container(controller, "controller")["image"], container(store, "store")["image"]}
    assert images == {IMAGE} == {env["AGENTIHOOKS_WORKER_IMAGE"]}

    folder = tmp_path / "k8s"
    shutil.copytree(rendered.folder, folder)
    kustomization = folder / "kustomization.yaml"
    text = kustomization.read_text()
    assert 'newTag: "1.4.2"' in text
    kustomization.write_text(text.replace('newTag: "1.4.2"', 'newTag: "2.0.0"'))
    moved = Rendered(render(folder), rendered.secrets, folder)
    controller = moved.one("Deployment", "agentihooks-controller")
    store = moved.one("Deployment", "agentihooks-checkpoint-store")
    env = container_env(moved, controller, "controller")
    moved_images = {
        container(controller, "controller")["image"],
        container(store, "store")["image"],
        env["AGENTIHOOKS_WORKER_IMAGE"],
    }
    assert moved_images == {"registry.local/agent-worker:2.0.0"}


def test_secret_env_files_are_ignored_and_their_examples_are_complete(
    rendered: Rendered,
) -> None:
    """Each Secret comes from a git-ignored env file whose committed example lists exactly the
    keys the manifests use."""
    used: dict[str, set[str]] = {}
    for obj in rendered.objects:
        for ref in _secret_key_refs(obj):
            used.setdefault(ref[0], set()).add(ref[1])
    keys = rendered.generated("Secret", "agentihooks-keys")["metadata"]["name"]
    assert used == {keys: set(rendered.secrets["keys.env"])}
    s3 = rendered.generated("Secret", "agentihooks-s3")
    assert set(s3["data"]) == set(rendered.secrets["s3.env"])
    for name in ("keys.env", "s3.env"):
        path = f"deploy/k8s/secrets/{name}"
        assert ignored(path), f"{path} is not git-ignored"
        assert not ignored(path + ".example"), f"{path}.example is git-ignored"
        assert (REPO / (path + ".example")).exists()


def _secret_key_refs(obj: Any) -> Iterator[tuple[str, str]]:
    if isinstance(obj, dict):
        if "secretKeyRef" in obj:
            yield obj["secretKeyRef"]["name"], obj["secretKeyRef"]["key"]
        for value in obj.values():
            yield from _secret_key_refs(value)
    elif isinstance(obj, list):
        for value in obj:
            yield from _secret_key_refs(value)


def ignored(path: str) -> bool:
    result = subprocess.run(
        ["git", "-C", str(REPO), "check-ignore", "-q", "--no-index", path],
        capture_output=True,
        timeout=30,
        check=False,
    )
    assert result.returncode in (0, 1), result.stderr
    return result.returncode == 0


def test_an_overlay_replaces_the_worker_pod_template(rendered: Rendered) -> None:
    """The guide's overlay (its own template in place of the ConfigMap) renders, and the
    controller then mounts the replaced template."""
    root = rendered.folder.parent
    overlay = root / "my-deploy"
    overlay.mkdir(exist_ok=True)
    template = templates.with_worker_tls(templates.default_pod_template())
    template["spec"]["containers"][0]["resources"]["limits"]["memory"] = "8Gi"
    (overlay / "worker-pod.yaml").write_text(yaml.safe_dump(template))
    (overlay / "kustomization.yaml").write_text(
        shell_block("cat > my-deploy/kustomization.yaml")
        .split("<<'EOF'\n", 1)[1]
        .split("EOF")[0]
        .replace("../deploy/k8s", "../k8s")
    )
    objects = Rendered(render(overlay), rendered.secrets, overlay)
    (template_map,) = [
        o
        for o in objects.all("ConfigMap")
        if o["metadata"]["name"].startswith("agentihooks-worker-pod-template")
    ]
    assert yaml.safe_load(template_map["data"]["worker-pod.yaml"]) == template
    volumes = objects.one("Deployment", "agentihooks-controller")["spec"]["template"]["spec"][
        "volumes"
    ]
    assert template_map["metadata"]["name"] in {
        v["configMap"]["name"] for v in volumes if "configMap" in v
    }


def dockerfile_instructions() -> list[tuple[str, str]]:
    """The Dockerfile's (INSTRUCTION, arguments), continuation lines joined, comments dropped."""
    text = (REPO / "Dockerfile").read_text()
    lines = [line for line in text.splitlines() if not line.lstrip().startswith("#")]
    found = []
    for line in re.sub(r"\\\n", " ", "\n".join(lines)).splitlines():
        if line.strip():
            keyword, _, rest = line.strip().partition(" ")
            found.append((keyword.upper(), " ".join(rest.split())))
    return found


# --- TLS ------------------------------------------------------------------------------------


def names_on(pem: bytes) -> set[str]:
    """The DNS names and IP addresses a PEM certificate is valid for."""
    cert = x509.load_pem_x509_certificate(pem)
    alternatives = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    return {*alternatives.get_values_for_type(x509.DNSName)} | {
        str(ip) for ip in alternatives.get_values_for_type(x509.IPAddress)
    }


def tls_secret_volumes(spec: Mapping[str, Any]) -> dict[str, str]:
    """Secret name -> mount path of a Pod spec's TLS volume (mounted in its containers)."""
    secrets = {v["name"]: v["secret"]["secretName"] for v in spec["volumes"] if "secret" in v}
    found = {}
    for c in spec["containers"]:
        for mount in c.get("volumeMounts") or ():
            if mount["name"] in secrets:
                assert mount.get("readOnly") is True, mount
                found[secrets[mount["name"]]] = mount["mountPath"]
    return found


@pytest.fixture(scope="module")
def issuance(rendered: Rendered) -> Rendered:
    """deploy/k8s/certificates/ rendered (the cert-manager objects)."""
    folder = rendered.folder / "certificates"
    return Rendered(render(folder), {}, folder)


def test_cert_manager_issues_each_certificate_from_the_systems_own_ca(
    rendered: Rendered, issuance: Rendered
) -> None:
    """A self-signed bootstrap Issuer signs the CA Certificate, whose Secret a CA Issuer signs
    every other Certificate with: one for the controller, one for the store and one for the
    workers, each with server and client usages (a process serves with it and presents it when
    it dials), a renewal before it ends and a new key each time, written to the Secrets the
    workloads and the worker Pod template mount."""
    namespace = rendered.namespace()
    assert all(o["metadata"]["namespace"] == namespace for o in issuance.objects)
    assert {o["apiVersion"] for o in issuance.objects} == {CERT_MANAGER}
    issuers = {o["metadata"]["name"]: o["spec"] for o in issuance.all("Issuer")}
    certs = {o["metadata"]["name"]: o["spec"] for o in issuance.all("Certificate")}
    (bootstrap,) = [name for name, spec in issuers.items() if spec == {"selfSigned": {}}]
    (ca,) = [spec for spec in certs.values() if spec.get("isCA")]
    assert ca["issuerRef"] == {"name": bootstrap, "kind": "Issuer", "group": "cert-manager.io"}
    (ca_issuer,) = [name for name, spec in issuers.items() if spec.get("ca")]
    assert issuers[ca_issuer]["ca"]["secretName"] == ca["secretName"]
    leaves = {spec["secretName"]: spec for spec in certs.values() if not spec.get("isCA")}
    for name, spec in leaves.items():
        assert spec["issuerRef"]["name"] == ca_issuer, name
        assert {"server auth", "client auth"} <= set(spec["usages"]), name
        assert spec["privateKey"]["rotationPolicy"] == "Always", name
        assert spec["renewBefore"] and spec["duration"], name

    controller = rendered.one("Deployment", "agentihooks-controller")["spec"]["template"]["spec"]
    store = rendered.one("Deployment", "agentihooks-checkpoint-store")["spec"]["template"]["spec"]
    worker = templates.with_worker_tls(templates.default_pod_template())["spec"]
    mounted = [tls_secret_volumes(spec) for spec in (controller, store, worker)]
    assert [set(m) for m in mounted] == [
        {"agentihooks-controller-tls"},
        {"agentihooks-checkpoint-store-tls"},
        {templates.WORKER_TLS_SECRET},
    ]
    assert set(leaves) == {name for m in mounted for name in m}
    assert set(rendered.tls) == set(leaves)
    # The key is readable by the Pod's group only (fsGroup), never by others.
    for spec in (controller, store, worker):
        (volume,) = [v for v in spec["volumes"] if "secret" in v]
        assert volume["secret"]["defaultMode"] == 0o440
        assert spec["securityContext"]["fsGroup"] == spec["securityContext"]["runAsGroup"]


def test_every_server_serves_tls_and_the_store_requires_client_certificates(
    rendered: Rendered, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each workload reads its AGENTIHOOKS_TLS_* settings from the files of the Secret it
    mounts (`start` refuses a path no mounted Secret holds): the controller serves TLS and
    dials its peers verifying their certificates, the store serves mutual TLS."""
    confs = {}
    for name, c_name in (
        ("agentihooks-controller", "controller"),
        ("agentihooks-checkpoint-store", "store"),
    ):
        deployment = rendered.one("Deployment", name)
        c = container(deployment, c_name)
        env = container_env(rendered, deployment, c_name)
        files = workload_files(rendered, deployment, c_name)
        started = start(command_of(c, env), env, monkeypatch, files=files)
        assert {n for n in env if n.startswith("AGENTIHOOKS_TLS_")} <= started.read
        confs[c_name] = started.conf.tls
    controller, store = confs["controller"], confs["store"]
    assert tls_settings.transport(controller) == "tls" and controller.dialing
    assert tls_settings.transport(store) == "mutual_tls"
    service = f"{settings.CONTROLLER_SERVICE}.{rendered.namespace()}.svc"
    assert controller.peer_name == service


def test_certificates_name_the_addresses_the_code_dials(
    rendered: Rendered, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker dials the controller at AGENTIHOOKS_WORKER_CONTROL_ADDR and the store at
    AGENTIHOOKS_STORE_ADDR, a replica forwards expecting AGENTIHOOKS_TLS_PEER_NAME, an operator's
    port-forward dials localhost, and the entry point dials its sidecar where the sidecar
    listens: each name is on the certificate of the server dialed, signed by the CA every
    client trusts."""
    controller = rendered.one("Deployment", "agentihooks-controller")
    env = container_env(rendered, controller, "controller")
    files = workload_files(rendered, controller, "controller")
    conf = start(
        command_of(container(controller, "controller"), env), env, monkeypatch, files=files
    ).conf
    controller_names = names_on(rendered.tls["agentihooks-controller-tls"]["tls.crt"])
    store_names = names_on(rendered.tls["agentihooks-checkpoint-store-tls"]["tls.crt"])
    worker_names = names_on(rendered.tls[templates.WORKER_TLS_SECRET]["tls.crt"])
    assert host_of(conf.worker_control_addr) in controller_names
    assert conf.tls.peer_name in controller_names
    assert {"localhost", "127.0.0.1"} <= controller_names & store_names
    assert host_of(conf.store_addr) in store_names

    template = yaml.safe_load((DEPLOY / "templates" / "worker-pod.yaml").read_text())
    pod = worker_pod(conf, env, template)
    worker, sidecar = pod["spec"]["containers"][0], pod["spec"]["initContainers"][0]
    listen = sidecar["command"][sidecar["command"].index("--listen") + 1]
    assert host_of(listen) in worker_names
    values = {e["name"]: e.get("value") or "credential" for e in worker["env"]}
    workdir = [args for keyword, args in dockerfile_instructions() if keyword == "WORKDIR"][-1]
    pod_files = mounted_files(pod["spec"], worker, rendered.tls)
    entry = start(worker["command"], values, monkeypatch, cwd=workdir, files=pod_files)
    assert entry.runs[0] == listen  # where the entry point dials its sidecar
    assert entry.conf.tls.dialing

    # One CA signed them all, and it is the ca.crt every Secret carries.
    (ca_pem,) = {data["ca.crt"] for data in rendered.tls.values()}
    authority = x509.load_pem_x509_certificate(ca_pem)
    for data in rendered.tls.values():
        x509.load_pem_x509_certificate(data["tls.crt"]).verify_directly_issued_by(authority)


# --- The guide -------------------------------------------------------------------------------

GUIDE = REPO / "docs" / "operator-guide.md"


def section_8() -> str:
    text = GUIDE.read_text()
    return text[text.index("## 8. Kubernetes") : text.index("## 9. ")]


def shell_block(containing: str) -> str:
    """The one shell block of section 8 that contains `containing`."""
    blocks = re.findall(r"```sh\n(.*?)```", section_8(), re.DOTALL)
    found = [b for b in blocks if containing in b]
    assert len(found) == 1, f"section 8 has {len(found)} shell blocks with {containing!r}"
    return str(found[0])


def test_the_guides_secret_commands_make_files_that_render(tmp_path: pathlib.Path) -> None:
    """Section 8's commands, run as written from a copy of the repository's deploy/, write the
    secrets env files kustomize needs, with values the services accept."""
    copy_deploy(tmp_path / "deploy" / "k8s")
    script = shell_block("deploy/k8s/secrets/keys.env <<EOF")
    subprocess.run(["bash", "-euc", script], cwd=tmp_path, check=True, timeout=60)
    folder = tmp_path / "deploy" / "k8s"
    for name in ("keys.env", "s3.env"):
        written = folder / "secrets" / name
        assert written.stat().st_mode & 0o077 == 0, f"{name} is readable by others"
        assert env_file_keys(written) == env_file_keys(written.with_name(name + ".example"))
    objects = Rendered(render(folder), {}, folder)
    keys = objects.data(
        "Secret", objects.generated("Secret", "agentihooks-keys")["metadata"]["name"]
    )
    settings.load_controller(
        {
            "AGENTIHOOKS_GRANT_KEY": keys["grant-key"],
            "AGENTIHOOKS_OPERATOR_TOKEN": keys["operator-token"],
            "AGENTIHOOKS_WORKER_IMAGE": IMAGE,
        }
    )
    token = subprocess.run(
        ["bash", "-c", "sed -n 's/^operator-token=//p' deploy/k8s/secrets/keys.env"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert token == keys["operator-token"]
    assert "sed -n 's/^operator-token=//p' deploy/k8s/secrets/keys.env" in section_8()


def test_the_guide_names_real_files_objects_and_commands() -> None:
    section = section_8()
    assert f"docker build -t {IMAGE} ." in section
    assert "kubectl apply -k deploy/k8s/" in section
    for path in set(re.findall(r"`((?:deploy|docs)/[\w./-]+?)`", section)):
        ignored_env = path.endswith(".env") and ignored(path)
        assert (REPO / path).exists() or ignored_env, f"the guide names {path}, which is missing"
    kinds = {
        "statefulset/agentihooks-redis",
        "deployment/agentihooks-checkpoint-store",
        "deployment/agentihooks-controller",
        "svc/agentihooks-controller",
        "svc/agentihooks-checkpoint-store",
    }
    manifests = "".join(p.read_text() for p in DEPLOY.glob("*.yaml"))
    for ref in re.findall(r"(?:statefulset|deployment|svc)/[\w-]+", section):
        assert ref in kinds, ref
        assert f"name: {ref.split('/')[1]}" in manifests, ref
    # The sed in the example must match the variable in settings.env.
    assert re.search(r"^AGENTIHOOKS_S3_ENDPOINT_URL=", (DEPLOY / "settings.env").read_text(), re.M)
